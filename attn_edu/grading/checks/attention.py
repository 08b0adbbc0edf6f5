"""Checks for notebook 02's exercises: attention weights, scaled dot-product attention, the FLOPs of attention's
two matrix products (a measurement: the learner runs attention under PyTorch's ``FlopCounterMode`` on the
``meta`` device; the check counts the library's attention the same way and on real tensors), and single-head
cross-attention from four raw projection matrices (matched with ``nn.MultiheadAttention``).

Each exercise is compared with :mod:`attn_edu.attention` on random cases with ``T != S``, ``Dv != D``, sizes
that are not powers of two and odd head counts, and each lists the mistakes learners make most often,
written out as wrong functions, so a check can say which one it sees. No masks here: notebook 04 adds them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from attn_edu import attention
from attn_edu.grading.exercise import (
    OVERFLOW_HINT,
    Case,
    Exercise,
    Mistake,
    Property,
    overflow_diagnosis,
    unshifted_softmax,
)
from attn_edu.multihead import MultiHeadAttention

# ---------------------------------------------------------------------------------------------------------
# Random inputs and shared pieces of the wrong versions


def _randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=g)


def _weights(
    q: torch.Tensor, k: torch.Tensor, scale: float, dim: int = -1, softmax: Callable = torch.softmax
) -> torch.Tensor:
    return softmax(q @ k.transpose(-2, -1) * scale, dim=dim)  # (..., T, S)


def _default(scale: float | None, D: int) -> float:
    return 1 / math.sqrt(D) if scale is None else scale


# ---------------------------------------------------------------------------------------------------------
# 02.1 attention weights


def _weights_cases(g: torch.Generator) -> list[Case]:
    return [
        Case((_randn(g, 2, 3, 5, 6), _randn(g, 2, 3, 7, 6))),  # (B, H, T, D), the default scale
        Case((_randn(g, 1, 5, 4, 10), _randn(g, 1, 5, 9, 10)), {"scale": 0.5}),
        Case((_randn(g, 3, 6, 5), _randn(g, 3, 8, 5))),  # (B, T, D)
        # (T, D) with a sharp scale: scores in the hundreds, where exp overflows unless the row's max is subtracted
        Case((_randn(g, 7, 12), _randn(g, 11, 12)), {"scale": 40.0}),
        Case((_randn(g, 2, 7, 3, 9), _randn(g, 2, 7, 5, 9))),
    ]


def _weights_reference(q: torch.Tensor, k: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    return attention.attention_weights(q, k, scale=scale)


def _unshifted_weights(q: torch.Tensor, k: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    return _weights(q, k, _default(scale, q.shape[-1]), softmax=unshifted_softmax)  # NaN past a score of 88


def _rows_do_not_sum_to_one(case: Case, got: torch.Tensor) -> str | None:
    sums = got.double().sum(dim=-1)  # (..., T)
    if (sums - 1).abs().max() > 1e-3:
        return (
            f"each row (one query) should sum to 1 over the keys; yours sum to {float(sums.min()):.3g} .. "
            f"{float(sums.max()):.3g}: the softmax must run over the last dim, the keys."
        )
    return None


WEIGHTS = Exercise(
    exercise_id="02.1",
    title="attention weights softmax(q kᵀ · scale) over the keys, scale = 1 / sqrt(D) unless given",
    function_name="attention_weights",
    arg_names=("q", "k"),
    reference=_weights_reference,
    make_cases=_weights_cases,
    mistakes=(
        Mistake(
            lambda q, k, scale=None: _weights(q, k, 1.0),
            "the scores are not scaled: multiply q kᵀ by the scale, which is 1 / √D when none is given, "
            "D being the queries' last dim.",
        ),
        Mistake(
            lambda q, k, scale=None: _weights(q, k, scale or 1 / q.shape[-1]),
            "the default scale divides by D; it is 1 / sqrt(D).",
        ),
        Mistake(
            lambda q, k, scale=None: _weights(q, k, scale or math.sqrt(q.shape[-1])),
            "the scores are multiplied by sqrt(D) by default; the default scale is 1 / sqrt(D).",
        ),
        Mistake(
            lambda q, k, scale=None: _weights(q, k, _default(scale, q.shape[1])),
            "the default scale takes its D from the queries' second dim, which is D only for a 2-D q; "
            "with leading dims (B, H, T, D) it is H or T. D is always the last dim.",
        ),
        Mistake(
            lambda q, k, scale=None: _weights(q, k, 1 / math.sqrt(q.shape[-1])),
            "the scale argument is ignored: when it is given, multiply the scores by it instead of by "
            "1 / sqrt(D).",
        ),
        Mistake(
            lambda q, k, scale=None: _weights(
                q, k, _default(None if scale is None else 1 / scale, q.shape[-1])
            ),
            "the scores are divided by the given scale; scale multiplies them (softmax(q kᵀ · scale)), as "
            "PyTorch's scaled_dot_product_attention does. Dividing is the temperature of notebook 01.",
        ),
        Mistake(
            lambda q, k, scale=None: _weights(q, k, _default(scale, q.shape[-1]), dim=-2),
            "the softmax runs over the queries (the second-to-last dim); each query's weights must sum "
            "to 1 over the keys, the last dim.",
        ),
        Mistake(
            lambda q, k, scale=None: _weights(k, q, _default(scale, q.shape[-1])),
            "these are k qᵀ, shape (..., S, T): one row per key. Each row must be a query, so the keys "
            "are the ones transposed (in their last two dims), giving (..., T, S).",
        ),
        Mistake(_unshifted_weights, OVERFLOW_HINT),
    ),
    diagnoses=(overflow_diagnosis(_unshifted_weights), _rows_do_not_sum_to_one),
    hints=(
        "the score of query t and key s is their dot product; all of them at once are one matrix product "
        "of the queries with the keys transposed in their last two dims, shape (..., T, S), the batch "
        "and head dims staying in front.",
        "the scale multiplies the scores. When it is not given, use 1 / √D with D the queries' last dim, "
        "whatever the leading dims are; then one softmax over the keys (the last dim), so that each "
        "query's row of weights sums to 1.",
        "a sketch: settle the scale first (when scale is None, 1 / math.sqrt(q.shape[-1])), then scores "
        "= q @ k.transpose(-2, -1) * scale, shape (..., T, S), and one softmax over the keys with "
        "dim=-1, so that each query's row of weights sums to 1.",
    ),
    difficulty=2,
    minutes=10,
)


# ---------------------------------------------------------------------------------------------------------
# 02.2 scaled dot-product attention


def _sharp(
    q: torch.Tensor, k: torch.Tensor, *rest: torch.Tensor, top: float = 200.0
) -> tuple[torch.Tensor, ...]:
    """The queries scaled so that the largest score q·k/√D is ``top``: past exp's float32 range (about 88), so
    a softmax that does not subtract the row's maximum overflows to inf/inf = NaN."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    return (q * (top / scores.max()), k, *rest)


