"""Checks for notebook 10's exercises on how 2026 inference engines decode: speculative decoding's acceptance rule
(10.8), a quantised KV block (10.9) and the block-table lookup of a paged cache (10.10).

10.8 is graded against :func:`attn_edu.generation.residual_distribution` and the ratio
:func:`attn_edu.generation.speculative_generate` keeps a token with; a property draws no sample but adds up, token by
token, the chance that the rule emits it, which must be the target's ``p`` exactly (Leviathan et al., 2023,
Theorem 1). Its slips: ``q / p`` for ``p / q``, no ``min(1, ·)``, ``p(x)`` alone, the residual not renormalised,
resampled from ``p`` (the bug that makes the output follow neither model) or from ``max(0, q - p)``.
10.9's codes come from :func:`attn_edu.kv_quant.quantize` (unpacked by :func:`attn_edu.kv_quant.dequantize`); its
dequantised values use the scale and minimum in float32, where the package stores them in float16 (test:
``tests/test_checks_decoding.py``). Each case's values sit at least 0.05 of a step away from a rounding tie, so that
any correct order of operations gives the same codes. Its slips: the minimum not subtracted (symmetric), or not
added back, ``2^bits`` levels, ``floor``, the slices taken along the last dim whatever ``dim`` says, ``0 / 0`` on
a constant slice, the input returned as the values.
10.10 is graded against :func:`attn_edu.paged_kv.gather_blocks`; its slips: ``//`` and ``%`` swapped, the blocks
read in physical order, the whole last block, every block of the (padded) table, the last partial block dropped,
one block off, and the ``(length, H_kv, D)`` that advanced indexing returns.
"""

from __future__ import annotations

import torch

from attn_edu.generation import generate, residual_distribution
from attn_edu.grading.exercise import Case, Exercise, Mistake, Property
from attn_edu.grading.given import TINY_LM_VOCAB, tiny_lm
from attn_edu.kv_quant import dequantize, quantize


def _randint(g: torch.Generator, low: int, high: int) -> int:
    return int(torch.randint(low, high + 1, (1,), generator=g))


# ---------------------------------------------------------------------------------------------------------
# 10.8 speculative decoding: keep the drafted token with min(1, p/q), else resample from max(0, p - q)


def _distributions(g: torch.Generator, *shape: int, sharpness: float = 1.5) -> torch.Tensor:
    return torch.softmax(sharpness * torch.randn(shape, generator=g), dim=-1)  # (..., V)


def _drafted(g: torch.Generator, q: torch.Tensor) -> torch.Tensor:
    """Token ids drawn from the draft's own distributions, as the draft model proposes them."""
    V = q.shape[-1]
    return torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(q.shape[:-1])  # (...)


def _speculative_cases(g: torch.Generator) -> list[Case]:
    def case(*shape: int) -> Case:
        p, q = _distributions(g, *shape), _distributions(g, *shape)
        return Case((p, q, _drafted(g, q)))

    V = _randint(g, 5, 13)
    # a greedy draft (one-hot q) beside a sampling target: the drafted token is kept with probability p(x)
    p, greedy = _distributions(g, 3, 7), torch.zeros(3, 7)
    greedy_ids = torch.randint(0, 7, (3,), generator=g)
    greedy[torch.arange(3), greedy_ids] = 1.0
    # a target truncated by top-k (zeros) and a draft nearly sure of the token the target rules out, and the
    # reverse: q(x) about 1e-30, so p(x) / q(x) is about 1e29 before min(1, ·)
    truncated = _distributions(g, 2, 6).index_fill(-1, torch.tensor([0, 1]), 0.0)
    truncated = truncated / truncated.sum(-1, keepdim=True)  # (2, 6): tokens 0 and 1 ruled out
    draft_sure = torch.tensor([[0.9, 0.02, 0.02, 0.02, 0.02, 0.02], [0.2, 0.2, 1e-30, 0.2, 0.2, 0.2]])
    draft_sure = draft_sure / draft_sure.sum(-1, keepdim=True)
    return [
        case(2, 3, V),  # leading dims
        case(4, 5),
        Case((p, greedy, greedy_ids)),
        # row 0: p(x) = 0, always rejected; row 1: q(x) tiny, always kept
        Case((truncated, draft_sure, torch.tensor([0, 2]))),
        case(2, 2, 3, 9),
        # p == q in some rows: nothing is ever rejected, and max(0, p - q) is all zeros
        Case(_equal_rows(g, 3, V), group="p == q"),
        Case(_equal_rows(g, 4, 5), group="p == q"),
        # the emitted token's distribution, summed over every token the draft may propose (V rows, one each)
        Case(_every_token(_distributions(g, V), _distributions(g, V)), group="exactly p"),
        Case(_every_token(truncated[0], _distributions(g, 6, sharpness=3.0)), group="exactly p"),
    ]


