"""Checks for notebook 06's exercises: the sinusoidal table, the ALiBi bias, T5's relative-position buckets,
Shaw et al.'s relative attention built from its two tables (against :func:`attn_edu.positional.shaw_attention`),
and the shift map ``M_k`` fitted by least squares (checked by the normal equations and the exact rotation).

Each exercise is compared with :mod:`attn_edu.positional` on random cases (``T != S``, sizes that are
not powers of two, odd head counts); the known-wrong versions below are the slips learners make most
often (sin and cos swapped, a wrong exponent, a mask aligned to the wrong corner, a missing bucket
offset, a fit the wrong way round), written out as functions so a check can name the one it sees.
"""

from __future__ import annotations

import math

import torch

from attn_edu import positional
from attn_edu.grading.exercise import (
    OVERFLOW_HINT,
    Case,
    Exercise,
    Mistake,
    Property,
    overflow_diagnosis,
    unshifted_softmax,
)

# ---------------------------------------------------------------------------------------------------------
# 06.1 the sinusoidal table


def _draw(g: torch.Generator, low: int, high: int) -> int:
    """A random int in ``low .. high`` (both included): sizes differ from seed to seed."""
    return int(torch.randint(low, high + 1, (1,), generator=g))


def _sinusoidal_cases(g: torch.Generator) -> list[Case]:
    wide = 2 * _draw(g, 16, 32)  # 32 .. 64 columns
    return [
        Case((_draw(g, 5, 12), 2 * _draw(g, 3, 5))),  # a small table, dim 6 .. 10
        Case((_draw(g, 40, 60), 2 * (2 * _draw(g, 2, 7) + 1))),  # dim = 2 · odd: not a power of two
        Case((_draw(g, 8, 20), 2)),  # dim = 2: a single pair, ω_0 = 1
        Case((wide - _draw(g, 1, 8), wide)),  # fewer positions than columns
        Case((_draw(g, 80, 100), 2 * _draw(g, 24, 40))),  # the widest table: angles up to ~100 rad
    ]


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
        "the angles form a (num_positions, dim/2) table, the position of each row times the frequency of "
        "each column (broadcast a column of positions against a row of frequencies); its sine goes in "
        "columns 0, 2, 4, ... and its cosine in columns 1, 3, 5, ...",
        "a sketch: angles = pos[:, None] * omega[None, :]; a slice with a step picks every other column "
        "(pe[:, 0::2] are the even ones): fill an empty (num_positions, dim) table through the even and "
        "the odd view, with the angles in float64, and cast the table to float32 at the end.",
    ),
    difficulty=2,
    minutes=15,
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
        "build the (T, S) matrix of distances with broadcasting: a row of key positions 0 .. S - 1 minus "
        "a column of query positions S - T .. S - 1, then its absolute value; each head scales it by "
        "minus its own slope.",
        "a sketch: distance = (torch.arange(S)[None, :] - (S - T + torch.arange(T))[:, None]).abs(); the "
        "slopes have shape (H,): view them as (H, 1, 1) so that they broadcast against the (T, S) "
        "distances, mind the minus sign, and make the result float32.",
    ),
    difficulty=2,
    minutes=10,
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
            "keys after the query (a positive relative position) land in the same buckets as keys before "
            "it: bidirectional buckets give the future the upper half, so those keys need an offset of "
            "half the buckets.",
        ),
        Mistake(
            _offset_for_past,
            "the offset goes to the wrong side: keys *after* the query (a positive relative position) "
            "get the upper half of the buckets, keys before it the lower half.",
        ),
        Mistake(
            _buckets_not_halved,
            "each direction has only half of the buckets: halve num_buckets before computing the exact "
            "region (half of that half) and the log-spaced ones.",
        ),
        Mistake(
            _no_cap,
            "distances beyond max_distance spill past the last bucket: cap the log-spaced bucket at the "
            "last bucket of its half, n - 1 with n = num_buckets / 2.",
        ),
    ),
    hints=(
        "with n = num_buckets / 2 buckets per direction, the future (a positive relative position) adds "
        "n. Within a direction, a distance d smaller than n / 2 is its own bucket; larger distances "
        "share log-spaced buckets.",
        "for d at least exact = n / 2: bucket = exact + ⌊log(d / exact) / log(max_distance / exact) · (n "
        "- exact)⌋, capped at n - 1; below exact the bucket is d itself; then the direction's offset is "
        "added.",
        "take the log of d.clamp(min=exact).float() so that small d never meet log(0); choose per "
        "entry between d and the log-spaced bucket with torch.where, add the direction's offset, and "
        "keep int64.",
    ),
    difficulty=2,
    minutes=15,
)


