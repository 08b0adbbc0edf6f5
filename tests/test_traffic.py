"""show_traffic draws a learner's attention kernel as it ran (Triton's interpreter): a right causal kernel's loads
form the staircase of causal skipping, with nothing marked; the same kernel without skipping has its skippable key
and value blocks marked, though its numbers are right; a check that fails it for that says where to look."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("triton")
pytestmark = pytest.mark.triton

KERNEL = textwrap.dedent(
    """
    import triton, triton.language as tl

    SKIP = True


    @triton.jit
    def causal_attention_kernel(
        q_ptr, k_ptr, v_ptr, out_ptr, T, S, scale, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
    ):
        q_start = tl.program_id(0) * BLOCK_M
        rows = q_start + tl.arange(0, BLOCK_M)
        dims = tl.arange(0, D)
        q = tl.load(q_ptr + rows[:, None] * D + dims[None, :], mask=rows[:, None] < T, other=0.0)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, D], tl.float32)
        key_stop = S
        if SKIP:
            key_stop = tl.minimum(S, S - T + q_start + BLOCK_M)
        for k_start in range(0, key_stop, BLOCK_N):
            cols = k_start + tl.arange(0, BLOCK_N)
            k = tl.load(k_ptr + cols[:, None] * D + dims[None, :], mask=cols[:, None] < S, other=0.0)
            v = tl.load(v_ptr + cols[:, None] * D + dims[None, :], mask=cols[:, None] < S, other=0.0)
            scores = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
            scores = tl.where(cols[None, :] <= rows[:, None] + S - T, scores, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(scores, axis=1))
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(scores - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
            m_i = m_new
        tl.store(out_ptr + rows[:, None] * D + dims[None, :], acc / l_i[:, None], mask=rows[:, None] < T)


    def causal_attention(q, k, v):  # the launcher is not what is drawn: the check launches the kernel itself
        return q
    """
)

RUN = textwrap.dedent(
    """
    import json, os, sys
    os.environ["TRITON_INTERPRET"] = "1"
    sys.path.insert(0, sys.argv[1])
    import matplotlib
    matplotlib.use("Agg")
    import learner
    from attn_edu.grading import check
    from attn_edu.grading.traffic import show_traffic
    from matplotlib.colors import to_hex
    from attn_edu.viz.diagrams_traffic import WRONG

    found = {}
    for skip in (True, False):
        learner.SKIP = skip
        fig = show_traffic("12.14", learner.causal_attention)
        found[f"skip={skip}"] = {
            "title": fig._suptitle.get_text() if fig._suptitle else "",
            "red": sum(to_hex(p.get_edgecolor()) == WRONG for ax in fig.axes for p in ax.patches),
        }
        result = check("12.14", learner.causal_attention)
        found[f"skip={skip}"]["check"] = [result.status.value, result.hint]
    print(json.dumps(found))
    """
)


def test_show_traffic_marks_the_key_blocks_a_causal_kernel_should_have_skipped(tmp_path: Path) -> None:
    (tmp_path / "learner.py").write_text(KERNEL)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("ATTN_EDU_STRICT", None)
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    right, wrong = found["skip=True"], found["skip=False"]
    assert right["check"][0] == "PASS" and right["red"] == 0, right
    assert "exercise 12.14: T = 40, S = 56" in right["title"], right
    # programs 0 and 1 (queries 0..31 of 40, keys 56) load blocks they never need: K and V of each, outlined red
    assert wrong["red"] >= 4, wrong
    assert wrong["check"][0] == "ERROR" and "show_traffic('12.14', your launcher)" in wrong["check"][1], wrong


def test_show_traffic_refuses_an_exercise_it_cannot_draw() -> None:
    from attn_edu.grading.traffic import show_traffic

    with pytest.raises(
        ValueError, match=r"exercise_id: expected one of \['12.13', '12.14', '12.7'\], got '12.4'"
    ):
        show_traffic("12.4", lambda x: x)
