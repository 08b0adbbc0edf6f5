"""Attention as explanation, tested: Jain & Wallace (2019, "Attention is not Explanation"), section 4 (notebook 13).

Two questions about a trained model's attention:

1. **Do the weights rank the inputs as an importance measure does?** :func:`attention_received` (the weight
   each token receives) against :func:`leave_one_out` (how far the output moves when the token is hidden),
   compared by :func:`kendall_tau`.
2. **Do other weights change the output?** :func:`replaced_attention` makes chosen layers mix their values with
   counterfactual weights, :func:`shuffled_attention` (the same weights, moved among the visible keys) or
   :func:`uniform_attention` (spread evenly), while queries, keys and values stay the model's own.

The head scores, maps and ablations these build on are in :mod:`attn_edu.interp`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from attn_edu._validate import check_floating, check_positive_int, check_shape
from attn_edu.attention import attention_weights
from attn_edu.interp import attention_fns_wrapped, attention_layers, real_queries
from attn_edu.masks import causal_mask, combine_masks


def attention_received(weights: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean weight each key receives, averaged over the heads and the real queries: where a layer looks.

    With softmax rows (each real query's weights sum to 1), each sentence's row sums to 1 over its keys.

    Shapes:
        weights ``(B, H, T, S)``, attention_mask ``(B, S)``; returns ``(B, S)``.

    Example:
        >>> w = torch.tensor([[[[0.5, 0.5, 0.0], [1.0, 0.0, 0.0], [0.2, 0.3, 0.5]]]])   # query 2 is padding
        >>> attention_received(w, torch.tensor([[1, 1, 0]]))
        tensor([[0.7500, 0.2500, 0.0000]])
    """
    check_floating("weights", weights)
    H = check_shape("weights", weights, "B H T S")["H"]
    real = real_queries(weights, attention_mask)  # (B, T)
    received = (weights.float() * real[:, None, :, None]).sum(dim=(1, 2))  # (B, S)
    return received / (H * real.sum(-1, keepdim=True)).clamp(min=1.0)  # (B, S)


@torch.no_grad()
def leave_one_out(
    embed: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    batch_size: int = 256,
) -> torch.Tensor:
    """How much each token matters to an embedding: ``1 − cos(embed(sentence), embed(sentence without it))``.

    The token is hidden by setting its ``attention_mask`` entry to 0: no token can attend to it and a
    mean-pooled embedding skips it, while the others keep their positions. Leave-one-out is one of the
    importance measures Jain & Wallace (2019, section 4.1) compare attention with. Padding gets 0 (hiding
    it changes nothing). ``embed(input_ids, attention_mask)`` maps ``(N, T)`` to ``(N, C)``; the variants,
    one per real token, run ``batch_size`` at a time.

    Shapes:
        input_ids, attention_mask ``(B, T)``; returns ``(B, T)``.

    Example:
        >>> def bag_of_words(ids, mask):                  # the mean of one-hot vectors
        ...     one_hot = torch.nn.functional.one_hot(ids, 4).float() * mask[..., None]
        ...     return one_hot.sum(1) / mask.sum(1, keepdim=True)
        >>> leave_one_out(bag_of_words, torch.tensor([[1, 1, 2, 0]]), torch.tensor([[1, 1, 1, 0]]))
        tensor([[0.0513, 0.0513, 0.1056, 0.0000]])
    """
    B, T = check_shape("input_ids", input_ids, "B T").values()
    check_shape("attention_mask", attention_mask, "B T", B=B, T=T)
    check_positive_int("batch_size", batch_size)
    full = embed(input_ids, attention_mask)  # (B, C)
    rows, cols = attention_mask.nonzero(as_tuple=True)  # one variant per real token
    variants = attention_mask[rows].clone()  # (N, T)
    variants[torch.arange(len(rows)), cols] = 0  # hide that token
    importance = torch.zeros(B, T, dtype=full.dtype, device=full.device)
    for start in range(0, len(rows), batch_size):
        part = slice(start, start + batch_size)
        hidden = embed(input_ids[rows[part]], variants[part])  # (n, C)
        similarity = torch.nn.functional.cosine_similarity(hidden, full[rows[part]], dim=-1)  # (n,)
        importance[rows[part], cols[part]] = 1.0 - similarity
    return importance


