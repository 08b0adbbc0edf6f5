"""Checks for notebook 12's PyTorch exercises: the online softmax update, a tiled forward, the log-sum-exp, the
tiled backward pass and (a measurement) the tiles a causal forward computes; Triton's are in triton_kernels.py.

The references are :func:`attn_edu.flash.online_softmax` and :func:`attn_edu.flash.tiled_attention`
(FlashAttention-2, Dao 2023, Algorithm 1), and ``m + log(l)`` for the log-sum-exp the backward pass keeps.
Cases use ``T != S`` both ways (``T > S`` with ``is_causal`` leaves queries that see no key), sizes that are
not powers of two, tiles that do not divide the lengths, odd head counts, and scores large enough that a
softmax without its running maximum overflows. The known-wrong versions are the slips the streaming
algorithm invites: a sum that is not rescaled when the maximum grows, a rescale factor upside down, each
block normalised on its own, NaN for a query that sees nothing, ``exp(m)`` overflowing, ``log2`` for ``log``.

The backward pass (12.6, :func:`attn_edu.flash.tiled_attention_backward`) returns ``cat([dq, dk, dv], -2)``,
``(..., T + 2S, D)``; its slips: no scale in dQ and dK, ``D`` over one tile or left out, a top-left mask.

Attention with a learned sink (12.10, gpt-oss) is checked against
:func:`attn_edu.attention.scaled_dot_product_attention` with ``sinks``; its slips: the sink left out (or added to
every score, the same thing), the sink scaled with the scores, exp without the maximum, a maximum without the sink.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attn_edu import attention, flash
from attn_edu.grading.exercise import Case, Exercise, Mistake, Property
from attn_edu.masks import causal_mask

NEG_INF = float("-inf")


def _randn(g: torch.Generator, *shape: int, std: float = 1.0) -> torch.Tensor:
    return std * torch.randn(shape, generator=g)


# ---------------------------------------------------------------------------------------------------------
# 12.1 online softmax update step (graded through the streaming softmax that calls it)


def _online_cases(g: torch.Generator) -> list[Case]:
    rising = torch.linspace(-3.0, 6.0, 11) + 0.1 * _randn(g, 11)  # the maximum grows in every block
    return [
        Case((rising, 3)),
        Case((_randn(g, 2, 3, 5, 7, std=2.0), 3)),  # (B, H, T, S): one softmax per query row
        Case((_randn(g, 4, 10), 4)),  # a last block of 2
        Case((_randn(g, 3, 9), 1)),  # one score per block
        Case((_randn(g, 6), 8)),  # one block bigger than the row
        Case((_randn(g, 3, 13, std=40.0) + 60.0, 5)),  # scores near 100: exp(x) alone overflows float32
    ]


def _streamed(x: torch.Tensor, block_size: int, update) -> torch.Tensor:  # noqa: ANN001
    """The driver of exercise 12.1 with a given update step: stream, then normalise once."""
    m_i = torch.full(x.shape[:-1], NEG_INF, device=x.device)  # (...)
    l_i = torch.zeros(x.shape[:-1], device=x.device)  # (...)
    for start in range(0, x.shape[-1], block_size):
        m_i, l_i = update(m_i, l_i, x[..., start : start + block_size])
    return torch.exp(x - m_i[..., None]) / l_i[..., None]  # (..., N)


def _update_without_rescale(m_i: torch.Tensor, l_i: torch.Tensor, x_block: torch.Tensor):  # noqa: ANN202
    m_new = torch.maximum(m_i, x_block.amax(dim=-1))
    return m_new, l_i + torch.exp(x_block - m_new[..., None]).sum(dim=-1)


def _update_rescale_upside_down(m_i: torch.Tensor, l_i: torch.Tensor, x_block: torch.Tensor):  # noqa: ANN202
    m_new = torch.maximum(m_i, x_block.amax(dim=-1))
    return m_new, l_i * torch.exp(m_new - m_i) + torch.exp(x_block - m_new[..., None]).sum(dim=-1)


def _update_without_max(m_i: torch.Tensor, l_i: torch.Tensor, x_block: torch.Tensor):  # noqa: ANN202
    return torch.zeros_like(m_i), l_i + torch.exp(x_block).sum(dim=-1)


ONLINE_SOFTMAX = Exercise(
    exercise_id="12.1",
    title="the online softmax update: new running max and rescaled running sum after one block",
    function_name="online_softmax",
    arg_names=("x", "block_size"),
    reference=lambda x, block_size: flash.online_softmax(x, block_size),
    make_cases=_online_cases,
    mistakes=(
        Mistake(
            lambda x, block_size: _streamed(x, block_size, _update_without_rescale),
            "the running sum is not rescaled when the maximum grows: its old terms are exp(x - m_old), "
            "too big by exp(m_new - m_old). Multiply l_i by exp(m_i - m_new) before adding the block.",
        ),
        Mistake(
            lambda x, block_size: _streamed(x, block_size, _update_rescale_upside_down),
            "the rescale factor is upside down: it is exp(m_i - m_new), at most 1 (the old terms shrink), "
            "not exp(m_new - m_i). With m_i = -inf before the first block, yours is 0 · inf = NaN.",
        ),
        Mistake(
            lambda x, block_size: _streamed(x, block_size, _update_without_max),
            "exp of large scores overflows (float32 ends near exp(88)): keep the running maximum m_i and "
            "sum exp(x - m_new), never exp(x) itself.",
        ),
    ),
    hints=(
        "the new maximum is the larger of m_i and this block's own maximum (over the last dim); every "
        "term of l_i was computed against the old maximum m_i.",
        "exp(x - m_old) = exp(x - m_new) · exp(m_new - m_old): multiply the old sum by exp(m_i - m_new), "
        "which is 0 before the first block (m_i = -inf) and 1 when the maximum did not move.",
        "l_new has two parts: the old sum times that factor, plus this block's terms exp(x - m_new) summed "
        "over the last dim; m_new needs a trailing dim ([..., None]) to broadcast against x_block.",
    ),
    difficulty=2,
    minutes=10,
)


# ---------------------------------------------------------------------------------------------------------
# 12.2 tiled attention forward


def _tiled_cases(g: torch.Generator) -> list[Case]:
    ones_v = torch.ones(1, 1, 7, 4)  # (B, H, S, Dv): every output row must be 1 (weights sum to 1)
    return [
        Case((_randn(g, 1, 1, 5, 8), _randn(g, 1, 1, 7, 8), ones_v), {"block_q": 2, "block_k": 3}),
        Case(
            (_randn(g, 2, 3, 13, 8), _randn(g, 2, 3, 21, 8), _randn(g, 2, 3, 21, 8)),
            {"block_q": 4, "block_k": 5},
        ),
        Case(
            (_randn(g, 1, 3, 10, 16), _randn(g, 1, 3, 10, 16), _randn(g, 1, 3, 10, 6)),
            {"is_causal": True, "block_q": 4, "block_k": 3},
        ),
        Case(  # T < S: a KV cache, query t sits at position S - T + t
            (_randn(g, 2, 1, 9, 8), _randn(g, 2, 1, 15, 8), _randn(g, 2, 1, 15, 8)),
            {"is_causal": True, "block_q": 4, "block_k": 4},
        ),
        Case(  # T > S: queries 0..6 see no key at all and must come out as zeros
            (_randn(g, 1, 5, 12, 8), _randn(g, 1, 5, 5, 8), _randn(g, 1, 5, 5, 8)),
            {"is_causal": True, "block_q": 5, "block_k": 2},
        ),
    ]


def tiled_variant(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool = False,
    block_q: int = 16,
    block_k: int = 16,
    *,
    how: str,
) -> torch.Tensor:
    """The exercise's loops with one known slip, named by ``how``."""
    *batch, T, D = q.shape
    S, Dv = k.shape[-2], v.shape[-1]
    scale = 1.0 if how == "no_scale" else 1 / math.sqrt(D)
    shift = 0 if how == "top_left" else S - T  # top-left: query t sees keys 0..t
    out = torch.zeros(*batch, T, Dv, device=q.device)  # (..., T, Dv)
    for q_start in range(0, T, block_q):
        q_block = q[..., q_start : q_start + block_q, :]  # (..., bq, D)
        rows = torch.arange(q_start, q_start + q_block.shape[-2], device=q.device)
        m_i = torch.full((*batch, len(rows)), NEG_INF, device=q.device)  # (..., bq)
        l_i = torch.zeros(*batch, len(rows), device=q.device)  # (..., bq)
        acc = torch.zeros(*batch, len(rows), Dv, device=q.device)  # (..., bq, Dv)
        for k_start in range(0, S, block_k):
            k_block = k[..., k_start : k_start + block_k, :]  # (..., bk, D)
            v_block = v[..., k_start : k_start + block_k, :]  # (..., bk, Dv)
            scores = q_block @ k_block.transpose(-2, -1) * scale  # (..., bq, bk)
            cols = torch.arange(k_start, k_start + k_block.shape[-2], device=q.device)
            hidden = (cols[None, :] > rows[:, None] + shift) & is_causal  # (bq, bk) keys past the query
            scores = scores if how == "mask_after_exp" else scores.masked_fill(hidden, NEG_INF)
            if how == "per_block":  # each block's weights sum to 1 on their own
                acc = acc + torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v_block
                continue
            m_new = torch.maximum(m_i, scores.amax(dim=-1))  # (..., bq)
            m_safe = m_new if how == "nan_rows" else torch.where(torch.isinf(m_new), 0.0, m_new)
            p = torch.exp(scores - m_safe[..., None]).masked_fill(hidden, 0.0)  # (..., bq, bk)
            alpha = torch.exp(m_i - m_safe)  # (..., bq)
            l_i = l_i * alpha + p.sum(dim=-1)
            acc = (acc if how == "acc_not_rescaled" else acc * alpha[..., None]) + p @ v_block
            acc = acc.half().float() if how == "fp16_acc" else acc  # a float16 accumulator rounds every step
            m_i = m_new
        if how == "per_block":
            out[..., q_start : q_start + len(rows), :] = acc
        elif how == "nan_rows":
            out[..., q_start : q_start + len(rows), :] = acc / l_i[..., None]
        else:
            out[..., q_start : q_start + len(rows), :] = acc / torch.where(l_i > 0, l_i, 1.0)[..., None]
    return out