# ---------------------------------------------------------------------------------------------------------
# 06.4 Shaw et al.'s relative attention from the raw tables (build and verify against the library's)


def _shaw_case(
    g: torch.Generator, B: int, H: int, T: int, S: int, D: int, Dv: int, k: int, causal: bool
) -> Case:
    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    return Case(
        (
            rand(B, H, T, D),
            rand(B, H, S, D),
            rand(B, H, S, Dv),
            rand(2 * k + 1, D),
            rand(2 * k + 1, Dv),
            k,
            causal,
        )
    )


def _shaw_cases(g: torch.Generator) -> list[Case]:
    return [
        _shaw_case(g, 2, 3, 5, 7, 6, 6, 2, False),  # T < S: queries are the last T positions
        _shaw_case(g, 1, 2, 6, 6, 5, 3, 3, True),  # self-attention, causal, Dv != D
        _shaw_case(g, 3, 1, 4, 9, 7, 7, 2, True),  # causal with cached keys: bottom-right
        _shaw_case(g, 2, 5, 7, 5, 3, 4, 1, False),  # T > S (cross-attention-like), k = 1
        _shaw_case(g, 1, 3, 3, 11, 4, 5, 4, False),  # distances beyond k on both sides
        _sharp_shaw(_shaw_case(g, 2, 2, 5, 6, 4, 4, 2, True)),  # the last query's scores up to 200
    ]


def _sharp_shaw(case: Case) -> Case:
    """The case with its last query scaled so that the largest score it has is 200, past exp's float32 range
    (about 88), the other queries left as they are: the scores are linear in q, and a softmax that does not
    subtract the row's maximum gives NaN there. Under a bottom-right causal mask the last query sees every key."""
    q, *rest = case.args
    last = _shaw_variant(*case.args, scores_only=True)[..., -1, :]  # (B, H, S): the last query's scores
    sharp = q.clone()
    sharp[..., -1, :] *= 200.0 / last.max()  # (B, H, T, D)
    return Case((sharp, *rest))


def _shaw_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_table: torch.Tensor,
    value_table: torch.Tensor,
    max_distance: int,
    is_causal: bool,
) -> torch.Tensor:
    rel = positional.ShawRelativePosition(max_distance, key_table.shape[-1], value_dim=value_table.shape[-1])
    with torch.no_grad():
        rel.key_embedding.weight.copy_(key_table)
        rel.value_embedding.weight.copy_(value_table)
        rel_k, rel_v = rel(q.shape[-2], k.shape[-2])  # (T, S, D), (T, S, Dv)
    return positional.shaw_attention(q, k, v, rel_k, rel_v, is_causal=is_causal)  # (B, H, T, Dv)


def _shaw_variant(
    q, k, v, key_table, value_table, max_distance, is_causal, *, sign=1, offset=None, index_shift=True,
    values=True, scale_positions=True, softmax=torch.softmax, scores_only=False,
):  # fmt: skip
    """Shaw attention with one piece swapped for a wrong one (the known mistakes below)."""
    T, S, D = q.shape[-2], k.shape[-2], q.shape[-1]
    start = S - T if offset is None else offset
    distance = torch.arange(S)[None, :] - (torch.arange(T)[:, None] + start)  # (T, S): key - query
    clipped = (sign * distance).clamp(-max_distance, max_distance)  # (T, S)
    index = clipped + max_distance if index_shift else clipped  # negative indices wrap around the table
    a_k, a_v = key_table[index], value_table[index]  # (T, S, D), (T, S, Dv)
    content = q @ k.transpose(-2, -1)  # (B, H, T, S)
    position = torch.einsum("bhtd,tsd->bhts", q, a_k)  # (B, H, T, S)
    scores = (content + position) / math.sqrt(D) if scale_positions else content / math.sqrt(D) + position
    if is_causal:
        scores = scores.masked_fill(distance > 0, float("-inf"))
    if scores_only:
        return scores  # (B, H, T, S)
    weights = softmax(scores, dim=-1)  # (B, H, T, S)
    out = weights @ v  # (B, H, T, Dv)
    return out + torch.einsum("bhts,tsd->bhtd", weights, a_v) if values else out


