"""Checks for notebook 06's exercises: the sinusoidal table, the ALiBi bias, T5's relative-position buckets.

Each exercise is compared with :mod:`attn_edu.positional` on random cases (``T != S``, sizes that are
not powers of two, odd head counts); the known-wrong versions below are the slips learners make most
often (sin and cos swapped, a wrong exponent, a mask aligned to the wrong corner, a missing bucket
offset), written out as functions so a check can name the one it sees.
"""

from __future__ import annotations

import math

import torch

from attn_edu import positional
from attn_edu.grading.exercise import Case, Exercise, Mistake

# ---------------------------------------------------------------------------------------------------------
# 06.1 the sinusoidal table


def _sinusoidal_cases(g: torch.Generator) -> list[Case]:
    del g  # the inputs are sizes only
    return [Case((7, 6)), Case((50, 10)), Case((13, 2)), Case((33, 34)), Case((97, 64))]


def _sinusoidal_reference(num_positions: int, dim: int) -> torch.Tensor:
    return positional.sinusoidal_encoding(num_positions, dim)


def _table(num_positions: int, dim: int, omega: torch.Tensor, *, cos_first: bool = False) -> torch.Tensor:
    angles = torch.arange(num_positions, dtype=torch.float64)[:, None] * omega  # (N, dim/2)
    first, second = (angles.cos(), angles.sin()) if cos_first else (angles.sin(), angles.cos())
    return torch.stack((first, second), dim=-1).reshape(num_positions, dim).float()  # (N, dim)


