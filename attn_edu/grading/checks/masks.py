"""Checks for notebook 04's exercises: a bottom-right causal mask, a padding mask, a masked softmax, the
decoding mask of a left-padded batch (checked against transformers), and the padding waste of
length-sorted batches (a measurement, checked by counting the padding masks' hidden entries).

The references are built on :func:`attn_edu.masks.causal_mask`, :func:`attn_edu.masks.padding_mask` and
:func:`attn_edu.attention.masked_softmax`. Cases include ``T > S`` and ``T < S``, empty sequences and
fully masked rows, and scores up to 100; the known-wrong versions below are the usual slips (top-left
alignment, off-by-one diagonals, inverted polarity, left/right swapped, NaN rows, masking after the softmax,
finite fills, a softmax that does not subtract the row's largest score, unsorted batches, padded keys counted
without padded queries).
"""

from __future__ import annotations

import torch

from attn_edu import masks
from attn_edu.attention import masked_softmax
from attn_edu.grading.exercise import (
    OVERFLOW_HINT,
    Case,
    Exercise,
    Mistake,
    Property,
    lifted,
    overflow_diagnosis,
    unshifted_softmax,
)

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
            "the mask is aligned top-left (query t sees keys 0 .. t, like PyTorch's is_causal); with S "
            "keys, query t sits at position S - T + t and sees keys 0 .. S - T + t. Look at the last "
            "row: it must keep all S keys.",
        ),
        Mistake(
            lambda T, S: _tril(T, S, S - T - 1),
            "off by one: each query must also see its own token, the key at its own position S - T + t "
            "(the shifted diagonal).",
        ),
        Mistake(
            lambda T, S: _tril(T, S, S - T + 1),
            "off by one: each query also sees the next (future) token; the last key it sees is the one "
            "at its own position S - T + t, not one further.",
        ),
        Mistake(
            lambda T, S: ~masks.causal_mask(T, S),
            "the polarity is inverted: True means *may attend* (the past and the token itself); True = "
            "ignore is the convention of PyTorch's MultiheadAttention.",
        ),
        Mistake(
            lambda T, S: torch.ones(T, S, dtype=torch.bool).triu(diagonal=S - T),
            "this is the upper triangle, the future; a causal mask keeps the lower triangle: tril.",
        ),
    ),
    hints=(
        "query t may attend to key s when s <= S - T + t: the newest query (t = T - 1) sees every key.",
        "a lower triangle of True keeps, in row t, the keys up to the diagonal; here the diagonal is "
        "shifted right by S - T keys, so that the last row keeps all S keys and, when T > S, the first T "
        "- S rows keep none.",
        "a sketch: torch.ones(T, S, dtype=torch.bool).tril(...) with the diagonal shifted by S - T, or a "
        "(T, 1) column of query positions against a (1, S) row of key positions, compared with <= after "
        "adding S - T to the queries; check the last row and the T > S case.",
    ),
    difficulty=2,
    minutes=10,
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
            "left and right are swapped: right padding means the tokens come first and the padding after "
            "them; left padding puts the padding first.",
        ),
        Mistake(
            lambda lengths, max_len, side="right": masks.padding_mask(lengths, max_len),
            "the side argument is ignored: with left padding the real tokens are the last L positions.",
        ),
    ),
    hints=(
        "compare every position 0 .. max_len - 1 with each sequence's length, broadcasting to (B, "
        "max_len): one row per sequence, True where a real token sits.",
        "right padding: the real tokens are positions 0 .. L - 1; left padding: the last L positions, "
        "max_len - L .. max_len - 1.",
        "a sketch: a (1, max_len) row of positions against a (B, 1) column, one entry per sequence: for the "
        "right side the column holds the lengths (compare with <), for the left side the first real "
        "position of each sequence (compare with >=).",
    ),
    difficulty=2,
    minutes=10,
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
        # every key visible, rows 0, 2 and 4 lifted so that their largest score is 100: exp overflows
        Case((lifted(randn(5, 5), 100.0), torch.ones(5, 5, dtype=torch.bool))),
    ]


def _naive(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)  # (..., T, S), NaN rows


