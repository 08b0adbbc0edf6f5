"""Checks for notebook 12's Triton exercises: kernels a learner writes with ``@triton.jit``.

- 12.4 a row-softmax kernel, one program per row, its lanes past ``n_cols`` masked;
- 12.5 a kernel that streams a row in blocks, keeping the running max and sum, and stores its log-sum-exp;
- 12.7 the FlashAttention forward kernel: online softmax over key blocks, ragged shapes, causal block skipping;
- 12.8 the backward kernel for dQ: ``delta = rowsum(dO ∘ O)``, then ``dS = P ∘ (dP - delta)`` per key block.

Each check launches the learner's kernel, found by name, with the grader's copy of the notebook's given launcher
(:mod:`attn_edu.grading.harness`: a launcher rewritten in PyTorch is not what is graded), in Triton's
interpreter on CPU tensors (the exercise notebook and the grading command's worker set ``TRITON_INTERPRET=1``)
or compiled on a GPU. The references are the
library's (:func:`attn_edu.attention.masked_softmax`, :mod:`attn_edu.flash`); the known-wrong versions are
written in torch, lane for lane: masked lanes loaded as 0 instead of -inf, a sum never divided by, an old sum
not rescaled when the maximum grows, a causal mask aligned top-left, a scale or a delta forgotten.
"""

from __future__ import annotations

import math

import torch

from attn_edu import attention, flash
from attn_edu.grading.checks.flash import NEG_INF, running_stats, tiled_variant
from attn_edu.grading.exercise import Case, Exercise, Mistake, Property
from attn_edu.grading.harness import LSE_BLOCK


def _randn(g: torch.Generator, *shape: int, std: float = 1.0) -> torch.Tensor:
    return std * torch.randn(shape, generator=g)


# ---------------------------------------------------------------------------------------------------------
# 12.4 a row-softmax kernel in Triton, 12.5 a row's log-sum-exp streamed over blocks in Triton

# LSE_BLOCK: the block width of 12.5's launcher: every row but the shortest spans several blocks


def _next_power_of_2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _rows_cases(g: torch.Generator) -> list[Case]:
    return [
        Case((_randn(g, 3, 5, std=2.0),)),  # a row shorter than one block
        Case((_randn(g, 4, 37, std=2.0),)),  # 37 columns in a block of 64 (12.4) or three of 16 (12.5)
        Case((_randn(g, 2, 48, std=2.0),)),  # a whole number of 16-wide blocks
        Case((_randn(g, 5, 100, std=3.0),)),
        Case((_randn(g, 2, 50, std=30.0) + 100.0,), group="large scores"),  # exp(x) overflows float32
    ]


def _padded(x: torch.Tensor, width: int, fill: float) -> torch.Tensor:
    """``x (R, N)`` with columns of ``fill`` up to ``width``: what a load with ``other=fill`` sees."""
    return torch.cat([x, x.new_full((x.shape[0], width - x.shape[1]), fill)], dim=-1)


def _softmax_with_zero_lanes(x: torch.Tensor) -> torch.Tensor:
    lanes = _padded(x, _next_power_of_2(x.shape[-1]), 0.0)  # (R, BLOCK)
    e = torch.exp(lanes - lanes.amax(dim=-1, keepdim=True))
    return (e / e.sum(dim=-1, keepdim=True))[:, : x.shape[-1]]


SOFTMAX_KERNEL = Exercise(
    exercise_id="12.4",
    kind="triton",
    title="a Triton kernel that writes the softmax of one row per program, masking the lanes past n_cols",
    function_name="softmax_rows",
    arg_names=("x",),
    reference=lambda x: attention.masked_softmax(x),
    make_cases=_rows_cases,
    mistakes=(
        Mistake(
            _softmax_with_zero_lanes,
            "the lanes past n_cols were loaded as 0 and count in the max and the sum: load them with "
            "other=float('-inf') (exp(-inf) = 0), or mask them out of both.",
        ),
        Mistake(
            lambda x: torch.exp(x - x.amax(dim=-1, keepdim=True)),
            "the row is not normalised: divide exp(x - max) by its sum over the row (tl.sum(..., axis=0)).",
        ),
    ),
    properties=(
        Property(
            "large scores",
            "scores near 100 overflow exp() in float32 (it ends near exp(88)) and inf / inf is NaN: subtract "
            "the row's maximum (tl.max(x, axis=0)) before the exponential.",
        ),
    ),
    hints=(
        "one program per row: tl.program_id(0) is the row, tl.arange(0, BLOCK) the column offsets, and the "
        "row starts at x_ptr + row * row_stride.",
        "lanes past n_cols must count for nothing: load with a mask and a fill value whose exponential is 0, "
        "and store with the same mask (a store without it writes past the row).",
        "on the loaded vector, the three steps of a safe softmax: subtract its maximum (a reduction over "
        "axis 0), exponentiate, divide by the sum.",
    ),
    difficulty=2,
    minutes=15,
)


