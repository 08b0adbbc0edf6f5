"""Linear attention and random features: attention without the ``(T, S)`` score matrix (notebook 11).

1. **Linear attention** (Katharopoulos et al. 2020): replace ``exp(q·k)`` by ``φ(q)·φ(k)`` and
   reassociate ``(φ(Q) φ(K)ᵀ) V = φ(Q) (φ(K)ᵀ V)``: ``O(T·D²)`` instead of ``O(T²·D)``, and in the
   causal case an RNN with a ``(D, Dv)`` state.
2. **Performer** (Choromanski et al. 2021): random features whose dot product is, on average,
   exactly ``exp(q·k)``, so linear attention *approximates softmax attention*.
3. **Linformer** (Wang et al. 2020): project the ``S`` keys and values down to ``r`` rows along the
   sequence, ``softmax(Q (E K)ᵀ) (F V)``: ``O(T·r)`` scores, on the bet that attention is low rank.

Sparse patterns are in :mod:`attn_edu.sparse`; routing tokens to experts in :mod:`attn_edu.moe`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from attn_edu._validate import check_floating, check_positive_int, check_qkv, check_scale, check_shape

# ----------------------------------------------------------------------------------------------
# 1. Linear attention (Katharopoulos et al. 2020)
# ----------------------------------------------------------------------------------------------


def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    """``φ(x) = elu(x) + 1``: a positive feature map, so ``φ(q)·φ(k) > 0`` acts like a similarity.

    Katharopoulos et al. 2020, §3.2.1, eq. 7.

    Example:
        >>> elu_feature_map(torch.tensor([-1.0, 0.0, 2.0]))
        tensor([0.3679, 1.0000, 3.0000])
    """
    return F.elu(x) + 1


def _check_linear_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: object) -> None:
    check_qkv(q, k, v)
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
    _check_linear_inputs(q, k, v, mask)
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
    _check_linear_inputs(q, k, v, None)
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
# 2. Performer: FAVOR+ random features (Choromanski et al. 2021)
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
    _check_linear_inputs(q, k, v, None)
    check_positive_int("num_features", num_features)
    scale = check_scale(scale, q.shape[-1])
    projection = orthogonal_random_matrix(num_features, q.shape[-1], generator=generator).to(
        q.device
    )  # (F, D)
    q_features = performer_features(q, projection, scale=scale)  # (..., T, F)
    k_features = performer_features(k, projection, scale=scale)  # (..., S, F)
    return _linear_attention(q_features, k_features, v, is_causal, eps=1e-12)  # (..., T, Dv)


# ----------------------------------------------------------------------------------------------
# 3. Linformer (Wang et al. 2020)
# ----------------------------------------------------------------------------------------------


def linformer_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    e_proj: torch.Tensor,
    f_proj: torch.Tensor | None = None,
    *,
    scale: float | None = None,
) -> torch.Tensor:
    """``softmax(Q (E K)ᵀ · scale) (F V)``: attention over ``r`` mixtures of the keys instead of all ``S``.

    Linformer (Wang et al. 2020, §4, eq. 7) observes that the attention matrix is approximately low rank and
    multiplies keys and values along the *sequence* by learned ``(r, S)`` matrices ``E`` and ``F`` (``F``
    defaults to ``E``; the paper also shares them). The scores are ``(T, r)``: linear in ``S`` for fixed
    ``r``. Not causal (each of the ``r`` rows mixes every position, future ones included) and tied to one
    length ``S``: it suits encoders. With random ``E`` (a Johnson-Lindenstrauss projection, the paper's
    Theorem 1) the error falls as ``r`` grows; trained ``E`` do better.

    Shapes:
        q ``(..., T, D)``, k ``(..., S, D)``, v ``(..., S, Dv)``, e_proj and f_proj ``(r, S)``;
        returns ``(..., T, Dv)``.

    Example:
        >>> q, k, v = torch.randn(2, 10, 8), torch.randn(2, 32, 8), torch.randn(2, 32, 4)
        >>> linformer_attention(q, k, v, torch.randn(6, 32) / 6**0.5).shape
        torch.Size([2, 10, 4])
        >>> exact = torch.softmax(q @ k.mT / 8**0.5, -1) @ v          # r = S with E = I: exact attention
        >>> torch.allclose(linformer_attention(q, k, v, torch.eye(32)), exact, atol=1e-5)
        True
    """
    sizes = check_qkv(q, k, v)
    f_proj = e_proj if f_proj is None else f_proj
    for name, proj in (("e_proj", e_proj), ("f_proj", f_proj)):
        check_floating(name, proj)
        check_shape(name, proj, "r S", S=sizes["S"])
    scale = check_scale(scale, sizes["D"])
    k_low = e_proj @ k  # (..., r, D): r mixtures of the S keys
    v_low = f_proj @ v  # (..., r, Dv)
    weights = torch.softmax((q @ k_low.transpose(-2, -1)) * scale, dim=-1)  # (..., T, r)
    return weights @ v_low  # (..., T, Dv)