def _unshifted_masked(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """exp, the mask multiplied in, and a clamped sum: right on fully masked rows, NaN past a score of 88."""
    e = scores.exp() * mask  # (..., T, S)
    return e / e.sum(dim=-1, keepdim=True).clamp_min(1e-30)


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
            "rows whose keys are all masked come out NaN: the softmax of a row of -inf is 0/0. Look at "
            "those rows: they must come out as zeros, the other rows unchanged. hint('04.3', 2) says how "
            "to find them.",
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
            "hidden scores are set to 0, but e^0 = 1 still gives them weight: a hidden key needs a score "
            "of -inf, whose exp is exactly 0.",
        ),
        Mistake(
            lambda scores, mask: masked_softmax(scores, ~mask),
            "the mask is inverted: True means *may attend*, so hide the positions where mask is False.",
        ),
        Mistake(
            lambda scores, mask: (
                _naive(scores.transpose(-2, -1), mask.transpose(-2, -1)).transpose(-2, -1).nan_to_num(0.0)
            ),
            "the softmax runs over the queries (the second-to-last dim); each row (one query) must sum "
            "to 1 over the keys.",
        ),
        Mistake(_unshifted_masked, OVERFLOW_HINT),
        Mistake(
            lambda scores, mask: unshifted_softmax(scores.masked_fill(~mask, float("-inf"))),
            "two slips: rows whose keys are all masked come out NaN (the softmax of a row of -inf is 0/0), "
            "and the softmax is not shifted, so scores past about 88 overflow exp in float32 (inf / inf). "
            "Give the rows with no visible key zeros, and subtract each row's largest visible score before exp.",
        ),
    ),
    diagnoses=(overflow_diagnosis(_unshifted_masked),),
    hints=(
        "hide the masked keys before the softmax, by giving them a score whose exp is exactly 0; then "
        "take the softmax over the keys.",
        "with hidden scores at -inf, a row with no visible key is the softmax of a row of -inf, 0/0 = "
        "NaN. Find such rows by asking, for each query, whether any key of its mask row is True (keep "
        "that dim, shape (..., T, 1), so that it broadcasts), and give them zeros.",
        "a sketch: weights = torch.softmax(scores.masked_fill(~mask, float('-inf')), dim=-1); then "
        "torch.where(condition, weights, 0.0) keeps the weights where the condition holds and puts 0 "
        "elsewhere; here the condition is 'this row has a visible key', mask.any over the keys with "
        "keepdim=True.",
    ),
    difficulty=2,
    minutes=10,
)


# ---------------------------------------------------------------------------------------------------------
# 04.4 the decoding mask from Hugging Face's attention_mask (build and verify against transformers' sdpa_mask)