def _sdpa_cases(g: torch.Generator) -> list[Case]:
    def qkv(*lead: int, T: int, S: int, D: int, Dv: int) -> tuple[torch.Tensor, ...]:
        return _randn(g, *lead, T, D), _randn(g, *lead, S, D), _randn(g, *lead, S, Dv)

    return [
        Case(qkv(2, 3, T=5, S=7, D=6, Dv=4)),  # (B, H, T, D)
        Case(qkv(1, 5, T=3, S=9, D=8, Dv=5)),
        Case(qkv(3, T=6, S=7, D=6, Dv=3)),  # (B, T, D)
        Case(_sharp(*qkv(T=6, S=9, D=10, Dv=7), top=100.0)),  # (T, D), the largest score 100: exp overflows
        Case(qkv(2, 1, T=4, S=11, D=5, Dv=9)),  # Dv > D
    ]


def _sdpa_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return attention.scaled_dot_product_attention(q, k, v)


def _sdpa_scaled(size_of):
    """Attention whose scale is 1 / sqrt(size_of(q, k, v)) instead of 1 / sqrt(D)."""

    def wrong(q, k, v):
        return _weights(q, k, 1 / math.sqrt(size_of(q, k, v))) @ v  # (..., T, Dv)

    return wrong


def _unshifted_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return _unshifted_weights(q, k) @ v  # (..., T, Dv), NaN rows past a score of 88


