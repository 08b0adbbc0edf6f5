"""Checks for notebook 07's exercises: half-split RoPE, the score from the offset alone, NTK-aware and YaRN
frequencies, and the score as a function of distance (measured again at random absolute positions).

Each exercise is compared with :mod:`attn_edu.rope` on random cases (``T`` and ``D`` that are not powers
of two, odd head counts, offsets as with a KV cache); the known-wrong versions below are the slips
learners make most often (the interleaved pairing, a rotation the wrong way, positions off by one, the
plain base times the factor), written out as functions so a check can name the one it sees.

The YaRN table (07.4) is graded against :func:`attn_edu.rope_scaling.yarn_frequencies`, which follows the reference code
and Hugging Face's ``"yarn"`` rope init (a ramp linear in the pair index between ``floor(d(beta_fast))`` and
``ceil(d(beta_slow))``), not the paper's ramp in the number of turns; its known-wrong versions are the ramp run
backwards, its ends left unrounded, the paper's ramp, and every pair interpolated.
"""

from __future__ import annotations

import math

import torch

from attn_edu import rope, rope_scaling
from attn_edu.grading.exercise import Case, Exercise, Mistake, Property


def _randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=g)


def _draw(g: torch.Generator, low: int, high: int) -> int:
    """A random int in ``low .. high`` (both included): sizes and bases differ from seed to seed."""
    return int(torch.randint(low, high + 1, (1,), generator=g))


def _factor(g: torch.Generator) -> float:
    """A context-extension factor ``s`` in 1.5 .. 16, in steps of 0.5."""
    return _draw(g, 3, 32) / 2


# ---------------------------------------------------------------------------------------------------------
# 07.1 RoPE in the half-split layout


def _rope_cases(g: torch.Generator) -> list[Case]:
    return [
        Case((_randn(g, 2, 3, 5, 8),)),  # (B, H, T, D)
        Case((_randn(g, 1, 5, 7, 6),), {"offset": 3}),  # odd head count, D = 6
        Case((_randn(g, 4, 10),), {"offset": 100}),  # (T, D), far into a cache
        Case((_randn(g, 3, 1, 12),), {"offset": 41}),  # one decoding step
        Case((_randn(g, 2, 9, 34),), {"offset": 1}),
    ]


def _rope_reference(x: torch.Tensor, offset: int = 0) -> torch.Tensor:
    return rope.apply_rope(x, offset=offset, layout="half")