def _left_padded(g: torch.Generator, B: int, S: int) -> torch.Tensor:
    """A 0/1 ``attention_mask (B, S)``: each row starts with 0 to S // 2 padding zeros (left padding)."""
    pads = torch.randint(0, S // 2 + 1, (B,), generator=g)  # (B,)
    return (torch.arange(S)[None, :] >= pads[:, None]).long()  # (B, S)


def _decoding_cases(g: torch.Generator) -> list[Case]:
    return [
        Case((_left_padded(g, 3, 7), 2)),  # two new tokens after five cached positions
        Case((_left_padded(g, 2, 5), 5)),  # the prompt itself (T == S)
        Case((_left_padded(g, 4, 9), 1)),  # one decoding step
        Case((torch.ones(1, 6, dtype=torch.long), 3)),  # no padding at all
        Case((_left_padded(g, 2, 11), 4)),
    ]


def _decoding_reference(attention_mask: torch.Tensor, T: int) -> torch.Tensor:
    B, S = attention_mask.shape
    real = masks.padding_from_attention_mask(attention_mask, B, S)  # (B, S)
    return masks.combine_masks(masks.causal_mask(T, S), masks.key_mask(real))  # (B, 1, T, S)


DECODING_MASK = Exercise(
    exercise_id="04.4",
    kind="build",
    title="the decoding mask from Hugging Face's attention_mask: causal (bottom-right) and padded keys hidden",
    function_name="decoding_mask",
    arg_names=("attention_mask", "T"),
    reference=_decoding_reference,
    make_cases=_decoding_cases,
    mistakes=(
        Mistake(
            lambda attention_mask, T: (
                masks.causal_mask_top_left(T, attention_mask.shape[1])[None, None]
                & (attention_mask == 1)[:, None, None, :]
            ),
            "the causal part is aligned top-left: the T queries are the *last* T of the S positions, so query t "
            "sits at position S - T + t and sees every key up to it.",
        ),
        Mistake(
            lambda attention_mask, T: masks.causal_mask(T, attention_mask.shape[1]).expand(
                attention_mask.shape[0], 1, T, attention_mask.shape[1]
            ),
            "the padded keys are still visible: hide every key whose attention_mask is 0.",
        ),
        Mistake(
            lambda attention_mask, T: (
                masks.causal_mask(T, attention_mask.shape[1])[None, None]
                & (attention_mask == 0)[:, None, None, :]
            ),
            "the padding polarity is inverted: in Hugging Face's attention_mask 1 marks a real token, 0 padding.",
        ),
    ),
    hints=(
        "two conditions for query t and key s, both needed: s is not in query t's future, and s is a real token.",
        "with a cache the queries are the last T of the S positions, so compare key positions with query "
        "positions S - T + t; the padding condition depends on the key only, one row of attention_mask per "
        "sequence.",
        "build the (T, S) causal part and the (B, S) padding part separately, then give them the singleton "
        "dimensions that make them broadcast to (B, 1, T, S) and combine them with &.",
    ),
    difficulty=3,
    minutes=20,
)


# ---------------------------------------------------------------------------------------------------------
# 04.5 the padding waste of length-sorted batches (a measurement, checked by counting mask entries)


def _waste_cases(g: torch.Generator) -> list[Case]:
    def lengths(n: int, longest: int) -> torch.Tensor:
        return torch.randint(1, longest + 1, (n,), generator=g)  # (N,) every sequence has a token

    return [
        Case((torch.tensor([5, 12, 3, 9, 7, 2, 11]), 3)),  # the last batch holds one sequence
        Case((lengths(13, 40), 4)),
        Case((lengths(10, 25), 10)),  # one batch: no sorting can help
        Case((torch.tensor([30, 1, 1, 1, 30, 1]), 2)),  # sorting pairs the two long ones
        Case((lengths(9, 17), 1)),  # one sequence per batch: no padding at all
        Case((lengths(11, 33), 5)),
        Case((lengths(11, 29), 3), group="the masks' False entries"),
        Case((lengths(8, 50), 5), group="the masks' False entries"),
    ]


def _sorted_batches(lengths: torch.Tensor, batch_size: int) -> tuple[torch.Tensor, ...]:
    return lengths.sort(descending=True).values.split(batch_size)  # longest first; the last may be smaller


def _waste_reference(lengths: torch.Tensor, batch_size: int) -> torch.Tensor:
    real = total = 0
    for batch in _sorted_batches(lengths, batch_size):
        tokens = masks.padding_mask(batch)  # (B_b, L_b) padded to the batch's own longest, True = real
        real += int((tokens.sum(dim=-1) ** 2).sum())  # real query × real key pairs: Σ ℓ²
        total += tokens.numel() * tokens.shape[-1]  # every score entry: B_b × L_b × L_b
    return torch.tensor(1 - real / total, dtype=torch.float64)  # 0-d


def _counted_waste(lengths: torch.Tensor, batch_size: int) -> tuple[int, int]:
    """(False entries, all entries) of the query × key padding masks of the sorted batches."""
    hidden = total = 0
    for batch in lengths.sort(descending=True).values.split(batch_size):
        tokens = masks.padding_mask(batch)  # (B_b, L_b)
        pairs = masks.query_key_mask(tokens, tokens)  # (B_b, 1, L_b, L_b): a real query and a real key
        hidden, total = hidden + int((~pairs).sum()), total + pairs.numel()
    return hidden, total


def _waste_holds(case: Case, output: torch.Tensor) -> str | None:
    if output.ndim != 0 or not output.is_floating_point():
        return f"expected a 0-d float64 fraction, got shape {tuple(output.shape)} {output.dtype}"
    hidden, total = _counted_waste(*case.args)
    if abs(float(output) - hidden / total) > 1e-9:
        return (
            f"the padding masks of these batches hide {hidden:,} of {total:,} score entries "
            f"({hidden / total:.6f}), the answer says {float(output):.6f}"
        )
    return None


def _wrong_waste(
    lengths: torch.Tensor,
    batch_size: int,
    *,
    sort: bool = True,
    pad_to_all: bool = False,
    count: str = "pairs",
) -> torch.Tensor:
    """The known-wrong wastes: unsorted batches, every batch padded to the longest of all, or counting
    ``"keys"`` (padded keys only), ``"tokens"`` (padded tokens, not score entries) or ``"entries"`` (no fraction)."""
    batches = _sorted_batches(lengths, batch_size) if sort else lengths.split(batch_size)
    longest = [int(lengths.max()) if pad_to_all else int(b.max()) for b in batches]  # L_b
    total = sum(len(b) * L * L for b, L in zip(batches, longest))  # Σ B_b L_b²
    real = int((lengths**2).sum())  # Σ ℓ²: a real query and a real key
    if count == "keys":  # entries with a padded key: Σ L_b (L_b - ℓ) over Σ B_b L_b²
        waste = 1 - sum(int(b.sum()) * L for b, L in zip(batches, longest)) / total
    elif count == "tokens":  # 1 - Σ ℓ / Σ B_b L_b
        waste = 1 - int(lengths.sum()) / sum(len(b) * L for b, L in zip(batches, longest))
    elif count == "entries":
        waste = float(total - real)
    else:
        waste = 1 - real / total
    return torch.tensor(waste, dtype=torch.float64)  # 0-d


PADDING_WASTE = Exercise(
    exercise_id="04.5",
    kind="measure",
    title="the fraction of attention-score entries that involve padding, for length-sorted batches",
    function_name="padding_waste",
    arg_names=("lengths", "batch_size"),
    reference=_waste_reference,
    make_cases=_waste_cases,
    mistakes=(
        Mistake(
            lambda lengths, batch_size: _wrong_waste(lengths, batch_size, sort=False),
            "the batches are cut in the given order; sort the lengths first, longest first, so that each "
            "batch holds sequences of similar length.",
        ),
        Mistake(
            lambda lengths, batch_size: _wrong_waste(lengths, batch_size, count="keys"),
            "only the padded keys are counted; an entry also involves padding when its *query* is padded "
            "(a padded query's whole row): the real entries are the ℓ × ℓ block of each sequence.",
        ),
        Mistake(
            lambda lengths, batch_size: _wrong_waste(lengths, batch_size, pad_to_all=True),
            "every batch is padded to the longest sequence of all; each batch only needs its own longest, "
            "L_b = the batch's max.",
        ),
        Mistake(
            lambda lengths, batch_size: _wrong_waste(lengths, batch_size, count="entries"),
            "that is the number of padded entries; return the fraction: divide by all entries, Σ B_b L_b².",
        ),
        Mistake(
            lambda lengths, batch_size: _wrong_waste(lengths, batch_size, count="tokens"),
            "that is the fraction of padded *tokens*; the scores are query × key, so a sequence of length ℓ "
            "in a batch padded to L_b fills ℓ² of L_b² entries.",
        ),
    ),
    properties=(
        Property(
            "the masks' False entries",
            "count what the masks hide: for each batch, padding_mask to its own longest, the query × key mask "
            "(a real query and a real key), and the fraction of False entries over all batches together.",
            holds=_waste_holds,
        ),
    ),
    hints=(
        "sort the lengths (longest first), cut them into batches of batch_size, and for each batch count two "
        "numbers: all its score entries and the real ones. The answer is 1 - (real / all), summed over batches "
        "before dividing.",
        "a batch of B sequences padded to its longest L has B × L × L score entries; the real ones (a "
        "real query and a real key) are the ℓ × ℓ block of each sequence, so a batch holds Σ ℓ² real "
        "entries. Sum both counts over the batches and only then divide.",
        "a sketch: for batch in lengths.sort(descending=True).values.split(batch_size): add len(batch) · L² "
        "to the total and Σ ℓ² to the real count; at the end, a 0-d float64 tensor of 1 - real / total.",
    ),
    difficulty=3,
    minutes=20,
)


EXERCISES = (CAUSAL, PADDING, MASKED_SOFTMAX, DECODING_MASK, PADDING_WASTE)