def _equal_rows(g: torch.Generator, rows: int, V: int) -> tuple[torch.Tensor, ...]:
    p, q = _distributions(g, rows, V), _distributions(g, rows, V)
    q[::2] = p[::2]  # every other row: the draft equals the target
    return p, q, _drafted(g, q)


def _every_token(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """One row per token of the vocabulary, all with the same p and q: row y asks about drafting token y."""
    V = p.shape[-1]
    return p.expand(V, V).clone(), q.expand(V, V).clone(), torch.arange(V)


def _emits_exactly_p(case: Case, output: torch.Tensor) -> str | None:
    """The chance that one round emits token y: drafted (q(y)) and kept (a(y)), or any rejection (1 - sum of
    q·a) followed by y from the residual r; it must be p(y) for every y."""
    p, q, _ = case.args
    accept, residual = output[:, 0], output[0, 1:]  # a(y) for each drafted y; r (every row holds the same)
    emitted = q[0] * accept + (1 - (q[0] * accept).sum()) * residual  # (V,)
    gap = float((emitted.double() - p[0].double()).abs().max())
    if gap > 1e-5:
        return f"the rule emits token y with probability q(y)·a(y) + P(reject)·r(y), which is off p by up to {gap:.3g}"
    return None


def _speculative_reference(p: torch.Tensor, q: torch.Tensor, draft: torch.Tensor) -> torch.Tensor:
    x = draft.unsqueeze(-1)  # (..., 1)
    accept = (p.gather(-1, x) / q.gather(-1, x)).clamp(max=1.0)  # (..., 1), as speculative_generate keeps it
    V = p.shape[-1]
    rows = [residual_distribution(p_i, q_i) for p_i, q_i in zip(p.reshape(-1, V), q.reshape(-1, V))]
    return torch.cat([accept, torch.stack(rows).reshape(p.shape)], dim=-1)  # (..., 1 + V)


def _speculative_variant(p, q, draft, *, ratio="p/q", clip=True, residual="normalised"):
    """The rule with one piece swapped for a wrong one (the known mistakes below)."""
    x = draft.unsqueeze(-1)  # (..., 1)
    p_x, q_x = p.gather(-1, x), q.gather(-1, x)  # (..., 1)
    accept = {"p/q": p_x / q_x, "q/p": q_x / p_x, "p": p_x}[ratio]
    accept = accept.clamp(max=1.0) if clip else accept
    if residual == "p":
        rest = p
    else:
        diff = (q - p if residual == "q - p" else p - q).clamp(min=0)  # (..., V)
        rest = diff if residual == "raw" else diff / diff.sum(-1, keepdim=True)
    return torch.cat([accept, rest], dim=-1)  # (..., 1 + V)


SPECULATIVE_ACCEPT = Exercise(
    exercise_id="10.8",
    title="speculative decoding: the chance to keep each drafted token, and where a rejection resamples from",
    function_name="speculative_accept",
    arg_names=("p", "q", "draft"),
    reference=_speculative_reference,
    make_cases=_speculative_cases,
    mistakes=(
        Mistake(
            lambda p, q, draft: _speculative_variant(p, q, draft, ratio="q/p"),
            "the ratio is upside down: a token the draft likes more than the target does (q(x) > p(x)) must be "
            "kept less often, not always. Keep it with the target's probability over the draft's.",
        ),
        Mistake(
            lambda p, q, draft: _speculative_variant(p, q, draft, clip=False),
            "some acceptance probabilities are above 1: where the target likes the token more than the draft "
            "(p(x) > q(x)) the ratio passes 1, and a probability stops at 1 (the token is always kept).",
        ),
        Mistake(
            lambda p, q, draft: _speculative_variant(p, q, draft, ratio="p"),
            "the acceptance is p(x) alone: the token was drafted with probability q(x) already, so the chance "
            "to keep it must divide that out, or a token both models like is thrown away too often.",
        ),
        Mistake(
            lambda p, q, draft: _speculative_variant(p, q, draft, residual="p"),
            "a rejection resamples from p: the emitted tokens then follow neither model. Tokens the draft "
            "proposes too rarely are owed the missing mass, and only they: the residual is where p exceeds q.",
        ),
        Mistake(
            lambda p, q, draft: _speculative_variant(p, q, draft, residual="raw"),
            "the residual's entries do not sum to 1: max(0, p - q) holds only the mass the rejections owe "
            "(the total variation between p and q); divide it by its sum to draw from it.",
        ),
        Mistake(
            lambda p, q, draft: _speculative_variant(p, q, draft, residual="q - p"),
            "the residual points at the tokens the draft over-proposes (q > p), the ones that were rejected; "
            "a rejection must move mass to the tokens the target likes more than the draft (p > q).",
        ),
    ),
    properties=(
        Property(
            "p == q",
            "where the draft equals the target, the positive part of p - q is all zeros and dividing by "
            "its sum gives 0/0 = NaN: nothing is rejected there, and the residual of those rows must be "
            "p itself (as the library's residual distribution returns).",
        ),
        Property(
            "exactly p",
            "summed over every token the draft may propose, draft-and-keep plus reject-and-resample must give "
            "the target's p: that is what makes speculative decoding lossless.",
            holds=_emits_exactly_p,
        ),
    ),
    hints=(
        "two pieces, per row of the leading dims: a number for the drafted token x (how likely the target "
        "lets it stand) and a distribution over all V tokens (what to draw instead after a rejection).",
        "read p(x) and q(x) at the drafted ids (gather along the last dim); the chance to keep x is their "
        "ratio, capped at 1. The residual is the positive part of p - q, divided by its own sum over V.",
        "a sketch: p.gather(-1, draft.unsqueeze(-1)) gives (..., 1); torch.where(total > 0, ..., p) "
        "keeps the rows where p equals q out of 0/0; torch.cat([acceptance (..., 1), residual (..., V)], "
        "dim=-1) is the (..., 1 + V) answer.",
    ),
    difficulty=3,
    minutes=20,
)


# ---------------------------------------------------------------------------------------------------------
# 10.9 a KV block quantised (asymmetric min-max, one scale and minimum per slice along dim) and dequantised


def _off_tie_block(
    g: torch.Generator, shape: tuple[int, ...], dim: int, bits: int, *, outlier: int | None = None
) -> torch.Tensor:
    """A random block whose every value lies 0.05 to 0.4 of a step from a code, never near a rounding tie:
    each slice along ``dim`` has its minimum at code 0 and its maximum at the top code."""
    levels = 2**bits - 1
    dim = dim % len(shape)
    moved = [n for i, n in enumerate(shape) if i != dim] + [shape[dim]]  # the slice along the last dim
    codes = torch.randint(0, levels + 1, moved, generator=g).float()
    sign = torch.randint(0, 2, moved, generator=g).float() * 2 - 1
    steps = (codes + sign * (0.05 + 0.35 * torch.rand(moved, generator=g))).clamp(0, levels)
    steps[..., 0], steps[..., -1] = 0.0, float(levels)  # the slice's minimum and maximum
    steps = steps.gather(-1, torch.rand(moved, generator=g).argsort(dim=-1))  # at random places
    low = torch.randn(*moved[:-1], 1, generator=g)  # (..., 1)
    spread = 0.5 + 2.0 * torch.rand(*moved[:-1], 1, generator=g)  # (..., 1): max - min
    if outlier is not None:  # one channel of the keys with values 20 times larger, as KIVI finds in real keys
        low[..., outlier, :] *= 20
        spread[..., outlier, :] *= 20
    return (low + steps * (spread / levels)).movedim(-1, dim).contiguous()


def _quant_cases(g: torch.Generator) -> list[Case]:
    S, D = _randint(g, 5, 12), 2 * _randint(g, 2, 4)  # 4-bit codes pack two to a byte: D even
    padding = _off_tie_block(g, (3, 5, 10), -1, 8)
    padding[1, 2] = 0.0  # a padding token: all its values equal, max == min
    constant = _off_tie_block(g, (6, 5), 0, 8)
    constant[:, 3] = 0.75  # a channel that holds the same value for every token
    return [
        Case((_off_tie_block(g, (1, 2, 9, 6), -2, 8, outlier=2), 8, -2)),  # keys: per channel, over tokens
        Case((_off_tie_block(g, (2, 3, 7, 8), -1, 4), 4, -1)),  # values: per token, over channels
        Case((_off_tie_block(g, (2, 1, S, D), 2, 4), 4, 2)),  # keys, dim counted from the front
        Case((padding, 8, -1)),
        Case((constant, 8, 0)),
        # values cached in bfloat16: read in float32
        Case((_bf16_off_tie_block(g, (2, 2, 4, 6), -1, 8), 8, -1)),
    ]


def _bf16_off_tie_block(g: torch.Generator, shape: tuple[int, ...], dim: int, bits: int) -> torch.Tensor:
    """A bfloat16 block (a cache stored in bf16) whose values, read in float32, still lie 0.05 of a step or more
    from a rounding tie: redrawn until they do (rounding to bf16 moves them by up to 2^-9 of their size)."""
    while True:
        x = _off_tie_block(g, shape, dim, bits).bfloat16()
        wide = x.double()
        low = wide.amin(dim, keepdim=True)
        steps = (wide - low) / ((wide.amax(dim, keepdim=True) - low) / (2**bits - 1))
        if float(((steps - steps.floor()) - 0.5).abs().min()) >= 0.05:
            return x


def _quant_reference(x: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    x = x.float()  # a bfloat16 block is read in float32: its scale and codes need more than bf16's 8 bits
    packed, _, _ = quantize(x, bits, dim)  # its scale and minimum are float16, as the cache stores them
    codes = dequantize(packed, torch.ones(()), torch.zeros(()), bits, x.shape[-1])  # unpacked, as floats
    low = x.amin(dim, keepdim=True)  # the same scale and minimum in float32
    scale = ((x.amax(dim, keepdim=True) - low) / (2**bits - 1)).clamp_min(1e-8)
    return torch.stack([codes, codes * scale + low])  # (2, *x.shape)


def _quant_variant(x, bits, dim, *, levels=None, top=None, subtract=True, add_back=True, rounding=torch.round,
                   clamp=True, guard=True, cast=True, axis=None, values=None, upcast=True):  # fmt: skip
    """The round trip with one piece swapped for a wrong one (the known mistakes below); ``upcast=False`` keeps
    a bfloat16 block in bfloat16 throughout."""
    x = x.float() if upcast else x
    dim = dim if axis is None else axis
    levels = 2**bits - 1 if levels is None else levels
    low = x.amin(dim, keepdim=True)
    scale = (x.amax(dim, keepdim=True) - low) / levels
    scale = scale.clamp_min(1e-8) if guard else scale
    shift = low if subtract else torch.zeros_like(low)
    codes = rounding((x - shift) / scale)
    codes = codes.clamp(0, levels if top is None else top) if clamp else codes
    codes = codes.to(torch.uint8).to(x.dtype) if cast else codes  # float32, or bf16 without the upcast
    dequantised = codes * scale + (shift if add_back else 0)
    return torch.stack([codes, dequantised if values is None else values])  # (2, *x.shape)


SYMMETRIC = (
    "the minimum is not subtracted before dividing by the scale: codes count steps up from 0, not up from each "
    "slice's own minimum, so negative values have no code (that is symmetric quantisation, around 0). Shift by "
    "the slice's minimum first."
)
LEVELS = (
    "the step divides the range into 2^bits parts: bits bits hold the codes 0 .. 2^bits - 1, so from the "
    "minimum to the maximum there are 2^bits - 1 steps (and the top code must still fit in bits bits)."
)


BF16_ARITHMETIC = (
    "the bfloat16 block was quantised in bfloat16: its 8 significant bits cannot hold (x - min) / scale to a "
    "fraction of a code, so codes come out one or more steps off (at 8 bits, 255 steps span the range). Read "
    "the block in float32 first, then take the minimum, the scale and the codes."
)


def _negatives_at_zero(case: Case, got: torch.Tensor) -> str | None:
    """Any scheme around 0 (an absolute maximum for the scale, no minimum) leaves every negative value code 0."""
    x = case.args[0]
    negative = x < 0
    if got.shape[1:] == x.shape and negative.any() and float((got[0][negative] == 0).float().mean()) > 0.5:
        return SYMMETRIC
    return None


QUANTIZE_KV = Exercise(
    exercise_id="10.9",
    title="quantise a KV block, one (scale, minimum) per slice along dim, and dequantise it: codes and values",
    function_name="quantize_kv",
    arg_names=("x", "bits", "dim"),
    reference=_quant_reference,
    make_cases=_quant_cases,
    mistakes=(
        Mistake(lambda x, bits, dim: _quant_variant(x, bits, dim, subtract=False), SYMMETRIC),
        Mistake(lambda x, bits, dim: _quant_variant(x, bits, dim, subtract=False, clamp=False), SYMMETRIC),
        Mistake(
            lambda x, bits, dim: _quant_variant(x, bits, dim, add_back=False),
            "the codes are right, the values are not: dequantising must undo both steps, the scale and the "
            "shift by the slice's minimum.",
        ),
        Mistake(lambda x, bits, dim: _quant_variant(x, bits, dim, levels=2**bits), LEVELS),
        Mistake(lambda x, bits, dim: _quant_variant(x, bits, dim, levels=2**bits, top=2**bits - 1), LEVELS),
        Mistake(
            lambda x, bits, dim: _quant_variant(x, bits, dim, rounding=torch.floor),
            "the codes are rounded down: a value just below the next code gets the lower one, up to a whole "
            "step away, and every value comes back too small on average. Take the nearest code.",
        ),
        Mistake(
            lambda x, bits, dim: _quant_variant(x, bits, dim, axis=-1),
            "each slice is taken along the last dim whatever dim says: for keys (dim = -2) that is one scale per "
            "token, and one outlier channel then sets a coarse step for every other channel of that token. "
            "Take the minimum and maximum along dim.",
        ),
        Mistake(
            lambda x, bits, dim: _quant_variant(x, bits, dim, guard=False, cast=False),
            "a slice whose values are all equal (a constant channel, a padding token of zeros) has its "
            "maximum equal to its minimum, so its scale is 0 and dividing by it gives 0 / 0 = NaN. Such "
            "a slice needs a scale that cannot be 0; its codes are then all 0 and its values come back "
            "exactly.",
        ),
        Mistake(lambda x, bits, dim: _quant_variant(x, bits, dim, upcast=False), BF16_ARITHMETIC),
        Mistake(lambda x, bits, dim: _quant_variant(x, bits, dim, upcast=False).float(), BF16_ARITHMETIC),
        Mistake(
            lambda x, bits, dim: _quant_reference(x, bits, dim).to(x.dtype),
            "the right codes and values, returned in the block's bfloat16: the values are a float32 result (a "
            "bfloat16 holds only about 3 significant digits, and rounds them off again). Return float32.",
        ),
        Mistake(
            lambda x, bits, dim: _quant_variant(x, bits, dim, values=x),
            "the values are the input itself: dequantised values are what the codes give back, code · scale + "
            "minimum, each up to half a step from the input (that error is the price of the smaller cache).",
        ),
    ),
    diagnoses=(_negatives_at_zero,),
    hints=(
        "one slice is everything along dim for a fixed index of the other dims: its minimum and maximum set a "
        "grid of 2^bits equally spaced values from the minimum to the maximum, and each value takes the nearest.",
        "per slice, the minimum and the maximum along dim (kept as dims of size 1, so that they "
        "broadcast): the scale is (max - min) / (2^bits - 1); the code is the number of steps from the "
        "minimum, rounded to the nearest integer and kept in 0 .. 2^bits - 1.",
        "x = x.float() first (a bfloat16 block too); codes = round((x - low) / scale), clamped and stored as "
        "uint8; values = codes · scale + low. Clamp "
        "scale below at a tiny positive number (1e-8) for constant slices; return torch.stack of the codes "
        "(as float) and the values.",
    ),
    difficulty=3,
    minutes=25,
)


# ---------------------------------------------------------------------------------------------------------
# 10.10 the block-table lookup of a paged KV cache


def _paged_case(g: torch.Generator, H_kv: int, D: int, block_size: int, length: int, padding: int) -> Case:
    """A pool with spare blocks, and a table of distinct random blocks: the sequence's, then ``padding``
    entries (a batch's tables are padded to its longest sequence's)."""
    table_len = max(-(-length // block_size) + padding, 1)
    num_blocks = table_len + _randint(g, 2, 5)
    blocks = torch.randn(num_blocks, H_kv, block_size, D, generator=g)  # every slot holds something
    table = torch.randperm(num_blocks, generator=g)[:table_len]  # (n,) int64, in no particular order
    return Case((blocks, table, length))


def _paged_cases(g: torch.Generator) -> list[Case]:
    block_size = _randint(g, 3, 5)
    length = _randint(g, block_size + 1, block_size * block_size - 1)
    # Every table has a padding entry and at least block_size entries, and length <= block_size²: so that a lookup
    # one block off, or with // and % swapped, still runs and the check can name it (an IndexError names nothing).
    padding = max(block_size - -(-length // block_size), 1)
    cases = [
        _paged_case(g, 2, 3, 4, 14, 2),  # the last block holds 2 of its 4 slots
        _paged_case(g, _randint(g, 1, 3), _randint(g, 2, 6), block_size, length, padding),
        _paged_case(g, 1, 4, 2, 3, 1),  # one kv head (MQA)
        _paged_case(g, 3, 5, 3, 5, 1),  # odd head count and head dim
        _paged_case(g, 2, 2, 4, 1, 3),  # one token: only slot 0 of the first block
    ]
    edges = [
        _paged_case(g, 2, 3, 4, 0, 1),  # an empty sequence: (H_kv, 0, D)
        _paged_case(g, 2, 3, 3, 9, 1),  # three full blocks: the last block ends exactly at length
        _paged_case(g, 1, 2, 1, 1, 1),  # block_size 1: one token a block
    ]
    return cases + [Case(c.args, group="edge cases") for c in edges]


def _paged_reference(blocks: torch.Tensor, block_table: torch.Tensor, length: int) -> torch.Tensor:
    from attn_edu.paged_kv import gather_blocks  # imported here: the paged cache is the newest module

    return gather_blocks(blocks, block_table, length)  # (H_kv, length, D)


def _paged_variant(blocks, block_table, length, *, block=None, slot=None, tokens=None, order="HTD"):
    """The lookup with one piece swapped for a wrong one (the known mistakes below)."""
    block_size = blocks.shape[2]
    t = torch.arange(length if tokens is None else tokens)  # (T,) logical token positions
    logical, within = (t // block_size, t % block_size) if block is None else (block(t), slot(t))
    gathered = blocks[block_table[logical], :, within]  # (T, H_kv, D): advanced indices go first
    return gathered if order == "THD" else gathered.transpose(0, 1)  # (H_kv, T, D)


def _whole_blocks(blocks, block_table, length):  # every slot of the blocks the sequence touches
    return _paged_variant(blocks, block_table, length, tokens=-(-length // blocks.shape[2]) * blocks.shape[2])


PAGED_GATHER = Exercise(
    exercise_id="10.10",
    title="a paged KV cache: gather a sequence's first length tokens (H_kv, length, D) through its block table",
    function_name="gather_paged",
    arg_names=("blocks", "block_table", "length"),
    reference=_paged_reference,
    make_cases=_paged_cases,
    mistakes=(
        Mistake(
            lambda b, table, n: _paged_variant(
                b, table, n, block=lambda t: t % b.shape[2], slot=lambda t: t // b.shape[2]
            ),
            "the block and the slot are swapped: consecutive tokens fill one block before the next, so the "
            "logical block of token t counts how many whole blocks come before it, and the slot is what is left.",
        ),
        Mistake(
            lambda b, table, n: _paged_variant(b, torch.arange(b.shape[0]), n),
            "the blocks are read in the order they sit in the pool: a paged cache places a sequence's blocks "
            "wherever memory was free, and only its block table says which physical block holds its k-th block.",
        ),
        Mistake(
            _whole_blocks,
            "every slot of the last block is returned: a block is allocated whole, but its slots past the "
            "sequence's end are empty (or hold stale tokens). Stop at length.",
        ),
        Mistake(
            lambda b, table, n: _paged_variant(b, table, n, tokens=table.numel() * b.shape[2]),
            "every block of the table is read: a batch pads its tables to the longest sequence, and the "
            "entries past this sequence's last block are not its tokens. Stop at length.",
        ),
        Mistake(
            lambda b, table, n: _paged_variant(b, table, n, tokens=n // b.shape[2] * b.shape[2]),
            "the last block is missing when it is not full: the sequence's newest tokens sit in a partly filled "
            "block, so it spans length / block_size blocks rounded up, not down.",
        ),
        Mistake(
            lambda b, table, n: _paged_variant(
                b, table, n, block=lambda t: t // b.shape[2] + 1, slot=lambda t: t % b.shape[2]
            ),
            "every token is read from the block after its own: the table's entries are numbered from 0, and "
            "token 0 lives in the block of entry 0.",
        ),
        Mistake(
            lambda b, table, n: _paged_variant(b, table, n, order="THD"),
            "the result is (length, H_kv, D): indexing dims 0 and 2 with two tensors puts their dim first, in "
            "front of the heads. Move the token dim behind the heads.",
        ),
    ),
    properties=(
        Property(
            "edge cases",
            "an empty sequence gives (H_kv, 0, D); a sequence that fills its last block exactly gives all of "
            "it and nothing of the padding after it; with block_size 1 every table entry is one token.",
        ),
    ),
    hints=(
        "a token's place is two numbers: which of the sequence's blocks it falls in (its logical block), and "
        "which slot of that block; the table turns the logical block into a row of blocks.",
        "token t sits in logical block ⌊t / block_size⌋, at slot t mod block_size; the block table maps "
        "the logical block to a physical one. Compute both numbers for all positions 0 .. length - 1 at "
        "once and index the pool with them.",
        "a sketch: t = torch.arange(length); the physical block of token t is block_table at t // "
        "block_size and its slot t % block_size; indexing blocks with two index tensors, one for dim 0 "
        "and one for dim 2, gives (length, H_kv, D); transpose to (H_kv, length, D). (Or: select the "
        "blocks, lay their slots end to end, and cut at length.)",
    ),
    difficulty=2,
    minutes=15,
)


# ---------------------------------------------------------------------------------------------------------
# 10.11 greedy decoding with a KV cache on a given tiny model


def _greedy(
    seed: int, prompt: torch.Tensor, max_new_tokens: int, *, fed: str = "new", shift: int = 0,
    read: int = -1, cache: bool = True, keep: str = "all",
) -> torch.Tensor:  # fmt: skip
    """Greedy decoding through the given model's cache, with one known slip where the arguments say so: ``fed``
    what each step feeds ("new" token, the prompt's "last" token, the "whole" sequence again), ``shift`` added to
    each new token's position, ``read`` the prefill's position whose logits pick the first token, ``cache``
    whether the calls share one, ``keep`` what comes back ("all", the "new" tokens)."""
    model = tiny_lm(seed)
    store = model.new_cache() if cache else None
    P, ids = prompt.shape[1], prompt
    logits = model(prompt, store, 0)  # (B, P, V): the prefill
    for step in range(max_new_tokens):
        next_id = logits[:, read if step == 0 else -1].argmax(dim=-1, keepdim=True)  # (B, 1)
        ids = torch.cat([ids, next_id], dim=1)  # (B, P + step + 1)
        if step == max_new_tokens - 1:
            break
        if fed == "whole":
            logits = model(ids, store, 0)  # (B, P + step + 1, V)
        else:
            token = next_id if fed == "new" else prompt[:, -1:]  # (B, 1)
            logits = model(token, store, P + step + shift)  # (B, 1, V)
    return ids if keep == "all" else ids[:, P:]


def _generate_reference(seed: int, prompt: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """The library's generation without a cache: every step re-runs the model on the whole sequence."""
    return generate(tiny_lm(seed).model, prompt, max_new_tokens, use_cache=False)  # (B, P + N)


def _clear_cut(seed: int, prompt: torch.Tensor, max_new_tokens: int, margin: float = 1e-3) -> bool:
    """Whether every greedy choice wins by ``margin`` or more, so that rounding (a cached step sums in another
    order than a full forward) cannot flip a choice."""
    model = tiny_lm(seed)
    cache = model.new_cache()
    logits = model(prompt, cache, 0)  # (B, P, V)
    for step in range(max_new_tokens):
        top2 = logits[:, -1].topk(2, dim=-1)  # values and indices (B, 2)
        if float((top2.values[:, 0] - top2.values[:, 1]).min()) < margin:
            return False
        start = prompt.shape[1] + step
        logits = model(top2.indices[:, :1], cache, start)  # (B, 1, V)
    return True


def _generation_cases(g: torch.Generator) -> list[Case]:
    def case(B: int, P: int, N: int) -> Case:
        while True:  # redrawn until every greedy choice is clear-cut (a few draws at most)
            seed = _randint(g, 0, 10**6)
            prompt = torch.randint(0, TINY_LM_VOCAB, (B, P), generator=g)
            if _clear_cut(seed, prompt, N):
                return Case((seed, prompt, N))

    return [
        case(1, 1, 6),  # a prompt of one token
        case(2, 5, 8),
        case(3, 3, 12),
        case(1, 7, 1),  # one new token: the prefill alone
        case(2, 4, 20),
    ]


POSITIONS = (
    "the new tokens sit at the wrong positions: the token fed after the prefill of P prompt tokens is at "
    "position P, the next at P + 1, and so on; start_pos is the number of tokens before it in the sequence."
)

GENERATE_CACHED = Exercise(
    exercise_id="10.11",
    title="greedy decoding with a KV cache: prefill the prompt once, then feed one new token per step",
    function_name="generate_cached",
    arg_names=("seed", "prompt", "max_new_tokens"),
    reference=_generate_reference,
    make_cases=_generation_cases,
    mistakes=(
        Mistake(lambda *a: _greedy(*a, shift=1), POSITIONS),
        Mistake(lambda *a: _greedy(*a, shift=-1), POSITIONS),
        Mistake(lambda s, p, n: _greedy(s, p, n, shift=-p.shape[1]), POSITIONS),
        Mistake(
            lambda *a: _greedy(*a, fed="last"),
            "the token just chosen is never fed back: every step reads the prompt's last token again, so the "
            "model never sees what it wrote. Append each new token and feed that one next.",
        ),
        Mistake(
            lambda *a: _greedy(*a, fed="whole"),
            "the whole sequence goes into the cache at every step, so the cache holds the earlier tokens twice "
            "and more. With a cache only the tokens it has not stored yet are fed: after the prefill, the newest.",
        ),
        Mistake(
            lambda *a: _greedy(*a, cache=False),
            "each step's model call starts from nothing: the newest token is fed alone, but without the cache "
            "that holds the earlier tokens, so it attends to itself only. Pass the same cache to every call.",
        ),
        Mistake(
            lambda *a: _greedy(*a, read=0),
            "the first new token is chosen from the prefill's first position, which predicts the prompt's second "
            "token. The prediction for the token after the prompt sits at the prompt's last position.",
        ),
        Mistake(
            lambda *a: _greedy(*a, keep="new"),
            "only the new tokens come back: return the prompt followed by them, (B, P + max_new_tokens).",
        ),
        Mistake(
            lambda s, p, n: p,
            "the prompt comes back unchanged: append each chosen token to the sequence you return.",
        ),
    ),
    hints=(
        "the prompt goes through the model once, filling the cache; after that, each step the model only needs "
        "to read the token it has just chosen, at that token's own position in the sequence.",
        "greedy picks the largest logit at the last position. Every call passes the same cache; start_pos is "
        "the position of the first token fed, the number of tokens before it (the prompt's length plus the new "
        "tokens already fed). Append each choice to the ids you return.",
        "a sketch: an empty cache from model.new_cache() and one call on the whole prompt at start_pos 0; "
        "then, max_new_tokens times: the argmax over the vocabulary of logits[:, -1], kept as a (B, 1) column "
        "(keepdim=True); torch.cat it onto the ids along dim 1; call the model on that column alone, with the "
        "same cache and start_pos ids.shape[1] - 1 (the length before it was appended).",
    ),
    difficulty=3,
    minutes=25,
)


EXERCISES = (SPECULATIVE_ACCEPT, QUANTIZE_KV, PAGED_GATHER, GENERATE_CACHED)