def _unshifted_shaw(*args) -> torch.Tensor:
    return _shaw_variant(*args, softmax=unshifted_softmax)  # (B, H, T, Dv), NaN rows past a score of 88


SHAW = Exercise(
    exercise_id="06.4",
    kind="build",
    title="Shaw et al.'s relative attention: a^K and a^V looked up by clipped distance, added to keys and values",
    function_name="shaw_relative_attention",
    arg_names=("q", "k", "v", "key_table", "value_table", "max_distance", "is_causal"),
    reference=_shaw_reference,
    make_cases=_shaw_cases,
    mistakes=(
        Mistake(
            lambda *a: _shaw_variant(*a, sign=-1),
            "the distance has the wrong sign: Shaw et al. index by key position - query position (negative = "
            "a key in the past), so row 0 of a table is distance -k and row 2k is distance +k.",
        ),
        Mistake(
            lambda *a: _shaw_variant(*a, index_shift=False),
            "the clipped distance is used as the row index directly: distances run from -k to k, rows from 0 "
            "to 2k, so add max_distance (a negative index silently wraps to the end of the table).",
        ),
        Mistake(
            lambda *a: _shaw_variant(*a, values=False),
            "a^V is missing: Shaw et al. add relative vectors to the values too, z_i = Σ_j w_ij (v_j + "
            "a^V_ij).",
        ),
        Mistake(
            lambda *a: _shaw_variant(*a, scale_positions=False),
            "only q·k is divided by √D: the position term belongs inside the same score, e_ij = q_i · "
            "(k_j + a^K_ij) / √D.",
        ),
        Mistake(
            lambda *a: _shaw_variant(*a, offset=0),
            "the queries are placed at positions 0 .. T - 1: when T and S differ they are the last T of "
            "the S positions (offset S - T), as for the bottom-right causal mask.",
        ),
        Mistake(_unshifted_shaw, OVERFLOW_HINT),
    ),
    diagnoses=(overflow_diagnosis(_unshifted_shaw),),
    hints=(
        "first a (T, S) table of distances, key position minus query position, with query t at position "
        "S - T + t; clip it to [-k, k] and turn it into row numbers 0 .. 2k.",
        "indexing key_table and value_table with that (T, S) table of row numbers gives a^K (T, S, D) "
        "and a^V (T, S, Dv), one vector per (query, key) pair; each query is paired with its own row of "
        "a^K (a product summed over D for every pair), not with every row.",
        "a sketch: a_k = key_table[index] and a_v = value_table[index]; scores = (q @ k.transpose(-2, "
        "-1) + torch.einsum('...td,tsd->...ts', q, a_k)) / math.sqrt(D); mask future keys with -inf when "
        "is_causal; after the softmax, add the weighted sum of a^V to the weighted sum of v.",
    ),
    difficulty=3,
    minutes=35,
)


# ---------------------------------------------------------------------------------------------------------
# 06.5 measure: the shift map M_k fitted by least squares, checked by the normal equations

NORMAL_EQUATIONS = "least squares: the normal equations, and M_k where the data pins it down"


def _shift_cases(g: torch.Generator) -> list[Case]:
    def table(n: int, dim: int, base: float = 10000.0, *, mixed: bool = False) -> torch.Tensor:
        start = int(torch.randint(0, 50, (), generator=g))  # any stretch of positions
        pe = positional.sinusoidal_encoding(start + n, dim, base=base, dtype=torch.float64)[
            start:
        ]  # (n, dim)
        if not mixed:
            return pe
        W = torch.eye(dim, dtype=torch.float64) + 0.2 * torch.randn(
            dim, dim, generator=g, dtype=torch.float64
        )
        return pe @ W  # the positions seen through a linear layer: the shift is still linear, not a rotation

    def shift() -> int:
        return int(torch.randint(2, 7, (), generator=g))

    return [
        Case((table(120, 8, 100.0), shift())),
        Case((table(300, 10, 1000.0), shift())),
        Case((table(90, 6, 50.0), shift())),
        Case((table(200, 8, 300.0, mixed=True), shift())),
        Case((table(400, 12), shift())),  # the paper's base: the slowest pair turns less than once
        # Pure sinusoids with base 10000 (the property knows ω_i), the slow pairs nearly dependent.
        Case((table(250, 16), 3), group=NORMAL_EQUATIONS),
        Case((table(160, 14), 4), group=NORMAL_EQUATIONS),
        Case((table(400, 12), shift()), group=NORMAL_EQUATIONS),
    ]


