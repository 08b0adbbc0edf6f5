"""Attacks on the grade, tried as a student would: each is refused, with the message the student would see.

The threat model is the README's "Grading: what a grade guarantees". A student controls every cell of the
submitted notebook and whatever those cells do while they are graded. The attacks are the ones issue 36 and
the exercise review (``shared/reviews/exercises.md``, "Wrong answers I believe pass") list:

- in the notebook's own ``check()`` (fast, in-process): the answer key's reference and mistakes, and the
  library behind ``torch.no_grad()``, ``functools.partial``, an ``nn.Module``, a copied function object, a thread,
  or a profiler switched off and put back; a softmax that overflows on large scores;
- through the instructor's command, on notebook 04 (slow: each notebook runs in its own process, in the
  sandbox where this machine has bubblewrap): importing the answer key (registry, questions, the check module's
  file by path), answers precomputed for the notebook's own inputs, the grader's request and results files,
  messages forged on the grader's socket, a copy of the same notebook uploaded twice, and, inside the sandbox,
  the network, classmates' files, the answer key's files and writing into the graded folder.

The controls: the solution notebook passes every item, in the sandbox and without it.

The algorithms are checked too: the dense (T, S) form for 11.2, 11.3, 12.2 and 12.6, a prefix sum for 11.3's
recurrence, autograd for 12.6's backward (attn_edu/grading/algorithms.py); a PyTorch launcher for a Triton
exercise, and 12.7 without causal block skipping (tests/test_triton_exercises.py); and for 12.1 the grader runs
its own driver around the learner's update, so an edited driver grades nothing.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest
import torch
from helpers import once_per_run

from attn_edu import attention
from attn_edu.grading import check, command, sandbox
from attn_edu.grading.harness import kernel_of
from attn_edu.grading.registry import get_exercise, get_question
from attn_edu.grading.result import Status

ROOT = Path(__file__).resolve().parent.parent
EXERCISE = ROOT / "exercises" / "04_masks_exercises.ipynb"
SOLUTION = ROOT / "solutions" / "04_masks.ipynb"
SECRET = "attack-tests"
LOCK = (
    ROOT / "artifacts" / ".system-packages.lock"
)  # held while `make test` installs bubblewrap, then Chromium


def _bwrap_installed(seconds: float = 120.0) -> None:
    """Wait for bwrap while `make test`'s background job may still be installing it (it comes first)."""
    import fcntl

    deadline = time.monotonic() + seconds
    while shutil.which("bwrap") is None and LOCK.exists() and time.monotonic() < deadline:
        with open(LOCK) as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return  # nobody is installing
            except OSError:
                time.sleep(1.0)


_bwrap_installed()
NO_SANDBOX = sandbox.problem()
LIBRARY = "the exercise is to write this yourself"  # the hint of a call into the package


# ---------------------------------------------------------------------------------------------------------
# In the notebook: check() refuses the answer key and the library, however wrapped


def _shortcut(result) -> bool:
    return result.status is Status.FAIL and LIBRARY in result.hint and "calls attn_edu." in result.message


def test_the_answer_keys_reference_and_mistakes_are_calls_into_the_library() -> None:
    result = check("04.1", get_exercise("04.1").reference)
    assert _shortcut(result), result
    assert "attn_edu.masks.causal_mask" in result.message
    assert _shortcut(check("04.3", get_exercise("04.3").mistakes[4].fn))  # a mistake built on the library


class _Wrapped(torch.nn.Module):
    def forward(self, scores, mask):
        return attention.masked_softmax(scores, mask)


def _in_a_thread(scores, mask):
    out = []
    worker = threading.Thread(target=lambda: out.append(attention.masked_softmax(scores, mask)))
    worker.start()
    worker.join()
    return out[0]


def _profiler_off_and_back(scores, mask):
    hook = sys.getprofile()
    sys.setprofile(None)
    try:
        return attention.masked_softmax(scores, mask)
    finally:
        sys.setprofile(hook)


_copied = types.FunctionType(
    attention.masked_softmax.__code__, attention.masked_softmax.__globals__, "masked_softmax"
)
_copied.__defaults__ = attention.masked_softmax.__defaults__
_copied.__kwdefaults__ = attention.masked_softmax.__kwdefaults__


