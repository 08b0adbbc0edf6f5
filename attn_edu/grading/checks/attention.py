"""Checks for notebook 02's exercises: attention weights, scaled dot-product attention, a causal + padding mask,
and single-head cross-attention from four raw projection matrices (matched with ``nn.MultiheadAttention``).

Each exercise is compared with :mod:`attn_edu.attention` / :mod:`attn_edu.masks` on random cases with
``T != S``, sizes that are not powers of two and odd head counts, and each lists the mistakes learners
make most often, written out as wrong functions, so a check can say which one it sees.
"""

from __future__ import annotations

import math

import torch

from attn_edu import attention, masks
from attn_edu.grading.exercise import Case, Exercise, Mistake, Property, Question
from attn_edu.multihead import MultiHeadAttention

# ---------------------------------------------------------------------------------------------------------
# Random inputs


def _randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=g)


def _random_mask(g: torch.Generator, *shape: int) -> torch.Tensor:
    """A random bool mask (about 70% True) in which key 0 is always visible, so no row is fully hidden."""
    mask = torch.rand(shape, generator=g) < 0.7  # (..., T, S)
    mask[..., 0] = True
    return mask


def _fully_masked(g: torch.Generator, B: int, T: int, S: int) -> torch.Tensor:
    """A ``(B, 1, T, S)`` mask whose query row 1 of batch 0 sees no key at all."""
    mask = _random_mask(g, B, 1, T, S)  # (B, 1, T, S)
    mask[0, 0, 1] = False
    return mask


# ---------------------------------------------------------------------------------------------------------
# Shared pieces of the wrong versions


def _masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None, dim: int = -1) -> torch.Tensor:
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=dim).nan_to_num(0.0)


def _scores(q: torch.Tensor, k: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    return q @ k.transpose(-2, -1) * scale  # (..., T, S)


def _causal(T: int, S: int, shift: int = 0) -> torch.Tensor:
    """Bottom-right causal mask moved ``shift`` diagonals up (+1 sees one future key, -1 hides itself)."""
    return torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T + shift)  # (T, S)


def _visible(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None, is_causal: bool, shift: int = 0):
    causal = _causal(q.shape[-2], k.shape[-2], shift) if is_causal else None
    return masks.combine_masks(mask, causal)


# ---------------------------------------------------------------------------------------------------------
# 02.1 attention weights


def _weights_cases(g: torch.Generator) -> list[Case]:
    return [
        Case((_randn(g, 2, 3, 5, 6), _randn(g, 2, 3, 7, 6))),
        Case((_randn(g, 1, 5, 4, 10), _randn(g, 1, 5, 9, 10)), {"mask": _random_mask(g, 1, 1, 4, 9)}),
        Case((_randn(g, 3, 6, 5), _randn(g, 3, 8, 5)), {"mask": _random_mask(g, 3, 6, 8)}),
        Case((_randn(g, 7, 12), _randn(g, 7, 12)), {"mask": _random_mask(g, 7, 7)}),
        Case(
            (_randn(g, 2, 1, 4, 6), _randn(g, 2, 1, 5, 6)),
            {"mask": _fully_masked(g, 2, 4, 5)},
            group="fully masked rows",
        ),
    ]


