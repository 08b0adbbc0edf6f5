"""Checks for notebook 03's exercises: the variance of dot products, the softmax Jacobian (checked against
autograd), attention entropy, and the d at which unscaled attention saturates (a measurement).

Each exercise runs the learner's function on random cases (sizes that are not powers of two, odd head
counts, ``T != S``) and compares it with a reference built on :mod:`attn_edu` and PyTorch; the known-wrong
versions below are the slips learners make most often, so a check can name the one it sees. The Jacobian is
also held to torch.autograd's, and the measured d to the mean max weights recomputed around it.
"""

from __future__ import annotations

import math

import torch

from attn_edu.attention import attention_entropy, attention_weights, masked_softmax
from attn_edu.grading.exercise import Case, Exercise, Mistake, Property
from attn_edu.masks import causal_mask

# ---------------------------------------------------------------------------------------------------------
# 03.1 the variance of dot products


def _variance_cases(g: torch.Generator) -> list[Case]:
    def pairs(*shape: int, std_q: float = 1.0, std_k: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        return std_q * torch.randn(shape, generator=g), std_k * torch.randn(shape, generator=g)

    return [
        Case(pairs(257, 1)),  # (N, D)
        Case(pairs(301, 24)),
        Case(pairs(3, 211, 7)),  # (H, N, D): one variance per head
        Case(pairs(223, 130)),
        Case(pairs(240, 5, std_q=2.0, std_k=1.5)),  # not unit variance: Var(q·k) = 9 D, not D
    ]


def _variance_reference(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    dots = (q * k).sum(dim=-1)  # (..., N) one dot product per pair
    return dots.var(dim=-1)  # (...,) sample variance over the N pairs


VARIANCE = Exercise(
    exercise_id="03.1",
    title="the sample variance of the dot products q[n]·k[n] over N pairs",
    function_name="score_variance",
    arg_names=("q", "k"),
    reference=_variance_reference,
    make_cases=_variance_cases,
    mistakes=(
        Mistake(
            lambda q, k: (q * k).sum(dim=-1).std(dim=-1),
            "that is the standard deviation (about √D); the variance is its square.",
        ),
        Mistake(
            lambda q, k: ((q * k).sum(dim=-1) / math.sqrt(q.shape[-1])).var(dim=-1),
            "the dot products are divided by sqrt(D): that is the *scaled* variance (about 1). "
            "Measure the raw q·k here.",
        ),
        Mistake(
            lambda q, k: (q * k).flatten(-2).var(dim=-1),
            "that is the variance of single products q_i k_i; each pair's D products must be summed "
            "first into one dot product, and the variance taken over the N dot products.",
        ),
        Mistake(
            lambda q, k: (q @ k.transpose(-2, -1)).flatten(-2).var(dim=-1),
            "every q is paired with every k (an N × N matrix of scores); this exercise pairs q[n] with "
            "k[n] only, N dot products.",
        ),
        Mistake(
            lambda q, k: (q * k).sum(dim=-1).mean(dim=-1),
            "that is the mean of the dot products (about 0); the variance is the mean squared distance "
            "from that mean (with N - 1 or N in the denominator).",
        ),
    ),
    hints=(
        "compute the N dot products first (one per pair, shape (..., N)), then their variance over N.",
        "an elementwise product of q and k, summed over the last dimension, gives one dot product per "
        "pair; a matrix product of q with kᵀ would pair every q with every k (N² scores, not N). The "
        "variance is then taken over the pairs' dimension.",
        "a sketch: dots = (q * k).sum(dim=-1), shape (..., N); Tensor.var reduces over the dimension you "
        "name (here the pairs' one); keep the result a tensor (0-d for (N, D) inputs): .item() or "
        "float() would make it a Python number.",
    ),
    # N is a few hundred: dividing by N or by N - 1 differs by < 0.5%, and both estimators are fine.
    rtol=1e-2,
    atol=1e-6,
    minutes=5,
)


# ---------------------------------------------------------------------------------------------------------
# 03.2 the softmax Jacobian (build and verify against autograd)


def _random_weights(g: torch.Generator, *shape: int, d: int = 8, scale: float = 1.0) -> torch.Tensor:
    """Rows of attention weights ``shape = (..., T, S)`` from random q and k; ``scale`` multiplies the usual
    ``1/sqrt(d)`` (``scale = sqrt(d)`` gives unscaled scores)."""
    q = torch.randn(*shape[:-1], d, generator=g)  # (..., T, D)
    k = torch.randn(*shape[:-2], shape[-1], d, generator=g)  # (..., S, D)
    return attention_weights(q, k, scale=scale / math.sqrt(d))  # (..., T, S), every weight > 0


def _jacobian_cases(g: torch.Generator) -> list[Case]:
    scores = torch.randn(3, 6, generator=g)  # (T, S)
    scores[torch.arange(3), torch.randint(0, 6, (3,), generator=g)] += 25.0  # one key far ahead in each row
    saturated = masked_softmax(scores)  # (T, S): one weight ≈ 1 per row, the others ≈ 1e-11
    hidden = masked_softmax(torch.randn(5, 8, generator=g), causal_mask(5, 8))  # (T, S): hidden keys weigh 0
    return [
        Case((_random_weights(g, 2, 3, 5, 7),)),  # (B, T, S)
        Case((_random_weights(g, 4, 9),)),
        Case((_random_weights(g, 1, 7)[0],)),  # a single row (S,)
        Case((_random_weights(g, 1, 2, 4, 11, scale=3.0),)),  # (B, H, T, S), sharp rows
        Case((saturated,)),  # the Jacobian ≈ 0: almost no gradient gets through
        Case((hidden,)),
        Case((_random_weights(g, 2, 4, 6),), group="autograd's Jacobian"),
        Case((_random_weights(g, 5, 5, d=300, scale=math.sqrt(300)),), group="autograd's Jacobian"),
    ]


def _jacobian_reference(weights: torch.Tensor) -> torch.Tensor:
    # The weights are read back through the library's softmax at the scores z = log p that give them
    # (softmax(log p) = p for rows that sum to 1), then J = diag(p) - p pᵀ.
    p = masked_softmax(weights.log())  # (..., S)
    return torch.diag_embed(p) - p[..., :, None] * p[..., None, :]  # (..., S, S)


def _autograd_jacobian(weights: torch.Tensor) -> torch.Tensor:
    """∂p_i/∂z_j by torch.autograd: the Jacobian of torch.softmax at z = log p, one row at a time."""
    S = weights.shape[-1]
    rows = weights.reshape(-1, S).double().log()  # (R, S): the scores z with softmax(z) = p
    full = torch.autograd.functional.jacobian(lambda z: torch.softmax(z, dim=-1), rows)  # (R, S, R, S)
    blocks = torch.diagonal(full, dim1=0, dim2=2).permute(2, 0, 1)  # (R, S, S): rows do not mix
    return blocks.reshape(*weights.shape, S)  # (..., S, S)


def _matches_autograd(case: Case, output: torch.Tensor) -> str | None:
    expected = _autograd_jacobian(case.args[0])  # (..., S, S)
    if output.shape != expected.shape:
        return f"autograd's Jacobian has shape {tuple(expected.shape)}, the answer {tuple(output.shape)}"
    diff = (output.double() - expected).abs().nan_to_num(nan=math.inf)
    if float(diff.max()) > 1e-5:
        return (
            f"torch.autograd's Jacobian of torch.softmax at z = log p differs from the answer by up to "
            f"{float(diff.max()):.3g} (mean {float(diff.mean()):.3g})"
        )
    return None


def _outer(p: torch.Tensor) -> torch.Tensor:
    return p[..., :, None] * p[..., None, :]  # (..., S, S): p_i p_j


JACOBIAN = Exercise(
    exercise_id="03.2",
    kind="build",
    title="the softmax Jacobian ∂p_i/∂z_j = p_i(δ_ij - p_j) of rows of weights, checked against autograd",
    function_name="softmax_jacobian",
    arg_names=("weights",),
    reference=_jacobian_reference,
    make_cases=_jacobian_cases,
    mistakes=(
        Mistake(
            lambda p: torch.diag_embed(p * (1 - p)),
            "only the diagonal, p_i (1 - p_i), is there: moving score j also moves every other weight i, "
            "by -p_i p_j. Subtract the outer product p pᵀ from diag(p).",
        ),
        Mistake(
            lambda p: -_outer(p),
            "that is -p pᵀ alone; the δ_ij term adds p_i on the diagonal: diag(p) - p pᵀ.",
        ),
        Mistake(
            lambda p: torch.diag_embed(p) - (p * p).sum(dim=-1)[..., None, None],
            "pᵀp is the scalar Σ p_j², subtracted from every entry; the Jacobian needs the outer product "
            "p pᵀ, an (S, S) matrix with entries p_i p_j.",
        ),
        Mistake(
            lambda p: p[..., :, None] * (1 - p[..., None, :]),
            "p_i (1 - p_j) for every pair treats δ_ij as 1 everywhere; it is 1 only on the diagonal (i = "
            "j) and 0 elsewhere: diag(p) - p pᵀ.",
        ),
        Mistake(
            lambda p: _outer(p) - torch.diag_embed(p),
            "the sign is flipped: raising score i raises weight i, so the diagonal p_i (1 - p_i) is "
            "positive: diag(p) - p pᵀ.",
        ),
    ),
    properties=(
        Property(
            "autograd's Jacobian",
            "entry (i, j) is ∂p_i/∂z_j, how weight i moves when score j does; autograd differentiates "
            "the library softmax itself at the scores z = log p, so a right formula matches it "
            "everywhere.",
            holds=_matches_autograd,
        ),
    ),
    hints=(
        "for one row p of S weights the answer is an (S, S) matrix whose entry (i, j) is p_i (δ_ij - "
        "p_j), with δ_ij = 1 when i = j and 0 otherwise.",
        "split it in two: the p_i δ_ij part is a diagonal matrix holding p (PyTorch can build one along "
        "the last dim, keeping leading dims), and the p_i p_j part is an outer product of the row with "
        "itself; the Jacobian is their difference.",
        "the outer product of every row with itself: p[..., :, None] (a column) times p[..., None, :] (a "
        "row) broadcasts to (..., S, S); subtract it from the diagonal matrix of p.",
    ),
    difficulty=2,
    minutes=10,
)


# ---------------------------------------------------------------------------------------------------------
# 03.3 entropy of attention rows


def _entropy_cases(g: torch.Generator) -> list[Case]:
    sparse = masked_softmax(torch.randn(6, 5, generator=g), causal_mask(6, 5))  # (T, S) rows 0 .. all zero
    one_hot = torch.eye(4, 7)  # (T, S) every row certain: entropy 0
    return [
        Case((_random_weights(g, 2, 3, 5, 7),)),
        Case((_random_weights(g, 4, 9),)),
        Case((_random_weights(g, 1, 5, 6, 11, scale=4.0),)),  # sharp rows
        Case((_random_weights(g, 3, 2, 4, d=32, scale=0.1),)),  # nearly uniform rows
        Case((sparse,), group="zero weights"),
        Case((one_hot,), group="zero weights"),
    ]


ENTROPY = Exercise(
    exercise_id="03.3",
    title="the entropy -Σ_s p_s log p_s (nats) of each row of attention weights",
    function_name="attention_entropy",
    arg_names=("weights",),
    reference=lambda weights: attention_entropy(weights),
    make_cases=_entropy_cases,
    mistakes=(
        Mistake(
            lambda w: attention_entropy(w) / math.log(2),
            "that is the entropy in bits (log base 2); use the natural log, for nats.",
        ),
        Mistake(
            lambda w: -attention_entropy(w),
            "the sign is flipped: entropy is -Σ p log p, which is >= 0 because log p <= 0.",
        ),
        Mistake(
            lambda w: torch.special.entr(w).sum(dim=-2),
            "the sum runs over the queries (the second-to-last dim); each row (one query) sums over its "
            "keys, the last dim.",
        ),
        Mistake(
            lambda w: torch.special.entr(w).mean(dim=-1),
            "that is the mean of -p log p over the keys; the entropy is their sum.",
        ),
        Mistake(
            lambda w: attention_entropy(w) / math.log(w.shape[-1]),
            "the entropy is divided by log S (normalised); return it in nats, without dividing.",
        ),
    ),
    properties=(
        Property(
            "zero weights",
            "a weight of exactly 0 contributes 0 (the limit of p log p as p -> 0), but 0 · log 0 is 0 · "
            "(-inf) = NaN in floating point: take the log only where the weight is positive, and put 0 "
            "elsewhere.",
        ),
    ),
    hints=(
        "the entropy of one row p is H = -Σ_s p_s log p_s, summed over the keys; one number per query, "
        "shape (..., T).",
        "multiply each weight by its natural log, sum over the keys (the last dim) and flip the sign; "
        "that works while every weight is > 0. Masked keys have weight exactly 0, and 0 · log 0 is NaN "
        "in floating point: those terms must count as 0.",
        "a sketch: -(weights * torch.log(weights)).sum(dim=-1) for positive weights; for zeros, take the "
        "log only where the weight is positive (torch.where(weights > 0, ..., 0.0)), or use "
        "torch.special.entr, which is -p log p with 0 for p = 0.",
    ),
    difficulty=2,
)


# ---------------------------------------------------------------------------------------------------------
# 03.4 the d at which unscaled attention saturates (a measurement, checked by its crossing)


def _saturation_cases(g: torch.Generator) -> list[Case]:
    def qk(N: int, S: int, D: int, std: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        q = std * torch.randn(N, D, generator=g, dtype=torch.float64)  # (N, Dmax)
        k = std * torch.randn(N, S, D, generator=g, dtype=torch.float64)  # (N, S, Dmax)
        return q, k

    return [
        Case((*qk(40, 7, 50, std=1.5), 0.9)),
        Case((*qk(33, 5, 90), 0.8)),
        Case((*qk(25, 9, 45, std=2.0), 0.95)),
        Case((*qk(30, 6, 12), 0.99)),  # too few dimensions to get there: -1
        Case((*qk(21, 11, 70, std=1.2), 0.7)),
        Case((*qk(37, 8, 60, std=1.5), 0.9), group="the crossing"),
        Case((*qk(28, 7, 9), 0.97), group="the crossing"),  # none reaches it
    ]


def _mean_max_weight(
    q: torch.Tensor, k: torch.Tensor, *, scaled: bool = False, over: int = -1
) -> torch.Tensor:
    """The mean over queries (or keys, ``over=-2``) of the largest softmax weight, for d = 1 .. Dmax."""
    curve = []
    for d in range(1, q.shape[-1] + 1):
        scale = 1 / math.sqrt(d) if scaled else 1.0
        weights = attention_weights(q[:, None, :d], k[:, :, :d], scale=scale)[:, 0]  # (N, S)
        curve.append(weights.amax(dim=over).mean())
    return torch.stack(curve)  # (Dmax,)


def _first_reaching(curve: torch.Tensor, threshold: float, start: int = 1) -> torch.Tensor:
    """The first d (counted from ``start``) at which ``curve`` reaches ``threshold``, else -1."""
    reached = (curve >= threshold).nonzero()
    return torch.tensor(int(reached[0]) + start if len(reached) else -1)  # 0-d int64


def _saturation_reference(q: torch.Tensor, k: torch.Tensor, threshold: float) -> torch.Tensor:
    return _first_reaching(_mean_max_weight(q, k), threshold)  # 0-d int64: the smallest d, or -1


def _mean_at_crossing(q: torch.Tensor, k: torch.Tensor, threshold: float) -> torch.Tensor:
    curve = _mean_max_weight(q, k)  # (Dmax,)
    d = int(_first_reaching(curve, threshold))
    return curve[d - 1] if d > 0 else curve[-1]  # 0-d float64


def _crossing_holds(case: Case, output: torch.Tensor) -> str | None:
    """Recompute the mean max weight at every d with plain torch: the answer is where it first reaches the
    threshold (or -1 if it never does)."""
    q, k, threshold = case.args
    if output.ndim != 0 or output.is_floating_point() or output.dtype == torch.bool:
        return f"expected a 0-d integer tensor d, got shape {tuple(output.shape)} {output.dtype}"
    d, Dmax = int(output), q.shape[-1]
    scores = (q[:, None, :] * k).cumsum(dim=-1)  # (N, S, Dmax): [..., d - 1] uses the first d coordinates
    curve = torch.softmax(scores, dim=1).amax(dim=1).mean(dim=0)  # (Dmax,) mean over the N queries
    reached = [e + 1 for e in range(Dmax) if float(curve[e]) >= threshold]  # every d that reaches it

    def at(e: int) -> str:  # the mean max weight at d = e, and at d = e - 1
        before = f"{float(curve[e - 2]):.4f}" if e > 1 else "none, d = 1 is the first"
        return f"{float(curve[e - 1]):.4f} at d = {e} (at d - 1: {before})"

    if d == -1:
        return f"the mean max weight reaches {threshold}: {at(reached[0])}, so not -1" if reached else None
    if not 1 <= d <= Dmax:
        return f"d = {d} is neither -1 nor one of 1 .. {Dmax}"
    if float(curve[d - 1]) < threshold:
        return f"the mean max weight is below {threshold} at the answer: {at(d)}"
    if reached[0] < d:
        return f"the mean max weight reaches {threshold} before the answer: {at(reached[0])}; the answer has {at(d)}"
    return None


SATURATION_DIM = Exercise(
    exercise_id="03.4",
    kind="measure",
    title="the smallest d at which the unscaled softmax's mean max weight reaches a threshold",
    function_name="saturation_dim",
    arg_names=("q", "k", "threshold"),
    reference=_saturation_reference,
    make_cases=_saturation_cases,
    mistakes=(
        Mistake(
            lambda q, k, threshold: _first_reaching(_mean_max_weight(q, k, scaled=True), threshold),
            "the scores are divided by √d: scaled rows keep the same spread at every d, so they never "
            "saturate. Measure the unscaled scores of the first d coordinates.",
        ),
        Mistake(
            lambda q, k, threshold: _first_reaching(_mean_max_weight(q, k, over=-2), threshold),
            "the max is taken over the queries (for each key) instead of over the keys: each query's "
            "softmax weights (N, S) have their largest entry along the keys, the last dim; then average "
            "over the N queries.",
        ),
        Mistake(
            lambda q, k, threshold: _first_reaching(_mean_max_weight(q, k), threshold, start=0),
            "off by one: d counts coordinates, so the prefix of one coordinate is d = 1 (a Python index "
            "i stands for d = i + 1).",
        ),
        Mistake(
            _mean_at_crossing,
            "that is the mean max weight at the crossing; return the dimension d itself, as a 0-d int64 "
            "tensor.",
        ),
    ),
    properties=(
        Property(
            "the crossing",
            "at the returned d the mean (over the N queries) of each query's largest weight must reach the "
            "threshold, and at every smaller d stay below it; -1 only when no d up to Dmax reaches it.",
            holds=_crossing_holds,
        ),
    ),
    hints=(
        "for each d = 1, 2, ..., Dmax: the N rows of scores from the first d coordinates, their softmax over "
        "the S keys, the largest weight of each row, and the mean of those N numbers. Stop at the first d "
        "whose mean reaches the threshold.",
        "for one d, the score of query n with each of its S keys uses only the first d coordinates of "
        "both, with no 1/√d; a batched matrix product (keys (N, S, d) times the query as an (N, d, 1) "
        "column) or an elementwise product summed over the coordinates gives (N, S). The softmax then "
        "runs over the S keys.",
        "a sketch: loop d from 1 to Dmax; scores = (k[:, :, :d] @ q[:, :d, None]).squeeze(-1); weights = "
        "torch.softmax(scores, dim=-1); the mean of weights.amax(dim=-1); once that mean >= threshold, "
        "hand back torch.tensor(d); after the loop, the same for -1.",
    ),
    difficulty=3,
    minutes=20,
)


EXERCISES = (VARIANCE, JACOBIAN, ENTROPY, SATURATION_DIM)