@pytest.mark.parametrize(
    "answer",
    [
        torch.no_grad()(attention.masked_softmax),
        functools.partial(attention.masked_softmax),
        _Wrapped(),
        torch.nn.Sequential(),  # placeholder replaced below: a library nn.Module called as module(x)
        _copied,
        _in_a_thread,
    ],
    ids=["no_grad", "partial", "own_module", "library_module", "copied_function", "thread"],
)
def test_the_library_behind_any_wrapper_is_refused(answer) -> None:
    if isinstance(
        answer, torch.nn.Sequential
    ):  # MultiHeadAttention's forward, reached through Module.__call__
        module = __import__("attn_edu.multihead", fromlist=["MultiHeadAttention"]).MultiHeadAttention(8, 2)
        result = check("05.3", lambda x, *args, **kwargs: module(torch.zeros(1, 3, 8)))
        assert _shortcut(result) and "MultiHeadAttention" in result.message, result
        return
    result = check("04.3", answer)
    assert _shortcut(result) and "attn_edu.attention.masked_softmax" in result.message, result


def test_a_profiler_switched_off_and_put_back_is_seen() -> None:
    result = check("04.3", _profiler_off_and_back)
    assert result.status is Status.FAIL and "switched off the watch" in result.message, result


def test_an_unshifted_softmax_overflows_on_the_large_score_cases() -> None:
    def unshifted(scores, mask):  # the review's 04.3 answer that used to pass
        e = torch.exp(scores) * mask
        return e / e.sum(-1, keepdim=True).clamp_min(1e-30)

    def plain(q, k, scale=None):
        scores = q @ k.transpose(-2, -1) * (q.shape[-1] ** -0.5 if scale is None else scale)
        return scores.exp() / scores.exp().sum(-1, keepdim=True)

    for exercise_id, answer in (
        ("04.3", unshifted),
        ("02.1", plain),
        ("02.2", lambda q, k, v: plain(q, k) @ v),
    ):
        result = check(exercise_id, answer)
        assert result.status is Status.FAIL and "NaN" in result.message, (exercise_id, result)


def test_a_question_answered_from_the_key_is_still_the_learners_answer_in_the_notebook() -> None:
    # In the learner's own kernel the registry is importable (check() needs it); the grade comes from the
    # grading command, where it is not (tests below).
    assert check("04.q1", get_question("04.q1").answer).status is Status.PASS


def test_each_learner_gets_other_inputs_from_the_secret() -> None:
    exercise = get_exercise("04.1")
    seeds = {command.case_seed(SECRET, learner, "04.1") for learner in ("ada", "bob", "cy")}
    assert len(seeds) == 3 and command.GRADER_SEED not in seeds
    assert command.case_seed("another secret", "ada", "04.1") not in seeds
    assert command.case_seed(SECRET, "ada", "04.2") != command.case_seed(SECRET, "ada", "04.1")
    cases = [exercise.make_cases(torch.Generator().manual_seed(s)) for s in seeds]
    assert cases[0][4].args != cases[1][4].args or cases[1][4].args != cases[2][4].args  # the random (T, S)


def test_a_copy_of_the_solution_or_the_library_is_flagged_not_failed() -> None:
    import inspect

    from attn_edu import masks
    from attn_edu.grading.similarity import copy_flag

    mine = (
        "def causal_mask(n_q, n_k):\n"
        "    # renamed, recommented, reflowed: still the solution's function\n"
        "    rows = torch.arange(n_q)[:, None]\n"
        "    cols = torch.arange(n_k)[None, :]\n"
        "    return cols <= rows + (n_k - n_q)\n"
    )
    assert (
        copy_flag([mine], "04.1", "causal_mask") == "identical to the solution notebook's (normalised source)"
    )
    pasted = inspect.getsource(masks.padding_mask)  # the library's, pasted in
    assert (
        copy_flag([pasted], "04.2", "padding_mask")
        == "identical to attn_edu.masks.padding_mask (normalised source)"
    )
    own = mine.replace("cols <= rows", "rows >= cols")  # the same mask, written otherwise
    assert copy_flag([own], "04.1", "causal_mask") is None


