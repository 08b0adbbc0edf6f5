"""Checks for notebook 03's exercises: the variance of dot products, per-head scaled scores, attention entropy.

Each exercise runs the learner's function on random cases (sizes that are not powers of two, odd head
counts, ``T != S``) and compares it with a reference built on :mod:`attn_edu` and PyTorch; the known-wrong
versions below are the slips learners make most often, so a check can name the one it sees.
"""

from __future__ import annotations

import math

import torch

from attn_edu.attention import attention_entropy, attention_weights, masked_softmax
from attn_edu.grading.exercise import Case, Exercise, Mistake, Property, Question
from attn_edu.masks import causal_mask
from attn_edu.multihead import split_heads

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
            "that is the standard deviation (about sqrt(D)); the variance is its square: .var(), not .std().",
        ),
        Mistake(
            lambda q, k: ((q * k).sum(dim=-1) / math.sqrt(q.shape[-1])).var(dim=-1),
            "the dot products are divided by sqrt(D): that is the *scaled* variance (about 1). "
            "Measure the raw q·k here.",
        ),
        Mistake(
            lambda q, k: (q * k).flatten(-2).var(dim=-1),
            "that is the variance of single products q_i k_i; sum the D products of each pair first: "
            "q·k = (q * k).sum(dim=-1).",
        ),
        Mistake(
            lambda q, k: (q @ k.transpose(-2, -1)).flatten(-2).var(dim=-1),
            "q @ k.T pairs every q with every k; this exercise pairs q[n] with k[n] only: "
            "(q * k).sum(dim=-1).",
        ),
        Mistake(
            lambda q, k: (q * k).sum(dim=-1).mean(dim=-1),
            "that is the mean of the dot products (about 0); the variance is "
            "((dots - dots.mean())**2).sum() / (N - 1), i.e. dots.var(dim=-1).",
        ),
    ),
    hints=(
        "compute the N dot products first (one per pair, shape (..., N)), then their variance over N.",
        "an elementwise product q * k summed over the last dimension gives one dot product per pair; a matrix "
        "product q @ kᵀ would pair every q with every k (N² scores, not N).",
        "Tensor.var reduces over the dimension you name (here the pairs' one); keep the result a tensor (0-d "
        "for (N, D) inputs): .item() or float() would make it a Python number.",
    ),
    # N is a few hundred: dividing by N or by N - 1 differs by < 0.5%, and both estimators are fine.
    rtol=1e-2,
    atol=1e-6,
    minutes=5,
)


# ---------------------------------------------------------------------------------------------------------
# 03.2 per-head scaled scores