def _shift_holds(case: Case, output: torch.Tensor) -> str | None:
    table, k = case.args
    A, B, M = table[:-k], table[k:], output.double()  # (N - k, D), (N - k, D), (D, D)
    gap = float((A.T @ (A @ M - B)).norm() / (A.T @ B).norm())  # 0 at a least-squares minimum
    if gap > 1e-5:
        return f"‖Aᵀ(A M − B)‖ is {gap:.3g} of ‖Aᵀ B‖ (A = table[:-k], B = table[k:]), not about 0"
    D = table.shape[-1]
    exact = positional.rotation_matrix(k, D).T  # (D, D): rows, so table[p + k] = table[p] @ M_kᵀ
    turning = positional.wavelengths(D) <= len(A)  # (D/2,) the pairs that turn at least once in the data
    for i in turning.nonzero().flatten().tolist():
        block = slice(2 * i, 2 * i + 2)
        error = float((M[block, block] - exact[block, block]).abs().max())
        if error > 1e-5:
            return f"pair {i} turns within the table, yet its 2×2 block differs from the rotation by k·ω_{i} by {error:.3g}"
    return None


def _fit(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    return torch.linalg.lstsq(A, B, driver="gelsd").solution  # argmin ‖A M - B‖


SHIFT_MAP = Exercise(
    exercise_id="06.5",
    kind="measure",
    title="the least-squares map M with table[:-k] @ M ≈ table[k:]: can a layer learn the shift M_k?",
    function_name="fit_shift_map",
    arg_names=("table", "k"),
    reference=lambda table, k: positional.fit_shift_map(table, k),
    make_cases=_shift_cases,
    mistakes=(
        Mistake(
            lambda table, k: _fit(table[k:], table[:-k]),
            "the map is fitted the wrong way round: it takes position p + k back to p. The inputs are "
            "the earlier rows (0 .. N - k - 1) and the targets the rows k further on.",
        ),
        Mistake(
            lambda table, k: _fit(table[:-k], table[k:]).T,
            "the result is transposed: the rows are positions, so the map acts from the right (earlier "
            "rows times M ≈ later rows), and the least-squares solution is that M as it is.",
        ),
        Mistake(
            lambda table, k: _fit(table[: -k - 1], table[k + 1 :]),
            "the shift is off by one: this map moves k + 1 rows. Pair row p with row p + k.",
        ),
        Mistake(
            lambda table, k: _fit(table[: len(table) - k + 1], table[k - 1 :]),
            "the shift is off by one: this map moves k - 1 rows. Pair row p with row p + k.",
        ),
    ),
    properties=(
        Property(
            NORMAL_EQUATIONS,
            "a least-squares M solves the normal equations Aᵀ A M = Aᵀ B (A the rows 0 .. N - k - 1, B "
            "the rows k .. N - 1); on a sinusoidal table, every pair that turns within the table pins "
            "its 2×2 block down to the rotation.",
            holds=_shift_holds,
        ),
    ),
    hints=(
        "rows are positions: the inputs of the map are the rows that have a row k further on, the targets "
        "are those later rows. Which slices of the table are they?",
        "the inputs A are the rows 0 .. N - k - 1 and the targets B the rows k .. N - 1, both (N - k, "
        "D); you want the (D, D) matrix M that makes A M as close as possible to B in the least-squares "
        "sense. PyTorch's linear-algebra module has a solver for exactly that.",
        "a sketch: A, B = table[:-k], table[k:]; torch.linalg.lstsq(A, B) returns a named tuple; its "
        ".solution is the (D, D) map. Keep float64, and do not transpose it: it already acts on rows "
        "from the right.",
    ),
    difficulty=2,
    minutes=10,
    atol=1e-6,  # float64 fits by lstsq, pinv or the normal equations agree to ~1e-7 on these tables
    rtol=1e-5,
)


EXERCISES = (SINUSOIDAL, ALIBI, BUCKETS, SHAW, SHIFT_MAP)
