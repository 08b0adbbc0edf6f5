"""Attention as a soft database lookup: score every key, turn scores into weights, average the values.

A Python ``dict`` does a *hard* lookup: the query matches one key and returns its value. Attention
does a *soft* one: every key gets a score, the softmax turns scores into weights that sum to 1, and
the answer is the weighted average of the values. Lowering the temperature sharpens the weights
until the soft lookup becomes the hard one.

The same recipe is much older than transformers: Nadaraya–Watson kernel regression (Nadaraya, 1964;
Watson, 1964) predicts ``y`` at ``x`` as a kernel-weighted average of the training targets ``y_i``,
which is attention with query ``x``, keys ``x_i`` and values ``y_i`` (Dive into Deep Learning,
chapter "Attention Pooling by Similarity"). What changes between methods is the *score*: dot
product (Luong et al., 2015), scaled dot product (Vaswani et al., 2017), additive (Bahdanau et al.,
2014), or a Gaussian kernel. The pooling step, :func:`attention_pool`, is always the same, and it is
the reference attention of :mod:`attn_edu.attention` (one softmax in the whole library).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attn_edu._validate import check_floating, check_shape
from attn_edu.attention import attention_weights, masked_softmax, scaled_dot_product_attention

# --- pooling: scores -> weights -> weighted average -------------------------------------------


def pool_weights(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Turn arbitrary scores into attention weights: a masked softmax over the keys.

    The same :func:`attn_edu.attention.masked_softmax` that the reference attention uses, so the
    rules match (hidden keys get weight 0, a query with no visible key gets a row of zeros).

    Shapes:
        scores ``(..., T, S)``, mask bool broadcastable to ``(..., T, S)`` (True = may attend);
        returns ``(..., T, S)``.

    Example:
        >>> pool_weights(torch.tensor([[0.0, 0.0, math.log(2.0)]]))     # weights 1 : 1 : 2
        tensor([[0.2500, 0.2500, 0.5000]])
    """
    check_shape("scores", scores, "... T S")  # masked_softmax checks the dtype and the mask
    return masked_softmax(scores, mask)  # (..., T, S)