# ---------------------------------------------------------------------------------------------------------
# Through the instructor's command: one folder of attacks on notebook 04, graded once


def _cells(nb: dict, marker: str) -> dict:
    return next(c for c in nb["cells"] if c["cell_type"] == "code" and marker in "".join(c["source"]))


def _notebook(replace: dict[str, str], base: Path = EXERCISE, extra: tuple[str, ...] = ()) -> dict:
    """Notebook 04 with the cells marked ``# Exercise 04.k:`` or ``# Question 04.qk:`` replaced (the marker
    line kept), and ``extra`` code cells appended."""
    nb = json.loads(base.read_text(encoding="utf-8"))
    for item, source in replace.items():
        noun = "Question" if ".q" in item else "Exercise"
        cell = _cells(nb, f"# {noun} {item}:")
        first = "".join(cell["source"]).split("\n")[0]
        cell["source"] = f"{first}\n{source}"
        cell[
            "outputs"
        ] = []  # what the new code prints, not what the old code printed (a first answer's record)
    for source in extra:
        nb["cells"].append(
            {"cell_type": "code", "metadata": {}, "source": source, "outputs": [], "execution_count": None}
        )
    return nb


KEY_FILE = "pathlib.Path(attn_edu.__file__).parent / 'grading' / 'checks' / 'masks.py'"

ATTACKS: dict[str, dict[str, str]] = {
    # the answer key, by import and by file
    "key": {
        "04.1": 'from attn_edu.grading.registry import get_exercise\ncausal_mask = get_exercise("04.1").reference',
        "04.2": (
            f"import attn_edu, pathlib\npath = {KEY_FILE}\nkey = {{'__name__': 'key'}}\n"
            "exec(compile(path.read_text(), str(path), 'exec'), key)\n"
            "padding_mask = next(e for e in key['EXERCISES'] if e.exercise_id == '04.2').reference"
        ),
        "04.3": (
            f"import attn_edu, importlib.util, pathlib\nspec = importlib.util.spec_from_file_location('k', {KEY_FILE})\n"
            "module = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(module)\n"
            "masked_softmax = module.MASKED_SOFTMAX.reference"
        ),
        "04.q1": 'from attn_edu.grading.questions.masks import QUESTIONS\nanswer_q1 = QUESTIONS[0].answer\ncheck("04.q1", answer_q1)',
        "04.q2": 'from attn_edu.grading.registry import get_question\nanswer_q2 = get_question("04.q2").answer',
    },
    # the library, and answers computed for the notebook's own inputs
    "library": {
        "04.1": "import attn_edu.masks\ncausal_mask = torch.no_grad()(attn_edu.masks.causal_mask)",
        "04.2": (  # the notebook's check() inputs are public: a table of their answers, made at cell time
            "from attn_edu import masks\n"
            "TABLE = {(tuple(l), n, side): masks.padding_mask(torch.tensor(l), n, side=side)\n"
            "         for l, n, side in __SEED0_CASES__}\n"
            "def padding_mask(lengths, max_len, side='right'):\n"
            "    return TABLE[(tuple(lengths.tolist()), max_len, side)].clone()"
        ),
        "04.3": "from attn_edu.attention import masked_softmax as masked_softmax",
    },
    # the channel to the grader: its old files, and messages written on its socket
    "channel": {
        "04.2": "__PASTED_PADDING_MASK__",
        "04.1": (
            "import os, json, socket, struct\n"
            "def causal_mask(T, S):\n"
            "    return torch.arange(S)[None, :] <= torch.arange(T)[:, None] + (S - T)\n"
            "read = []\n"
            "for name in ('../request.json', '../results.jsonl'):\n"
            "    try:\n        read.append(open(name).read())\n    except OSError:\n        pass\n"
            '    try:\n        open(name, \'a\').write(\'{"event": "exercise", "id": "04.2", "outcomes": []}\\n\')\n'
            "    except OSError:\n        pass\n"
            "for fd in range(3, 64):\n"
            "    try:\n        s = socket.socket(fileno=os.dup(fd))\n    except OSError:\n        continue\n"
            "    for m in ({'event': 'cells_done'}, {'event': 'exercise', 'id': '04.1', 'nonce': '0' * 16,\n"
            "              'outcomes': [{'kind': 'tensor', 'dtype': 'bool', 'shape': [1], 'data': [True]}]}):\n"
            "        data = json.dumps(m).encode()\n"
            "        try:\n            s.sendall(struct.pack('>I', len(data)) + data)\n        except OSError:\n            pass"
        ),
    },
}