def _mistake(how: str):  # noqa: ANN202
    def wrong(q, k, v, is_causal=False, block_q=16, block_k=16):  # noqa: ANN001, ANN202
        return tiled_variant(q, k, v, is_causal, block_q, block_k, how=how)

    return wrong


PER_BLOCK = (
    "each key block is normalised on its own, so a row's weights sum to 1 per block (to the number of "
    "blocks in all): keep the unnormalised sums l_i and acc across blocks and divide acc by l_i once, "
    "after the last key block."
)


def _blocks_normalised_separately(case: Case, got: torch.Tensor) -> str | None:
    """With values all 1 the right output is 1; a per-block softmax gives the number of blocks read."""
    v = case.args[2]
    if not bool((v == 1).all()):
        return None
    if bool((got > 1.5).any()) and torch.allclose(got, got.round(), atol=1e-4):
        return PER_BLOCK
    return None


TILED_FORWARD = Exercise(
    exercise_id="12.2",
    title="a tiled attention forward: the online softmax over key blocks, normalised once at the end",
    function_name="tiled_attention",
    arg_names=("q", "k", "v"),
    reference=lambda q, k, v, is_causal=False, block_q=16, block_k=16: flash.tiled_attention(
        q, k, v, is_causal=is_causal, block_q=block_q, block_k=block_k
    ),
    make_cases=_tiled_cases,
    mistakes=(
        Mistake(_mistake("per_block"), PER_BLOCK),
        Mistake(
            _mistake("acc_not_rescaled"),
            "acc is not rescaled when the maximum grows: like l_i, every earlier term was weighted by "
            "exp(s - m_old), so acc must be multiplied by the same correction factor exp(m_old - m_new) "
            "before this block's contribution is added.",
        ),
        Mistake(
            _mistake("nan_rows"),
            "a query that sees no key comes out NaN: its m stays -inf, so exp(-inf - (-inf)) and "
            "0 / 0 appear. Subtract 0 where m_new is -inf and divide by l_i only where l_i > 0 "
            "(such rows must be zeros).",
        ),
        Mistake(
            _mistake("top_left"),
            "the causal mask is aligned top-left (query t sees keys 0..t); with S keys query t sits at "
            "position S - T + t: hide key s when s > t + (S - T).",
        ),
        Mistake(
            _mistake("no_scale"),
            "the scores are not scaled: each block's q kᵀ must be multiplied by 1 / √D.",
        ),
    ),
    diagnoses=(_blocks_normalised_separately,),
    hints=(
        "keep three running quantities per query row: the largest score seen so far, the sum of "
        "exponentials relative to it, and the weighted sum of values relative to it. When a new key "
        "block raises the maximum, shrink the old sums by exp(old max - new max) before adding the "
        "block's own terms.",
        "per key block: the new maximum is the larger of the old one and the block's row maxima; the "
        "block's weights are exp(scores - new max); the correction factor is exp(old max - new max); "
        "rescale the running sum and the accumulator by it, then add the block's row sums and its "
        "weights times the block's values. A row whose scores are all -inf so far has a new max of -inf: "
        "subtract 0 there instead, so that its weights are exp(-inf) = 0, not NaN.",
        "a sketch: m_new = torch.maximum(m_i, scores.amax(-1)); where m_new is -inf subtract 0 instead "
        "(torch.where with torch.isinf); p = torch.exp(scores - m_safe[:, None]); the correction exp(m_i "
        "- m_safe) rescales l_i and acc before l_i gains p.sum(-1) and acc gains p @ v_block. After the "
        "key loop divide acc by l_i once, by 1 where l_i is 0, so that rows that saw no key come out "
        "zeros.",
    ),
    difficulty=4,
    minutes=35,
)