def _streamed_lse(x: torch.Tensor, rescale: bool, fill: float) -> torch.Tensor:
    """The 12.5 kernel's loop in torch; ``rescale=False`` or ``fill=0`` are the mistakes."""
    N = x.shape[-1]
    lanes = _padded(x, math.ceil(N / LSE_BLOCK) * LSE_BLOCK, fill)  # (R, blocks * BLOCK)
    m = torch.full((x.shape[0],), NEG_INF, device=x.device)
    l = torch.zeros(x.shape[0], device=x.device)  # noqa: E741 - the paper's name
    for start in range(0, N, LSE_BLOCK):
        block = lanes[:, start : start + LSE_BLOCK]  # (R, BLOCK)
        m_new = torch.maximum(m, block.amax(dim=-1))
        alpha = torch.exp(m - m_new) if rescale else torch.ones_like(m)
        l = l * alpha + torch.exp(block - m_new[:, None]).sum(dim=-1)  # noqa: E741
        m = m_new
    return m + torch.log(l)


LSE_KERNEL = Exercise(
    exercise_id="12.5",
    kind="triton",
    title="a Triton kernel that streams one row per program in blocks, keeping the running max and sum",
    function_name="row_logsumexp",
    arg_names=("x",),
    reference=lambda x: flash.logsumexp_from_stats(*running_stats(x, LSE_BLOCK)),
    make_cases=_rows_cases,
    mistakes=(
        Mistake(
            lambda x: _streamed_lse(x, rescale=False, fill=NEG_INF),
            "the running sum is not rescaled when the maximum grows: the old terms were exp(x - m_old), so "
            "multiply l by exp(m_old - m_new) before adding the new block.",
        ),
        Mistake(
            lambda x: _streamed_lse(x, rescale=True, fill=0.0),
            "the lanes past n_cols in the last block were loaded as 0 and add exp(0 - m) to the sum: load "
            "them with other=float('-inf').",
        ),
    ),
    properties=(
        Property(
            "large scores",
            "scores near 100 overflow exp() in float32: keep the running maximum m and sum exp(x - m), then "
            "add m back at the end (exercise 12.3).",
        ),
    ),
    hints=(
        "keep two running numbers for the row, m (from -inf) and l (from 0), and visit the row in chunks of "
        "BLOCK columns with a for loop over range(0, n_cols, BLOCK).",
        "each chunk: load it masked, with a fill whose exponential is 0; the new maximum is the larger of m "
        "and the chunk's; l was measured against the old maximum, so scale it by exp(old - new) before the "
        "chunk's terms are added.",
        "after the loop, the row's log-sum-exp comes from m and l as in exercise 12.3; each program stores "
        "one number, at lse_ptr + row.",
    ),
    difficulty=3,
    minutes=25,
)


# ---------------------------------------------------------------------------------------------------------
# 12.7 (Triton) the whole forward kernel: one program per query block, key blocks skipped past the diagonal

FORWARD_BLOCK = 16  # BLOCK_M = BLOCK_N in the 12.7 launcher (tl.dot needs 16 or more)


