"""Cheaper attention: sparse patterns, linear attention, random features, and mixture-of-experts FFNs.

Full attention costs ``O(T·S)`` per head. Three ways around it, each in its own section:

1. **Sparse patterns** (Longformer, Beltagy et al. 2020; BigBird, Zaheer et al. 2020): let each query
   see only some keys. Here they are boolean masks (``True`` = may attend) used with the reference
   attention, so you can *see* the pattern and measure its density; a real implementation would
   compute only the allowed blocks. Patterns are combined with ``|`` (a key is visible if *any*
   pattern allows it), unlike :func:`attn_edu.masks.combine_masks`, which intersects.
2. **Linear attention** (Katharopoulos et al. 2020): replace ``exp(q·k)`` by ``φ(q)·φ(k)`` and
   reassociate ``(φ(Q) φ(K)ᵀ) V = φ(Q) (φ(K)ᵀ V)``: ``O(T·D²)`` instead of ``O(T²·D)``, and in the
   causal case an RNN with a ``(D, Dv)`` state.
3. **Performer** (Choromanski et al. 2021): random features whose dot product is, on average,
   exactly ``exp(q·k)``, so linear attention *approximates softmax attention*.

A last section routes tokens to experts (Shazeer et al. 2017; Switch Transformer, Fedus et al. 2022):
not an attention trick, but the other way large models spend compute sparsely.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attn_edu._validate import (
    check_floating,
    check_positive_int,
    check_same_dtype,
    check_scale,
    check_shape,
    check_tensor,
)

# ----------------------------------------------------------------------------------------------
# 1. Sparse attention patterns (boolean masks, True = may attend, bottom-right aligned)
# ----------------------------------------------------------------------------------------------


def _offsets(T: int, S: int | None, device: torch.device | str | None = None) -> torch.Tensor:
    """``offset[t, s] = (S - T + t) - s``: how far key ``s`` lies behind query ``t`` (negative = ahead).

    Query ``t`` sits at absolute position ``S - T + t`` (bottom-right alignment, as in
    :func:`attn_edu.masks.causal_mask`).
    """
    check_positive_int("T", T)
    S = T if S is None else check_positive_int("S", S)
    rows = torch.arange(T, device=device)[:, None] + (S - T)  # (T, 1)
    cols = torch.arange(S, device=device)[None, :]  # (1, S)
    return rows - cols  # (T, S)


def sliding_window_mask(T: int, S: int | None = None, *, window: int, causal: bool = True) -> torch.Tensor:
    """Each query sees only the keys within ``window`` positions of itself (a local band).

    Causal: key ``s`` is visible from query position ``p`` when ``0 <= p - s < window`` (itself and the
    ``window - 1`` keys before it, as in Mistral's sliding window). Not causal: ``|p - s| < window``,
    a band of ``2·window - 1`` keys (Longformer §3.1 counts its window ``w`` as the total width;
    Hugging Face's bidirectional ``sliding_window=w`` means ``|p - s| <= w``, our ``window=w + 1``).
    Stacking L such layers lets information travel ``L·window`` positions.

    Shapes:
        returns ``(T, S)`` bool, ``S`` defaults to ``T``.

    Example:
        >>> sliding_window_mask(5, window=2).int()
        tensor([[1, 0, 0, 0, 0],
                [1, 1, 0, 0, 0],
                [0, 1, 1, 0, 0],
                [0, 0, 1, 1, 0],
                [0, 0, 0, 1, 1]], dtype=torch.int32)
    """
    check_positive_int("window", window)
    offset = _offsets(T, S)  # (T, S)
    if causal:
        return (offset >= 0) & (offset < window)  # (T, S)
    return offset.abs() < window  # (T, S)


def dilated_window_mask(
    T: int, S: int | None = None, *, window: int, dilation: int, causal: bool = True
) -> torch.Tensor:
    """A sliding window with gaps: ``window`` keys spaced ``dilation`` apart (Longformer §3.1).

    Causal: key ``s`` is visible from position ``p`` when ``d = p - s`` is one of ``0, dilation, ...,
    (window - 1)·dilation``. Not causal: ``|d|`` is. The same number of keys reaches ``dilation`` times
    further; ``dilation=1`` is :func:`sliding_window_mask`.

    Shapes:
        returns ``(T, S)`` bool, ``S`` defaults to ``T``.

    Example:
        >>> dilated_window_mask(5, window=2, dilation=2).int()
        tensor([[1, 0, 0, 0, 0],
                [0, 1, 0, 0, 0],
                [1, 0, 1, 0, 0],
                [0, 1, 0, 1, 0],
                [0, 0, 1, 0, 1]], dtype=torch.int32)
    """
    check_positive_int("window", window)
    check_positive_int("dilation", dilation)
    offset = _offsets(T, S)  # (T, S)
    distance = offset if causal else offset.abs()  # (T, S)
    return (distance >= 0) & (distance % dilation == 0) & (distance < window * dilation)  # (T, S)


def _positions(name: str, positions: torch.Tensor | list[int], size: int) -> torch.Tensor:
    """Validate a list of positions in ``0 .. size - 1``; return a long tensor."""
    positions = torch.as_tensor(positions, dtype=torch.long)
    if positions.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D list of positions, got shape {tuple(positions.shape)}")
    if positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= size):
        raise ValueError(f"{name}: expected positions in 0 .. {size - 1}, got {positions.tolist()}")
    return positions


def global_tokens_mask(
    T: int, S: int | None = None, *, global_positions: torch.Tensor | list[int]
) -> torch.Tensor:
    """Longformer's global attention: global tokens attend everywhere and every token attends to them.

    ``global_positions`` are absolute positions (``0 .. S - 1``), e.g. ``[0]`` for a ``[CLS]`` token.
    A query at absolute position ``S - T + t`` that is global gets a full row; a global key gets a full
    column (Beltagy et al. 2020, §3.1, "Global Attention"). Combine with a window by ``|``.

    Shapes:
        returns ``(T, S)`` bool, ``S`` defaults to ``T``.

    Example:
        >>> global_tokens_mask(4, global_positions=[1]).int()
        tensor([[0, 1, 0, 0],
                [1, 1, 1, 1],
                [0, 1, 0, 0],
                [0, 1, 0, 0]], dtype=torch.int32)
    """
    check_positive_int("T", T)
    S = T if S is None else check_positive_int("S", S)
    is_global = torch.zeros(S, dtype=torch.bool)  # (S,)
    is_global[_positions("global_positions", global_positions, S)] = True
    query_positions = torch.arange(T) + (S - T)  # (T,): absolute positions, bottom-right aligned
    query_is_global = torch.isin(query_positions, is_global.nonzero().flatten())  # (T,)
    return query_is_global[:, None] | is_global[None, :]  # (T, S)


def random_blocks_mask(
    T: int,
    S: int | None = None,
    *,
    num_random: int,
    generator: torch.Generator | None,
    block_size: int = 1,
) -> torch.Tensor:
    """BigBird's random attention: each block of queries sees ``num_random`` key blocks drawn at random.

    Queries and keys are cut into blocks of ``block_size`` (the last may be shorter); every query
    block picks ``num_random`` distinct key blocks uniformly (Zaheer et al. 2020, §2 and App. D, where
    blocks make the sparse product fast on accelerators). ``block_size=1`` picks single keys.
    Pass a seeded ``generator`` for a reproducible pattern.

    Shapes:
        returns ``(T, S)`` bool, ``S`` defaults to ``T``.

    Example:
        >>> m = random_blocks_mask(6, num_random=2, generator=torch.Generator().manual_seed(0))
        >>> m.sum(dim=-1).tolist()                  # two keys per query
        [2, 2, 2, 2, 2, 2]
    """
    check_positive_int("T", T)
    S = T if S is None else check_positive_int("S", S)
    check_positive_int("num_random", num_random)
    check_positive_int("block_size", block_size)
    num_q_blocks, num_k_blocks = -(-T // block_size), -(-S // block_size)
    if num_random > num_k_blocks:
        raise ValueError(
            f"num_random: expected at most {num_k_blocks} (the number of key blocks), got {num_random}"
        )
    # A random permutation per query block; its first num_random entries are the chosen key blocks.
    noise = torch.rand(num_q_blocks, num_k_blocks, generator=generator)  # (T/b, S/b)
    chosen = noise.argsort(dim=-1)[:, :num_random]  # (T/b, num_random)
    block_mask = torch.zeros(num_q_blocks, num_k_blocks, dtype=torch.bool)  # (T/b, S/b)
    block_mask.scatter_(1, chosen, True)
    full = block_mask.repeat_interleave(block_size, 0).repeat_interleave(block_size, 1)  # (T', S')
    return full[:T, :S]  # (T, S)


def bigbird_mask(
    T: int,
    *,
    window: int,
    global_positions: torch.Tensor | list[int],
    num_random: int,
    generator: torch.Generator | None,
    block_size: int = 1,
) -> torch.Tensor:
    """BigBird's pattern: a local window, a few global tokens and a few random keys per query.

    ``mask = window | global | random`` (Zaheer et al. 2020, §2, Fig. 1). The window is not causal
    (BigBird is an encoder pattern): ``|t - s| < window``. Its density falls like ``1/T`` as the
    sequence grows, yet the paper shows the pattern keeps full attention's expressive power.

    Shapes:
        returns ``(T, T)`` bool.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> m = bigbird_mask(64, window=3, global_positions=[0], num_random=2, generator=g)
        >>> m.shape, round(mask_density(m), 2)
        (torch.Size([64, 64]), 0.13)
    """
    local = sliding_window_mask(T, window=window, causal=False)  # (T, T)
    glob = global_tokens_mask(T, global_positions=global_positions)  # (T, T)
    rand = random_blocks_mask(T, num_random=num_random, generator=generator, block_size=block_size)  # (T, T)
    return local | glob | rand  # (T, T)


def mask_density(mask: torch.Tensor) -> float:
    """Fraction of (query, key) pairs a mask allows: the cost relative to full attention.

    Example:
        >>> from attn_edu.masks import causal_mask
        >>> mask_density(causal_mask(4))          # 10 of 16 pairs
        0.625
    """
    check_tensor("mask", mask)
    if mask.dtype != torch.bool:
        raise ValueError(f"mask: expected a bool mask (True = may attend), got dtype {mask.dtype}")
    if mask.numel() == 0:
        raise ValueError(f"mask: expected a non-empty mask, got shape {tuple(mask.shape)}")
    return mask.float().mean().item()


# ----------------------------------------------------------------------------------------------
# 2. Linear attention (Katharopoulos et al. 2020)
# ----------------------------------------------------------------------------------------------


def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    """``φ(x) = elu(x) + 1``: a positive feature map, so ``φ(q)·φ(k) > 0`` acts like a similarity.

    Katharopoulos et al. 2020, §3.2.1, eq. 7.

    Example:
        >>> elu_feature_map(torch.tensor([-1.0, 0.0, 2.0]))
        tensor([0.3679, 1.0000, 3.0000])
    """
    return F.elu(x) + 1


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: object) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_floating(name, x)
    check_same_dtype(q=q, k=k, v=v)
    sizes = check_shape("q", q, "... T D")
    k_sizes = check_shape("k", k, "... S D", D=sizes["D"])
    check_shape("v", v, "... S Dv", S=k_sizes["S"])
    if mask is not None:
        raise ValueError(
            "mask: linear attention never forms the (T, S) score matrix, so it cannot apply an arbitrary "
            "mask; pass mask=None (is_causal=True is supported)"
        )


def _linear_attention(
    q_features: torch.Tensor, k_features: torch.Tensor, v: torch.Tensor, is_causal: bool, eps: float
) -> torch.Tensor:
    """``φ(Q) (φ(K)ᵀ V) / φ(Q) (φ(K)ᵀ 1)`` given the features; causal via prefix sums."""
    T, S = q_features.shape[-2], k_features.shape[-2]
    qf, kf, vf = q_features.float(), k_features.float(), v.float()
    if not is_causal:
        kv = kf.transpose(-2, -1) @ vf  # (..., F, Dv): sum_s φ(k_s) v_sᵀ, computed once
        z = kf.sum(dim=-2)  # (..., F): sum_s φ(k_s)
        numerator = qf @ kv  # (..., T, Dv)
        denominator = (qf * z[..., None, :]).sum(dim=-1)  # (..., T)
    else:
        # Query t (absolute position S - T + t) needs the sums over keys 0 .. S - T + t: prefix sums.
        kv = torch.cumsum(kf[..., :, None] * vf[..., None, :], dim=-3)  # (..., S, F, Dv)
        z = torch.cumsum(kf, dim=-2)  # (..., S, F)
        if T > S:  # the first T - S queries come before every key: empty sums
            kv = torch.cat(
                [kv.new_zeros(*kv.shape[:-3], T - S, *kv.shape[-2:]), kv], dim=-3
            )  # (..., T, F, Dv)
            z = torch.cat([z.new_zeros(*z.shape[:-2], T - S, z.shape[-1]), z], dim=-2)  # (..., T, F)
        kv, z = kv[..., -T:, :, :], z[..., -T:, :]  # (..., T, F, Dv), (..., T, F)
        numerator = (qf[..., :, None, :] @ kv).squeeze(-2)  # (..., T, Dv)
        denominator = (qf * z).sum(dim=-1)  # (..., T)
    # eps keeps 0/0 away: a query with no visible key gets numerator 0, so output 0.
    return (numerator / (denominator[..., None] + eps)).to(v.dtype)  # (..., T, Dv)


def linear_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: None = None,
    *,
    feature_map: Callable[[torch.Tensor], torch.Tensor] = elu_feature_map,
    is_causal: bool = False,
    scale: float | None = None,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Linear attention, parallel form: ``out_t = φ(q_t)ᵀ Σ_s φ(k_s) v_sᵀ / φ(q_t)ᵀ Σ_s φ(k_s)``.

    Softmax attention weights key ``s`` by ``exp(q_t·k_s)``; linear attention uses ``φ(q_t)·φ(k_s)``
    (Katharopoulos et al. 2020, eq. 4-6). Because the kernel factorises, ``Σ_s φ(k_s) v_sᵀ`` is shared
    by every query: the cost is ``O(T·F·Dv)`` instead of ``O(T·S·D)``. Causal (bottom-right): query
    ``t`` uses prefix sums over keys ``0 .. S - T + t`` (eq. 8-9).

    The result is *not* softmax attention; it is a different model with a different inductive bias.
    ``mask`` must be ``None`` (there is no score matrix to mask); it is there only so the function
    has the course's common signature. ``scale`` (default none) multiplies ``q`` before ``φ``.

    Shapes:
        q ``(..., T, D)``, k ``(..., S, D)``, v ``(..., S, Dv)``; returns ``(..., T, Dv)``.

    Example:
        >>> q, k, v = torch.randn(2, 6, 4), torch.randn(2, 6, 4), torch.randn(2, 6, 3)
        >>> out = linear_attention(q, k, v, is_causal=True)
        >>> torch.allclose(out, linear_attention_recurrent(q, k, v), atol=1e-5)
        True
    """
    _check_qkv(q, k, v, mask)
    if scale is not None:
        q = q * check_scale(scale, q.shape[-1])
    return _linear_attention(feature_map(q), feature_map(k), v, is_causal, eps)


def linear_attention_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    feature_map: Callable[[torch.Tensor], torch.Tensor] = elu_feature_map,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Causal linear attention as an RNN: a ``(F, Dv)`` state updated once per token.

    ``S_t = S_{t-1} + φ(k_t) v_tᵀ``, ``z_t = z_{t-1} + φ(k_t)``, ``out_t = φ(q_t)ᵀ S_t / φ(q_t)ᵀ z_t``
    (Katharopoulos et al. 2020, §3.4, "Transformers are RNNs"). Each step costs ``O(F·Dv)`` whatever
    the position, so a sequence costs ``O(T·F·Dv)`` (``O(n·d²)``) and generation needs no growing
    KV cache. Equal to ``linear_attention(..., is_causal=True)``; bottom-right aligned when ``S != T``.

    Shapes:
        q ``(..., T, D)``, k ``(..., S, D)``, v ``(..., S, Dv)``; returns ``(..., T, Dv)``.

    Example:
        >>> out = linear_attention_recurrent(torch.randn(5, 4), torch.randn(5, 4), torch.randn(5, 2))
        >>> out.shape
        torch.Size([5, 2])
    """
    _check_qkv(q, k, v, None)
    T, S = q.shape[-2], k.shape[-2]
    qf, kf, vf = feature_map(q).float(), feature_map(k).float(), v.float()
    batch = torch.broadcast_shapes(qf.shape[:-2], kf.shape[:-2], vf.shape[:-2])
    state = torch.zeros(*batch, kf.shape[-1], vf.shape[-1], device=q.device)  # (..., F, Dv): S_t
    z = torch.zeros(*batch, kf.shape[-1], device=q.device)  # (..., F): z_t
    outputs = []
    seen = 0  # keys folded into the state so far
    for t in range(T):
        while seen <= S - T + t:  # absorb every key up to this query's absolute position
            state = state + kf[..., seen, :, None] * vf[..., seen, None, :]  # (..., F, Dv)
            z = z + kf[..., seen, :]  # (..., F)
            seen += 1
        numerator = (qf[..., t, None, :] @ state).squeeze(-2)  # (..., Dv)
        denominator = (qf[..., t, :] * z).sum(dim=-1, keepdim=True)  # (..., 1)
        outputs.append(numerator / (denominator + eps))
    return torch.stack(outputs, dim=-2).to(v.dtype)  # (..., T, Dv)


# ----------------------------------------------------------------------------------------------
# 3. Performer: FAVOR+ random features (Choromanski et al. 2021)
# ----------------------------------------------------------------------------------------------


def orthogonal_random_matrix(
    num_features: int, dim: int, *, generator: torch.Generator | None
) -> torch.Tensor:
    """``num_features`` random projection rows, orthogonal within each block of ``dim`` rows.

    Each block is the Q factor of a Gaussian matrix (orthonormal rows); each row is then rescaled to
    the norm of an independent Gaussian vector, so every row is still marginally ``N(0, I)`` but the
    rows do not overlap. Orthogonal features lower the estimator's variance (Choromanski et al. 2021,
    §2.4, "ORFs").

    Shapes:
        returns ``(num_features, dim)``.

    Example:
        >>> w = orthogonal_random_matrix(4, 4, generator=torch.Generator().manual_seed(0))
        >>> gram = w @ w.T
        >>> torch.allclose(gram - torch.diag(gram.diag()), torch.zeros(4, 4), atol=1e-4)
        True
    """
    check_positive_int("num_features", num_features)
    check_positive_int("dim", dim)
    num_blocks = -(-num_features // dim)
    gaussian = torch.randn(num_blocks, dim, dim, generator=generator)  # (blocks, D, D)
    q_factor, r_factor = torch.linalg.qr(gaussian)  # (blocks, D, D), orthonormal columns
    # QR leaves each column's sign arbitrary (LAPACK makes Q[0, 0] <= 0): fix it with the signs of
    # diag(R) so every direction is uniformly distributed (Mezzadri 2007); otherwise biased.
    q_factor = q_factor * torch.sign(r_factor.diagonal(dim1=-2, dim2=-1))[:, None, :]  # (blocks, D, D)
    blocks = q_factor.transpose(-2, -1)  # (blocks, D, D), rows orthonormal
    rows = blocks.reshape(num_blocks * dim, dim)[:num_features]  # (F, D)
    norms = torch.randn(num_features, dim, generator=generator).norm(dim=-1)  # (F,), chi(D) distributed
    return rows * norms[:, None]  # (F, D)


def performer_features(x: torch.Tensor, projection: torch.Tensor, *, scale: float) -> torch.Tensor:
    """Positive random features: ``φ(x) = exp(wᵢᵀx' - |x'|²/2) / sqrt(m)`` with ``x' = x·sqrt(scale)``.

    For ``w ~ N(0, I)``, ``E[exp(wᵀq - |q|²/2) · exp(wᵀk - |k|²/2)] = exp(q·k)`` (Choromanski et al.
    2021, Lemma 1): so ``φ(q)·φ(k)`` is an unbiased estimate of the softmax kernel
    ``exp(q·k·scale)``, and every feature is positive (no negative weights, unlike sin/cos features).
    This plain form can overflow for inputs of large norm; production code subtracts a per-row maximum
    before ``exp`` (it cancels in the normalisation).

    Shapes:
        x ``(..., T, D)``, projection ``(F, D)``; returns ``(..., T, F)``.

    Example:
        >>> w = torch.randn(4096, 2, generator=torch.Generator().manual_seed(0))
        >>> q, k = torch.tensor([[0.3, -0.2]]), torch.tensor([[0.1, 0.4]])
        >>> estimate = performer_features(q, w, scale=1.0) @ performer_features(k, w, scale=1.0).T
        >>> exact = math.exp(0.3 * 0.1 - 0.2 * 0.4)                       # exp(q·k) = 0.951
        >>> abs(estimate.item() - exact) < 0.02
        True
    """
    check_floating("x", x)
    sizes = check_shape("x", x, "... T D")
    check_shape("projection", projection, "F D", D=sizes["D"])
    x = x.float() * math.sqrt(scale)  # (..., T, D)
    projected = x @ projection.float().T  # (..., T, F)
    squared_norm = (x * x).sum(dim=-1, keepdim=True) / 2  # (..., T, 1)
    return torch.exp(projected - squared_norm) / math.sqrt(projection.shape[0])  # (..., T, F)


def performer_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    num_features: int,
    generator: torch.Generator | None,
    is_causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """FAVOR+: linear attention whose feature map approximates ``softmax(q kᵀ · scale) v``.

    Draws ``num_features`` orthogonal random projections, maps q and k with
    :func:`performer_features`, and runs :func:`linear_attention` (Choromanski et al. 2021, §2-3).
    More features, smaller error; the cost stays ``O(T·F·Dv)``. The estimator's variance grows like
    ``exp(|q + k|²·scale)``, so it is accurate for queries and keys of small norm and needs many
    features for large ones (the paper's models normalise their inputs).

    Shapes:
        q ``(..., T, D)``, k ``(..., S, D)``, v ``(..., S, Dv)``; returns ``(..., T, Dv)``.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> q, k = torch.randn(8, 16, generator=g) / 2, torch.randn(8, 16, generator=g) / 2   # small norms
        >>> v = torch.randn(8, 16, generator=g)
        >>> out = performer_attention(q, k, v, num_features=1024, generator=g)
        >>> ref = torch.softmax(q @ k.T / 4, dim=-1) @ v                  # scale 1/sqrt(16)
        >>> bool((out - ref).abs().max() < 0.1)
        True
    """
    _check_qkv(q, k, v, None)
    check_positive_int("num_features", num_features)
    scale = check_scale(scale, q.shape[-1])
    projection = orthogonal_random_matrix(num_features, q.shape[-1], generator=generator).to(
        q.device
    )  # (F, D)
    q_features = performer_features(q, projection, scale=scale)  # (..., T, F)
    k_features = performer_features(k, projection, scale=scale)  # (..., S, F)
    return _linear_attention(q_features, k_features, v, is_causal, eps=1e-12)  # (..., T, Dv)


# ----------------------------------------------------------------------------------------------
# 4. Mixture of experts (Shazeer et al. 2017; Switch Transformer, Fedus et al. 2022)
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RoutingStats:
    """How a router spread the tokens over the experts, and the loss that keeps the spread even."""

    tokens_per_expert: torch.Tensor  # (E,) long: assignments each expert received (sums to N·k)
    fraction: torch.Tensor  # (E,) float: tokens_per_expert / (N·k), the f_i of Switch eq. 4
    mean_probability: torch.Tensor  # (E,) float: router probability averaged over tokens, P_i of eq. 5
    load_balancing_loss: torch.Tensor  # () float: E · Σ_i f_i · P_i; 1 when perfectly balanced


class TopKRouter(nn.Module):
    """Send each token to its ``k`` best-scoring experts, with softmax weights over those ``k``.

    ``logits = x W_g``; keep the top ``k`` per token; ``weights = softmax(top-k logits)``
    (Shazeer et al. 2017, eq. 3-5, without the tunable noise). The load-balancing loss is Switch's
    ``E · Σ_i f_i · P_i`` (Fedus et al. 2022, §2.2, eq. 4-6), with ``f_i`` counting all ``k``
    assignments per token; its gradient flows through ``P_i``, the mean router probability.

    Shapes:
        x ``(N, C)`` (N tokens); returns weights ``(N, k)``, expert_index ``(N, k)`` and
        :class:`RoutingStats`.

    Example:
        >>> router = TopKRouter(8, num_experts=4, k=2)
        >>> weights, expert_index, stats = router(torch.randn(5, 8))
        >>> weights.shape, int(stats.tokens_per_expert.sum())      # every token counted k times
        (torch.Size([5, 2]), 10)
    """

    def __init__(self, dim: int, num_experts: int, *, k: int = 2) -> None:
        super().__init__()
        check_positive_int("dim", dim)
        check_positive_int("num_experts", num_experts)
        check_positive_int("k", k)
        if k > num_experts:
            raise ValueError(f"k: expected at most num_experts={num_experts}, got {k}")
        self.num_experts = num_experts
        self.k = k
        self.gate = nn.Linear(dim, num_experts, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, RoutingStats]:
        check_shape("x", x, "N C", C=self.gate.in_features)
        N, C = x.shape
        logits = self.gate(x)  # (N, E)
        top_logits, expert_index = logits.topk(self.k, dim=-1)  # (N, k), (N, k)
        weights = torch.softmax(top_logits.float(), dim=-1).to(x.dtype)  # (N, k), rows sum to 1

        tokens_per_expert = torch.bincount(expert_index.flatten(), minlength=self.num_experts)  # (E,)
        fraction = tokens_per_expert.float() / (N * self.k)  # (E,)
        mean_probability = torch.softmax(logits.float(), dim=-1).mean(dim=0)  # (E,)
        loss = self.num_experts * (fraction * mean_probability).sum()
        return weights, expert_index, RoutingStats(tokens_per_expert, fraction, mean_probability, loss)


class MoEFeedForward(nn.Module):
    """A feed-forward layer made of ``num_experts`` FFNs; each token runs through only ``k`` of them.

    ``y = Σ_{e in top-k(x)} weight_e(x) · FFN_e(x)``. Parameters grow with ``num_experts`` while the
    compute per token stays that of ``k`` FFNs (Shazeer et al. 2017; Fedus et al. 2022). Each expert
    is ``Linear(C, hidden) → GELU → Linear(hidden, C)``. No capacity limit: no token is dropped.

    Shapes:
        x ``(B, T, C)``; returns ``(B, T, C)`` and :class:`RoutingStats` (add
        ``stats.load_balancing_loss`` times a small factor, e.g. 0.01, to the training loss).

    Example:
        >>> moe = MoEFeedForward(8, 16, num_experts=4, k=2)
        >>> y, stats = moe(torch.randn(2, 3, 8))
        >>> y.shape, stats.tokens_per_expert.shape
        (torch.Size([2, 3, 8]), torch.Size([4]))
    """

    def __init__(self, dim: int, hidden_dim: int, num_experts: int, *, k: int = 2) -> None:
        super().__init__()
        check_positive_int("hidden_dim", hidden_dim)
        self.router = TopKRouter(dim, num_experts, k=k)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, hidden_dim), nn.GELU(), nn.Linear(hidden_dim, dim))
            for _ in range(num_experts)
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, RoutingStats]:
        check_shape("x", x, "B T C", C=self.router.gate.in_features)
        B, T, C = x.shape
        tokens = x.reshape(B * T, C)  # (N, C)
        weights, expert_index, stats = self.router(tokens)  # (N, k), (N, k)
        out = torch.zeros_like(tokens)  # (N, C)
        for e, expert in enumerate(self.experts):
            token_ids, slot = torch.nonzero(expert_index == e, as_tuple=True)  # tokens routed to e
            if token_ids.numel() == 0:
                continue
            expert_out = expert(tokens[token_ids])  # (n_e, C): only this expert's tokens
            out.index_add_(0, token_ids, expert_out * weights[token_ids, slot, None])  # (N, C)
        return out.reshape(B, T, C), stats  # (B, T, C)