def _scores_cases(g: torch.Generator) -> list[Case]:
    def qk(B: int, T: int, S: int, C: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(B, T, C, generator=g), torch.randn(B, S, C, generator=g)

    return [
        Case((*qk(2, 5, 7, 12), 3)),  # D = 4
        Case((*qk(1, 4, 9, 30), 5)),  # D = 6
        Case((*qk(3, 6, 6, 21), 7)),  # D = 3
        Case((*qk(2, 3, 8, 40), 1)),  # a single head: D = C
        Case((*qk(1, 7, 5, 45), 3)),  # D = 15
    ]


def _scores_reference(q: torch.Tensor, k: torch.Tensor, num_heads: int) -> torch.Tensor:
    q_heads = split_heads(q, num_heads)  # (B, H, T, D)
    k_heads = split_heads(k, num_heads)  # (B, H, S, D)
    D = q_heads.shape[-1]
    return q_heads @ k_heads.transpose(-2, -1) / math.sqrt(D)  # (B, H, T, S)


def _raw_head_scores(q: torch.Tensor, k: torch.Tensor, num_heads: int) -> torch.Tensor:
    return split_heads(q, num_heads) @ split_heads(k, num_heads).transpose(-2, -1)  # (B, H, T, S)


def _scores_no_transpose(q: torch.Tensor, k: torch.Tensor, num_heads: int) -> torch.Tensor:
    # (B, T, C) viewed straight as (B, H, T, D) mixes tokens and channels
    B, T, C = q.shape
    S, D = k.shape[1], C // num_heads
    q_heads = q.reshape(B, num_heads, T, D)  # (B, H, T, D)
    k_heads = k.reshape(B, num_heads, S, D)  # (B, H, S, D)
    return q_heads @ k_heads.transpose(-2, -1) / math.sqrt(D)  # (B, H, T, S)


def _scores_strided_heads(q: torch.Tensor, k: torch.Tensor, num_heads: int) -> torch.Tensor:
    # head h takes channels h, h + H, h + 2H, ... instead of a contiguous slice
    B, T, C = q.shape
    S, D = k.shape[1], C // num_heads
    q_heads = q.view(B, T, D, num_heads).permute(0, 3, 1, 2)  # (B, H, T, D)
    k_heads = k.view(B, S, D, num_heads).permute(0, 3, 1, 2)  # (B, H, S, D)
    return q_heads @ k_heads.transpose(-2, -1) / math.sqrt(D)  # (B, H, T, S)


SCALED_SCORES = Exercise(
    exercise_id="03.2",
    title="per-head scores q_h k_hᵀ / sqrt(D) with D = C / num_heads",
    function_name="scaled_scores",
    arg_names=("q", "k", "num_heads"),
    reference=_scores_reference,
    make_cases=_scores_cases,
    mistakes=(
        Mistake(
            lambda q, k, H: _raw_head_scores(q, k, H) / math.sqrt(q.shape[-1]),
            "the scores are divided by sqrt(C), the model dimension; each head's scores are sums of "
            "D = C / num_heads products, so divide by sqrt(D).",
        ),
        Mistake(
            _raw_head_scores,
            "the scores are not scaled: divide q_h k_hᵀ by sqrt(D), D = C / num_heads.",
        ),
        Mistake(
            lambda q, k, H: _raw_head_scores(q, k, H) / (q.shape[-1] // H),
            "the scores are divided by D; the scale is 1 / sqrt(D).",
        ),
        Mistake(
            _scores_no_transpose,
            "the heads are split with a plain reshape to (B, H, T, D), which mixes tokens and channels: "
            "view (B, T, H, D) first, then .transpose(1, 2).",
        ),
        Mistake(
            _scores_strided_heads,
            "head h should own the contiguous channels h*D .. (h+1)*D - 1: view the last dim as "
            "(H, D), not (D, H).",
        ),
    ),
    hints=(
        "split q and k into heads: (B, T, C) -> (B, T, H, D) -> (B, H, T, D), with D = C // num_heads.",
        "scores = q_h @ k_h.transpose(-2, -1) has shape (B, H, T, S); each is a sum of D products, "
        "so divide by sqrt(D), not sqrt(C).",
        "view the last dimension as (num_heads, D) and move the head axis in front of the time axis "
        "(.transpose(1, 2)), for q (length T) and for k (length S); then one batched matrix product and the "
        "1/sqrt(D).",
    ),
    difficulty=2,
)


# ---------------------------------------------------------------------------------------------------------
# 03.3 entropy of attention rows


def _entropy_cases(g: torch.Generator) -> list[Case]:
    def weights(*shape: int, d: int = 8, scale: float = 1.0) -> torch.Tensor:
        q = torch.randn(*shape[:-1], d, generator=g)  # (..., T, D)
        k = torch.randn(*shape[:-2], shape[-1], d, generator=g)  # (..., S, D)
        return attention_weights(q, k, scale=scale / math.sqrt(d))  # (..., T, S), every weight > 0

    sparse = masked_softmax(torch.randn(6, 5, generator=g), causal_mask(6, 5))  # (T, S) rows 0 .. all zero
    one_hot = torch.eye(4, 7)  # (T, S) every row certain: entropy 0
    return [
        Case((weights(2, 3, 5, 7),)),
        Case((weights(4, 9),)),
        Case((weights(1, 5, 6, 11, scale=4.0),)),  # sharp rows
        Case((weights(3, 2, 4, d=32, scale=0.1),)),  # nearly uniform rows
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
            "that is the entropy in bits (log base 2); use the natural log (nats): torch.log.",
        ),
        Mistake(
            lambda w: -attention_entropy(w),
            "the sign is flipped: entropy is -Σ p log p, which is >= 0 because log p <= 0.",
        ),
        Mistake(
            lambda w: torch.special.entr(w).sum(dim=-2),
            "the sum runs over the queries (dim=-2); each row (one query) sums over its keys: dim=-1.",
        ),
        Mistake(
            lambda w: torch.special.entr(w).mean(dim=-1),
            "that is the mean of -p log p over the keys; the entropy is their sum over dim=-1.",
        ),
        Mistake(
            lambda w: attention_entropy(w) / math.log(w.shape[-1]),
            "the entropy is divided by log S (normalised); return it in nats, without dividing.",
        ),
    ),
    properties=(
        Property(
            "zero weights",
            "a weight of exactly 0 contributes 0 (the limit of p log p as p -> 0), but 0 * log(0) is "
            "0 * -inf = NaN in floating point: use torch.special.entr(p) or torch.where(p > 0, ..., 0.0).",
        ),
    ),
    hints=(
        "entropy of one row p: H = -Σ_s p_s log p_s, summed over the keys (dim=-1); shape (..., T).",
        "-(weights * torch.log(weights)).sum(dim=-1) works while every weight is > 0.",
        "masked keys have weight exactly 0, and 0 * log(0) = 0 * -inf = NaN in floating point: take the log "
        "only where the weight is positive (torch.where), or look in torch.special for -p log p with 0 for p = 0.",
    ),
    difficulty=2,
)