def _kernel_forward_cases(g: torch.Generator) -> list[Case]:
    def qkv(N: int, T: int, S: int, D: int) -> tuple[torch.Tensor, ...]:
        return _randn(g, N, T, D), _randn(g, N, S, D), _randn(g, N, S, D)

    return [
        Case(qkv(2, 20, 37, 16), {"is_causal": False}),  # T != S, neither a multiple of the block
        Case(qkv(3, 33, 33, 8), {"is_causal": True}),  # D = 8 < 16: padded head dimension
        Case(qkv(1, 17, 40, 32), {"is_causal": True}),  # T < S: a KV cache, query t at position S - T + t
        Case(qkv(2, 5, 9, 12), {"is_causal": False}),  # shorter than one block
        # scores of about ±100: a query's hidden (future) keys can outscore its visible ones by far
        Case(tuple(25.0 * x for x in qkv(1, 24, 24, 16)), {"is_causal": True}),
        Case(qkv(2, 40, 24, 16), {"is_causal": True}, group="queries that see no key"),  # T > S
    ]


def _kernel_forward_mistake(how: str):  # noqa: ANN202
    def wrong(q, k, v, is_causal=False):  # noqa: ANN001, ANN202
        return tiled_variant(q, k, v, is_causal, FORWARD_BLOCK, FORWARD_BLOCK, how=how)

    return wrong


FORWARD_KERNEL = Exercise(
    exercise_id="12.7",
    kind="triton",
    title="the FlashAttention forward kernel in Triton: online softmax over key blocks, causal blocks skipped",
    function_name="flash_forward",
    arg_names=("q", "k", "v"),
    reference=lambda q, k, v, is_causal=False: flash.tiled_attention(q, k, v, is_causal=is_causal),
    make_cases=_kernel_forward_cases,
    mistakes=(
        Mistake(
            _kernel_forward_mistake("top_left"),
            "the causal mask is aligned top-left: with T != S query t sits at position S - T + t, so it sees "
            "keys s <= t + S - T (and the last key block to visit moves by S - T too).",
        ),
        Mistake(
            _kernel_forward_mistake("no_scale"),
            "the scores are not multiplied by the scale 1/sqrt(D) that the launcher passes in.",
        ),
        Mistake(
            _kernel_forward_mistake("acc_not_rescaled"),
            "acc is not rescaled when the running maximum grows: its terms were weighted by exp(s - m_old), so "
            "multiply it by alpha = exp(m_old - m_new), as l_i, before adding p @ v.",
        ),
        Mistake(
            _kernel_forward_mistake("mask_after_exp"),
            "the causal mask is applied after the exponential: the running maximum then counts the scores of "
            "keys the query may not see, and where those are far larger every visible weight underflows to 0 "
            "(0 / 0 = NaN). Set hidden scores to -inf before the maximum and the exponential.",
        ),
        Mistake(
            _kernel_forward_mistake("fp16_acc"),
            "acc is kept in float16: every update rounds it to about three significant digits. Accumulate in "
            "tl.float32 (tl.zeros(..., tl.float32)) and cast only when the output is stored.",
        ),
    ),
    properties=(
        Property(
            "queries that see no key",
            "with is_causal and T > S the first T - S queries see no key: their m stays -inf and l 0, and "
            "exp(-inf - (-inf)) and 0 / 0 are NaN. Use 0 as the maximum where it is still -inf and divide by l "
            "only where it is positive: those rows come out as zeros.",
        ),
    ),
    hints=(
        "the loads: the program's query rows (program_id(0) * BLOCK_M + arange) and all head dims, masked "
        "where a row is past T or a dim past D; then three running quantities per row: m (-inf), l (0) and "
        "acc (BLOCK_M, BLOCK_D) of zeros.",
        "the key loop: for each block of BLOCK_N keys, load k and v (masked), scores = q kᵀ times the scale "
        "(tl.dot and tl.trans), -inf where a key is past S or, if causal, past the query's own position; "
        "then the online-softmax update of exercise 12.2 for m, l and acc.",
        "causal block skipping: a query block ending at row q_start + BLOCK_M - 1 never sees a key past "
        "S - T + q_start + BLOCK_M - 1, so stop the loop there (clamped between 0 and S); divide acc by l at "
        "the end, guarding rows that saw nothing.",
    ),
    difficulty=3,
    minutes=40,
)


# ---------------------------------------------------------------------------------------------------------
# 12.8 (Triton) the backward pass's delta and dQ kernel


