"""The steps of notebook 12's Triton ladder that come between its first kernels and the forward kernel (12.11 a
masked tile, 12.12 a tiled q kᵀ with tl.dot, 12.13 one query block against every key block, 12.14 causal block
skipping), graded as a learner meets them: real ``@triton.jit`` kernels in Triton's interpreter on CPU tensors.

Each right kernel passes; each named mistake of these exercises, written as the kernel a learner writes (one
flag each, read by the kernel as a module global), fails with that mistake's message; a causal kernel that does
not skip its blocks, and one whose store leaves the tile's edge unmasked, are errors that say so. (12.4, 12.5,
12.7, 12.8 and the grading command: tests/test_triton_exercises.py.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from attn_edu.grading.registry import get_exercise

pytest.importorskip("triton")
pytestmark = pytest.mark.triton

KERNELS = textwrap.dedent(
    """
    import json, math, os
    os.environ["TRITON_INTERPRET"] = "1"
    import torch, triton, triton.language as tl
    from attn_edu.grading import check

    DEFAULTS = dict(
        STRIDES=True, TOP_LEFT=False, STRICT=False, ROW_MASK_ON_STORE=True,  # 12.11
        ADD=True, MOVE_CHUNK=True, TRANSPOSE=True, FILL=0.0,  # 12.12
        RESCALE_ACC=True, MASK_PADDED=True, SCALE=True, PER_BLOCK=False,  # 12.13
        SKIP=True, EARLY_STOP=False, MASK_DIAGONAL=True,  # 12.14 (and TOP_LEFT)
    )
    globals().update(DEFAULTS)

    @triton.jit
    def masked_scores_kernel(
        scores_ptr, out_ptr, T, S, stride_t, stride_s, BLOCK_T: tl.constexpr, BLOCK_S: tl.constexpr
    ):
        rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
        cols = tl.program_id(1) * BLOCK_S + tl.arange(0, BLOCK_S)
        inside = (rows[:, None] < T) & (cols[None, :] < S)
        if STRIDES:
            x = tl.load(scores_ptr + rows[:, None] * stride_t + cols[None, :] * stride_s, mask=inside, other=0.0)
        else:  # rows taken to be S apart, as if the scores were contiguous
            x = tl.load(scores_ptr + rows[:, None] * S + cols[None, :], mask=inside, other=0.0)
        if TOP_LEFT:
            visible = cols[None, :] <= rows[:, None]
        elif STRICT:
            visible = cols[None, :] < rows[:, None] + S - T
        else:
            visible = cols[None, :] <= rows[:, None] + S - T
        x = tl.where(visible, x, float("-inf"))
        if ROW_MASK_ON_STORE:
            tl.store(out_ptr + rows[:, None] * S + cols[None, :], x, mask=inside)
        else:  # the columns masked, the rows not: the last tile of rows writes past the output
            tl.store(out_ptr + rows[:, None] * S + cols[None, :], x, mask=cols[None, :] < S)

    def masked_scores(scores, column_major=False):  # the learner's launcher: not what is graded
        return scores

    @triton.jit
    def tiled_scores_kernel(
        q_ptr, k_ptr, out_ptr, T, S, D, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr
    ):
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        for d_start in range(0, D, BLOCK_K):
            dims = tl.arange(0, BLOCK_K)
            if MOVE_CHUNK:
                dims = d_start + dims
            q = tl.load(
                q_ptr + rows[:, None] * D + dims[None, :], mask=(rows[:, None] < T) & (dims[None, :] < D), other=FILL
            )
            if TRANSPOSE:
                k = tl.load(
                    k_ptr + cols[None, :] * D + dims[:, None],
                    mask=(dims[:, None] < D) & (cols[None, :] < S),
                    other=FILL,
                )
            else:  # (BLOCK_N, BLOCK_K): one key per row, multiplied as it lies
                k = tl.load(
                    k_ptr + cols[:, None] * D + dims[None, :],
                    mask=(cols[:, None] < S) & (dims[None, :] < D),
                    other=FILL,
                )
            if ADD:
                acc += tl.dot(q, k, input_precision="ieee")
            else:
                acc = tl.dot(q, k, input_precision="ieee")
        tl.store(out_ptr + rows[:, None] * S + cols[None, :], acc, mask=(rows[:, None] < T) & (cols[None, :] < S))

    def tiled_scores(q, k):
        return q @ k.T

    @triton.jit
    def block_attention_kernel(
        q_ptr, k_ptr, v_ptr, out_ptr, T, S, scale, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
    ):
        q_start = tl.program_id(0) * BLOCK_M
        rows = q_start + tl.arange(0, BLOCK_M)
        dims = tl.arange(0, D)
        q = tl.load(q_ptr + rows[:, None] * D + dims[None, :], mask=rows[:, None] < T, other=0.0)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, D], tl.float32)
        for k_start in range(0, S, BLOCK_N):
            cols = k_start + tl.arange(0, BLOCK_N)
            k = tl.load(k_ptr + cols[:, None] * D + dims[None, :], mask=cols[:, None] < S, other=0.0)
            v = tl.load(v_ptr + cols[:, None] * D + dims[None, :], mask=cols[:, None] < S, other=0.0)
            scores = tl.dot(q, tl.trans(k), input_precision="ieee")
            if SCALE:
                scores = scores * scale
            if MASK_PADDED:
                scores = tl.where(cols[None, :] < S, scores, float("-inf"))
            if PER_BLOCK:  # each block's softmax on its own, summed
                e = tl.exp(scores - tl.max(scores, axis=1)[:, None])
                acc = acc + tl.dot(e / tl.sum(e, axis=1)[:, None], v, input_precision="ieee")
            else:
                m_new = tl.maximum(m_i, tl.max(scores, axis=1))
                alpha = tl.exp(m_i - m_new)
                p = tl.exp(scores - m_new[:, None])
                l_i = l_i * alpha + tl.sum(p, axis=1)
                if RESCALE_ACC:
                    acc = acc * alpha[:, None]
                acc = acc + tl.dot(p, v, input_precision="ieee")
                m_i = m_new
        if PER_BLOCK:
            out = acc
        else:
            out = acc / l_i[:, None]
        tl.store(out_ptr + rows[:, None] * D + dims[None, :], out, mask=rows[:, None] < T)

    def block_attention(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)

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
        shift = S - T
        if TOP_LEFT:
            shift = 0
        last = BLOCK_M
        if EARLY_STOP:  # the block's first query's keys
            last = 1
        key_stop = S
        if SKIP:
            key_stop = tl.minimum(S, shift + q_start + last)
        for k_start in range(0, key_stop, BLOCK_N):
            cols = k_start + tl.arange(0, BLOCK_N)
            k = tl.load(k_ptr + cols[:, None] * D + dims[None, :], mask=cols[:, None] < S, other=0.0)
            v = tl.load(v_ptr + cols[:, None] * D + dims[None, :], mask=cols[:, None] < S, other=0.0)
            scores = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
            if MASK_DIAGONAL:
                scores = tl.where(cols[None, :] <= rows[:, None] + shift, scores, float("-inf"))
            else:  # only the keys past S hidden
                scores = tl.where(cols[None, :] < S, scores, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(scores, axis=1))
            alpha = tl.exp(m_i - m_new)
            p = tl.exp(scores - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
            m_i = m_new
        tl.store(out_ptr + rows[:, None] * D + dims[None, :], acc / l_i[:, None], mask=rows[:, None] < T)

    def causal_attention(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    tried = {
        "12.11 right": ("12.11", masked_scores, {}),
        "12.11 strides": ("12.11", masked_scores, {"STRIDES": False}),
        "12.11 top_left": ("12.11", masked_scores, {"TOP_LEFT": True}),
        "12.11 diagonal": ("12.11", masked_scores, {"STRICT": True}),
        "12.11 store without the row mask": ("12.11", masked_scores, {"ROW_MASK_ON_STORE": False}),
        "12.12 right": ("12.12", tiled_scores, {}),
        "12.12 replaced": ("12.12", tiled_scores, {"ADD": False}),
        "12.12 same_chunk": ("12.12", tiled_scores, {"MOVE_CHUNK": False}),
        "12.12 not_transposed": ("12.12", tiled_scores, {"TRANSPOSE": False}),
        "12.12 no_fill": ("12.12", tiled_scores, {"FILL": None}),
        "12.13 right": ("12.13", block_attention, {}),
        "12.13 acc_not_rescaled": ("12.13", block_attention, {"RESCALE_ACC": False}),
        "12.13 padded_keys": ("12.13", block_attention, {"MASK_PADDED": False}),
        "12.13 no_scale": ("12.13", block_attention, {"SCALE": False}),
        "12.13 per_block": ("12.13", block_attention, {"PER_BLOCK": True}),
        "12.14 right": ("12.14", causal_attention, {}),
        "12.14 no_diagonal_mask": ("12.14", causal_attention, {"MASK_DIAGONAL": False}),
        "12.14 early_stop": ("12.14", causal_attention, {"EARLY_STOP": True}),
        "12.14 top_left": ("12.14", causal_attention, {"TOP_LEFT": True}),
        "12.14 without block skipping": ("12.14", causal_attention, {"SKIP": False}),
    }
    results = {}
    for name, (eid, fn, flags) in tried.items():
        globals().update(DEFAULTS, **flags)
        results[name] = check(eid, fn, timeout=120)
    print(json.dumps({name: [r.status.value, r.message, r.hint] for name, r in results.items()}))
    """
)


@pytest.fixture(scope="module")
def checked() -> dict[str, list[str]]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env.pop("ATTN_EDU_STRICT", None)
    done = subprocess.run(
        [sys.executable, "-c", KERNELS], capture_output=True, text=True, timeout=600, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("exercise_id", ["12.11", "12.12", "12.13", "12.14"])
def test_the_right_kernel_passes(checked: dict[str, list[str]], exercise_id: str) -> None:
    assert checked[f"{exercise_id} right"][0] == "PASS", checked[f"{exercise_id} right"]


# (exercise, the slip's name in the script, the index of its Mistake): every named mistake of the four steps
SLIPS = [
    ("12.11", "strides", 0),
    ("12.11", "top_left", 1),
    ("12.11", "diagonal", 2),
    ("12.12", "replaced", 0),
    ("12.12", "same_chunk", 1),
    ("12.12", "not_transposed", 2),
    ("12.12", "no_fill", 3),
    ("12.13", "acc_not_rescaled", 0),
    ("12.13", "padded_keys", 1),
    ("12.13", "no_scale", 2),
    ("12.13", "per_block", 3),
    ("12.14", "no_diagonal_mask", 0),
    ("12.14", "early_stop", 1),
    ("12.14", "top_left", 2),
]


def test_every_named_mistake_of_the_new_steps_is_written_as_a_kernel() -> None:
    for exercise_id in ("12.11", "12.12", "12.13", "12.14"):
        written = sorted(index for eid, _, index in SLIPS if eid == exercise_id)
        assert written == list(range(len(get_exercise(exercise_id).mistakes))), exercise_id


@pytest.mark.parametrize(("exercise_id", "slip", "index"), SLIPS, ids=[f"{e}-{s}" for e, s, _ in SLIPS])
def test_each_slip_written_as_a_kernel_gets_its_message(
    checked: dict[str, list[str]], exercise_id: str, slip: str, index: int
) -> None:
    status, _, given = checked[f"{exercise_id} {slip}"]
    assert status == "FAIL" and given == get_exercise(exercise_id).mistakes[index].message, checked[
        f"{exercise_id} {slip}"
    ]


def test_a_causal_kernel_that_loads_every_key_block_fails_though_its_numbers_are_right(
    checked: dict[str, list[str]],
) -> None:
    status, message, _ = checked["12.14 without block skipping"]
    assert status == "ERROR" and "causal block skipping: program (" in message, message


def test_a_tile_stored_without_its_row_mask_is_stopped(checked: dict[str, list[str]]) -> None:
    status, message, _ = checked["12.11 store without the row mask"]
    assert status == "ERROR" and "OutOfBounds" in message and "tl.store" in message, message