def kendall_tau(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Kendall's rank correlation τ_b: +1 when ``x`` and ``y`` order the items alike, −1 when reversed.

    ``τ_b = Σ_{i<j} sign(x_i − x_j) sign(y_i − y_j) / sqrt(n_x n_y)``, with ``n_x`` (``n_y``) the pairs
    not tied in ``x`` (``y``) (Kendall, 1945). Only the order matters, so any increasing transform of
    ``x`` leaves τ unchanged. Jain & Wallace (2019, section 4.1) use it to compare attention with importance.

    Shapes:
        x, y ``(N,)``; returns a 0-dim tensor.

    Example:
        >>> kendall_tau(torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([10.0, 20.0, 40.0, 30.0]))  # 5 - 1 of 6 pairs
        tensor(0.6667)
    """
    check_shape("x", x, "N")
    check_shape("y", y, "N", N=x.shape[0])
    sx = torch.sign(x[:, None] - x[None, :]).double()  # (N, N): +1 where x_i > x_j
    sy = torch.sign(y[:, None] - y[None, :]).double()
    if not bool(sx.any()) or not bool(sy.any()):
        raise ValueError(f"x, y: τ needs two values that differ in each, got x={x.tolist()}, y={y.tolist()}")
    return ((sx * sy).sum() / ((sx * sx).sum() * (sy * sy).sum()).sqrt()).float()


def _check_allowed(weights: torch.Tensor, allowed: torch.Tensor) -> None:
    check_floating("weights", weights)
    if not isinstance(allowed, torch.Tensor) or allowed.dtype != torch.bool or allowed.shape != weights.shape:
        raise ValueError(
            f"allowed: expected a bool tensor of the weights' shape {tuple(weights.shape)} (True = may attend), "
            f"got {getattr(allowed, 'dtype', type(allowed).__name__)} {tuple(getattr(allowed, 'shape', ()))}"
        )


def shuffled_attention(
    weights: torch.Tensor, allowed: torch.Tensor, *, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Each query's weights moved to other keys at random, among the keys it may see (Jain & Wallace, 2019, §4.2.1).

    A row keeps its numbers (the same largest weight, the same entropy) on a random permutation of its
    visible keys; hidden keys keep 0. A transform for :func:`replaced_attention`.

    Shapes:
        weights ``(B, H, T, S)`` (or any ``(..., S)``), allowed bool of the same shape; returns that shape.

    Example:
        >>> w, allowed = torch.tensor([[0.7, 0.2, 0.1, 0.0]]), torch.tensor([[True, True, True, False]])
        >>> moved = shuffled_attention(w, allowed, generator=torch.Generator().manual_seed(0))
        >>> sorted(moved[0].tolist()) == sorted(w[0].tolist()), moved[0, 3].item()   # same numbers, key 3 hidden
        (True, 0.0)
    """
    _check_allowed(weights, allowed)
    noise = torch.rand(weights.shape, generator=generator).to(weights.device)  # (B, H, T, S)
    targets = noise.masked_fill(~allowed, 2.0).argsort(dim=-1)  # visible keys in random order, then hidden
    sources = (~allowed).long().argsort(dim=-1, stable=True)  # visible keys in their order, then hidden
    return torch.zeros_like(weights).scatter(-1, targets, weights.gather(-1, sources))  # (B, H, T, S)


def uniform_attention(weights: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Every query spreads its weight evenly over the keys it may see. A transform for :func:`replaced_attention`.

    Shapes:
        weights ``(B, H, T, S)`` (or any ``(..., S)``), allowed bool of the same shape; returns that shape.

    Example:
        >>> uniform_attention(torch.tensor([[0.9, 0.1, 0.0]]), torch.tensor([[True, True, False]]))
        tensor([[0.5000, 0.5000, 0.0000]])
    """
    _check_allowed(weights, allowed)
    visible = allowed.to(weights.dtype)  # (B, H, T, S)
    return visible / visible.sum(-1, keepdim=True).clamp(min=1.0)  # a query with no visible key: zeros


@contextmanager
def replaced_attention(
    model: nn.Module,
    transform: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    layers: Iterable[int] | None = None,
) -> Iterator[None]:
    """Inside the block, the chosen attention layers mix their values with ``transform(weights, allowed)``.

    ``weights`` are the layer's own softmax weights ``(B, H, T, S)``, ``allowed`` the keys each query may
    see (padding and causal masks). Queries, keys and values are the model's own; only the mixing changes:
    the counterfactual attention of Jain & Wallace (2019, section 4.2), e.g. :func:`shuffled_attention` or
    :func:`uniform_attention`. ``layers`` counts as :func:`attention_layers` does (default: every layer).
    The layer's ``attention_fn`` is swapped and put back on exit, even after an error. ``need_weights=True``
    still reports the original weights.

    Example:
        >>> from attn_edu.multihead import MultiHeadAttention
        >>> attn, x = MultiHeadAttention(8, 2), torch.randn(1, 4, 8)
        >>> with replaced_attention(attn, uniform_attention):        # every query reads the mean value
        ...     flat = attn(x)
        >>> torch.allclose(flat, attn.out_proj(attn.v_proj(x).mean(1, keepdim=True)).expand(1, 4, 8), atol=1e-6)
        True
    """
    found = attention_layers(model)
    chosen = list(range(len(found))) if layers is None else list(layers)
    for index in chosen:
        if not 0 <= index < len(found):
            raise ValueError(f"layers: layer {index} is out of range, the model has {len(found)} layers")

    def mix(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        is_causal: bool = False,
        scale: float | None = None,
        score_bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        weights = attention_weights(q, k, mask, is_causal=is_causal, scale=scale, score_bias=score_bias)
        causal = causal_mask(q.shape[-2], k.shape[-2], device=q.device) if is_causal else None
        allowed = combine_masks(mask, causal)  # True = may attend, or None: every key
        allowed = (
            torch.ones_like(weights, dtype=torch.bool) if allowed is None else allowed.expand_as(weights)
        )
        return transform(weights, allowed).to(v.dtype) @ v  # (B, H, T, Dv)

    with attention_fns_wrapped([found[index] for index in chosen], lambda _index, _original: mix):
        yield