ROPE_HALF = Exercise(
    exercise_id="07.1",
    title="rotate every pair (x_i, x_(i+D/2)) of x by (offset + t) · θ_i, θ_i = 10000^(-2i/D)",
    function_name="apply_rope_half",
    arg_names=("x",),
    reference=_rope_reference,
    make_cases=_rope_cases,
    mistakes=(
        Mistake(
            lambda x, offset=0: rope.apply_rope(x, offset=offset, layout="interleaved"),
            "the pairs are neighbours (x_2i, x_2i+1): that is the interleaved layout. In the half-split "
            "layout coordinate i pairs with coordinate i + D/2, the same place in the second half.",
        ),
        Mistake(
            lambda x, offset=0: rope.apply_rope(x, -torch.arange(offset, offset + x.shape[-2])),
            "the rotation goes the wrong way: x'_1 = x_1 cos - x_2 sin and x'_2 = x_1 sin + x_2 cos; "
            "look at the sign in front of each sine.",
        ),
        Mistake(
            lambda x, offset=0: rope.apply_rope(x, offset=offset + 1),
            "positions are off by one: token t of x sits at position offset + t, starting at offset "
            "(the first token of a fresh sequence is at position 0, angle 0).",
        ),
        Mistake(
            lambda x, offset=0: rope.apply_rope(x, layout="half"),
            "the offset is ignored: with a KV cache the new tokens sit at positions offset .. "
            "offset + T - 1, not 0 .. T - 1.",
        ),
        Mistake(
            lambda x, offset=0: rope.apply_rope(
                x, offset=offset, inv_freq=(10000.0 ** (-torch.arange(x.shape[-1] // 2) / x.shape[-1]))
            ),
            "the frequencies miss the factor 2: θ_i = 10000^(-2i/D) for i = 0 .. D/2 - 1.",
        ),
    ),
    hints=(
        "cut x into its first and second halves: pair i is coordinate i of the first half with "
        "coordinate i of the second. The angle of pair i for token t is (offset + t) · θ_i, and each "
        "pair is turned by its angle.",
        "θ has D/2 entries, θ_i = 10000^(-2i/D) for i = 0 .. D/2 - 1; the angles form a (T, D/2) table, "
        "a column of positions offset .. offset + T - 1 times a row of θ; their cosine and sine "
        "broadcast over (..., T, D/2), one per pair.",
        "a sketch: x1, x2 = x.chunk(2, dim=-1); theta = 10000.0 ** (-torch.arange(0, D, 2) / D); the "
        "angles are a column of positions times a row of theta, (T, D/2); build each rotated half from "
        "the formula in the exercise text (both halves mix x1 and x2 with cos and sin), then join them "
        "along the last dim with torch.cat.",
    ),
    difficulty=2,
    minutes=15,
    atol=1e-4,  # float32 angles at positions ~100 may differ by ~1e-5 between correct versions
)


# ---------------------------------------------------------------------------------------------------------
# 07.2 the score from the offset alone


def _offset_cases(g: torch.Generator) -> list[Case]:
    def case(N: int, D: int, span: int) -> Case:
        return Case((_randn(g, N, D), _randn(g, N, D), torch.randint(-span, span + 1, (N,), generator=g)))

    return [case(7, 8, 20), case(11, 6, 200), case(5, 34, 60), case(9, 64, 1000), case(3, 2, 5)]


def _at(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotate each row of ``x (N, D)`` by its own position ``(N,)`` in the half layout."""
    return rope.apply_rope(x[:, None, :], positions[:, None])[:, 0]  # (N, D)


def _offset_reference(q: torch.Tensor, k: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    # The definition: q at position delta, k at position 0.
    return (_at(q, delta) * _at(k, torch.zeros_like(delta))).sum(-1)  # (N,)


OFFSET_SCORE = Exercise(
    exercise_id="07.2",
    title="the RoPE score of q at position m and k at position n, from delta = m - n alone",
    function_name="score_from_offset",
    arg_names=("q", "k", "delta"),
    reference=_offset_reference,
    make_cases=_offset_cases,
    mistakes=(
        Mistake(
            lambda q, k, delta: (q * _at(k, delta)).sum(-1),
            "the key is turned the wrong way: R(mθ)q · R(nθ)k = q · R((n - m)θ)k, so rotate k by "
            "-delta (or rotate q by +delta and leave k alone).",
        ),
        Mistake(
            lambda q, k, delta: (_at(q, delta) * _at(k, delta)).sum(-1),
            "this is plain q · k, as if nothing turned (rotating both vectors by delta cancels out): "
            "put q at position delta and k at position 0.",
        ),
        Mistake(
            lambda q, k, delta: (
                rope.apply_rope(q[:, None, :], delta[:, None], layout="interleaved")[:, 0] * k
            ).sum(-1),
            "the pairs are neighbours (the interleaved layout); this course's RoPE is half-split: "
            "coordinate i pairs with i + D/2.",
        ),
    ),
    hints=(
        "rotations compose: R(mθ)q · R(nθ)k = q · R((n - m)θ)k. Only delta = m - n matters.",
        "turn q by delta (one angle delta · θ_i per pair, half-split layout) and take the dot product "
        "with the unrotated k, one score per row.",
        "as in 07.1, but with one position per row: the angles are delta as a float column (N, 1) "
        "times theta (D/2,); rotate q in the half-split layout, leave k alone, and sum the "
        "elementwise product over the last dim.",
    ),
    difficulty=2,
    minutes=15,
    atol=1e-4,
)


# ---------------------------------------------------------------------------------------------------------
# 07.3 NTK-aware frequencies


def _ntk_cases(g: torch.Generator) -> list[Case]:
    return [
        Case((2 ** _draw(g, 5, 7), _factor(g))),  # D = 32, 64 or 128, as in real models
        Case((2 * _draw(g, 20, 60), _factor(g))),  # D = 40 .. 120
        Case((2 * _draw(g, 2, 3), _factor(g))),  # D = 4 or 6: D / (D - 2) is far from 1
        Case((2 * (2 * _draw(g, 2, 7) + 1), _factor(g)), {"base": 100.0 * _draw(g, 2, 20)}),  # D = 2 · odd
        Case((2 * _draw(g, 32, 64), _factor(g)), {"base": 100000.0 * _draw(g, 2, 10)}),  # a Llama-3-like base
    ]


def _ntk_reference(head_dim: int, factor: float, base: float = 10000.0) -> torch.Tensor:
    return rope_scaling.ntk_scaled_frequencies(head_dim, factor, base=base)


def _freqs(head_dim: int, base: float) -> torch.Tensor:
    return rope.rope_frequencies(head_dim, base=base)


NTK = Exercise(
    exercise_id="07.3",
    title="NTK-aware RoPE frequencies: raise the base to base · s^(D/(D-2))",
    function_name="ntk_frequencies",
    arg_names=("head_dim", "factor"),
    reference=_ntk_reference,
    make_cases=_ntk_cases,
    mistakes=(
        Mistake(
            lambda D, s, base=10000.0: _freqs(D, base) / s,
            "every frequency is divided by s: that is position interpolation. NTK-aware scaling "
            "changes the base instead, so the fastest pair (θ_0 = 1) keeps its speed.",
        ),
        Mistake(
            lambda D, s, base=10000.0: _freqs(D, base * s),
            "the base is multiplied by s alone: then the slowest pair is slowed by s^((D-2)/D), not "
            "by s. Use base · s^(D / (D - 2)).",
        ),
        Mistake(
            lambda D, s, base=10000.0: _freqs(D, base * s ** ((D - 2) / D)),
            "the exponent is upside down: base' = base · s^(D / (D - 2)).",
        ),
        Mistake(
            lambda D, s, base=10000.0: _freqs(D, base / s ** (D / (D - 2))),
            "the base is divided by the factor: a larger base turns slower, which is what a longer "
            "context needs, so multiply: base · s^(D / (D - 2)).",
        ),
    ),
    hints=(
        "keep θ_i = base'^(-2i/D) for i = 0 .. D/2 - 1, but with a new base' chosen so that the last "
        "pair turns exactly s times slower than before.",
        "the last pair has i = D/2 - 1, so θ_last = base'^(-(D-2)/D); solving base'^(-(D-2)/D) = "
        "base^(-(D-2)/D) / s for the new base gives base' = base · s^(D/(D-2)); every other frequency "
        "follows from base' by the usual formula.",
        "compute the new base once from base and factor, then the frequencies exactly as "
        "rope_frequencies does (exponents -2i/D for the even numbers 2i = 0, 2, ..., D - 2), in "
        "float64, cast to float32.",
    ),
    difficulty=1,
    minutes=5,
)


# ---------------------------------------------------------------------------------------------------------
# 07.4 YaRN frequencies


def _yarn_cases(g: torch.Generator) -> list[Case]:
    # The ranges keep both ends of the ramp inside the table and apart (0 <= floor(d(beta_fast)) <
    # ceil(d(beta_slow)) <= D/2 - 1, so never the low == high corner): pair 0 keeps θ_0, the last pair is
    # interpolated, and the pairs in between are on the ramp, where the known mistakes differ.
    return [
        Case((2 ** _draw(g, 5, 7), _factor(g), 2 ** _draw(g, 9, 13))),  # D and L powers of two
        Case(
            (2 * _draw(g, 32, 64), _factor(g), 2 ** _draw(g, 11, 13)),
            {"base": 100000.0 * _draw(g, 2, 10)},  # a Llama-3-like base
        ),
        Case((2 * (2 * _draw(g, 8, 15) + 1), _factor(g), 100 * _draw(g, 5, 30))),  # D and L not powers of two
        Case(
            (2 * _draw(g, 40, 64), _factor(g), 2 ** _draw(g, 12, 14)),
            {"base": 1000000.0, "beta_fast": float(_draw(g, 12, 24)), "beta_slow": _draw(g, 1, 4) / 2},
        ),
        Case(
            (2 * _draw(g, 16, 32), _factor(g), 100 * _draw(g, 5, 20)),
            {"beta_fast": float(_draw(g, 16, 48))},  # beta_fast alone moves the ramp's lower end
        ),
    ]


def _yarn_reference(head_dim, factor, original_max_positions, base=10000.0, beta_fast=32.0, beta_slow=1.0):  # noqa: ANN001, ANN202
    inv_freq, _ = rope_scaling.yarn_frequencies(
        head_dim,
        factor,
        original_max_positions=original_max_positions,
        base=base,
        beta_fast=beta_fast,
        beta_slow=beta_slow,
    )
    return inv_freq  # (D/2,)


def _yarn_variant(
    head_dim, factor, original_max_positions, base=10000.0, beta_fast=32.0, beta_slow=1.0, *, how: str
):  # fmt: skip
    """The YaRN table with one known slip (``how``), in float64."""
    D, L = head_dim, original_max_positions
    theta = _freqs(D, base).double()  # (D/2,)
    i = torch.arange(D // 2, dtype=torch.float64)  # (D/2,)

    def index(turns: float) -> float:  # the pair index that makes `turns` turns over L
        return D * math.log(L / (2 * math.pi * turns)) / (2 * math.log(base))

    if how == "turns":  # the paper's ramp, linear in the number of turns r_i
        turns = L * theta / (2 * math.pi)  # (D/2,)
        interpolate = ((beta_fast - turns) / (beta_fast - beta_slow)).clamp(0.0, 1.0)
    else:
        low, high = index(beta_fast), index(beta_slow)
        if how != "unrounded":
            low, high = max(math.floor(low), 0), min(math.ceil(high), D - 1)
        interpolate = ((i - low) / (high - low)).clamp(0.0, 1.0)  # (D/2,)
        if how == "reversed":
            interpolate = 1 - interpolate
    return (theta * (1 - interpolate) + theta / factor * interpolate).float()  # (D/2,)


def _yarn_mistake(how: str):  # noqa: ANN202
    def wrong(head_dim, factor, original_max_positions, base=10000.0, beta_fast=32.0, beta_slow=1.0):  # noqa: ANN001, ANN202
        return _yarn_variant(head_dim, factor, original_max_positions, base, beta_fast, beta_slow, how=how)

    return wrong


YARN = Exercise(
    exercise_id="07.4",
    kind="build",
    title="the YaRN frequency table: keep the fast pairs, interpolate the slow ones, a ramp in between",
    function_name="yarn_inv_freq",
    arg_names=("head_dim", "factor", "original_max_positions"),
    reference=_yarn_reference,
    make_cases=_yarn_cases,
    mistakes=(
        Mistake(
            _yarn_mistake("reversed"),
            "the ramp runs the wrong way: the first pairs turn fastest (θ_0 = 1, many turns over L) and must "
            "keep their frequency; the last, slowest pairs are the ones divided by the factor.",
        ),
        Mistake(
            _yarn_mistake("unrounded"),
            "the ramp's ends are not rounded: like the YaRN reference code and Hugging Face (which "
            "truncate), take the floor of d(beta_fast) and the ceiling of d(beta_slow), clipped to 0 and "
            "D - 1, before the linear ramp.",
        ),
        Mistake(
            _yarn_mistake("turns"),
            "the ramp is linear in the number of turns r (the paper's eq. 18); the reference code and Hugging "
            "Face ramp linearly in the pair index i, between the indices d(beta_fast) and d(beta_slow).",
        ),
        Mistake(
            lambda head_dim, factor, original_max_positions, base=10000.0, beta_fast=32.0, beta_slow=1.0: (
                _freqs(head_dim, base) / factor
            ),
            "every pair is divided by the factor: that is position interpolation. YaRN keeps the fast pairs "
            "(more than beta_fast turns over the original context) as they are.",
        ),
    ),
    hints=(
        "pair i of θ_i = base^(-2i/D) makes L · θ_i / (2π) turns over the trained context L. Find the (fractional) "
        "pair index at which that count equals beta_fast, and the one where it equals beta_slow.",
        "solving L · base^(-2i/D) / (2π) = r for i gives D · ln(L / (2π r)) / (2 ln base). Round the beta_fast "
        "index down and the beta_slow index up, and keep them within 0 .. D - 1.",
        "a ramp over the pair indices, 0 at the lower end and 1 at the upper (clamped), says how much of θ_i / s "
        "each pair takes: blend θ_i · (1 - ramp) + θ_i / s · ramp, in float64, then cast to float32.",
    ),
    difficulty=2,
    minutes=25,
)


# ---------------------------------------------------------------------------------------------------------
# 07.5 measure: the RoPE score as a function of distance, checked at random absolute positions

ABSOLUTE = "the same scores at random absolute positions m + δ and m"


def _distance_cases(g: torch.Generator) -> list[Case]:
    def case(D: int, max_distance: int, base: float, group: str = "values") -> Case:
        return Case((_randn(g, D), _randn(g, D), max_distance, base), group=group)

    ones = torch.ones(64)
    return [
        case(10, 20, 10000.0),
        case(12, 57, 500.0),
        case(34, 300, 10000.0),
        case(16, 120, 100.0),
        Case((ones, ones, 1000, 10000.0)),  # q = k = 1: Σ_i 2 cos(δ θ_i), the long-range decay
        case(10, 40, 10000.0, ABSOLUTE),
        case(64, 500, 500000.0, ABSOLUTE),  # a Llama-3-like base
        Case((ones, ones, 200, 10000.0), group=ABSOLUTE),
    ]


def _rotated(x: torch.Tensor, positions: torch.Tensor, base: float, **kwargs) -> torch.Tensor:
    """``x (D,)`` at each of ``positions (N,)``, rotated in float64: ``(N, D)``."""
    return rope.apply_rope(x.double().expand(len(positions), -1), positions, base=base, **kwargs)


def _distance_reference(q: torch.Tensor, k: torch.Tensor, max_distance: int, base: float) -> torch.Tensor:
    delta = torch.arange(max_distance + 1)  # (N,) the query's position; the key sits at 0
    scores = _rotated(q, delta, base) @ _rotated(k, torch.zeros(1, dtype=torch.long), base)[0]  # (N,)
    return scores.to(q.dtype)


def _absolute_holds(case: Case, output: torch.Tensor) -> str | None:
    q, k, max_distance, base = case.args
    delta = torch.arange(max_distance + 1)  # (N,)
    g = torch.Generator().manual_seed(len(delta))  # the same positions on every run
    m = torch.randint(1, 10_000, (len(delta),), generator=g)  # (N,) a key position for each δ
    measured = (_rotated(q, m + delta, base) * _rotated(k, m, base)).sum(-1)  # (N,) q at m + δ, k at m
    if output.shape != measured.shape:
        return f"expected one score per δ = 0 .. {max_distance}, {tuple(measured.shape)}, got {tuple(output.shape)}"
    gap = (output.double() - measured).abs()  # (N,)
    worst = int(gap.argmax())
    if not gap[worst] <= 1e-3 + 1e-4 * measured[worst].abs():
        return (
            f"at δ = {worst} the rotated q (position {int(m[worst] + worst)}) and k (position {int(m[worst])}) "
            f"score {float(measured[worst]):.4g}, the answer says {float(output[worst]):.4g} (max difference "
            f"{float(gap.max()):.3g})"
        )
    return None


def _distance_variant(q, k, max_distance, base, *, turned="q", layout="half", exponent=2.0, fixed_base=None):
    """The score with one known slip: which vector is turned to δ, the layout, θ_i's exponent, the base."""
    D, b = q.shape[-1], base if fixed_base is None else fixed_base
    inv_freq = b ** (-exponent * torch.arange(D // 2, dtype=torch.float64) / D)  # (D/2,)
    delta = torch.arange(max_distance + 1)  # (N,)
    zero = torch.zeros_like(delta)
    q_at, k_at = {"q": (delta, zero), "k": (zero, delta), "both": (delta, delta)}[turned]
    q_rot = _rotated(q, q_at, b, inv_freq=inv_freq, layout=layout)  # (N, D)
    k_rot = _rotated(k, k_at, b, inv_freq=inv_freq, layout=layout)  # (N, D)
    return (q_rot * k_rot).sum(-1).to(q.dtype)  # (N,)


SCORE_BY_DISTANCE = Exercise(
    exercise_id="07.5",
    kind="measure",
    title="the RoPE score of q at position δ and k at position 0, for δ = 0 .. max_distance",
    function_name="rope_score_by_distance",
    arg_names=("q", "k", "max_distance", "base"),
    reference=_distance_reference,
    make_cases=_distance_cases,
    mistakes=(
        Mistake(
            lambda *a: _distance_variant(*a, turned="k"),
            "the offset has the wrong sign: k was turned to position δ and q left at 0, which is the score at "
            "-δ. Put q at position δ and k at 0. (For q = k the two agree, cos being even; random q, k show it.)",
        ),
        Mistake(
            lambda *a: _distance_variant(*a, turned="both"),
            "q and k are both turned to position δ, so the rotations cancel and every score is the plain q·k: "
            "q sits at δ, k stays at position 0 (angle 0).",
        ),
        Mistake(
            lambda *a: _distance_variant(*a, layout="interleaved"),
            "the pairs are neighbours (x_2i, x_2i+1), the interleaved layout; as in 07.1, pair i is "
            "coordinate i of the first half with coordinate i of the second half.",
        ),
        Mistake(
            lambda *a: _distance_variant(*a, exponent=1.0),
            "the frequencies miss the factor 2: θ_i = base^(-2i/D) for i = 0 .. D/2 - 1.",
        ),
        Mistake(
            lambda *a: _distance_variant(*a, fixed_base=10000.0),
            "the base is always 10000: use the base argument, θ_i = base^(-2i/D).",
        ),
    ),
    properties=(
        Property(
            ABSOLUTE,
            "RoPE scores depend on m - n only: turn q to a random position m + δ and k to m with the library's "
            "apply_rope, and their dot product must be your score at δ.",
            holds=_absolute_holds,
        ),
    ),
    hints=(
        "the key sits at position 0, where RoPE turns nothing; the query sits at δ. One score per δ, so build "
        "all max_distance + 1 rotated copies of q at once.",
        "the angles are δ · θ_i, an outer product of the distances (N,) and θ (D/2,); turn the two "
        "halves of q by them as in 07.1 (pair i is coordinate i of each half), which gives N rotated "
        "copies of q, one per distance.",
        "a sketch: q1, q2 = q.chunk(2); angles = delta[:, None] * theta[None, :]; the (N, D) rotated "
        "queries times k, summed over the last dim, in float64 (angles reach 1000 rad), cast back to q's "
        "dtype at the end.",
    ),
    difficulty=2,
    minutes=15,
    atol=1e-3,  # float32 angles near 1000 rad are off by ~1e-4 rad: scores by ~1e-4 · |q| |k|
)


EXERCISES = (ROPE_HALF, OFFSET_SCORE, NTK, YARN, SCORE_BY_DISTANCE)
