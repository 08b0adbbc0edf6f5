"""The Triton exercises (12.4 a row-softmax kernel, 12.5 a streamed log-sum-exp kernel, 12.7 the forward kernel,
12.8 the dQ kernel), graded as a learner meets them: real ``@triton.jit`` kernels in Triton's interpreter on CPU
tensors. The solution notebook's kernels pass all four in the grader; the slips below are written for 12.4/12.5.

- In a notebook's process (``check()``): the right kernels pass; each slip, written as the kernel a learner
  writes (masked lanes loaded as 0, no division, no rescale of the old sum, no running maximum), fails with the
  message the exercise gives for it; the stub's ``NotImplementedError``, which the interpreter re-raises
  wrapped, is "not attempted".
- With the grading command: the solution notebook passes; a kernel that never ends is a TIMEOUT, a kernel that
  stores far out of bounds is stopped by the bounds watch (:mod:`attn_edu.grading.bounds`) and reported, and
  one that crashes its process (SIGSEGV) is reported too; the JSON is written each time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from attn_edu.grading.registry import get_exercise

pytest.importorskip("triton")
pytestmark = pytest.mark.triton

ROOT = Path(__file__).resolve().parents[1]
EXERCISE = ROOT / "exercises" / "12_flash_attention.ipynb"
SOLUTION = ROOT / "solutions" / "12_flash_attention.ipynb"

# The kernels a learner might write; each is a (launcher, exercise) pair run through check().
KERNELS = textwrap.dedent(
    """
    import json, os
    os.environ["TRITON_INTERPRET"] = "1"
    import torch, triton, triton.language as tl
    from attn_edu.grading import check

    def make_softmax(fill, normalise=True, subtract_max=True, store_mask=True):
        @triton.jit
        def kernel(x_ptr, out_ptr, n_cols, row_stride, BLOCK: tl.constexpr, FILL: tl.constexpr,
                   NORMALISE: tl.constexpr, SUBTRACT_MAX: tl.constexpr, STORE_MASK: tl.constexpr):
            row = tl.program_id(0)
            cols = tl.arange(0, BLOCK)
            x = tl.load(x_ptr + row * row_stride + cols, mask=cols < n_cols, other=FILL)
            if SUBTRACT_MAX:
                x = x - tl.max(x, axis=0)
            e = tl.exp(x)
            if NORMALISE:
                e = e / tl.sum(e, axis=0)
            if STORE_MASK:
                tl.store(out_ptr + row * row_stride + cols, e, mask=cols < n_cols)
            else:  # every lane written, the padding ones past the row (and past the tensor, in the last row)
                tl.store(out_ptr + row * row_stride + cols, e)

        def softmax_rows(x):
            out = torch.empty_like(x)
            kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=triton.next_power_of_2(x.shape[1]),
                                  FILL=fill, NORMALISE=normalise, SUBTRACT_MAX=subtract_max,
                                  STORE_MASK=store_mask)
            return out
        return softmax_rows

    def make_lse(fill, rescale=True):
        @triton.jit
        def kernel(x_ptr, lse_ptr, n_cols, row_stride, BLOCK: tl.constexpr, FILL: tl.constexpr,
                   RESCALE: tl.constexpr):
            row = tl.program_id(0)
            m_i = float("-inf")
            l_i = 0.0
            for start in range(0, n_cols, BLOCK):
                cols = start + tl.arange(0, BLOCK)
                x = tl.load(x_ptr + row * row_stride + cols, mask=cols < n_cols, other=FILL)
                m_new = tl.maximum(m_i, tl.max(x, axis=0))
                if RESCALE:
                    l_i = l_i * tl.exp(m_i - m_new)
                l_i = l_i + tl.sum(tl.exp(x - m_new), axis=0)
                m_i = m_new
            tl.store(lse_ptr + row, m_i + tl.log(l_i))

        def row_logsumexp(x):
            lse = torch.empty(x.shape[0])
            kernel[(x.shape[0],)](x, lse, x.shape[1], x.stride(0), BLOCK=16, FILL=fill, RESCALE=rescale)
            return lse
        return row_logsumexp

    @triton.jit
    def stub_kernel(x_ptr, out_ptr, n_cols, row_stride, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        raise NotImplementedError("Exercise 12.4: ...")

    def stub(x):
        out = torch.empty_like(x)
        stub_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=triton.next_power_of_2(x.shape[1]))
        return out

    INF = float("-inf")
    tried = {
        "softmax right": ("12.4", make_softmax(INF)),
        "softmax zero lanes": ("12.4", make_softmax(0.0)),
        "softmax not normalised": ("12.4", make_softmax(INF, normalise=False)),
        "softmax without max": ("12.4", make_softmax(INF, subtract_max=False)),
        "softmax stub": ("12.4", stub),
        "softmax store without mask": ("12.4", make_softmax(INF, store_mask=False)),
        "lse right": ("12.5", make_lse(INF)),
        "lse no rescale": ("12.5", make_lse(INF, rescale=False)),
        "lse zero lanes": ("12.5", make_lse(0.0)),
    }
    results = {name: check(eid, fn, timeout=60) for name, (eid, fn) in tried.items()}
    print(json.dumps({name: [r.status.value, r.message, r.hint] for name, r in results.items()}))
    """
)


@pytest.fixture(scope="module")
def checked() -> dict[str, list[str]]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env.pop("ATTN_EDU_STRICT", None)
    done = subprocess.run(
        [sys.executable, "-c", KERNELS], capture_output=True, text=True, timeout=300, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_right_kernels_pass(checked: dict[str, list[str]]) -> None:
    assert checked["softmax right"][0] == "PASS", checked["softmax right"]
    assert checked["lse right"][0] == "PASS", checked["lse right"]


@pytest.mark.parametrize(
    ("name", "exercise_id", "mistake"),
    [("softmax zero lanes", "12.4", 0), ("softmax not normalised", "12.4", 1), ("lse no rescale", "12.5", 0)],
)
def test_each_slip_written_as_a_kernel_is_named(
    checked: dict[str, list[str]], name: str, exercise_id: str, mistake: int
) -> None:
    status, _, given = checked[name]
    assert status == "FAIL" and given == get_exercise(exercise_id).mistakes[mistake].message, checked[name]


def test_padded_lanes_as_zero_in_the_streamed_kernel_are_named(checked: dict[str, list[str]]) -> None:
    status, _, given = checked["lse zero lanes"]
    assert status == "FAIL" and given == get_exercise("12.5").mistakes[1].message, checked["lse zero lanes"]


def test_a_kernel_without_its_maximum_fails_on_large_scores(checked: dict[str, list[str]]) -> None:
    status, message, given = checked["softmax without max"]
    assert status == "FAIL" and message.startswith("large scores") and "NaN" in message, checked
    assert given == get_exercise("12.4").properties[0].message


def test_a_store_without_its_mask_is_stopped_in_the_notebook(checked: dict[str, list[str]]) -> None:
    # The interpreter writes through raw CPU addresses; the bounds watch stops the store before it lands.
    status, message, _ = checked["softmax store without mask"]
    assert status == "ERROR" and "OutOfBounds" in message and "tl.store" in message, checked
    assert "of out_ptr, which holds 15" in message, message  # the first case: x (3, 5) in a block of 8


def test_the_stub_kernel_is_not_attempted(checked: dict[str, list[str]]) -> None:
    assert checked["softmax stub"][0] == "NOT_ATTEMPTED", checked["softmax stub"]


# ---------------------------------------------------------------------------------------------------------
# The grading command


def _with_kernel_body(tmp_path: Path, name: str, body: str) -> Path:
    """exercises/12 with exercise 12.4's stub line replaced by ``body`` (indented as the kernel's body)."""
    nb = json.loads(EXERCISE.read_text(encoding="utf-8"))
    stub = '    raise NotImplementedError("Exercise 12.4:'
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and stub in source:
            lines = [
                textwrap.indent(body, "    ") if line.startswith(stub) else line
                for line in source.split("\n")
            ]
            cell["source"] = "\n".join(lines)
    path = tmp_path / name
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


def _grade(paths: list[Path], tmp_path: Path) -> dict[str, dict[str, dict]]:
    out = tmp_path / "grades.json"
    limits = ["--timeout", "5", "--cell-timeout", "30", "--notebook-timeout", "120", "--notebook", "12"]
    done = subprocess.run(
        [sys.executable, "-m", "attn_edu.grade", *map(str, paths), "--json", str(out), *limits],
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr[-3000:]
    document = json.loads(out.read_text())
    return {s["learner"]: {r["id"]: r for r in s["exercises"]} for s in document["submissions"]}


@pytest.mark.slow  # grades hostile kernels in sandboxes
def test_the_grader_passes_the_solution_and_survives_hostile_kernels(tmp_path: Path) -> None:
    looping = _with_kernel_body(tmp_path, "looping.ipynb", "while True:\n    pass")
    stray = _with_kernel_body(
        tmp_path,
        "stray.ipynb",
        "cols = tl.arange(0, BLOCK)\ntl.store(out_ptr + cols + 1_000_000_000_000, tl.zeros([BLOCK], tl.float32))",
    )
    crashing = _with_kernel_body(tmp_path, "crashing.ipynb", "import ctypes\n\nctypes.string_at(0)")
    untouched = _with_kernel_body(
        tmp_path, "untouched.ipynb", 'raise NotImplementedError("Exercise 12.4: ...")'
    )
    graded = _grade([SOLUTION, untouched, looping, stray, crashing], tmp_path)
    solution = graded["12_flash_attention"]
    kernels = ("12.4", "12.5", "12.7", "12.8")
    assert all(solution[i]["status"] == "PASS" for i in kernels), {i: solution[i] for i in kernels}
    assert all(graded["untouched"][i]["status"] == "NOT_ATTEMPTED" for i in kernels), graded["untouched"]
    assert graded["looping"]["12.4"]["status"] == "TIMEOUT", graded["looping"]["12.4"]
    assert graded["looping"]["12.5"]["status"] == "NOT_ATTEMPTED"  # graded after the timeout
    caught = graded["stray"]["12.4"]  # the interpreter's bounds watch stops the store before it happens
    assert caught["status"] == "ERROR" and "OutOfBounds" in caught["message"], caught
    assert "tl.store of 8 lane(s) outside every tensor" in caught["message"], caught
    assert graded["stray"]["12.5"]["status"] == "NOT_ATTEMPTED"  # the process lives on to grade the rest
    crashed = graded["crashing"]["12.4"]  # a crash of another kind still ends only its own process
    assert crashed["status"] == "ERROR" and "SIGSEGV" in crashed["message"], crashed
    assert graded["crashing"]["12.1"]["status"] == "NOT_ATTEMPTED"  # graded before the crash


@pytest.mark.parametrize("missing", ["_get_np_dtype", "GridExecutor._init_args_hst"])
def test_the_bounds_watch_turns_itself_off_where_triton_lacks_what_it_uses(
    missing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watch leans on Triton's private interpreter names; where one is missing (another Triton), the
    block runs unwatched instead of failing the learner with an ImportError that is not theirs."""
    import triton.runtime.interpreter as interpreter

    from attn_edu.grading.bounds import bounds_checked

    with bounds_checked() as on:
        assert on is True
    owner, _, name = missing.rpartition(".")
    monkeypatch.delattr(getattr(interpreter, owner) if owner else interpreter, name)
    with bounds_checked() as on:
        assert on is False