def attention_pool(
    scores: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Attention pooling: ``softmax(scores) @ values``, for scores from any scoring function.

    ``out_t = sum_s softmax_s(scores_t) · values_s``: each output is a convex combination of the values.

    Shapes:
        scores ``(..., T, S)``, values ``(..., S, Dv)``, mask broadcastable to ``(..., T, S)``;
        returns ``(..., T, Dv)``.

    Example:
        >>> values = torch.tensor([[1.0], [3.0]])
        >>> attention_pool(torch.zeros(1, 2), values)            # equal scores: the plain mean
        tensor([[2.]])
    """
    S = check_shape("scores", scores, "... T S")["S"]
    check_floating("values", values)
    check_shape("values", values, "... S Dv", S=S)
    weights = masked_softmax(scores, mask)  # (..., T, S), checking the scores' dtype and the mask
    return weights.to(values.dtype) @ values  # (..., T, Dv)


# --- lookups: hard (one key wins) and soft (every key contributes) -------------------------------


def dot_product_score(query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Similarity of each query to each key: ``q · k`` (the "dot" score of Luong et al., 2015, section 3.1).

    Shapes:
        query ``(..., T, D)``, keys ``(..., S, D)``; returns ``(..., T, S)``.

    Example:
        >>> dot_product_score(torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0, 4.0], [1.0, 0.0]]))
        tensor([[11.,  1.]])
    """
    D = check_shape("query", query, "... T D")["D"]
    check_shape("keys", keys, "... S D", D=D)
    return query @ keys.transpose(-2, -1)  # (..., T, S)


def scaled_dot_product_score(query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """``q · k / sqrt(D)``: the dot product rescaled to unit variance for random unit-variance vectors.

    Vaswani et al., 2017, section 3.2.1 (notebook 03 measures why the scale matters).

    Shapes:
        query ``(..., T, D)``, keys ``(..., S, D)``; returns ``(..., T, S)``.

    Example:
        >>> scaled_dot_product_score(torch.ones(1, 4), torch.ones(1, 4))    # 4 / sqrt(4)
        tensor([[2.]])
    """
    return dot_product_score(query, keys) / math.sqrt(query.shape[-1])  # (..., T, S)


def hard_lookup_weights(query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """One-hot weights on the best-scoring key: what a ``dict`` lookup does, written as weights.

    The best key is the ``argmax`` of the dot product; ties go to the first key. With keys of equal
    length, the best key is the one pointing most nearly the query's way; a query equal to a key
    matches it exactly.

    Shapes:
        query ``(..., T, D)``, keys ``(..., S, D)``; returns ``(..., T, S)`` with a single 1 per row.

    Example:
        >>> keys = torch.eye(3)                         # three orthogonal unit keys
        >>> hard_lookup_weights(torch.tensor([[0.2, 0.9, 0.1]]), keys)
        tensor([[0., 1., 0.]])
    """
    scores = dot_product_score(query, keys)  # (..., T, S)
    best = scores.argmax(dim=-1)  # (..., T)
    return nn.functional.one_hot(best, scores.shape[-1]).to(scores.dtype)  # (..., T, S)


def hard_lookup(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Return the value of the best-matching key for each query (no blending, no gradient to the keys).

    Shapes:
        query ``(..., T, D)``, keys ``(..., S, D)``, values ``(..., S, Dv)``; returns ``(..., T, Dv)``.

    Example:
        >>> keys, values = torch.eye(3), torch.tensor([[10.0], [20.0], [30.0]])
        >>> hard_lookup(torch.tensor([[0.0, 0.0, 1.0]]), keys, values)
        tensor([[30.]])
    """
    S = check_shape("keys", keys, "... S D")["S"]
    check_shape("values", values, "... S Dv", S=S)
    return hard_lookup_weights(query, keys) @ values  # (..., T, Dv)


def _check_temperature(temperature: float) -> float:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"temperature: expected a number > 0, got {temperature!r}")
    return float(temperature)


def soft_lookup_weights(query: torch.Tensor, keys: torch.Tensor, *, temperature: float = 1.0) -> torch.Tensor:
    """Softmax weights over the keys: ``softmax(q · k / temperature)``.

    Large temperature: nearly uniform weights (every key counts the same). Temperature towards 0:
    the weights approach the one-hot :func:`hard_lookup_weights` (when the best key is unique).

    Shapes:
        query ``(..., T, D)``, keys ``(..., S, D)``; returns ``(..., T, S)``, rows summing to 1.

    Example:
        >>> keys, q = torch.eye(2), torch.tensor([[1.0, 0.0]])
        >>> soft_lookup_weights(q, keys, temperature=1.0)             # e / (e + 1)
        tensor([[0.7311, 0.2689]])
        >>> soft_lookup_weights(q, keys, temperature=0.01)
        tensor([[1., 0.]])
    """
    temperature = _check_temperature(temperature)
    return attention_weights(query, keys, scale=1.0 / temperature)  # (..., T, S)


def soft_lookup(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, *, temperature: float = 1.0
) -> torch.Tensor:
    """Blend all values, weighted by ``softmax(q · k / temperature)``: attention with ``scale = 1/temperature``.

    This is the reference :func:`attn_edu.attention.scaled_dot_product_attention`; the usual
    ``1/sqrt(D)`` scale is the temperature ``sqrt(D)``.

    Shapes:
        query ``(..., T, D)``, keys ``(..., S, D)``, values ``(..., S, Dv)``; returns ``(..., T, Dv)``.

    Example:
        >>> keys, values = torch.eye(2), torch.tensor([[0.0], [1.0]])
        >>> soft_lookup(torch.tensor([[0.0, 0.0]]), keys, values)     # equal scores: the mean
        tensor([[0.5000]])
    """
    temperature = _check_temperature(temperature)
    return scaled_dot_product_attention(query, keys, values, scale=1.0 / temperature)  # (..., T, Dv)


# --- additive score (Bahdanau) -----------------------------------------------------------------


class AdditiveScore(nn.Module):
    """Additive attention score ``v^T tanh(W_q q + W_k k)``: a one-hidden-layer network per (query, key) pair.

    Bahdanau et al., 2014, "Neural Machine Translation by Jointly Learning to Align and Translate",
    section 3.1 and appendix A.1.2 (there ``e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j)``, without biases).
    Unlike the dot product it works when queries and keys have different sizes, at the price of a
    ``(T, S, hidden_dim)`` intermediate. Turn the scores into an output with :func:`attention_pool`.

    Shapes:
        query ``(..., T, query_dim)``, keys ``(..., S, key_dim)``; returns scores ``(..., T, S)``.

    Example:
        >>> score = AdditiveScore(query_dim=3, key_dim=5, hidden_dim=4)
        >>> score(torch.randn(2, 6, 3), torch.randn(2, 7, 5)).shape     # (B, T, S)
        torch.Size([2, 6, 7])
    """

    def __init__(self, query_dim: int, key_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.q_proj = nn.Linear(query_dim, hidden_dim, bias=False)  # W_q (W_a in the paper)
        self.k_proj = nn.Linear(key_dim, hidden_dim, bias=False)  # W_k (U_a in the paper)
        self.score_proj = nn.Linear(hidden_dim, 1, bias=False)  # v (v_a in the paper)

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        check_shape("query", query, "... T D", D=self.q_proj.in_features)
        check_shape("keys", keys, "... S D", D=self.k_proj.in_features)
        q = self.q_proj(query)[..., :, None, :]  # (..., T, 1, hidden)
        k = self.k_proj(keys)[..., None, :, :]  # (..., 1, S, hidden)
        return self.score_proj(torch.tanh(q + k)).squeeze(-1)  # (..., T, S)


class DotProductScore(nn.Module):
    """Learned projections, then the scaled dot product: ``(W_q q) · (W_k k) / sqrt(D)``.

    The transformer's score (Vaswani et al., 2017, section 3.2.1, with the projections of section 3.2.2);
    as a bilinear form ``qᵀ W_qᵀ W_k k / sqrt(D)`` it is the "general" score of Luong et al. (2015,
    section 3.1) with a matrix of rank at most ``D``. Like :class:`AdditiveScore` it takes queries and keys
    of different sizes, but it never builds a ``(T, S, D)`` tensor: one matrix product gives every score.

    Shapes:
        query ``(..., T, query_dim)``, keys ``(..., S, key_dim)``; returns scores ``(..., T, S)``.

    Example:
        >>> score = DotProductScore(query_dim=3, key_dim=5, head_dim=4)
        >>> score(torch.randn(2, 6, 3), torch.randn(2, 7, 5)).shape     # (B, T, S)
        torch.Size([2, 6, 7])
    """

    def __init__(self, query_dim: int, key_dim: int, head_dim: int) -> None:
        super().__init__()
        self.q_proj = nn.Linear(query_dim, head_dim, bias=False)  # W_q
        self.k_proj = nn.Linear(key_dim, head_dim, bias=False)  # W_k

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        check_shape("query", query, "... T D", D=self.q_proj.in_features)
        check_shape("keys", keys, "... S D", D=self.k_proj.in_features)
        return scaled_dot_product_score(self.q_proj(query), self.k_proj(keys))  # (..., T, S)


# --- kernel regression: attention pooling before neural networks ---------------------------------


def _as_points(name: str, x: torch.Tensor) -> torch.Tensor:
    """Scalars ``(N,)`` become one-dimensional points ``(N, 1)``; points ``(..., N, D)`` pass through."""
    check_floating(name, x)
    return x[:, None] if x.ndim == 1 else x  # (..., N, D)


def gaussian_kernel_score(x_query: torch.Tensor, x_train: torch.Tensor, bandwidth: float) -> torch.Tensor:
    """Gaussian-kernel score ``-||x - x_i||² / (2 σ²)``; its softmax is the normalised Gaussian kernel.

    ``softmax_i(-||x - x_i||² / (2σ²)) = K(x - x_i) / sum_j K(x - x_j)`` with ``K(u) = exp(-||u||² / (2σ²))``:
    the Nadaraya–Watson weights. The bandwidth ``σ`` plays the role of a temperature.

    Shapes:
        x_query ``(T,)`` or ``(..., T, D)``, x_train ``(S,)`` or ``(..., S, D)``; returns ``(..., T, S)``.

    Example:
        >>> gaussian_kernel_score(torch.tensor([1.0]), torch.tensor([0.0, 3.0]), bandwidth=1.0)
        tensor([[-0.5000, -2.0000]])
    """
    if isinstance(bandwidth, bool) or not isinstance(bandwidth, (int, float)) or not bandwidth > 0:
        raise ValueError(f"bandwidth: expected a number > 0, got {bandwidth!r}")
    xq, xt = _as_points("x_query", x_query), _as_points("x_train", x_train)
    D = check_shape("x_query", xq, "... T D")["D"]
    check_shape("x_train", xt, "... S D", D=D)
    diff = xq[..., :, None, :] - xt[..., None, :, :]  # (..., T, S, D)
    return -diff.pow(2).sum(-1) / (2.0 * bandwidth**2)  # (..., T, S)


def _pool_targets(scores: torch.Tensor, y_train: torch.Tensor) -> torch.Tensor:
    """Pool scalar targets ``(S,)`` or vector targets ``(S, Dv)`` with the given scores."""
    check_floating("y_train", y_train)
    if y_train.ndim == 1:
        return attention_pool(scores, y_train[:, None]).squeeze(-1)  # (..., T)
    return attention_pool(scores, y_train)  # (..., T, Dv)


def average_pool(x_query: torch.Tensor, y_train: torch.Tensor) -> torch.Tensor:
    """Baseline: predict the mean of the training targets everywhere (attention with equal scores).

    Shapes:
        x_query ``(T,)`` or ``(T, D)``, y_train ``(S,)`` or ``(S, Dv)``; returns ``(T,)`` or ``(T, Dv)``.

    Example:
        >>> average_pool(torch.tensor([0.0, 5.0]), torch.tensor([1.0, 2.0, 6.0]))
        tensor([3., 3.])
    """
    T = _as_points("x_query", x_query).shape[-2]
    S = y_train.shape[0]
    return _pool_targets(y_train.new_zeros(T, S), y_train)  # (T,) or (T, Dv)


def nadaraya_watson(
    x_query: torch.Tensor, x_train: torch.Tensor, y_train: torch.Tensor, *, bandwidth: float = 1.0
) -> torch.Tensor:
    """Nadaraya–Watson kernel regression: a Gaussian-weighted average of the training targets.

        f(x) = sum_i  K(x - x_i) / sum_j K(x - x_j) · y_i,    K(u) = exp(-||u||² / (2σ²))

    (Nadaraya, 1964, "On estimating regression"; Watson, 1964, "Smooth regression analysis".)
    In attention terms: query ``x``, keys ``x_i``, values ``y_i``, score :func:`gaussian_kernel_score`,
    pooled by :func:`attention_pool`. A tiny bandwidth reproduces the nearest training target (it
    interpolates the training points); a huge one returns the mean of all targets (:func:`average_pool`).

    Shapes:
        x_query ``(T,)`` or ``(T, D)``, x_train ``(S,)`` or ``(S, D)``, y_train ``(S,)`` or ``(S, Dv)``;
        returns ``(T,)`` or ``(T, Dv)``.

    Example:
        >>> x_train, y_train = torch.tensor([0.0, 1.0]), torch.tensor([0.0, 10.0])
        >>> nadaraya_watson(torch.tensor([0.5]), x_train, y_train)       # halfway: equal weights
        tensor([5.])
    """
    scores = gaussian_kernel_score(x_query, x_train, bandwidth)  # (T, S)
    if y_train.shape[0] != scores.shape[-1]:
        raise ValueError(
            f"y_train: expected shape (S,) or (S, Dv) with S={scores.shape[-1]} (one target per "
            f"x_train point), got {tuple(y_train.shape)}"
        )
    return _pool_targets(scores, y_train)  # (T,) or (T, Dv)
