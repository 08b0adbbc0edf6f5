"""Checks for notebook 01's exercises: a soft lookup with a temperature, Nadaraya–Watson regression, the
bandwidth with the lowest validation error (a measurement, checked by every candidate's error), and additive
(Bahdanau) attention from raw weights (the reference loads them into :class:`attn_edu.retrieval.AdditiveScore`).

Each exercise is compared with :mod:`attn_edu.retrieval` on random cases (``T != S``, sizes that are not
powers of two, odd head counts as leading dims), and each lists the slips learners make most often,
written out as wrong functions, so that a check can name the one it sees.
"""

from __future__ import annotations

import math

import torch

from attn_edu import retrieval
from attn_edu.grading.exercise import Case, Exercise, Mistake, Property

# ---------------------------------------------------------------------------------------------------------
# Random inputs and shared pieces of the wrong versions


def _randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=g)


def _pool(scores: torch.Tensor, values: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.softmax(scores, dim=dim) @ values  # (..., T, Dv)


def _outside_the_values(case: Case, got: torch.Tensor) -> str | None:
    """A weighted average never leaves the range of the values; an output that does has bad weights."""
    values = case.args[2]  # (..., S, Dv) or (S,)
    values = values[:, None] if values.ndim == 1 else values
    got = got[:, None] if got.ndim == 1 else got
    low = values.amin(dim=-2, keepdim=True)  # (..., 1, Dv)
    high = values.amax(dim=-2, keepdim=True)  # (..., 1, Dv)
    try:
        outside = ((got < low - 1e-4) | (got > high + 1e-4)).any()
    except RuntimeError:  # shapes that do not broadcast: another stage reports them
        return None
    if outside:
        return (
            "some outputs lie outside the range of the values, so they are not weighted averages: the "
            "weights must be non-negative and sum to 1 over the keys (a softmax over the last dim)."
        )
    return None


# ---------------------------------------------------------------------------------------------------------
# 01.1 soft lookup with a temperature


def _soft_lookup_cases(g: torch.Generator) -> list[Case]:
    return [
        Case((_randn(g, 5, 3), _randn(g, 7, 3), _randn(g, 7, 2)), {"temperature": 0.5}),
        Case((_randn(g, 2, 3, 4, 6), _randn(g, 2, 3, 9, 6), _randn(g, 2, 3, 9, 5)), {"temperature": 2.0}),
        Case((_randn(g, 1, 5), _randn(g, 6, 5), _randn(g, 6, 1))),  # the default temperature, 1
        Case((_randn(g, 3, 6, 2), _randn(g, 3, 11, 2), _randn(g, 3, 11, 3)), {"temperature": 0.3}),
        Case(
            (3 * _randn(g, 4, 3), 3 * _randn(g, 6, 3), _randn(g, 6, 2)),
            {"temperature": 0.01},
            group="low temperature",
        ),
    ]


def _soft_lookup_reference(query, keys, values, temperature=1.0):
    return retrieval.soft_lookup(query, keys, values, temperature=temperature)


def _scores(query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    return query @ keys.transpose(-2, -1)  # (..., T, S)


SOFT_LOOKUP = Exercise(
    exercise_id="01.1",
    title="soft lookup: softmax(q · k / temperature) over the keys, then a weighted sum of the values",
    function_name="soft_lookup",
    arg_names=("query", "keys", "values"),
    reference=_soft_lookup_reference,
    make_cases=_soft_lookup_cases,
    mistakes=(
        Mistake(
            lambda query, keys, values, temperature=1.0: _pool(
                _scores(query, keys) / temperature, values, -2
            ),
            "the softmax runs over the queries (the second-to-last dim); each query's weights must sum "
            "to 1 over the keys, so normalise along the last dim.",
        ),
        Mistake(
            lambda query, keys, values, temperature=1.0: (
                torch.exp(_scores(query, keys) / temperature) @ values
            ),
            "the weights are not normalised: exp of the scores alone does not sum to 1; each row must be "
            "divided by its own sum, which is what a softmax does.",
        ),
        Mistake(
            lambda query, keys, values, temperature=1.0: _pool(_scores(query, keys) * temperature, values),
            "the scores are multiplied by the temperature; divide by it (a small temperature must "
            "sharpen the weights towards the hard lookup).",
        ),
        Mistake(
            lambda query, keys, values, temperature=1.0: _pool(_scores(query, keys), values),
            "the temperature is ignored: divide the scores by it before the softmax.",
        ),
        Mistake(
            lambda query, keys, values, temperature=1.0: _pool(
                _scores(query, keys) / (temperature * math.sqrt(query.shape[-1])), values
            ),
            "the scores are also divided by sqrt(D): here the temperature is the only scale.",
        ),
        Mistake(
            lambda query, keys, values, temperature=1.0: torch.softmax(
                _scores(query, keys) / temperature, dim=-1
            ),
            "this is the (..., T, S) matrix of weights; the answer is each query's weighted average of "
            "the values, shape (..., T, Dv).",
        ),
    ),
    properties=(
        Property(
            "low temperature",
            "at temperature 0.01 the scores divided by the temperature reach the hundreds and exp "
            "overflows to inf (inf / inf = NaN): subtract each row's largest score before exp, as a "
            "library softmax does.",
        ),
    ),
    diagnoses=(_outside_the_values,),
    hints=(
        "three steps: the score of every (query, key) pair, divided by the temperature; a softmax over "
        "the keys for each query; then each query's weighted average of the values.",
        "the scores are a matrix product of the queries (..., T, D) with the keys transposed in their "
        "last two dims, (..., D, S), which gives (..., T, S); after the division by the temperature the "
        "softmax runs over the last dim (the keys), so each query's weights sum to 1. A softmax you "
        "write yourself with exp overflows at low temperature unless it first subtracts each row's "
        "largest score.",
        "a sketch: weights = torch.softmax(query @ keys.transpose(-2, -1) / temperature, dim=-1), shape "
        "(..., T, S); the answer is one more matrix product, of those weights with the values, shape "
        "(..., T, Dv). The library softmax stays finite at low temperature because it subtracts each "
        "row's largest score before exp.",
    ),
    difficulty=2,
    minutes=10,
)


# ---------------------------------------------------------------------------------------------------------
# 01.2 Nadaraya–Watson kernel regression


def _nadaraya_watson_cases(g: torch.Generator) -> list[Case]:
    def points(n: int, scale: float = 5.0) -> torch.Tensor:
        return torch.rand(n, generator=g) * scale  # (n,)

    def targets(n: int) -> torch.Tensor:
        return torch.randn(n, generator=g)  # (n,)

    return [
        Case((points(7), points(13), targets(13)), {"bandwidth": 0.5}),
        Case((points(20), points(9), targets(9)), {"bandwidth": 1.7}),
        Case((points(5, 10.0), points(31, 10.0), targets(31)), {"bandwidth": 2.5}),
        Case((points(11), points(6), targets(6)), {"bandwidth": 0.8}),
        Case(
            (torch.tensor([-3.0, 0.5, 6.0, 20.0]), points(10), targets(10)),
            {"bandwidth": 0.05},
            group="narrow bandwidth",
        ),
    ]


def _nadaraya_watson_reference(x_query, x_train, y_train, bandwidth=1.0):
    return retrieval.nadaraya_watson(x_query, x_train, y_train, bandwidth=bandwidth)


def _nadaraya_watson_with(kernel_of_gap, dim: int = 1):
    """A Nadaraya–Watson variant: weights = kernel(x - x_i) normalised along ``dim`` (1 = over training points)."""

    def wrong(x_query, x_train, y_train, bandwidth=1.0):
        gaps = x_query[:, None] - x_train[None, :]  # (T, S)
        kernel = kernel_of_gap(gaps, bandwidth)  # (T, S)
        return (kernel / kernel.sum(dim=dim, keepdim=True)) @ y_train  # (T,)

    return wrong


NADARAYA_WATSON = Exercise(
    exercise_id="01.2",
    title="Nadaraya–Watson prediction: Gaussian-kernel weights over the training points",
    function_name="nadaraya_watson",
    arg_names=("x_query", "x_train", "y_train"),
    reference=_nadaraya_watson_reference,
    make_cases=_nadaraya_watson_cases,
    mistakes=(
        Mistake(
            _nadaraya_watson_with(lambda d, bw: torch.exp(-(d**2) / (2 * bw**4))),
            "the bandwidth is squared twice (σ⁴): the kernel is exp(-(x - x_i)² / (2 σ²)).",
        ),
        Mistake(
            _nadaraya_watson_with(lambda d, bw: torch.exp(-(d**2) / (2 * bw))),
            "the bandwidth is not squared: divide by 2 σ², not 2 σ.",
        ),
        Mistake(
            _nadaraya_watson_with(lambda d, bw: torch.exp(-d.abs() / (2 * bw**2))),
            "the distance is not squared: the Gaussian kernel uses (x - x_i)².",
        ),
        Mistake(
            _nadaraya_watson_with(lambda d, bw: torch.exp(-(d**2) / bw**2)),
            "the factor 2 is missing: the kernel is exp(-(x - x_i)² / (2 σ²)).",
        ),
        Mistake(
            _nadaraya_watson_with(lambda d, bw: torch.exp(-(d**2) / (2 * bw**2)), dim=0),
            "the weights are normalised over the queries (dim 0); each query's weights must sum to 1 "
            "over the training points (dim 1, the keys).",
        ),
        Mistake(
            lambda x_query, x_train, y_train, bandwidth=1.0: (
                torch.exp(-((x_query[:, None] - x_train[None, :]) ** 2) / (2 * bandwidth**2)) @ y_train
            ),
            "the kernel values are not normalised: divide each row by its sum, so that the weights sum to 1.",
        ),
    ),
    properties=(
        Property(
            "narrow bandwidth",
            "with a narrow bandwidth, a query far from every training point has kernel values that all "
            "underflow to 0, and 0 / 0 = NaN; it must get the target of the nearest training point. "
            "Treat -(x - x_i)² / (2 σ²) as scores and take a softmax over the training points, which "
            "subtracts each row's largest score first.",
        ),
    ),
    diagnoses=(_outside_the_values,),
    hints=(
        "each query gets a weight for every training point, from the Gaussian kernel of their distance; "
        "the prediction is the weighted average of the targets, the weights of each query summing to 1.",
        "the gaps between every query and every training point form a (T, S) matrix, one row per query; "
        "the score of a pair is the log of its kernel, -gap² / (2 σ²). Exponentiating and dividing by "
        "the row sum gives 0 / 0 when every kernel value underflows; a softmax over the training points "
        "(dim 1) does not.",
        "a sketch: the gaps are x_query[:, None] minus x_train[None, :], shape (T, S); the scores come "
        "from the squared gaps and the bandwidth; torch.softmax over dim=1 (the training points) gives "
        "the weights; the prediction is that (T, S) matrix times the (S,) targets, a (T,) vector.",
    ),
    difficulty=2,
    minutes=10,
)


# ---------------------------------------------------------------------------------------------------------
# 01.3 the bandwidth with the lowest validation error (a measurement, checked by every candidate's error)


def _validation_errors(x_train, y_train, x_val, y_val, bandwidths) -> torch.Tensor:
    """Each candidate's mean squared error on the validation points, in float64 with plain torch (not the
    library): the Gaussian kernel of every (validation, training) pair, normalised per row."""
    gaps = x_val.double()[:, None] - x_train.double()[None, :]  # (N, S)
    scores = -(gaps**2)[None] / (2 * bandwidths.double()[:, None, None] ** 2)  # (K, N, S)
    kernel = torch.exp(scores - scores.amax(dim=-1, keepdim=True))  # (K, N, S): largest term e^0 = 1
    predictions = (kernel @ y_train.double()) / kernel.sum(dim=-1)  # (K, N)
    return (predictions - y_val.double()).pow(2).mean(dim=-1)  # (K,)


def _clear_winner(errors: torch.Tensor, pick) -> int | None:
    """The index ``pick`` (argmin or argmax) chooses, if the runner-up is more than 2% away, else None."""
    ranked = errors.sort(descending=pick is torch.argmax).values  # (K,)
    if abs(float(ranked[1] - ranked[0])) <= 0.02 * abs(float(ranked[0])) + 1e-6:
        return None
    return int(pick(errors))


def _noisy_curve(g: torch.Generator, n: int, curve: tuple[float, float, float]) -> tuple[torch.Tensor, ...]:
    """n points x on [0, 5] and y = sin(f x + phase) + x / 2 + noise, for curve = (f, phase, noise sd)."""
    freq, phase, noise = curve
    x = torch.rand(n, generator=g) * 5  # (n,)
    return x, torch.sin(freq * x + phase) + 0.5 * x + noise * torch.randn(n, generator=g)  # (n,), (n,)


def _bandwidth_case(g: torch.Generator, S: int, N: int, bandwidths: list[float], group: str = "values"):
    """S training and N validation points of one noisy curve, drawn again until the answer, the worst
    candidate and the training-error winner are three different, clear winners (each slip its own answer)."""
    candidates = torch.tensor(bandwidths)  # (K,)
    low, span = torch.tensor([1.5, 0.0, 0.2]), torch.tensor([1.0, 6.0, 0.2])  # frequency, phase, noise sd
    for _ in range(50):
        curve = (low + span * torch.rand(3, generator=g)).tolist()
        (x_train, y_train), (x_val, y_val) = _noisy_curve(g, S, curve), _noisy_curve(g, N, curve)
        on_val = _validation_errors(x_train, y_train, x_val, y_val, candidates)  # (K,)
        on_train = _validation_errors(x_train, y_train, x_train, y_train, candidates)  # (K,)
        picks = {_clear_winner(on_val, torch.argmin), _clear_winner(on_val, torch.argmax)}
        picks.add(_clear_winner(on_train, torch.argmin))
        if None not in picks and len(picks) == 3:
            return Case((x_train, y_train, x_val, y_val, candidates), group=group)
    raise RuntimeError("no case separates the known slips in 50 draws: change the sizes or the candidates")


def _bandwidth_cases(g: torch.Generator) -> list[Case]:
    # Candidates exact in float32 (multiples of 1/128), so that messages print them as written; none is an
    # integer, which an index returned by mistake could equal.
    return [
        _bandwidth_case(g, 30, 17, [0.03125, 0.125, 0.25, 0.75, 2.5]),
        _bandwidth_case(g, 23, 11, [1.25, 0.0625, 0.5, 0.1875]),  # not in order
        _bandwidth_case(g, 41, 25, [0.0625, 0.09375, 0.15625, 0.3125, 0.5625, 0.875, 2.25]),
        _bandwidth_case(g, 17, 9, [0.375, 2.75, 0.078125, 0.15625, 0.625]),
        _bandwidth_case(
            g, 37, 13, [0.046875, 0.125, 0.21875, 0.375, 3.25], group="the lowest validation error"
        ),
        _bandwidth_case(
            g, 26, 19, [0.875, 0.078125, 0.3125, 0.1875, 0.109375, 1.625], group="the lowest validation error"
        ),
    ]


def _errors_of(x_query, y_query, x_train, y_train, bandwidths) -> torch.Tensor:
    """The library's Nadaraya–Watson prediction at x_query for each bandwidth, scored against y_query."""
    predictions = [
        retrieval.nadaraya_watson(x_query, x_train, y_train, bandwidth=float(bw)) for bw in bandwidths
    ]
    return torch.stack([(p - y_query).pow(2).mean() for p in predictions])  # (K,)


def _best_bandwidth_reference(x_train, y_train, x_val, y_val, bandwidths):
    errors = _errors_of(x_val, y_val, x_train, y_train, bandwidths)  # (K,)
    return bandwidths[errors.argmin()]  # 0-d


def _lowest_error_holds(case: Case, output: torch.Tensor) -> str | None:
    """The answer is one of the candidates, and no candidate has a lower validation error (recomputed here)."""
    x_train, y_train, x_val, y_val, bandwidths = case.args
    if output.ndim != 0 or not output.is_floating_point():
        return f"expected a 0-d float tensor (one of the bandwidths), got shape {tuple(output.shape)} {output.dtype}"
    errors = _validation_errors(x_train, y_train, x_val, y_val, bandwidths)  # (K,)
    given = float(output)
    picked = (bandwidths.double() - given).abs() <= 1e-6 * bandwidths.double().abs()  # (K,)
    if not picked.any():
        listed = ", ".join(f"{b:g}" for b in bandwidths.tolist())
        return f"{given:g} is not one of the candidates ({listed})"
    best = int(errors.argmin())
    chosen, lowest = float(errors[picked].min()), float(errors[best])
    if chosen > lowest * (1 + 1e-4) + 1e-9:
        return (
            f"σ = {given:g} has validation MSE {chosen:.4f}, but σ = {float(bandwidths[best]):g} has "
            f"{lowest:.4f}, the lowest"
        )
    return None


BEST_BANDWIDTH = Exercise(
    exercise_id="01.3",
    kind="measure",
    title="the bandwidth among the candidates whose Nadaraya–Watson prediction has the lowest validation MSE",
    function_name="best_bandwidth",
    arg_names=("x_train", "y_train", "x_val", "y_val", "bandwidths"),
    reference=_best_bandwidth_reference,
    make_cases=_bandwidth_cases,
    mistakes=(
        Mistake(
            lambda xt, yt, xv, yv, bws: bws[_errors_of(xv, yv, xt, yt, bws).argmax()],
            "that is the bandwidth with the highest validation error: the best one has the lowest, so take "
            "the argmin of the errors, not the argmax.",
        ),
        Mistake(
            lambda xt, yt, xv, yv, bws: bws[_errors_of(xt, yt, xt, yt, bws).argmin()],
            "the error is measured on the training points, where a tiny bandwidth gives each point its own "
            "target back and always wins; predict the validation points x_val from the training points and "
            "compare with y_val.",
        ),
        Mistake(
            lambda xt, yt, xv, yv, bws: _errors_of(xv, yv, xt, yt, bws).argmin(),
            "that is the position of the best candidate in bandwidths; return the bandwidth itself, "
            "bandwidths[i], a 0-d float tensor.",
        ),
        Mistake(
            lambda xt, yt, xv, yv, bws: _errors_of(xv, yv, xt, yt, bws).min(),
            "that is the lowest validation error; return the bandwidth that reaches it.",
        ),
    ),
    properties=(
        Property(
            "the lowest validation error",
            "the answer must be one of the candidates, and the Nadaraya–Watson prediction at x_val from "
            "(x_train, y_train) with it must have the lowest mean squared error against y_val of them all.",
            holds=_lowest_error_holds,
        ),
    ),
    hints=(
        "for each candidate bandwidth, predict the validation points x_val from the training points (the "
        "Nadaraya–Watson of 01.2), and measure the mean squared error of that prediction against y_val.",
        "for each candidate bandwidth, predict x_val from the training points and average the squared "
        "errors against y_val; the best candidate has the lowest such error. Measure on the validation "
        "points, not the training points: there a tiny bandwidth gives every point its own target back, "
        "an error near 0 that says nothing about new points.",
        "a sketch: a loop over bandwidths.tolist() that collects K validation errors (your 01.2 for the "
        "predictions); stack them into a (K,) tensor; the position of the smallest (argmin, not argmax) "
        "picks the candidate; hand back the candidate bandwidth itself, a 0-d float tensor, not its "
        "position.",
    ),
    difficulty=3,
    minutes=20,
)


# ---------------------------------------------------------------------------------------------------------
# 01.4 additive (Bahdanau) attention from raw weights


def _additive_case(
    g: torch.Generator, lead: tuple[int, ...], T: int, S: int, Dq: int, Dk: int, Dv: int, A: int
):
    args = (
        _randn(g, *lead, T, Dq),  # query
        _randn(g, *lead, S, Dk),  # keys
        _randn(g, *lead, S, Dv),  # values
        _randn(g, A, Dq) / math.sqrt(Dq),  # w_q (A, Dq) like nn.Linear
        _randn(g, A, Dk) / math.sqrt(Dk),  # w_k (A, Dk)
        _randn(g, A),  # v (A,): scores are large enough for the softmax to be far from uniform
    )
    return Case(args)


def _additive_cases(g: torch.Generator) -> list[Case]:
    return [
        _additive_case(g, (2,), 5, 7, 3, 6, 4, 9),  # queries and keys of different sizes
        _additive_case(g, (), 4, 9, 10, 5, 3, 6),  # no batch dim
        _additive_case(g, (3,), 6, 3, 7, 7, 5, 11),  # T > S
        _additive_case(g, (2, 3), 3, 5, 4, 6, 2, 5),  # batch and head dims
        _additive_case(g, (1,), 1, 6, 5, 3, 7, 13),  # a single query
    ]


def _additive_reference(query, keys, values, w_q, w_k, v):
    A, Dq = w_q.shape
    score = retrieval.AdditiveScore(query_dim=Dq, key_dim=w_k.shape[1], hidden_dim=A)
    with torch.no_grad():
        score.q_proj.weight.copy_(w_q)
        score.k_proj.weight.copy_(w_k)
        score.score_proj.weight.copy_(v[None, :])  # (1, A): v as nn.Linear(A, 1)'s weight
        return retrieval.attention_pool(score(query, keys), values)  # (..., T, Dv)


def _additive_variant(query, keys, values, w_q, w_k, v, *, squash=torch.tanh, scale=1.0, dim=-1, pool=True):
    """Additive attention with one piece swapped for a wrong one (the known mistakes below)."""
    hidden = (query @ w_q.T)[..., :, None, :] + (keys @ w_k.T)[..., None, :, :]  # (..., T, S, A)
    scores = squash(hidden) @ v * scale  # (..., T, S)
    weights = torch.softmax(scores, dim=dim)  # (..., T, S)
    return weights @ values if pool else weights  # (..., T, Dv)


ADDITIVE = Exercise(
    exercise_id="01.4",
    kind="build",
    title="additive (Bahdanau) attention: scores v · tanh(W_q q + W_k k), softmax over keys, pool values",
    function_name="additive_attention",
    arg_names=("query", "keys", "values", "w_q", "w_k", "v"),
    reference=_additive_reference,
    make_cases=_additive_cases,
    mistakes=(
        Mistake(
            lambda *a: _additive_variant(*a, squash=lambda h: h),
            "the tanh is missing: without it v · (W_q q + W_k k) = v·W_q q + v·W_k k, and the query's "
            "part is the same for every key, so the softmax ignores the query. Apply tanh to the sum, "
            "then take the dot product with v.",
        ),
        Mistake(
            lambda *a: _additive_variant(*a, dim=-2),
            "the softmax runs over the queries (the second-to-last dim); each query's weights over the S "
            "keys must sum to 1, so take the softmax over the last dim.",
        ),
        Mistake(
            lambda *a: _additive_variant(*a, scale=1.0 / math.sqrt(a[3].shape[0])),
            "the scores are divided by sqrt(hidden size): that scale belongs to the dot product; additive "
            "scores v · tanh(...) are used as they are.",
        ),
        Mistake(
            lambda *a: _additive_variant(*a, pool=False),
            "this is the (..., T, S) matrix of weights; the output is each query's weighted average of "
            "the values, shape (..., T, Dv).",
        ),
    ),
    hints=(
        "the weights follow a linear layer's layout, (out_features, in_features): project the queries "
        "and the keys to the hidden size A, then every (query, key) pair needs its own hidden vector, "
        "the sum of its two projections, before the tanh.",
        "project with each weight transposed, giving (..., T, A) and (..., S, A); give the projected "
        "queries a new axis for the keys and the projected keys a new axis for the queries, so that "
        "broadcasting their sum gives (..., T, S, A). The tanh of that sum, contracted with v over A, "
        "gives the (..., T, S) scores.",
        "a sketch: hidden = torch.tanh((query @ w_q.T)[..., :, None, :] + (keys @ w_k.T)[..., None, :, "
        ":]), shape (..., T, S, A); the scores are hidden @ v, shape (..., T, S); then the softmax over "
        "the keys and the weighted sum of the values, as in 01.1 (no temperature here).",
    ),
    difficulty=3,
    minutes=15,
)


EXERCISES = (SOFT_LOOKUP, NADARAYA_WATSON, BEST_BANDWIDTH, ADDITIVE)