def _dq_cases(g: torch.Generator) -> list[Case]:
    def case(N: int, T: int, S: int, D: int, is_causal: bool) -> Case:
        q, k, v = _randn(g, N, T, D), _randn(g, N, S, D), _randn(g, N, S, D)
        out = attention.scaled_dot_product_attention(q, k, v, is_causal=is_causal)  # the forward's output
        return Case((q, k, v, out, _randn(g, N, T, D)), {"is_causal": is_causal})

    return [
        case(2, 20, 37, 16, False),  # T != S, neither a multiple of the block
        case(3, 33, 33, 8, True),  # D = 8: padded head dimension
        case(1, 17, 40, 32, True),  # T < S: queries at positions S - T + t
        case(2, 5, 9, 12, False),
    ]


def _dq_reference(q, k, v, out, grad_out, is_causal=False):  # noqa: ANN001, ANN202
    _, lse = flash.tiled_attention_forward(q, k, v, is_causal=is_causal)
    return flash.tiled_attention_backward(q, k, v, out, lse, grad_out, is_causal=is_causal)[0]


def _dq_variant(q, k, v, out, grad_out, is_causal=False, *, how: str):  # noqa: ANN001, ANN202
    """dQ = dS K · scale with dS = P ∘ (dP - delta), written densely, with one known slip."""
    T, S, D = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1 / math.sqrt(D)
    scores = q @ k.transpose(-2, -1) * scale  # (N, T, S)
    every = torch.ones(T, S, dtype=torch.bool, device=q.device)  # (T, S) on the scores' device
    seen = every.tril(S - T) if is_causal else every
    lse = torch.logsumexp(scores.masked_fill(~seen, NEG_INF), dim=-1, keepdim=True)  # the launcher's lse
    used = every.tril() if how == "top_left" and is_causal else seen
    p = torch.exp(scores - lse).masked_fill(~used, 0.0)  # (N, T, S)
    d_p = grad_out @ v.transpose(-2, -1)  # (N, T, S)
    delta = 0.0 if how == "no_delta" else (grad_out * out).sum(dim=-1, keepdim=True)  # (N, T, 1)
    return (p * (d_p - delta)) @ k * (1.0 if how == "no_scale" else scale)


def _dq_mistake(how: str):  # noqa: ANN202
    def wrong(q, k, v, out, grad_out, is_causal=False):  # noqa: ANN001, ANN202
        return _dq_variant(q, k, v, out, grad_out, is_causal, how=how)

    return wrong


DQ_KERNEL = Exercise(
    exercise_id="12.8",
    kind="triton",
    title="the backward kernel for dQ in Triton: delta = rowsum(dO ∘ O), then dS = P ∘ (dP - delta) per key block",
    function_name="flash_dq",
    arg_names=("q", "k", "v", "out", "grad_out"),
    reference=_dq_reference,
    make_cases=_dq_cases,
    mistakes=(
        Mistake(
            _dq_mistake("no_scale"),
            "the scale is missing from dQ: the scores were q kᵀ · scale, so the chain rule multiplies dS K "
            "by the scale too.",
        ),
        Mistake(
            _dq_mistake("no_delta"),
            "delta is missing: the softmax's backward is dS = P ∘ (dP - delta) with delta = rowsum(dO ∘ O), one "
            "number per query row, computed before the key loop.",
        ),
        Mistake(
            _dq_mistake("top_left"),
            "the causal mask is aligned top-left: query t sits at position S - T + t and sees keys s <= t + S - T.",
        ),
    ),
    hints=(
        "one program per query block, as in the forward: load its q, O, dO rows and their lse; delta is one "
        "number per row, the sum over the head dimension of dO ∘ O.",
        "in the loop over key blocks, recompute the forward's P = exp(q kᵀ · scale - lse) (0 where a key is "
        "hidden), then dP = dO Vᵀ and dS = P ∘ (dP - delta).",
        "accumulate dS K times the scale into a (BLOCK_M, BLOCK_D) float32 accumulator, with the forward's "
        "causal block skipping, and store it with the rows' mask.",
    ),
    difficulty=3,
    minutes=35,
)


EXERCISES = (SOFTMAX_KERNEL, LSE_KERNEL, FORWARD_KERNEL, DQ_KERNEL)