# ---------------------------------------------------------------------------------------------------------
# 12.3 log-sum-exp from the running statistics


def running_stats(scores: torch.Tensor, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(m, l) after the last block of the online softmax: what the forward pass ends with."""
    stats = list(flash.online_softmax_steps(scores, block_size))
    return stats[-1]


def _lse_cases(g: torch.Generator) -> list[Case]:
    hidden = _randn(g, 2, 3, 5, 7)  # (B, H, T, S)
    hidden[0, 1, 2] = NEG_INF  # a query that sees no key: m = -inf, l = 0
    hidden[1, :, 0, 3:] = NEG_INF  # partly hidden rows
    return [
        Case(running_stats(_randn(g, 2, 3, 5, 7), 3)),
        Case(running_stats(hidden, 4)),
        Case(running_stats(_randn(g, 9, std=3.0), 2)),
        Case(running_stats(_randn(g, 1, 5, 6, 11, std=20.0) + 100.0, 4)),  # m near 100: exp(m) overflows
    ]


LOGSUMEXP = Exercise(
    exercise_id="12.3",
    title="the log-sum-exp of each row from its running max m and running sum l",
    function_name="logsumexp_from_stats",
    arg_names=("m_i", "l_i"),
    reference=lambda m_i, l_i: flash.logsumexp_from_stats(m_i, l_i),
    make_cases=_lse_cases,
    mistakes=(
        Mistake(
            lambda m_i, l_i: torch.log(l_i),
            "the maximum is missing: l = Σ exp(s - m), so log Σ exp(s) = m + log(l).",
        ),
        Mistake(
            lambda m_i, l_i: torch.log(torch.exp(m_i) * l_i),
            "exp(m) overflows for large scores (float32 ends near exp(88)) and gives inf: keep m outside "
            "the exp and add it: m + log(l).",
        ),
        Mistake(
            lambda m_i, l_i: m_i + torch.log2(l_i),
            "log base 2 is not log: l holds exp (base e) terms, so use the natural log (kernels that use "
            "exp2 keep m in log2 units and convert at the end).",
        ),
    ),
    hints=(
        "factor the maximum out of the sum: Σ exp(s) = exp(m) · Σ exp(s - m) = exp(m) · l.",
        "take the log of exp(m) · l without ever computing exp(m).",
        "the log of a product is a sum of logs, and log(exp(m)) needs no exp. A row that saw no key needs "
        "no special case: torch.log(0) is -inf, and -inf plus -inf stays -inf.",
    ),
    difficulty=1,
    minutes=5,
)


# ---------------------------------------------------------------------------------------------------------
# 12.6 the tiled backward pass (FlashAttention-2, Algorithm 2)


def _backward_case(
    g: torch.Generator, B: int, H: int, T: int, S: int, D: int, is_causal: bool, bq: int, bk: int
):  # noqa: ANN202
    q, k, v = _randn(g, B, H, T, D), _randn(g, B, H, S, D), _randn(g, B, H, S, D)
    out, lse = flash.tiled_attention_forward(q, k, v, is_causal=is_causal)  # what the forward saved
    grad_out = _randn(g, B, H, T, D)  # dO, the gradient of the loss with respect to the output
    return Case((q, k, v, out, lse, grad_out), {"is_causal": is_causal, "block_q": bq, "block_k": bk})


def _backward_cases(g: torch.Generator) -> list[Case]:
    return [
        _backward_case(g, 2, 3, 7, 11, 6, False, 3, 4),  # T < S, tiles that do not divide the lengths
        _backward_case(g, 1, 2, 13, 9, 5, False, 4, 3),  # T > S
        _backward_case(g, 2, 1, 10, 10, 8, True, 4, 3),  # causal self-attention
        _backward_case(g, 3, 3, 5, 12, 7, True, 2, 5),  # causal, T < S: query t sits at S - T + t
    ]


def _backward_reference(q, k, v, out, lse, grad_out, is_causal=False, block_q=16, block_k=16):  # noqa: ANN001, ANN202
    dq, dk, dv = flash.tiled_attention_backward(
        q, k, v, out, lse, grad_out, is_causal=is_causal, block_q=block_q, block_k=block_k
    )
    return torch.cat([dq, dk, dv], dim=-2)  # (..., T + 2S, D)


def _backward_variant(q, k, v, out, lse, grad_out, is_causal=False, block_q=16, block_k=16, *, how: str):  # noqa: ANN001, ANN202
    """The tiled backward with one known slip (``how``), in plain torch."""
    T, S, D = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1 / math.sqrt(D)
    grad_scale = 1.0 if how == "no_scale" else scale
    offset = 0 if how == "top_left" else S - T
    delta = (grad_out * out).sum(dim=-1)  # (..., T)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for k0 in range(0, S, block_k):
        k1 = min(k0 + block_k, S)
        cols = torch.arange(k0, k1, device=q.device)
        for q0 in range(0, T, block_q):
            q1 = min(q0 + block_q, T)
            rows = torch.arange(q0, q1, device=q.device)
            scores = q[..., q0:q1, :] @ k[..., k0:k1, :].transpose(-2, -1) * scale  # (..., bq, bk)
            if is_causal:
                scores = scores.masked_fill(cols[None, :] > rows[:, None] + offset, NEG_INF)
            p = torch.exp(scores - lse[..., q0:q1, None])  # (..., bq, bk)
            dp = grad_out[..., q0:q1, :] @ v[..., k0:k1, :].transpose(-2, -1)  # (..., bq, bk)
            if how == "tile_delta":
                d = (p * dp).sum(dim=-1)  # rowsum over this tile's keys only
            elif how == "no_delta":
                d = torch.zeros_like(delta[..., q0:q1])
            else:
                d = delta[..., q0:q1]
            ds = p * (dp - d[..., None])  # (..., bq, bk)
            dv[..., k0:k1, :] += p.transpose(-2, -1) @ grad_out[..., q0:q1, :]
            dq[..., q0:q1, :] += ds @ k[..., k0:k1, :] * grad_scale
            dk[..., k0:k1, :] += ds.transpose(-2, -1) @ q[..., q0:q1, :] * grad_scale
    return torch.cat([dq, dk, dv], dim=-2)  # (..., T + 2S, D)


def _backward_mistake(how: str):  # noqa: ANN202
    def wrong(q, k, v, out, lse, grad_out, is_causal=False, block_q=16, block_k=16):  # noqa: ANN001, ANN202
        return _backward_variant(q, k, v, out, lse, grad_out, is_causal, block_q, block_k, how=how)

    return wrong


TILED_BACKWARD = Exercise(
    exercise_id="12.6",
    kind="build",
    title="the tiled backward pass: dQ, dK, dV one tile at a time from P = exp(scores - lse) and D = rowsum(dO ∘ O)",
    function_name="attention_backward",
    arg_names=("q", "k", "v", "out", "lse", "grad_out"),
    reference=_backward_reference,
    make_cases=_backward_cases,
    mistakes=(
        Mistake(
            _backward_mistake("no_scale"),
            "dQ and dK are missing the scale: the scores are (q kᵀ) · scale, so by the chain rule both "
            "gradients through the scores carry the scale too (dV has no scale: it comes from P, not "
            "from the scores).",
        ),
        Mistake(
            _backward_mistake("tile_delta"),
            "D is summed over one tile's keys: the softmax backward needs rowsum(P ∘ dP) over the *whole* row, "
            "which no single tile holds. Compute D = rowsum(dO ∘ O) once per query, before the loops.",
        ),
        Mistake(
            _backward_mistake("no_delta"),
            "D is missing: the softmax backward is dS = P ∘ (dP - D), D = rowsum(dO ∘ O) per query; "
            "dS = P ∘ dP forgets that the weights of a row must keep summing to 1.",
        ),
        Mistake(
            _backward_mistake("top_left"),
            "the causal mask is aligned top-left (query t sees keys 0..t); with S keys query t sits at "
            "position S - T + t, as in the forward: hide key s when s > t + (S - T).",
        ),
    ),
    hints=(
        "first, before any loop, one number per query: the row sum of grad_out times out. Then, per tile, "
        "recompute the forward's weights from the scores and the saved lse: no running maximum is needed.",
        "per tile, with P the recomputed weights: dV gets Pᵀ dO; dP = dO Vᵀ; dS = P ∘ (dP - D); dQ gets "
        "dS K and dK gets dSᵀ Q, both times the softmax scale (the scores were scaled).",
        "mask the tile's scores exactly as the forward did (bottom-right) before the exponential, so masked "
        "pairs get weight 0; add each tile's part into the rows and columns of dq, dk and dv that it covers.",
    ),
    difficulty=4,
    minutes=50,
)


# ---------------------------------------------------------------------------------------------------------
# 12.9 how many tiles a causal forward computes (measure)


def _tile_cases(g: torch.Generator) -> list[Case]:
    T, S = (int(n) for n in torch.randint(9, 40, (2,), generator=g))
    fixed = [(10, 10, 4, 3), (9, 15, 4, 4), (12, 5, 5, 2), (96, 96, 32, 32), (7, 20, 8, 6), (T, S, 5, 4)]
    checked = [(1, 1, 1, 1), (13, 13, 4, 4), (6, 17, 4, 5), (17, 6, 3, 4), (T, S, 4, 7), (S, T, 8, 3)]
    cases = [Case(args) for args in fixed]
    return cases + [Case(args, group="the tiles of the causal mask") for args in checked]


def _tiles(seq_q: int, seq_k: int, block_m: int, block_n: int, how: str) -> torch.Tensor:
    """Tiles counted with one known slip, named by ``how``."""
    shift, count = 0 if how == "top_left" else seq_k - seq_q, 0
    for q_start in range(0, seq_q - (seq_q % block_m if how == "floor" else 0), block_m):
        q_end = q_start + 1 if how == "full_only" else min(q_start + block_m, seq_q)  # the keys all rows see
        stop = seq_k if how == "all" else max(0, min(seq_k, shift + q_end))  # past the last key seen
        count += stop // block_n if how in ("floor", "full_only") else -(-stop // block_n)
    return torch.tensor(count)


def _tiles_with_a_visible_pair(case: Case, output: torch.Tensor) -> str | None:
    """The answer equals the number of (block_m, block_n) tiles of attn_edu's causal mask with a True."""
    seq_q, seq_k, block_m, block_n = case.args
    rows, cols = -(-seq_q // block_m) * block_m, -(-seq_k // block_n) * block_n
    padded = F.pad(causal_mask(seq_q, seq_k), (0, cols - seq_k, 0, rows - seq_q))  # ragged: hidden pairs
    tiles = padded.reshape(rows // block_m, block_m, cols // block_n, block_n)  # (nq, bm, nk, bn)
    if int(output) != (visible := int(tiles.any(dim=3).any(dim=1).sum())):
        return f"the causal mask has {visible} tiles with a visible pair, the answer says {int(output)}"
    return None


CAUSAL_TILE_COUNT = Exercise(
    exercise_id="12.9",
    kind="measure",
    title="how many (query block, key block) tiles a causal forward computes, fully masked ones skipped",
    function_name="causal_tile_count",
    arg_names=("seq_q", "seq_k", "block_m", "block_n"),
    reference=lambda *args: torch.tensor(flash.causal_tile_count(*args)),  # 0-d int64
    make_cases=_tile_cases,
    mistakes=(
        Mistake(
            lambda *args: _tiles(*args, how="top_left"),
            "the mask is aligned top-left; the course's kernels put query t at position seq_k - seq_q + t.",
        ),
        Mistake(
            lambda *args: _tiles(*args, how="floor"),
            "ragged blocks are dropped (rounded down): a last block shorter than block_m or block_n is "
            "still a tile to compute. Round the number of blocks up.",
        ),
        Mistake(
            lambda *args: _tiles(*args, how="all"),
            "every tile is counted: a key block entirely after a query block's last position is skipped.",
        ),
        Mistake(
            lambda *args: _tiles(*args, how="full_only"),
            "the diagonal tiles are left out: a tile with one visible pair is computed, with a mask.",
        ),
    ),
    properties=(
        Property(
            "the tiles of the causal mask",
            "cut the bottom-right causal mask of seq_q queries and seq_k keys into block_m × block_n "
            "tiles, the last ones ragged: the answer is the number of tiles with at least one visible "
            "pair.",
            holds=_tiles_with_a_visible_pair,
        ),
    ),
    hints=(
        "for each query block, which key blocks can its *last* query see? Only those hold a visible pair.",
        "query t sits at position seq_k - seq_q + t: count the key blocks that start at or before it.",
        "one loop over the query blocks; a block ends at q_start + block_m, or at seq_q for a ragged last "
        "one. Clip the visible keys to 0 .. seq_k, round the number of key blocks up, and add up.",
    ),
    difficulty=3,
    minutes=20,
)


# ---------------------------------------------------------------------------------------------------------
# 12.10 attention with a learned sink logit per head (gpt-oss)


def _sink_reference(q, k, v, sinks, is_causal=False):  # noqa: ANN001, ANN202
    return attention.scaled_dot_product_attention(q, k, v, is_causal=is_causal, sinks=sinks)


def _sink_cases(g: torch.Generator) -> list[Case]:
    def qkv(B: int, H: int, T: int, S: int, D: int) -> tuple[torch.Tensor, ...]:
        return _randn(g, B, H, T, D), _randn(g, B, H, S, D), _randn(g, B, H, S, D)

    q, k, v = qkv(1, 2, 6, 8, 8)
    scores = q @ k.transpose(-2, -1) / 8**0.5  # (B, H, T, S)
    return [
        Case(
            (*qkv(1, 3, 3, 3, 4), _randn(g, 3, std=2.0))
        ),  # T == H: a sink per query still broadcasts (first)
        Case((*qkv(2, 3, 5, 7, 8), torch.tensor([-1.0, 0.5, 2.0]))),
        Case(
            (*qkv(2, 2, 9, 4, 6), _randn(g, 2, std=2.0)), {"is_causal": True}
        ),  # T > S: 5 queries see no key
        Case((*qkv(1, 4, 6, 6, 8), torch.tensor([-30.0, 0.0, 3.0, 30.0])), {"is_causal": True}),
        # the largest score 200 (and a sink of 150): exp overflows float32 unless the row's maximum is subtracted
        Case((q * (200 / scores.max()), k, v, torch.tensor([150.0, -2.0]))),
    ]


def _visible_scores(q: torch.Tensor, k: torch.Tensor, is_causal: bool) -> torch.Tensor:
    """q kᵀ / sqrt(D), with -inf on the keys a causal (bottom-right) query may not see."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5  # (B, H, T, S)
    if is_causal:
        scores = scores.masked_fill(~causal_mask(q.shape[-2], k.shape[-2]), NEG_INF)
    return scores


def _sink_unshifted(q, k, v, sinks, is_causal=False):  # noqa: ANN001, ANN202
    scores = _visible_scores(q, k, is_causal)  # (B, H, T, S)
    e = torch.exp(scores)  # overflows for large scores
    return (e / (torch.exp(sinks)[:, None, None] + e.sum(-1, keepdim=True))) @ v


def _sink_max_without_sink(q, k, v, sinks, is_causal=False):  # noqa: ANN001, ANN202
    scores = _visible_scores(q, k, is_causal)  # (B, H, T, S)
    m = scores.amax(-1, keepdim=True)  # -inf for a row with no visible key
    e = torch.exp(scores - m)
    return (e / (torch.exp(sinks[:, None, None] - m) + e.sum(-1, keepdim=True))) @ v


def _sink_scaled_too(q, k, v, sinks, is_causal=False):  # noqa: ANN001, ANN202
    scores = _visible_scores(q, k, is_causal) * q.shape[-1] ** 0.5  # the raw q·k, scaled below with the sink
    sink = sinks.view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)  # (B, H, T, 1)
    logits = torch.cat([scores, sink], dim=-1) / q.shape[-1] ** 0.5  # the sink divided by sqrt(D) too
    return torch.softmax(logits, dim=-1)[..., :-1] @ v


SINK_ATTENTION = Exercise(
    exercise_id="12.10",
    title="attention with a learned sink logit per head: one more score in every softmax, with no value",
    function_name="sink_attention",
    arg_names=("q", "k", "v", "sinks"),
    reference=_sink_reference,
    make_cases=_sink_cases,
    mistakes=(
        Mistake(
            lambda q, k, v, sinks, is_causal=False: attention.scaled_dot_product_attention(
                q, k, v, is_causal=is_causal
            ),
            "the sink is missing: this is plain attention, whose weights sum to 1 (adding the sink to every "
            "score gives the same, since a softmax ignores a shift shared by the whole row). The sink's e^sink "
            "joins every row's denominator as one more score, so the weights on the keys sum to less than 1.",
        ),
        Mistake(
            _sink_scaled_too,
            "the sink is divided by sqrt(D) with the scores: it is a logit already, on the scale of the scaled "
            "scores q·k / sqrt(D). Scale q kᵀ, then put the sink beside it as it is.",
        ),
        Mistake(
            _sink_unshifted,
            "exp of the raw scores overflows float32 (past about 88) and gives inf / inf = NaN: subtract each "
            "row's maximum, the sink included, before exp.",
        ),
        Mistake(
            _sink_max_without_sink,
            "a query that sees no key comes out NaN: its maximum over the keys alone is -inf. Take the row's "
            "maximum over the keys and the sink together; such a query then puts all its weight on the sink "
            "and outputs zeros.",
        ),
    ),
    hints=(
        "put the sink beside the keys: a (B, H, T, S + 1) row of scores whose last column is the head's sink, "
        "softmax over it, then drop that column before multiplying by v (the sink has no value).",
        "sinks has shape (H,): give it the singleton dims that make it one extra column per row, (B, H, "
        "T, 1), and join it to the scaled scores along the keys. Hidden keys get -inf before the "
        "softmax, as in notebook 04; after it, drop the last column and multiply by v.",
        "a sketch: column = sinks.view(1, -1, 1, 1).expand(B, H, T, 1); weights = "
        "torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1]; torch.softmax subtracts "
        "each row's maximum for you, and with the sink in the row that maximum is never -inf, so a query "
        "that sees no key needs no special case.",
    ),
    difficulty=3,
    minutes=25,
)


EXERCISES = (ONLINE_SOFTMAX, TILED_FORWARD, LOGSUMEXP, TILED_BACKWARD, CAUSAL_TILE_COUNT, SINK_ATTENTION)