SDPA = Exercise(
    exercise_id="02.2",
    title="scaled dot-product attention softmax(q kᵀ / sqrt(D)) v, the output of torch's SDPA",
    function_name="scaled_dot_product_attention",
    arg_names=("q", "k", "v"),
    reference=_sdpa_reference,
    make_cases=_sdpa_cases,
    mistakes=(
        Mistake(
            lambda q, k, v: _weights(q, k, 1.0) @ v,
            "the scores are not divided by √D: scale q kᵀ by 1 / √D, D being the queries' last dim.",
        ),
        Mistake(
            _sdpa_scaled(lambda q, k, v: v.shape[-1]),
            "the scale uses the values' size Dv; it belongs to the dot products q · k, which have D "
            "terms (the queries' and keys' last dim).",
        ),
        Mistake(
            _sdpa_scaled(lambda q, k, v: k.shape[-2]),
            "the scale uses the number of keys S; d_k in the paper is the size of each key, D, the keys' "
            "last dim.",
        ),
        Mistake(
            lambda q, k, v: _weights(q, k, 1 / q.shape[-1]) @ v,
            "the scores are divided by D; the scale is 1 / sqrt(D).",
        ),
        Mistake(
            lambda q, k, v: _weights(q, k, 1 / math.sqrt(q.shape[-1]), dim=-2) @ v,
            "the softmax runs over the queries (the second-to-last dim); it must run over the keys (the "
            "last dim).",
        ),
        Mistake(
            lambda q, k, v: attention.attention_weights(q, k),
            "this is the (..., T, S) matrix of weights; the output is each query's weighted average of "
            "the values, shape (..., T, Dv).",
        ),
        Mistake(_unshifted_sdpa, OVERFLOW_HINT),
    ),
    diagnoses=(overflow_diagnosis(_unshifted_sdpa),),
    hints=(
        "the output is each query's weighted average of the values: the (..., T, S) weights of 02.1 "
        "times the (..., S, Dv) values gives (..., T, Dv). You may reuse your 02.1.",
        "the scale is 1 / √D with D the size of the queries and keys (their last dim); the values' size "
        "Dv may differ and plays no part in it. Then the weights, a softmax over the keys, multiply the "
        "values in one matrix product.",
        "a sketch: the weights of 02.1 (scores q @ k.transpose(-2, -1) times 1 / math.sqrt(q.shape[-1]), "
        "softmax over dim=-1), shape (..., T, S); the output is one more matrix product, of those "
        "weights with v, shape (..., T, Dv).",
    ),
    difficulty=1,
    minutes=5,
)


# ---------------------------------------------------------------------------------------------------------
# 02.3 the FLOPs of attention's two matrix products (a measurement, checked with PyTorch's FlopCounterMode)


def _flops_cases(g: torch.Generator) -> list[Case]:
    def sizes(top: tuple[int, ...]) -> tuple[int, ...]:
        """B, H, T, S, D, Dv drawn from 1 .. top, redrawn until T != S and D != Dv."""
        while True:
            drawn = tuple(int(torch.randint(1, n + 1, (), generator=g)) for n in top)
            B, H, T, S, D, Dv = drawn
            if T != S and D != Dv and T > 1 < S:
                return drawn

    values = [Case(sizes((8, 16, 2000, 4000, 160, 160))) for _ in range(3)]
    values.append(Case((1, 7, 1, 513, 96, 128)))  # one decoding step: a single query against 513 keys
    counted = "PyTorch's count"  # small sizes: the property runs attention on real tensors of these sizes
    return values + [
        Case(sizes((3, 4, 9, 9, 8, 8)), group=counted),
        Case((1, 1, 1, 9, 5, 3), group=counted),
        Case((3, 2, 6, 4, 3, 7), group=counted),
    ]


def _counted_flops(B: int, H: int, T: int, S: int, D: int, Dv: int, device: str = "meta") -> int:
    """The FLOPs PyTorch's FlopCounterMode counts while the library's attention runs on tensors of these sizes:
    on the ``meta`` device (shapes without memory) by default, so a 16-head, 4,000-key case costs nothing."""
    from torch.utils.flop_counter import (
        FlopCounterMode,
    )  # its first use imports torch._dynamo: a second or two

    q = torch.zeros(B, H, T, D, device=device)  # (B, H, T, D)
    k, v = torch.zeros(B, H, S, D, device=device), torch.zeros(B, H, S, Dv, device=device)
    with FlopCounterMode(display=False) as counter:
        attention.scaled_dot_product_attention(q, k, v)  # (B, H, T, Dv)
    return counter.get_total_flops()


def _flops_reference(B: int, H: int, T: int, S: int, D: int, Dv: int) -> torch.Tensor:
    return torch.tensor(_counted_flops(B, H, T, S, D, Dv))  # 0-d int64: counted, not a formula


def _counted_flops_hold(case: Case, output: torch.Tensor) -> str | None:
    """Run the library's attention on real zero tensors of the case's sizes under PyTorch's FlopCounterMode,
    which counts every matrix product it sees (2 FLOPs a multiply-add); the answer must be that total."""
    if output.ndim != 0 or output.is_floating_point() or output.dtype == torch.bool:
        return f"expected a 0-d int64 tensor, got shape {tuple(output.shape)} {output.dtype}"
    counted, given = _counted_flops(*case.args, device="cpu"), int(output)  # real tensors, on the CPU
    if given != counted:
        return f"PyTorch's FlopCounterMode counts {counted:,} FLOPs, the answer says {given:,}"
    return None


