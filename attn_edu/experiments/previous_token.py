"""Separate or tied query and key maps, trained to read the previous token (trained in notebook 02).

The task: in a sequence of ``T`` distinct token vectors, token ``t`` must put its attention on token ``t - 1``
(cyclically: token 0 on the last one), the pattern of a *previous-token head*. The loss is the mean
cross-entropy of each token's attention weights against that target (:func:`previous_token_loss`).

With separate maps ``W_Q`` and ``W_K`` the loss goes to 0. With tied maps ``W_Q = W_K = W`` the score matrix
``S = (XW)(XW)ᵀ`` is a Gram matrix, symmetric and positive semidefinite, and the loss can never fall below
``log 3``, whatever ``W`` is:

* the loss is convex in ``S`` (a log-sum-exp minus a linear term, row by row), and both the loss and the set
  of Gram matrices stay the same when the tokens are relabelled cyclically (``t -> t + 1``);
* so averaging ``S`` over the ``T`` relabellings gives a Gram matrix with a loss at most as high (Jensen's
  inequality): a symmetric *circulant* matrix, whose entry ``(t, s)`` depends only on ``s - t``;
* in it every token scores its previous and its next token alike (symmetry) and itself at least as high
  (``|S_ts| <= sqrt(S_tt S_ss)`` in a Gram matrix, and the diagonal is constant): the weight on the previous
  token is at most 1/3, and the loss at least ``log 3``.

So the best tied map can be taken circulant, and :func:`best_tied_run` finds it by a convex search over the
circulant Gram matrices. Individual tokens are another matter: a tied map *can* send some tokens to their
predecessor (a shrinking spiral of queries does it for four of six, notebook 02 builds one); what it cannot do
is all of them at once at a low loss.

Shapes:
    x ``(T, C)`` with ``T <= C`` (distinct tokens, so that ``XW`` can be any matrix); scores and weights
    ``(T, T)``, rows the queries and columns the keys.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from attn_edu._validate import check_positive_int, check_shape


def previous_token_loss(scores: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of ``softmax(scores)`` against "each token reads the token before it" (cyclically).

    Computed from the scores with a log-softmax, so a weight too small to store (``e^-1000``) still counts
    with its true size. ``log T`` for uniform weights; 0 only when every token puts all its weight on its
    predecessor.

    Shapes:
        scores ``(..., T, T)`` (already scaled, before the softmax); returns ``(...)``.

    Example:
        >>> previous_token_loss(torch.zeros(6, 6))  # uniform weights: log 6
        tensor(1.7918)
    """
    sizes = check_shape("scores", scores, "... T S")
    T = sizes["T"]
    if sizes["S"] != T:
        raise ValueError(f"scores: expected a square (..., T, T) matrix, got {tuple(scores.shape)}")
    previous = torch.roll(torch.arange(T), 1)  # (T,): token t's target is t - 1, token 0's is T - 1
    log_weights = torch.log_softmax(scores, dim=-1)  # (..., T, T)
    return -log_weights[..., torch.arange(T), previous].mean(dim=-1)


@dataclass(frozen=True)
class PreviousTokenRun:
    """The scores a run ended with, and what they mean."""

    scores: torch.Tensor  # (T, T): q_t · k_s / sqrt(D) after training

    @property
    def weights(self) -> torch.Tensor:
        """The attention weights ``(T, T)``: each row sums to 1."""
        return torch.softmax(self.scores, dim=-1)

    @property
    def loss(self) -> float:
        """:func:`previous_token_loss` of the scores."""
        return previous_token_loss(self.scores).item()