def _pasted() -> str:
    import inspect

    from attn_edu import masks

    return inspect.getsource(masks.padding_mask)  # the library's own function, pasted into the notebook


def _seed0_padding_cases() -> str:
    from attn_edu.grading.exercise import make_cases

    cases = make_cases(get_exercise("04.2"), 0)
    return repr([(c.args[0].tolist(), c.args[1], c.kwargs.get("side", "right")) for c in cases])


def _oracle(port: int, classmate: Path, instructor: Path) -> str:
    """04.q1's answer as a bit mask of what the notebook could reach: 1 the network, 2 a classmate's notebook,
    4 the answer key's file, 8 a file of the instructor's (in the folder the grader runs in); it also tries to
    write beside the classmate's notebook. 1000 + 0: nothing reached."""
    return (
        "import socket, pathlib, attn_edu\nreached = 0\n"
        f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2).close()\n    reached |= 1\n"
        "except OSError:\n    pass\n"
        f"reached |= 2 if pathlib.Path({str(classmate)!r}).exists() else 0\n"
        f"reached |= 4 if ({KEY_FILE}).exists() else 0\n"
        f"reached |= 8 if pathlib.Path({str(instructor)!r}).exists() else 0\n"
        f"try:\n    pathlib.Path({str(classmate.parent.parent / 'planted.txt')!r}).write_text('x')\n"
        "except OSError:\n    pass\n"
        'answer_q1 = 1000 + reached\ncheck("04.q1", answer_q1)'
    )


@pytest.fixture(scope="module")
def listener():
    """A TCP port on 127.0.0.1 that accepts connections, for the network oracle (closed after the module)."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.5)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                server.accept()[0].close()
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(timeout=5)
    server.close()


def _grade(folder: Path, out: Path, *extra: str, env: dict | None = None) -> dict:
    """Grade ``folder`` from ``out``'s folder, where the instructor keeps a file of notes."""
    (out.parent / "instructor_notes.txt").write_text("the secret is ...", encoding="utf-8")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "attn_edu.grade",
            str(folder),
            "--jobs",
            "2",
            "--secret",
            SECRET,
            "--json",
            str(out),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=out.parent,
        env=env,
    )
    assert run.returncode in (0, 1), run.stderr[-2000:]
    return {"stderr": run.stderr, "document": json.loads(out.read_text(encoding="utf-8"))}


def _by(graded: dict) -> dict:
    """``graded`` with each report under ``(learner, file name)``."""
    return graded | {
        "by": {(s["learner"], Path(s["path"]).name): s for s in graded["document"]["submissions"]}
    }


