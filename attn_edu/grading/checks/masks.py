"""Checks for notebook 04's exercises: a bottom-right causal mask, a padding mask, a masked softmax.

The references are :func:`attn_edu.masks.causal_mask`, :func:`attn_edu.masks.padding_mask` and
:func:`attn_edu.attention.masked_softmax`. Cases include ``T > S`` and ``T < S``, empty sequences and
fully masked rows; the known-wrong versions below are the usual slips (top-left alignment, off-by-one
diagonals, inverted polarity, left/right swapped, NaN rows, masking after the softmax, finite fills).
"""

from __future__ import annotations

import torch

from attn_edu import masks
from attn_edu.attention import masked_softmax
from attn_edu.grading.exercise import Case, Exercise, Mistake

# ---------------------------------------------------------------------------------------------------------
# 04.1 bottom-right causal mask


def _causal_cases(g: torch.Generator) -> list[Case]:
    T, S = (int(n) for n in torch.randint(2, 9, (2,), generator=g))
    return [
        Case((5, 5)),
        Case((3, 7)),  # a KV cache: 4 earlier keys
        Case((1, 4)),  # one new token sees everything
        Case((7, 3)),  # more queries than keys: the first 4 rows see nothing
        Case((T, S + 9)),
    ]


def _tril(T: int, S: int, diagonal: int) -> torch.Tensor:
    return torch.ones(T, S, dtype=torch.bool).tril(diagonal=diagonal)  # (T, S)


CAUSAL = Exercise(
    exercise_id="04.1",
    title="a bool causal mask (T, S) aligned to the bottom-right corner",
    function_name="causal_mask",
    arg_names=("T", "S"),
    reference=lambda T, S: masks.causal_mask(T, S),
    make_cases=_causal_cases,
    mistakes=(
        Mistake(
            lambda T, S: _tril(T, S, 0),
            "the mask is aligned top-left (query t sees keys 0..t, like torch's is_causal); with S keys "
            "query t sits at position S - T + t and sees keys 0..S - T + t: tril(diagonal=S - T).",
        ),
        Mistake(
            lambda T, S: _tril(T, S, S - T - 1),
            "off by one: each query must also see its own token (the diagonal): tril(diagonal=S - T).",
        ),
        Mistake(
            lambda T, S: _tril(T, S, S - T + 1),
            "off by one: each query sees the next (future) token too: tril(diagonal=S - T), not S - T + 1.",
        ),
        Mistake(
            lambda T, S: ~masks.causal_mask(T, S),
            "the polarity is inverted: True means *may attend* (the past and the token itself); "
            "True = ignore is nn.MultiheadAttention's convention.",
        ),
        Mistake(
            lambda T, S: torch.ones(T, S, dtype=torch.bool).triu(diagonal=S - T),
            "this is the upper triangle, the future; a causal mask keeps the lower triangle: tril.",
        ),
    ),
    hints=(
        "query t may attend to key s when s <= S - T + t: the newest query (t = T - 1) sees every key.",
        "torch.tril keeps the lower triangle; its diagonal= argument shifts it right by that many keys.",
        "torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)",
    ),
)


# ---------------------------------------------------------------------------------------------------------
# 04.2 padding mask from lengths


def _padding_cases(g: torch.Generator) -> list[Case]:
    lengths = torch.randint(1, 7, (4,), generator=g)
    lengths[0] = 6  # one full-length sequence
    return [
        Case((torch.tensor([5, 3, 1]), 5)),
        Case((torch.tensor([4, 2, 6]), 7), {"side": "left"}),
        Case((lengths, 6), {"side": "right"}),
        Case((torch.tensor([0, 3]), 4), {"side": "left"}),  # an empty sequence: a row of False
        Case((lengths.flip(0), 9), {"side": "left"}),
        Case((torch.tensor([2]), 5)),
    ]


def _positions_from_lengths(lengths: torch.Tensor, max_len: int, side: str, extra: int = 0) -> torch.Tensor:
    positions = torch.arange(max_len)  # (max_len,)
    if side == "right":
        return positions[None, :] < lengths[:, None] + extra  # (B, max_len)
    return positions[None, :] >= (max_len - lengths - extra)[:, None]  # (B, max_len)