def _weights_reference(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    return attention.attention_weights(q, k, mask)


def _rows_do_not_sum_to_one(case: Case, got: torch.Tensor) -> str | None:
    mask = case.kwargs.get("mask")
    sums = got.double().sum(dim=-1)  # (..., T)
    if mask is not None:
        sums = sums[mask.any(dim=-1).expand(sums.shape)]
    if (sums - 1).abs().max() > 1e-3:
        return (
            f"each row (one query) should sum to 1 over the keys; yours sum to {float(sums.min()):.3g} .. "
            f"{float(sums.max()):.3g}: softmax over dim=-1, after masking."
        )
    return None


def _hidden_keys_get_weight(case: Case, got: torch.Tensor) -> str | None:
    mask = case.kwargs.get("mask")
    if mask is None or got.shape != torch.broadcast_shapes(got.shape, mask.shape):
        return None
    leak = got.double().masked_fill(mask, 0.0).abs().max()
    if leak > 0:
        return f"keys where mask is False got weight up to {float(leak):.3g}; they must get exactly 0."
    return None


WEIGHTS = Exercise(
    exercise_id="02.1",
    title="attention weights softmax(q kᵀ / sqrt(D)) with a bool mask (True = may attend)",
    function_name="attention_weights",
    arg_names=("q", "k"),
    reference=_weights_reference,
    make_cases=_weights_cases,
    mistakes=(
        Mistake(
            lambda q, k, mask=None: _masked_softmax(_scores(q, k, 1.0), mask),
            "the scores are not divided by sqrt(D): scale q kᵀ by 1 / sqrt(q.shape[-1]).",
        ),
        Mistake(
            lambda q, k, mask=None: _masked_softmax(_scores(q, k, 1 / q.shape[-1]), mask),
            "the scores are divided by D; the scale is 1 / sqrt(D).",
        ),
        Mistake(
            lambda q, k, mask=None: _masked_softmax(_scores(q, k, math.sqrt(q.shape[-1])), mask),
            "the scores are multiplied by sqrt(D); divide by it instead.",
        ),
        Mistake(
            lambda q, k, mask=None: _masked_softmax(_scores(q, k), mask, dim=-2),
            "the softmax runs over the queries (dim=-2); each query's weights must sum to 1 over "
            "the keys: torch.softmax(scores, dim=-1).",
        ),
        Mistake(
            lambda q, k, mask=None: _masked_softmax(_scores(q, k), None) * (1 if mask is None else mask),
            "the mask is applied after the softmax, so the visible weights no longer sum to 1: "
            "fill hidden scores with -inf before the softmax.",
        ),
        Mistake(
            lambda q, k, mask=None: _masked_softmax(_scores(q, k), None if mask is None else ~mask),
            "the mask is inverted: True means *may attend*, so hide the positions where mask is False "
            "(scores.masked_fill(~mask, float('-inf'))).",
        ),
        Mistake(
            lambda q, k, mask=None: torch.softmax(
                _scores(q, k) if mask is None else _scores(q, k).masked_fill(~mask, 0.0), dim=-1
            ),
            "hidden scores are set to 0, but e^0 = 1 still gives them weight: use float('-inf').",
        ),
    ),
    properties=(
        Property(
            "fully masked rows",
            "a query whose every key is masked must get a row of zeros, not NaN "
            "(softmax of all -inf is 0/0): torch.where(mask.any(dim=-1, keepdim=True), weights, 0.0).",
        ),
    ),
    diagnoses=(_hidden_keys_get_weight, _rows_do_not_sum_to_one),
    hints=(
        "scores = q @ k.transpose(-2, -1) has shape (..., T, S); divide it by sqrt(D), D = q.shape[-1].",
        "hide keys with scores.masked_fill(~mask, float('-inf')) before torch.softmax(scores, dim=-1): "
        "e^-inf = 0.",
        "a row whose keys are all hidden is softmax(all -inf) = NaN. Find those rows with mask.any over the "
        "keys (keepdim, so that it broadcasts), and let torch.where put 0.0 there and keep the weights elsewhere.",
    ),
    difficulty=2,
    minutes=10,
)


# ---------------------------------------------------------------------------------------------------------
# 02.2 scaled dot-product attention with mask and bottom-right is_causal


def _sdpa_cases(g: torch.Generator) -> list[Case]:
    lengths = torch.tensor([6, 4])
    padding = masks.key_mask(masks.padding_mask(lengths, 6))  # (2, 1, 1, 6)
    return [
        Case((_randn(g, 2, 3, 5, 6), _randn(g, 2, 3, 7, 6), _randn(g, 2, 3, 7, 4))),
        Case((_randn(g, 1, 5, 3, 8), _randn(g, 1, 5, 9, 8), _randn(g, 1, 5, 9, 5)), {"is_causal": True}),
        Case(
            (_randn(g, 2, 1, 6, 5), _randn(g, 2, 1, 6, 5), _randn(g, 2, 1, 6, 7)),
            {"mask": padding, "is_causal": True},
        ),
        Case(
            (_randn(g, 3, 4, 6), _randn(g, 3, 7, 6), _randn(g, 3, 7, 3)), {"mask": _random_mask(g, 3, 4, 7)}
        ),
        Case(
            (_randn(g, 1, 3, 2, 5), _randn(g, 1, 3, 7, 5), _randn(g, 1, 3, 7, 3)),
            {"mask": _random_mask(g, 1, 3, 2, 7), "is_causal": True},
        ),
        Case(
            (_randn(g, 2, 3, 4, 6), _randn(g, 2, 3, 5, 6), _randn(g, 2, 3, 5, 2)),
            {"mask": _fully_masked(g, 2, 4, 5)},
            group="fully masked rows",
        ),
    ]


def _sdpa_reference(q, k, v, mask=None, *, is_causal=False):
    return attention.scaled_dot_product_attention(q, k, v, mask, is_causal=is_causal)


def _sdpa_shifted(shift: int):
    def wrong(q, k, v, mask=None, *, is_causal=False):
        return attention.scaled_dot_product_attention(q, k, v, _visible(q, k, mask, is_causal, shift))

    return wrong


def _sdpa_top_left(q, k, v, mask=None, *, is_causal=False):
    top_left = masks.causal_mask_top_left(q.shape[-2], k.shape[-2]) if is_causal else None
    return attention.scaled_dot_product_attention(q, k, v, masks.combine_masks(mask, top_left))


def _sdpa_mask_after_softmax(q, k, v, mask=None, *, is_causal=False):
    visible = _visible(q, k, mask, is_causal)
    weights = torch.softmax(_scores(q, k), dim=-1)  # (..., T, S)
    return (weights if visible is None else weights * visible) @ v  # (..., T, Dv)


SDPA = Exercise(
    exercise_id="02.2",
    title="scaled dot-product attention with a bool mask and bottom-right is_causal",
    function_name="scaled_dot_product_attention",
    arg_names=("q", "k", "v"),
    reference=_sdpa_reference,
    make_cases=_sdpa_cases,
    mistakes=(
        Mistake(
            lambda q, k, v, mask=None, *, is_causal=False: attention.scaled_dot_product_attention(
                q, k, v, mask, is_causal=is_causal, scale=1.0
            ),
            "the scores are not divided by sqrt(D): scale q kᵀ by 1 / sqrt(q.shape[-1]).",
        ),
        Mistake(
            lambda q, k, v, mask=None, *, is_causal=False: attention.attention_weights(
                q, k, mask, is_causal=is_causal
            ),
            "this is the (..., T, S) matrix of weights; the output is weights @ v, shape (..., T, Dv).",
        ),
        Mistake(
            lambda q, k, v, mask=None, *, is_causal=False: (
                _masked_softmax(_scores(q, k), _visible(q, k, mask, is_causal), dim=-2) @ v
            ),
            "the softmax runs over the queries (dim=-2); it must run over the keys (dim=-1).",
        ),
        Mistake(
            _sdpa_top_left,
            "the causal mask is aligned top-left (query t sees keys 0..t); with S > T keys, query t "
            "sits at position S - T + t and sees keys 0..S - T + t: tril(diagonal=S - T).",
        ),
        Mistake(
            _sdpa_shifted(-1),
            "the causal mask is off by one: each query must also see its own position "
            "(tril(diagonal=S - T), not S - T - 1).",
        ),
        Mistake(
            _sdpa_shifted(+1),
            "the causal mask is off by one: each query sees one future key (tril(diagonal=S - T), "
            "not S - T + 1).",
        ),
        Mistake(
            lambda q, k, v, mask=None, *, is_causal=False: attention.scaled_dot_product_attention(
                q, k, v, mask
            ),
            "is_causal=True is ignored: hide every key after the query's own position.",
        ),
        Mistake(
            _sdpa_mask_after_softmax,
            "the mask is applied after the softmax, so the visible weights no longer sum to 1: "
            "fill hidden scores with -inf before the softmax.",
        ),
        Mistake(
            lambda q, k, v, mask=None, *, is_causal=False: attention.scaled_dot_product_attention(
                q, k, v, None if mask is None else ~mask, is_causal=is_causal
            ),
            "the mask is inverted: True means *may attend*.",
        ),
    ),
    properties=(
        Property(
            "fully masked rows",
            "a query whose every key is masked must get an output row of zeros, not NaN.",
        ),
    ),
    hints=(
        "output = weights @ v: (..., T, S) @ (..., S, Dv) -> (..., T, Dv); you may reuse attention_weights.",
        "with is_causal=True query t sits at absolute position S - T + t and sees keys 0 .. S - T + t.",
        "torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T) is that mask; combine it with mask "
        "using & (either may be absent).",
    ),
    difficulty=2,
    minutes=15,
)


# ---------------------------------------------------------------------------------------------------------
# 02.3 causal + key padding mask


def _mask_cases(g: torch.Generator) -> list[Case]:
    def lengths(B: int, T: int) -> torch.Tensor:
        out = torch.randint(1, T + 1, (B,), generator=g)
        out[0] = T  # one full-length sequence in every batch
        return out

    return [
        Case((torch.tensor([5, 3, 1]), 5)),
        Case((lengths(2, 7), 7)),
        Case((torch.tensor([4]), 6)),
        Case((lengths(5, 6), 6)),
    ]


def _mask_reference(lengths: torch.Tensor, T: int) -> torch.Tensor:
    padding = masks.key_mask(masks.padding_mask(lengths, T))  # (B, 1, 1, T)
    return masks.combine_masks(masks.causal_mask(T), padding)  # (B, 1, T, T)


def _mask_with(causal: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    return causal[None, None] & real[:, None, None, :]  # (B, 1, T, T)


def _positions(T: int) -> torch.Tensor:
    return torch.arange(T)


CAUSAL_PADDING = Exercise(
    exercise_id="02.3",
    title="a causal + key-padding mask of shape (B, 1, T, T)",
    function_name="causal_padding_mask",
    arg_names=("lengths", "T"),
    reference=_mask_reference,
    make_cases=_mask_cases,
    mistakes=(
        Mistake(
            lambda lengths, T: ~_mask_reference(lengths, T),
            "the mask is inverted: True means *may attend* (the opposite of nn.MultiheadAttention).",
        ),
        Mistake(
            lambda lengths, T: _mask_reference(lengths, T)[:, 0],
            "the head axis is missing: return (B, 1, T, T) so the mask broadcasts over heads.",
        ),
        Mistake(
            lambda lengths, T: _mask_with(_causal(T, T, -1), masks.padding_mask(lengths, T)),
            "the causal part is off by one: a query may attend to itself (key s <= query t).",
        ),
        Mistake(
            lambda lengths, T: _mask_with(_causal(T, T, +1), masks.padding_mask(lengths, T)),
            "the causal part is off by one: a query sees the next token (use s <= t, not s <= t + 1).",
        ),
        Mistake(
            lambda lengths, T: _mask_with(_causal(T, T).T, masks.padding_mask(lengths, T)),
            "the causal part is transposed: query t (a row) may see keys s <= t (columns).",
        ),
        Mistake(
            lambda lengths, T: _causal(T, T)[None, None] & masks.padding_mask(lengths, T)[:, None, :, None],
            "the padding hides queries (rows) instead of keys (columns): index it as real[:, None, None, :].",
        ),
        Mistake(
            lambda lengths, T: _mask_with(_causal(T, T), _positions(T)[None, :] <= lengths[:, None]),
            "the padding is off by one: a sequence of length L has real tokens at 0 .. L - 1 (use <).",
        ),
        Mistake(
            lambda lengths, T: _mask_with(_causal(T, T), masks.padding_mask(lengths, T, side="left")),
            "the padding sits on the left; here sequences start at position 0 and padding follows them.",
        ),
    ),
    hints=(
        "build two bool masks and combine them with &: causal (T, T) and real keys (B, T); then add axes.",
        "compare positions = torch.arange(T) with itself for the causal part (a row of keys s against a "
        "column of queries t: s <= t) and with the lengths for the padding part (a row of keys against a "
        "column of lengths: s < lengths[b]).",
        "the causal part is (T, T), the padding part (B, T). Add axes with None so that both broadcast to "
        "(B, 1, T, T): the padding's last axis must land on the keys, the result's last axis.",
    ),
    difficulty=2,
    minutes=10,
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
    ]


def _cross_reference(x, context, w_q, w_k, w_v, w_o):
    C, C_ctx = x.shape[-1], context.shape[-1]
    layer = MultiHeadAttention(C, 1, bias=False, kdim=C_ctx, vdim=C_ctx)
    with torch.no_grad():
        for proj, w in [(layer.q_proj, w_q), (layer.k_proj, w_k), (layer.v_proj, w_v), (layer.out_proj, w_o)]:
            proj.weight.copy_(w)
        return layer(x, context)  # (B, T, C)


def _cross_variant(x, context, w_q, w_k, w_v, w_o, *, scale=None, softmax_dim=-1, out=True):
    """Cross-attention with one piece swapped for a wrong one (the known mistakes below)."""
    q, k, v = x @ w_q.T, context @ w_k.T, context @ w_v.T  # (B, T, C), (B, S, C), (B, S, C)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    weights = torch.softmax(q @ k.transpose(-2, -1) * scale, dim=softmax_dim)  # (B, T, S)
    heads = weights @ v  # (B, T, C)
    return heads @ w_o.T if out else heads


CROSS = Exercise(
    exercise_id="02.4",
    title="single-head cross-attention: queries from x, keys and values from context, then W^O",
    function_name="cross_attention",
    arg_names=("x", "context", "w_q", "w_k", "w_v", "w_o"),
    reference=_cross_reference,
    make_cases=_cross_cases,
    mistakes=(
        Mistake(
            lambda *a: _cross_variant(*a, out=False),
            "W^O is missing: the attended values still go through the output projection, @ w_o.T.",
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
    ),
    hints=(
        "the weights follow nn.Linear, (out_features, in_features): a projection is t @ w.T. Queries come "
        "from x, keys and values from context.",
        "project first: q (B, T, C), k and v (B, S, C); then one head of scaled dot-product attention, "
        "softmax over the S keys of q kᵀ / sqrt(C).",
        "the weighted sum of the values is (B, T, C); the output projection w_o is the last step.",
    ),
    difficulty=2,
    minutes=10,
)


EXERCISES = (WEIGHTS, SDPA, CAUSAL_PADDING, CROSS)


# ---------------------------------------------------------------------------------------------------------
# Concept questions

WEIGHTS_MEMORY = Question(
    exercise_id="02.q1",
    title="the memory of one layer's attention weights for B = 2, H = 12, n = 2048 in float32",
    answer=384,
    explanation=(
        "every sequence and every head has its own n × n matrix: 2 · 12 · 2048² = 100,663,296 weights, 4 bytes "
        "each, 402,653,184 bytes = 384 MiB. Doubling n would make it 1.5 GiB: the n² of section 8."
    ),
    wrong=(
        (32, "that is one head's matrices; each of the 12 heads has its own n × n weights."),
        (192, "that is one sequence; each of the B = 2 sequences in the batch has its own weights."),
        (96, "96 Mi is the number of weights; each float32 takes 4 bytes."),
        (0.1875, "the weight matrix has one entry per (query, key) pair: n², not n."),
    ),
    tolerance=0.5,
    hints=(
        "how many (query, key) pairs does one head of one sequence score? Then count the heads and sequences.",
        "multiply the number of weights by 4 bytes and divide by 2²⁰ bytes per MiB.",
    ),
    minutes=3,
)

REPEATED_TOKEN = Question(
    exercise_id="02.q2",
    title="the self-attention outputs of two copies of one word, without positions",
    choices=(
        "they are identical: equal inputs give equal queries, scores, weights and outputs",
        "they differ, because the second copy comes later in the sentence",
        "they differ, because each token puts the most weight on itself",
        "they are identical only when W_Q = W_K",
    ),
    answer="a",
    explanation=(
        "attention sees the sentence as a set: the two copies have the same row of X, hence the same query, "
        "the same scores against every key, the same weights and the same weighted sum of the values. Only "
        "the positional encodings of notebook 06 make them differ."
    ),
    wrong=(
        (
            "b",
            "where a token sits appears nowhere in Q K^T / sqrt(D): X holds the word's embedding and nothing "
            "about its position.",
        ),
        (
            "c",
            "nothing makes a query favour its own key, and even if it did, the two copies' keys are equal "
            "too: each copy's row of scores is the same.",
        ),
        (
            "d",
            "the two copies share their query whatever W_Q and W_K are; tying the maps makes the score matrix "
            "symmetric, a different property.",
        ),
    ),
    hints=(
        "follow one row of X through the formula: query, scores against all keys, softmax, weighted sum. "
        "Where could the position of the token come in?",
    ),
    difficulty=1,
    minutes=2,
)

QUESTIONS = (WEIGHTS_MEMORY, REPEATED_TOKEN)