EXERCISES = (VARIANCE, SCALED_SCORES, ENTROPY)


# ---------------------------------------------------------------------------------------------------------
# Concept questions

VARIANCE_OF_A_SCORE = Question(
    exercise_id="03.q1",
    title="the variance of one unscaled score q·k for D = 256",
    answer=256,
    explanation=(
        "q·k is a sum of D = 256 products q_i k_i; each has mean 0 and variance E[q_i²] E[k_i²] = 1, and "
        "the products are independent, so their variances add: 256. Dividing by sqrt(256) = 16 brings it to 1."
    ),
    wrong=(
        (16, "16 is the standard deviation, sqrt(256); the question asks for the variance."),
        (
            1,
            "1 is the variance after dividing the score by sqrt(D); before, the D products' variances add up.",
        ),
    ),
    hints=(
        "write q·k as a sum of D products q_i k_i. What are the mean and the variance of one product?",
        "variances of independent terms add: Var(q·k) = D · Var(q_i k_i), and Var(q_i k_i) = E[q_i²] E[k_i²].",
    ),
    minutes=3,
)

SATURATION = Question(
    exercise_id="03.q2",
    title="what happens to softmax(q·k) without the 1/sqrt(D) as D grows",
    choices=(
        "the weights become uniform: large scores cancel in the normalisation",
        "each row approaches one-hot, and the gradients through the softmax shrink towards 0",
        "nothing: softmax is unchanged when a constant is added to every score",
        "the weights turn into NaN once D passes 64",
    ),
    answer="b",
    explanation=(
        "the scores' standard deviation grows as sqrt(D), so the gaps between them grow too and exp() "
        "magnifies them: the largest score takes nearly all the weight. The softmax's Jacobian, "
        "diag(p) - p pᵀ, goes to 0 as p becomes one-hot, so almost no gradient reaches q and k."
    ),
    wrong=(
        ("a", "uniform weights need equal scores; here the scores spread further apart as D grows."),
        (
            "c",
            "adding one constant to every score changes nothing, but a larger D multiplies the gaps between "
            "scores, and softmax does depend on those.",
        ),
        (
            "d",
            "torch.softmax subtracts each row's maximum before exp(), so it does not overflow; the problem is "
            "the shape of the weights, not NaN.",
        ),
    ),
    hints=("how does the spread of the scores change with D, and what does exp() do to large gaps?",),
    difficulty=2,
    minutes=3,
)

QUESTIONS = (VARIANCE_OF_A_SCORE, SATURATION)