PADDING = Exercise(
    exercise_id="04.2",
    title="a bool padding mask (B, max_len) from lengths, padded on the right or on the left",
    function_name="padding_mask",
    arg_names=("lengths", "max_len"),
    reference=lambda lengths, max_len, side="right": masks.padding_mask(lengths, max_len, side=side),
    make_cases=_padding_cases,
    mistakes=(
        Mistake(
            lambda lengths, max_len, side="right": ~masks.padding_mask(lengths, max_len, side=side),
            "the mask is inverted: True marks the real tokens (they may be attended), False the padding.",
        ),
        Mistake(
            lambda lengths, max_len, side="right": _positions_from_lengths(lengths, max_len, side, 1),
            "off by one: a sequence of length L has exactly L real positions (right: 0 .. L - 1, "
            "left: max_len - L .. max_len - 1); compare with <, not <=.",
        ),
        Mistake(
            lambda lengths, max_len, side="right": masks.padding_mask(
                lengths, max_len, side="left" if side == "right" else "right"
            ),
            "left and right are swapped: side='right' means the tokens come first and the padding "
            "after them; side='left' puts the padding first.",
        ),
        Mistake(
            lambda lengths, max_len, side="right": masks.padding_mask(lengths, max_len),
            "side='left' is ignored: with left padding the real tokens are the last L positions.",
        ),
    ),
    hints=(
        "compare the positions torch.arange(max_len) with each sequence's length, broadcasting to (B, max_len).",
        "right padding: positions[None, :] < lengths[:, None]; "
        "left padding: the last L positions, positions >= max_len - L.",
        "left = positions[None, :] >= (max_len - lengths)[:, None]",
    ),
)


# ---------------------------------------------------------------------------------------------------------
# 04.3 masked softmax with zeros for fully masked rows


def _softmax_cases(g: torch.Generator) -> list[Case]:
    def randn(*shape: int) -> torch.Tensor:
        return 3 * torch.randn(shape, generator=g)

    some_hidden = torch.rand(4, 6, generator=g) < 0.6  # (T, S)
    some_hidden[:, 0] = True
    some_hidden[2] = False  # query 2 sees nothing
    padding = masks.key_mask(masks.padding_mask(torch.tensor([5, 3]), 7))  # (B, 1, 1, S)
    return [
        Case((randn(4, 6), some_hidden)),
        Case((randn(2, 3, 5, 7), padding)),  # (B, H, T, S) with a key-padding mask (B, 1, 1, S)
        Case((randn(3, 4, 9), masks.causal_mask(4, 9))),  # T < S: every query sees a key
        Case((randn(2, 1, 6, 4), masks.causal_mask(6, 4))),  # T > S: queries 0 and 1 see nothing
        Case((randn(5, 5), torch.ones(5, 5, dtype=torch.bool))),
    ]


def _naive(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)  # (..., T, S), NaN rows


MASKED_SOFTMAX = Exercise(
    exercise_id="04.3",
    title="softmax over the keys that hides masked keys and returns zeros for fully masked rows",
    function_name="masked_softmax",
    arg_names=("scores", "mask"),
    reference=lambda scores, mask: masked_softmax(scores, mask),
    make_cases=_softmax_cases,
    mistakes=(
        Mistake(
            _naive,
            "rows whose keys are all masked come out NaN: softmax of all -inf is 0/0. Keep the NaN out: "
            "torch.where(mask.any(dim=-1, keepdim=True), weights, 0.0).",
        ),
        Mistake(
            lambda scores, mask: torch.softmax(scores, dim=-1) * mask,
            "the mask is applied after the softmax, so the visible weights no longer sum to 1: "
            "fill hidden scores with -inf before the softmax.",
        ),
        Mistake(
            lambda scores, mask: torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1),
            "a finite fill (-1e9, -1e4, finfo.min) leaks: a fully masked row spreads all its weight "
            "uniformly over the hidden keys. Use -inf, then zero the rows with no visible key.",
        ),
        Mistake(
            lambda scores, mask: torch.softmax(scores.masked_fill(~mask, 0.0), dim=-1),
            "hidden scores are set to 0, but e^0 = 1 still gives them weight: use float('-inf').",
        ),
        Mistake(
            lambda scores, mask: masked_softmax(scores, ~mask),
            "the mask is inverted: True means *may attend*, so hide the positions where mask is False.",
        ),
        Mistake(
            lambda scores, mask: (
                _naive(scores.transpose(-2, -1), mask.transpose(-2, -1)).transpose(-2, -1).nan_to_num(0.0)
            ),
            "the softmax runs over the queries (dim=-2); each row (one query) must sum to 1 over the keys.",
        ),
    ),
    hints=(
        "hide keys with scores.masked_fill(~mask, float('-inf')), then torch.softmax(..., dim=-1).",
        "a row with no visible key is softmax(all -inf) = 0/0 = NaN; find such rows with "
        "mask.any(dim=-1, keepdim=True).",
        "torch.where(mask.any(dim=-1, keepdim=True), weights, 0.0) turns those rows into zeros.",
    ),
)


EXERCISES = (CAUSAL, PADDING, MASKED_SOFTMAX)