def _folder(root: Path, port: int) -> Path:
    folder = root / "submissions"
    for learner, replace in ATTACKS.items():
        (folder / learner).mkdir(parents=True)
        replace = {
            k: v.replace("__SEED0_CASES__", _seed0_padding_cases()).replace(
                "__PASTED_PADDING_MASK__", _pasted()
            )
            for k, v in replace.items()
        }
        nb = _notebook(replace)
        (folder / learner / "04_masks.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    (folder / "oracle").mkdir()
    classmate = folder / "control" / "04_masks.ipynb"
    nb = _notebook({"04.q1": _oracle(port, classmate, root / "instructor_notes.txt")}, base=SOLUTION)
    (folder / "oracle" / "04_masks.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    (folder / "control").mkdir()
    classmate.write_text(SOLUTION.read_text(encoding="utf-8"), encoding="utf-8")
    copy_of = json.loads(SOLUTION.read_text(encoding="utf-8"))  # the same notebook uploaded again
    (folder / "control" / "04_masks (1).ipynb").write_text(json.dumps(copy_of), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory, listener: int) -> dict:
    """The folder of attacks, graded once for the whole run (pytest-xdist workers share the result)."""

    def grade() -> dict:
        root = tmp_path_factory.mktemp("attacks")
        return _grade(_folder(root, listener), root / "grades.json") | {"folder": str(root / "submissions")}

    return _by(once_per_run(tmp_path_factory, "grading-attacks", grade))


def _item(graded: dict, learner: str, item: str, name: str = "04_masks.ipynb") -> dict:
    return next(r for r in graded["by"][(learner, name)]["exercises"] if r["id"] == item)


@pytest.mark.slow  # grades five notebooks, in the sandbox where there is one (about 30 s)
def test_the_solution_passes_and_a_second_copy_is_not_counted(graded: dict) -> None:
    both = [graded["by"][("control", name)] for name in ("04_masks.ipynb", "04_masks (1).ipynb")]
    kept = [r for r in both if not r["error"]]
    assert len(kept) == 1 and kept[0]["passed"] and kept[0]["points"] == kept[0]["max_points"] > 0, both
    skipped = next(r for r in both if r["error"])
    assert skipped["points"] == 0 and skipped["exercises"] == []
    assert (
        f"not graded: {Path(kept[0]['path']).name} is this learner's notebook 04 already" == skipped["error"]
    )
    assert graded["document"]["grader"]["inputs"] == "per learner, from the secret"
    assert len(graded["document"]["grader"]["checks_sha256"]) == 64
    # the solution notebook is the solution: flagged for the instructor, and still full points
    assert {r["id"]: r.get("flag") for r in kept[0]["exercises"]}["04.1"].startswith(
        "identical to the solution"
    )


@pytest.mark.slow
def test_a_pasted_library_function_is_flagged_for_the_instructor(graded: dict) -> None:
    pasted = _item(graded, "channel", "04.2")
    assert pasted["flag"] == "identical to attn_edu.masks.padding_mask (normalised source)", pasted
    assert "flag" not in _item(graded, "library", "04.3")  # an import is a shortcut (a FAIL), not a copy


@pytest.mark.slow
def test_the_answer_key_cannot_be_imported_or_read_while_grading(graded: dict) -> None:
    notes = " ".join(graded["by"][("key", "04_masks.ipynb")]["process"]["notes"])
    assert "is the grader's answer key: a notebook cannot import it while it is graded" in notes
    for item in ("04.1", "04.2", "04.3", "04.q1", "04.q2"):
        result = _item(graded, "key", item)
        assert result["status"] != "PASS", result
    assert _item(graded, "key", "04.1")["status"] == "NOT_ATTEMPTED"  # the stub stayed: the import failed
    assert _item(graded, "key", "04.q2")["status"] == "NOT_ATTEMPTED"
    if NO_SANDBOX is None:  # the key's files are not there in the sandbox
        assert "FileNotFoundError" in notes
    else:  # read by path, run under its own name: its reference still calls the library for the learner
        assert LIBRARY in _item(graded, "key", "04.2")["hint"]


@pytest.mark.slow
def test_the_library_and_answers_made_for_the_notebooks_own_inputs_fail(graded: dict) -> None:
    twin = _item(graded, "library", "04.1")
    assert twin["status"] == "FAIL" and "calls attn_edu.masks.causal_mask" in twin["message"], twin
    table = _item(graded, "library", "04.2")  # the grader's inputs are not the notebook's
    assert table["status"] == "ERROR" and "KeyError" in table["message"], table
    imported = _item(graded, "library", "04.3")
    assert imported["status"] == "FAIL" and "calls attn_edu.attention.masked_softmax" in imported["message"]


@pytest.mark.slow
def test_the_verdict_cannot_be_written_by_the_notebook(graded: dict) -> None:
    report = graded["by"][("channel", "04_masks.ipynb")]
    assert "sent what the grader did not ask for" in " ".join(report["process"]["notes"]), report["process"]
    assert not any(r["status"] == "PASS" for r in report["exercises"]), report["exercises"]
    assert _item(graded, "channel", "04.1")["message"].startswith("the notebook's process stopped answering")


@pytest.mark.slow
@pytest.mark.skipif(NO_SANDBOX is not None, reason=f"no sandbox here: {NO_SANDBOX}")
def test_in_the_sandbox_nothing_outside_is_reached(graded: dict) -> None:
    oracle = _item(graded, "oracle", "04.q1")
    assert oracle["message"].startswith("1000 is not the answer"), oracle  # no bit set: nothing reached
    assert not (Path(graded["folder"]) / "planted.txt").exists()
    report = graded["by"][("oracle", "04_masks.ipynb")]
    assert report["process"]["sandboxed"] and graded["document"]["grader"]["sandbox"] == "bwrap"
    assert sum(r["status"] == "PASS" for r in report["exercises"]) == len(report["exercises"]) - 1


@pytest.mark.slow
def test_without_the_sandbox_the_grader_says_so_and_still_grades(tmp_path: Path, listener: int) -> None:
    folder = tmp_path / "submissions"
    (folder / "oracle").mkdir(parents=True)
    (folder / "control").mkdir()
    classmate = folder / "control" / "04_masks.ipynb"
    classmate.write_text("{}", encoding="utf-8")
    nb = _notebook({"04.q1": _oracle(listener, classmate, tmp_path / "instructor_notes.txt")}, base=SOLUTION)
    (folder / "oracle" / "04_masks.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    no_bwrap = tmp_path / "bin"  # a PATH without bwrap: the sandbox cannot start
    no_bwrap.mkdir()
    graded = _by(_grade(folder, tmp_path / "grades.json", env={**os.environ, "PATH": str(no_bwrap)}))
    assert "grader: no sandbox (bwrap (bubblewrap) is not installed" in graded["stderr"]
    assert graded["stderr"].count("grader: no sandbox") == 1
    report = graded["by"][("oracle", "04_masks.ipynb")]
    assert not report["process"]["sandboxed"] and graded["document"]["grader"]["sandbox"] == "none"
    reached = int(_item(graded, "oracle", "04.q1")["message"].split()[0]) - 1000
    assert reached == 1 | 2 | 4 | 8, reached  # what the sandbox takes away: everything
    assert (folder / "planted.txt").exists()
    assert all(r["status"] == "PASS" for r in report["exercises"] if r["id"] != "04.q1")


# ---------------------------------------------------------------------------------------------------------
# The kernel exercises: the kernel is graded, not the launcher; the algorithm an exercise asks for


def test_a_pytorch_launcher_fails_a_triton_exercise() -> None:
    # The check launches the kernel of the exercise's name itself; this module has none.
    result = check("12.4", lambda x: torch.softmax(x, dim=-1))
    assert (
        result.status is Status.ERROR and "no @triton.jit function named `softmax_kernel`" in result.message
    )


class _NotAKernel:
    """Indexed by a grid like a kernel, but what it launches is torch's softmax written into ``out``."""

    fn = None

    def __getitem__(self, grid):  # noqa: ANN001, ANN204
        def launch(x, out, *rest, **blocks):  # noqa: ANN001, ANN202
            out.copy_(torch.softmax(x, dim=-1))

        return launch


def test_an_object_that_only_looks_like_a_kernel_fails_a_triton_exercise() -> None:
    """The check launches the kernel by name; something else of that name that can be indexed by a grid is not
    launched, in the notebook (its launcher's globals) or in the grader (the notebook's namespace)."""
    softmax_kernel = _NotAKernel()

    def softmax(x):  # noqa: ANN001, ANN202 - the launcher; the check runs its own
        return softmax_kernel[(x.shape[0],)](x, torch.empty_like(x))

    result = check("12.4", softmax)
    assert result.status is Status.ERROR, result
    assert "`softmax_kernel` is a _NotAKernel, not a @triton.jit function" in result.message, result
    assert check("12.4", softmax_kernel).status is Status.ERROR  # passed itself: not a function either
    launch = kernel_of("12.4", None, {"softmax_kernel": softmax_kernel})  # as the grader's worker finds it
    with pytest.raises(TypeError, match="not a @triton.jit function"):
        launch(torch.randn(3, 5))


def _phi(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.elu(x) + 1


def _dense_linear(q, k, v):
    T, S = q.shape[-2], k.shape[-2]
    scores = (_phi(q) @ _phi(k).transpose(-2, -1)).masked_fill(
        ~torch.ones(T, S, dtype=torch.bool).tril(S - T), 0.0
    )
    return (scores @ v) / scores.sum(-1, keepdim=True)


def _prefix_sums(q, k, v):  # 11.2's parallel form: right for 11.2, not the recurrence 11.3 asks for
    T, S = q.shape[-2], k.shape[-2]
    state = torch.cumsum(_phi(k)[..., :, :, None] * v[..., :, None, :], dim=-3)[..., S - T :, :, :]
    norm = torch.cumsum(_phi(k), dim=-2)[..., S - T :, :]
    return (_phi(q)[..., :, :, None] * state).sum(-2) / (_phi(q) * norm).sum(-1, keepdim=True)


def _sdpa_forward(q, k, v, is_causal=False, block_q=16, block_k=16):
    T, S = q.shape[-2], k.shape[-2]
    visible = (
        torch.ones(T, S, dtype=torch.bool).tril(S - T) if is_causal else torch.ones(T, S, dtype=torch.bool)
    )
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=visible)
    return torch.where(visible.any(dim=-1)[:, None], out, 0.0)  # rows that see no key: zeros


def _autograd_backward(q, k, v, out, lse, grad_out, is_causal=False, block_q=16, block_k=16):
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        T, S = q.shape[-2], k.shape[-2]
        scores = leaves[0] @ leaves[1].transpose(-2, -1) / q.shape[-1] ** 0.5
        if is_causal:
            scores = scores.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(S - T), float("-inf"))
        o = torch.softmax(scores, -1).nan_to_num(0.0) @ leaves[2]
        return torch.cat(torch.autograd.grad(o, leaves, grad_out), dim=-2)


@pytest.mark.parametrize(
    "exercise_id, answer, words",
    [
        ("11.2", _dense_linear, "without the (T, S) score matrix"),
        ("11.3", _prefix_sums, "uses cumsum"),
        ("11.3", _dense_linear, "without the (T, S) score matrix"),
        ("12.2", _sdpa_forward, "scaled_dot_product_attention"),
        ("12.6", _autograd_backward, "without the (T, S) score matrix"),
    ],
    ids=["11.2-dense", "11.3-prefix-sums", "11.3-dense", "12.2-sdpa", "12.6-autograd"],
)
def test_the_algorithm_an_exercise_asks_for_is_checked(exercise_id: str, answer, words: str) -> None:
    result = check(exercise_id, answer)  # the right numbers: the way of computing is what fails
    assert result.status is Status.FAIL and result.message.startswith("right on every case, but it "), result
    assert words in result.message and "a way of computing" in result.hint and result.points == 0
    assert check("11.2", _prefix_sums).status is Status.PASS  # the prefix sums are 11.2's answer


def test_autograd_is_refused_even_without_a_score_matrix() -> None:
    from attn_edu.grading.algorithms import watched

    def tiny(q, k, v, out, lse, grad_out, **kwargs):
        with torch.enable_grad():
            x = q.detach().requires_grad_()
            return torch.autograd.grad((x * 2).sum(), x)[0]

    call = watched("12.6", tiny)
    call(torch.randn(1, 1, 3, 4), torch.randn(1, 1, 5, 4), None, None, None, None)
    assert call.broken.startswith("uses autograd")


def test_the_update_is_graded_not_an_edited_driver() -> None:
    scope = {"torch": torch}
    exec(  # an update without the rescale, and the given driver replaced by torch's softmax
        "def online_softmax_update(m_i, l_i, x_block):\n"
        "    m_new = torch.maximum(m_i, x_block.amax(dim=-1))\n"
        "    return m_new, l_i + torch.exp(x_block - m_new[..., None]).sum(dim=-1)\n\n\n"
        "def online_softmax(x, block_size):\n"
        "    return torch.softmax(x, dim=-1)\n",
        scope,
    )
    result = check("12.1", scope["online_softmax"])
    assert result.status is Status.FAIL and result.hint == get_exercise("12.1").mistakes[0].message, result
    alone = check("12.1", lambda x, block_size: torch.softmax(x, dim=-1))  # no update in sight
    assert alone.status is Status.ERROR and "no function named `online_softmax_update`" in alone.message