def _flops_with(count):
    return lambda B, H, T, S, D, Dv: torch.tensor(count(B, H, T, S, D, Dv))  # 0-d int64


FLOPS = Exercise(
    exercise_id="02.3",
    kind="measure",
    title="measure the FLOPs of attention: run it on the meta device under PyTorch's FLOP counter",
    function_name="attention_flops",
    arg_names=("B", "H", "T", "S", "D", "Dv"),
    reference=_flops_reference,
    make_cases=_flops_cases,
    mistakes=(
        Mistake(
            _flops_with(lambda B, H, T, S, D, Dv: B * H * T * S * (D + Dv)),
            "that counts each multiply-add once; it is two floating-point operations, a multiply and an add "
            "(the convention of FlopCounterMode and of the FlashAttention papers): twice this.",
        ),
        Mistake(
            _flops_with(lambda B, H, T, S, D, Dv: 2 * B * H * T * S * D),
            "that is q kᵀ alone; the weights then multiply the values, P v, a second matrix product of "
            "(T, S) by (S, Dv) in every head.",
        ),
        Mistake(
            _flops_with(lambda B, H, T, S, D, Dv: 2 * B * H * T * T * (D + Dv)),
            "the score matrix has T · T entries in this count; there is one score per (query, key) pair, "
            "T · S, and S differs from T (with a KV cache, say).",
        ),
        Mistake(
            _flops_with(lambda B, H, T, S, D, Dv: 4 * B * H * T * S * D),
            "P v is counted with D; its output has Dv columns, so it takes T · Dv dot products of length S.",
        ),
        Mistake(
            _flops_with(lambda B, H, T, S, D, Dv: 2 * T * S * (D + Dv)),
            "that is one head of one sequence; every one of the B · H (sequence, head) pairs does its own "
            "two matrix products.",
        ),
    ),
    properties=(
        Property(
            "PyTorch's count",
            "the answer must equal what PyTorch's FlopCounterMode counts when attention runs on real (B, "
            "H, T, D), (B, H, S, D), (B, H, S, Dv) tensors: every matrix product, 2 FLOPs per "
            "multiply-add.",
            holds=_counted_flops_hold,
        ),
    ),
    hints=(
        "measure instead of deriving: PyTorch has a context manager that counts the FLOPs of every "
        "operation run inside it, and a device on which tensors have shapes but no memory, so even the "
        "largest case costs nothing to run.",
        "make q, k and v of the four-dimensional shapes the exercise gives, on the meta device, zeros will "
        "do. Run your attention of 02.2 on them inside the counter (display switched off), and read its "
        "total once the block has ended. Every (sequence, head) pair and both matrix products must be in "
        "what ran.",
        "a sketch: from torch.utils.flop_counter import FlopCounterMode; q = torch.zeros(B, H, T, D, "
        "device='meta'), k and v likewise with S keys (v with Dv columns); with FlopCounterMode(display="
        "False) as counter: scaled_dot_product_attention(q, k, v); after the block, the counter's "
        "get_total_flops() is the count: hand it back through torch.tensor.",
    ),
    difficulty=2,
    minutes=15,
)


# ---------------------------------------------------------------------------------------------------------
# 02.4 single-head cross-attention from raw projection weights


def _cross_case(g: torch.Generator, B: int, T: int, S: int, C: int, C_ctx: int) -> Case:
    args = (
        _randn(g, B, T, C),  # x: the queries' sequence
        _randn(g, B, S, C_ctx),  # context: the keys' and values' sequence
        _randn(g, C, C) / math.sqrt(C),  # w_q (out, in) like nn.Linear
        _randn(g, C, C_ctx) / math.sqrt(C_ctx),  # w_k
        _randn(g, C, C_ctx) / math.sqrt(C_ctx),  # w_v
        _randn(g, C, C) / math.sqrt(C),  # w_o
    )
    return Case(args)