def train_previous_token(
    x: torch.Tensor, *, tied: bool, steps: int = 100, seed: int = 1, lr: float = 0.1
) -> PreviousTokenRun:
    """Train ``W_Q`` and ``W_K`` (``C × C``, no bias) with Adam so that each token of ``x`` reads its predecessor.

    ``tied=True`` uses one map for both, ``W_Q = W_K``; the seed fixes the starting weights, so that both
    versions start from the same ``W_Q``.

    Shapes:
        x ``(T, C)``; the run's scores and weights ``(T, T)``.

    Example:
        >>> x = torch.randn(6, 8, generator=torch.Generator().manual_seed(0))
        >>> train_previous_token(x, tied=False).loss < 0.01
        True
        >>> train_previous_token(x, tied=True).loss > math.log(3)
        True
    """
    C = check_shape("x", x, "T C")["C"]
    check_positive_int("steps", steps)
    torch.manual_seed(seed)
    q_proj = nn.Linear(C, C, bias=False, dtype=x.dtype)
    k_proj = q_proj if tied else nn.Linear(C, C, bias=False, dtype=x.dtype)
    params = list(q_proj.parameters()) + ([] if tied else list(k_proj.parameters()))
    optimizer = torch.optim.Adam(params, lr=lr)

    def scores() -> torch.Tensor:
        q, k = q_proj(x), k_proj(x)  # (T, C) each
        return q @ k.T / math.sqrt(C)  # (T, T)

    for _ in range(steps):
        loss = previous_token_loss(scores())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        return PreviousTokenRun(scores())


def circulant(row: torch.Tensor) -> torch.Tensor:
    """The ``(T, T)`` matrix whose entry ``(t, s)`` is ``row[(s - t) % T]``: each row is the one before, shifted.

    Example:
        >>> circulant(torch.tensor([3, 1, 2]))
        tensor([[3, 1, 2],
                [2, 3, 1],
                [1, 2, 3]])
    """
    check_shape("row", row, "T")
    T = row.shape[0]
    offsets = (torch.arange(T)[None, :] - torch.arange(T)[:, None]) % T  # (T, T): s - t, cyclically
    return row[offsets]


def best_tied_run(T: int = 6, *, steps: int = 1000) -> PreviousTokenRun:
    """The lowest-loss tied map for ``T`` tokens: a circulant Gram matrix, found by a convex search (float64).

    A symmetric circulant matrix is a Gram matrix exactly when its eigenvalues ``λ_j`` (the discrete cosine
    transform of its first row, ``λ_j = λ_{T-j}``) are all ``>= 0``; its first row is then
    ``c_k = (1/T) Σ_j λ_j cos(2π jk / T)``. The loss is convex in ``c``, hence in ``λ``, so projected gradient
    steps (Adam, then clipping ``λ`` at 0) find its minimum. By the module's argument no tied map, circulant or
    not, has a lower loss. The scores are those of some tied ``W`` whenever ``T <= C``.

    Shapes:
        the run's scores and weights ``(T, T)``, float64.

    Example:
        >>> best = best_tied_run(6)
        >>> round(best.loss, 3), round(best.weights[0, 0].item(), 2)  # the weight a token keeps on itself
        (1.524, 0.39)
    """
    check_positive_int("T", T)
    if T < 3:
        raise ValueError(f"T: expected at least 3 tokens (a previous, a next and the token itself), got {T}")
    j = torch.arange(T, dtype=torch.float64)
    cosines = torch.cos(2 * math.pi * j[:, None] * j[None, :] / T)  # (T, T): cos(2π jk / T), symmetric
    mirror = torch.minimum(j, T - j).long()  # λ_j = λ_{T-j}: T // 2 + 1 free eigenvalues
    free = torch.ones(T // 2 + 1, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.Adam([free], lr=0.05)

    def first_row() -> torch.Tensor:
        return free[mirror] @ cosines / T  # (T,): c_k

    for _ in range(steps):
        row = first_row()
        loss = torch.logsumexp(row, dim=0) - row[T - 1]  # every row of a circulant has this loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            free.clamp_(min=0.0)  # back into the Gram matrices
    with torch.no_grad():
        return PreviousTokenRun(circulant(first_row()))