def _pair_index(dim: int) -> torch.Tensor:
    return torch.arange(dim // 2, dtype=torch.float64)  # (dim/2,) i = 0 .. dim/2 - 1


SINUSOIDAL = Exercise(
    exercise_id="06.1",
    title="the sinusoidal position table: column 2i = sin(pos ω_i), column 2i+1 = cos(pos ω_i)",
    function_name="sinusoidal_encoding",
    arg_names=("num_positions", "dim"),
    reference=_sinusoidal_reference,
    make_cases=_sinusoidal_cases,
    mistakes=(
        Mistake(
            lambda n, d: _table(n, d, 10000.0 ** (-2 * _pair_index(d) / d), cos_first=True),
            "sine and cosine are swapped: even columns (2i) hold sin(pos·ω_i), odd columns (2i+1) cos.",
        ),
        Mistake(
            lambda n, d: _table(n, d, 10000.0 ** (-_pair_index(d) / d)),
            "the exponent misses the factor 2: ω_i = 10000^(-2i/dim), with i the pair index "
            "(or 10000^(-j/dim) with j = 2i the even column index).",
        ),
        Mistake(
            lambda n, d: _table(n, d, 10000.0 ** (2 * _pair_index(d) / d)),
            "the exponent has the wrong sign: ω_i = 10000^(-2i/dim) = 1 / 10000^(2i/dim), so the "
            "frequencies *fall* from 1 to about 1/10000.",
        ),
        Mistake(
            lambda n, d: (
                _table(n, d, 10000.0 ** (-2 * _pair_index(d) / d))
                .unflatten(-1, (-1, 2))
                .transpose(-1, -2)
                .flatten(-2)
            ),
            "sines and cosines are in two halves (all sines, then all cosines); the table interleaves "
            "them: column 2i = sin(pos·ω_i), column 2i+1 = cos(pos·ω_i).",
        ),
    ),
    hints=(
        "positions pos = 0 .. num_positions-1 and pair indices i = 0 .. dim/2-1; the angle of pair i "
        "is pos · ω_i with ω_i = 10000^(-2i/dim).",
        "angles = pos[:, None] * omega[None, :] has shape (num_positions, dim/2); put its sine in "
        "columns 0, 2, 4, ... and its cosine in columns 1, 3, 5, ...",
        "pe = torch.zeros(num_positions, dim); pe[:, 0::2] = angles.sin(); pe[:, 1::2] = angles.cos().",
    ),
    atol=1e-4,  # float32 angles up to ~100 rad are fine: |error| < 1e-5
)


# ---------------------------------------------------------------------------------------------------------
# 06.2 the ALiBi bias (bottom-right aligned)


def _alibi_cases(g: torch.Generator) -> list[Case]:
    def slopes(H: int) -> torch.Tensor:
        return torch.rand(H, generator=g) * 0.9 + 0.05  # (H,) any positive slopes

    return [
        Case((positional.alibi_slopes(8), 5, 5)),  # the paper's slopes, T == S
        Case((slopes(3), 4, 9)),  # 4 new queries after 5 cached keys
        Case((slopes(5), 7, 12)),
        Case((positional.alibi_slopes(6), 1, 10)),  # one decoding step
        Case((slopes(1), 6, 6)),
    ]


def _alibi_with(slopes: torch.Tensor, distance: torch.Tensor) -> torch.Tensor:
    return 0.0 - slopes[:, None, None] * distance.float()  # (H, T, S)


def _top_left(T: int, S: int) -> torch.Tensor:
    return torch.arange(S)[None, :] - torch.arange(T)[:, None]  # (T, S): query t at position t


ALIBI = Exercise(
    exercise_id="06.2",
    title="ALiBi's score bias -slope_h · |query position - key position|, bottom-right aligned",
    function_name="alibi_bias",
    arg_names=("slopes", "T", "S"),
    reference=lambda slopes, T, S: positional.alibi_bias_from_slopes(slopes, T, S),
    make_cases=_alibi_cases,
    mistakes=(
        Mistake(
            lambda slopes, T, S: -_alibi_with(slopes, positional.relative_positions(T, S).abs()),
            "the bias is positive: ALiBi *penalises* distance, bias = -slope · distance.",
        ),
        Mistake(
            lambda slopes, T, S: _alibi_with(slopes, _top_left(T, S).abs()),
            "the queries are aligned to the top-left: with S > T keys, query t sits at position "
            "S - T + t (the last query is the newest token), so distance = |s - (S - T + t)|.",
        ),
        Mistake(
            lambda slopes, T, S: _alibi_with(slopes, -positional.relative_positions(T, S)),
            "the distance is signed: keys after the query get a positive bias. Use the absolute "
            "distance |query position - key position|.",
        ),
        Mistake(
            lambda slopes, T, S: _alibi_with(slopes, positional.relative_positions(T, S)),
            "the distance has the wrong sign and no absolute value: use -slope · |query position - "
            "key position|.",
        ),
    ),
    hints=(
        "query t sits at absolute position S - T + t and key s at position s; the bias of head h is "
        "-slopes[h] · |key position - query position|.",
        "build the (T, S) distance matrix with broadcasting: torch.arange(S)[None, :] - "
        "(S - T + torch.arange(T))[:, None], then take .abs().",
        "return -slopes[:, None, None] * distance.float(): shape (H, T, S).",
    ),
)


# ---------------------------------------------------------------------------------------------------------
# 06.3 T5 relative-position buckets (bidirectional, as in the encoder)


def _bucket_cases(g: torch.Generator) -> list[Case]:
    return [
        Case((torch.arange(-150, 151),), {"num_buckets": 32, "max_distance": 128}),
        Case((positional.relative_positions(9, 13),), {"num_buckets": 16, "max_distance": 64}),
        Case((torch.randint(-500, 501, (4, 37), generator=g),), {"num_buckets": 20, "max_distance": 100}),
        Case((torch.arange(-60, 61),), {"num_buckets": 10, "max_distance": 40}),
        Case((positional.relative_positions(3, 70),), {"num_buckets": 12, "max_distance": 50}),
    ]


def _bucket_reference(relative_position: torch.Tensor, num_buckets: int = 32, max_distance: int = 128):
    return positional.t5_relative_position_bucket(
        relative_position, bidirectional=True, num_buckets=num_buckets, max_distance=max_distance
    )


def _buckets(rel: torch.Tensor, per_direction: int, max_distance: int, *, cap: bool = True) -> torch.Tensor:
    """Buckets of ``|rel|`` within one direction (no offset): exact below per_direction // 2, log above."""
    distance = rel.abs()
    exact = per_direction // 2
    log_ratio = torch.log(distance.clamp(min=exact).float() / exact) / math.log(max_distance / exact)
    far = exact + (log_ratio * (per_direction - exact)).long()
    if cap:
        far = far.clamp(max=per_direction - 1)
    return torch.where(distance < exact, distance, far)


def _no_offset(relative_position, num_buckets=32, max_distance=128):
    return _buckets(relative_position.long(), num_buckets // 2, max_distance)


def _offset_for_past(relative_position, num_buckets=32, max_distance=128):
    rel = relative_position.long()
    return torch.where(rel < 0, num_buckets // 2, 0) + _buckets(rel, num_buckets // 2, max_distance)


def _buckets_not_halved(relative_position, num_buckets=32, max_distance=128):
    rel = relative_position.long()
    return torch.where(rel > 0, num_buckets // 2, 0) + _buckets(rel, num_buckets, max_distance)


def _no_cap(relative_position, num_buckets=32, max_distance=128):
    rel = relative_position.long()
    return torch.where(rel > 0, num_buckets // 2, 0) + _buckets(
        rel, num_buckets // 2, max_distance, cap=False
    )


BUCKETS = Exercise(
    exercise_id="06.3",
    title="T5's bidirectional relative-position buckets: exact near 0, log-spaced further out",
    function_name="t5_bucket",
    arg_names=("relative_position",),
    reference=_bucket_reference,
    make_cases=_bucket_cases,
    mistakes=(
        Mistake(
            _no_offset,
            "keys after the query (relative_position > 0) land in the same buckets as keys before it: "
            "bidirectional buckets give the future the upper half, so add num_buckets // 2 where "
            "relative_position > 0.",
        ),
        Mistake(
            _offset_for_past,
            "the offset goes to the wrong side: keys *after* the query (relative_position > 0) get "
            "the upper half (+ num_buckets // 2), keys before it the lower half.",
        ),
        Mistake(
            _buckets_not_halved,
            "each direction has only num_buckets // 2 buckets: halve num_buckets before computing the "
            "exact region (n // 2) and the log-spaced ones.",
        ),
        Mistake(
            _no_cap,
            "distances beyond max_distance spill past the last bucket: cap the log-spaced bucket at "
            "n - 1 (n = num_buckets // 2) with .clamp(max=n - 1).",
        ),
    ),
    hints=(
        "n = num_buckets // 2 buckets per direction; the future (relative_position > 0) adds n. "
        "Within a direction, d = |relative_position| < n // 2 is its own bucket.",
        "for d >= exact = n // 2: bucket = exact + floor(log(d / exact) / log(max_distance / exact) "
        "* (n - exact)), capped at n - 1.",
        "compute the log on d.clamp(min=exact).float() so that small d never meet log(0), then pick "
        "with torch.where(d < exact, d, far_bucket); return int64.",
    ),
)


EXERCISES = (SINUSOIDAL, ALIBI, BUCKETS)