def _cross_cases(g: torch.Generator) -> list[Case]:
    return [
        _cross_case(g, 2, 5, 7, 6, 10),  # context wider than x
        _cross_case(g, 1, 6, 3, 9, 5),  # fewer keys than queries, context narrower
        _cross_case(g, 3, 4, 9, 7, 7),  # same widths, T != S
        _cross_case(g, 2, 1, 6, 5, 11),  # a single query
        _cross_case(g, 1, 8, 8, 3, 12),  # T == S, but the widths differ
        _sharp_cross(_cross_case(g, 2, 5, 6, 8, 9)),  # the largest score 200: exp overflows unless shifted
    ]


def _sharp_cross(case: Case) -> Case:
    """The case with w_q scaled so that the largest score q·k/√C is 200, past exp's float32 range."""
    x, context, w_q, w_k, *rest = case.args
    scores = (x @ w_q.T) @ (context @ w_k.T).transpose(-2, -1) / w_q.shape[0] ** 0.5  # (B, T, S)
    return Case((x, context, w_q * (200.0 / scores.max()), w_k, *rest))


def _cross_reference(x, context, w_q, w_k, w_v, w_o):
    C, C_ctx = x.shape[-1], context.shape[-1]
    layer = MultiHeadAttention(C, 1, bias=False, kdim=C_ctx, vdim=C_ctx)
    with torch.no_grad():
        for proj, w in [(layer.q_proj, w_q), (layer.k_proj, w_k), (layer.v_proj, w_v), (layer.out_proj, w_o)]:
            proj.weight.copy_(w)
        return layer(x, context)  # (B, T, C)


def _cross_variant(x, context, w_q, w_k, w_v, w_o, *, scale=None, softmax_dim=-1, out=True, unshifted=False):
    """Cross-attention with one piece swapped for a wrong one (the known mistakes below)."""
    q, k, v = x @ w_q.T, context @ w_k.T, context @ w_v.T  # (B, T, C), (B, S, C), (B, S, C)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale  # (B, T, S)
    softmax = (
        unshifted_softmax if unshifted else torch.softmax
    )  # the first: inf / inf = NaN past a score of 88
    weights = softmax(scores, dim=softmax_dim)  # (B, T, S)
    heads = weights @ v  # (B, T, C)
    return heads @ w_o.T if out else heads


def _unshifted_cross(*args: torch.Tensor) -> torch.Tensor:
    return _cross_variant(*args, unshifted=True)  # (B, T, C), NaN rows past a score of 88


CROSS = Exercise(
    exercise_id="02.4",
    kind="build",
    title="single-head cross-attention: queries from x, keys and values from context, then W^O",
    function_name="cross_attention",
    arg_names=("x", "context", "w_q", "w_k", "w_v", "w_o"),
    reference=_cross_reference,
    make_cases=_cross_cases,
    mistakes=(
        Mistake(
            lambda *a: _cross_variant(*a, out=False),
            "W^O is missing: the attended values still go through the output projection, the last step.",
        ),
        Mistake(
            lambda *a: _cross_variant(*a, scale=1.0),
            "the scores are not scaled: divide q kᵀ by sqrt(C), the width of the projected queries (one "
            "head, so D = C).",
        ),
        Mistake(
            lambda *a: _cross_variant(*a, scale=1.0 / math.sqrt(a[1].shape[-1])),
            "the scores are divided by the square root of the context's width; the dot product runs over "
            "the projected queries and keys, C numbers each (one head, so D = C): divide by sqrt(C).",
        ),
        Mistake(
            lambda *a: _cross_variant(*a, softmax_dim=-2),
            "the softmax runs over the queries (dim -2): each query's weights over the S context tokens "
            "must sum to 1, so softmax over the last dim.",
        ),
        Mistake(_unshifted_cross, OVERFLOW_HINT),
    ),
    diagnoses=(overflow_diagnosis(_unshifted_cross),),
    hints=(
        "the weights follow a linear layer's layout, (out_features, in_features), so each projection "
        "multiplies by the weight transposed. Queries come from x, keys and values from the context; "
        "then one head of scaled dot-product attention and the output projection.",
        "project first: q (B, T, C), k and v (B, S, C); then one head of scaled dot-product attention, "
        "softmax over the S keys of q kᵀ / √C, and the weighted sum of the values, (B, T, C), goes "
        "through the output projection w_o as the last step.",
        "a sketch: q = x @ w_q.T, k = context @ w_k.T and v = context @ w_v.T; weights = torch.softmax(q "
        "@ k.transpose(-2, -1) / math.sqrt(C), dim=-1), shape (B, T, S); the weighted values, (B, T, C), "
        "then pass through the output projection the same way as the inputs did.",
    ),
    difficulty=2,
    minutes=15,
)


EXERCISES = (WEIGHTS, SDPA, FLOPS, CROSS)
