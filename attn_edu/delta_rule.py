"""Recurrent state: the delta rule and Gated DeltaNet, linear attention that can overwrite (notebook 11).

Causal linear attention (:func:`attn_edu.efficient.linear_attention_recurrent`) keeps a ``(Dk, Dv)`` state and
only ever adds to it, ``S_t = S_{t-1} + k_t v_tᵀ``: once two keys overlap, their values blur and nothing is
forgotten. The delta rule (Widrow and Hoff's, as DeltaNet uses it: Schlag et al. 2021; Yang et al. 2024) first
asks the state what it already holds for ``k_t`` and writes only the correction::

    S_t = S_{t-1} + β_t k_t (v_t - S_{t-1}ᵀ k_t)ᵀ        β_t in (0, 1]: how strongly to overwrite

With a unit key and ``β = 1`` the state then recalls exactly ``v_t`` for ``k_t``: one step of gradient descent on
``½‖Sᵀk - v‖²``. Gated DeltaNet (Yang, Kautz and Hatamizadeh, ICLR 2025; Qwen3-Next's linear layers) also lets the
whole state decay by ``α_t = exp(g_t)`` first, so it can forget::

    S_t = α_t S_{t-1} + β_t k_t (v_t - α_t S_{t-1}ᵀ k_t)ᵀ,     out_t = S_tᵀ q_t / √Dk

Two forms compute it, and they are equal:

- **recurrent**: one step per token (:func:`gated_delta_step`), ``O(Dk·Dv)`` whatever the position: how a model
  decodes, with a state of fixed size instead of a growing KV cache.
- **chunked** (``chunk_size=C``): within a chunk of ``C`` tokens the corrections ``u_t`` depend on each other
  through a unit lower-triangular system, ``(I + A) U = β V - diag(β γ) K S₀``, solved with one triangular solve
  (the "UT transform" of Yang et al. 2024, §3), so that a chunk costs a few ``(C, C)`` and ``(C, D)`` matrix
  products and only the ``T / C`` chunk boundaries stay sequential: how a model trains.

Layout: the package's ``(B, H, T, D)``. ``g`` (the log of the per-step decay, ``<= 0``) and ``beta`` are
``(B, H, T)``; the state is ``(B, H, Dk, Dv)``. The arithmetic is float32 whatever the inputs' dtype, as in
transformers' ``torch_recurrent_gated_delta_rule`` / ``torch_chunk_gated_delta_rule``, which these equal.

:class:`GatedDeltaNet` is the whole layer as Qwen3-Next uses it (short convolution, L2-normalised keys, learned
decay and write strength, gated RMSNorm), equal to transformers' ``Qwen3NextGatedDeltaNet``; while decoding it
keeps a :class:`DeltaStateLayer` of fixed size where attention keeps a KV cache.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from attn_edu._validate import check_floating, check_positive_int, check_scale, check_shape


def _check_inputs(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor | None,
    *,
    steps: str = "T ",
) -> dict[str, int]:
    """Shapes ``q, k (B, H, T, Dk)``, ``v (B, H, T, Dv)``, ``g, beta (B, H, T)``, ``state (B, H, Dk, Dv)``.

    ``steps=""`` checks one step instead (no ``T`` axis). ``g`` must be finite and ``<= 0`` (a decay
    ``exp(g)`` of at most 1): a positive ``g`` grows the state without bound.
    """
    for name, x in {"q": q, "k": k, "v": v, "g": g, "beta": beta}.items():
        check_floating(name, x)
    sizes = check_shape("q", q, f"B H {steps}Dk")
    check_shape("k", k, f"B H {steps}Dk", **sizes)
    sizes |= check_shape("v", v, f"B H {steps}Dv", **{key: sizes[key] for key in sizes if key != "Dk"})
    known = {key: sizes[key] for key in ("B", "H", "T") if key in sizes}
    check_shape("g", g, f"B H {steps}".strip(), **known)
    check_shape("beta", beta, f"B H {steps}".strip(), **known)
    if not torch.isfinite(g).all() or (g > 0).any():
        raise ValueError(
            "g: expected the log of a decay, finite and <= 0 (Qwen3-Next computes it as -exp(A) * softplus(...)), "
            f"got values from {float(g.min()):.3g} to {float(g.max()):.3g}"
        )
    if state is not None:
        check_floating("initial_state", state)
        check_shape(
            "initial_state", state, "B H Dk Dv", **{key: sizes[key] for key in ("B", "H", "Dk", "Dv")}
        )
    return sizes


def _step(
    state: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token, float32, ``q`` already scaled: ``(out (B, H, Dv), state (B, H, Dk, Dv))``."""
    state = state * g.exp()[..., None, None]  # (B, H, Dk, Dv): forget a little
    recalled = (k[..., None, :] @ state).squeeze(-2)  # (B, H, Dv): what the state holds for k, Sᵀk
    correction = beta[..., None] * (v - recalled)  # (B, H, Dv): the delta, scaled by the write strength
    state = state + k[..., :, None] * correction[..., None, :]  # (B, H, Dk, Dv): write k ⊗ correction
    return (q[..., None, :] @ state).squeeze(-2), state  # (B, H, Dv): read with the query


def gated_delta_step(
    state: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    *,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of Gated DeltaNet: decay the state, write the correction, read: ``(out, new state)``.

    ``S ← exp(g) S``; ``S ← S + β k (v - Sᵀk)ᵀ``; ``out = Sᵀ q · scale`` (``scale`` defaults to ``1/√Dk``).
    This is what a decoder does per generated token, in place of appending to a KV cache.

    Shapes:
        state ``(B, H, Dk, Dv)``, q and k ``(B, H, Dk)``, v ``(B, H, Dv)``, g and beta ``(B, H)``; returns
        out ``(B, H, Dv)`` in ``v``'s dtype and the state in float32.

    Example:
        >>> state = torch.zeros(1, 1, 2, 3)
        >>> k = torch.tensor([[[1.0, 0.0]]])  # a unit key
        >>> _, state = gated_delta_step(state, k, k, torch.ones(1, 1, 3), torch.zeros(1, 1), torch.ones(1, 1))
        >>> (k[..., None, :] @ state).squeeze(-2)  # with beta = 1 the state now recalls v exactly for k
        tensor([[[1., 1., 1.]]])
    """
    sizes = _check_inputs(q, k, v, g, beta, state, steps="")
    scale = check_scale(scale, sizes["Dk"])
    out, state = _step(state.float(), q.float() * scale, k.float(), v.float(), g.float(), beta.float())
    return out.to(v.dtype), state


def _recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    outs = []
    for t in range(q.shape[2]):
        out, state = _step(state, q[:, :, t], k[:, :, t], v[:, :, t], g[:, :, t], beta[:, :, t])
        outs.append(out)
    return torch.stack(outs, dim=2), state  # (B, H, T, Dv), (B, H, Dk, Dv)


def _chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    chunk: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same recurrence, a chunk of ``chunk`` tokens at a time.

    In a chunk starting from state ``S₀``, write ``c_t`` for the summed log decay up to step ``t`` (so
    ``γ_t = exp(c_t)``) and ``u_t`` for the correction that step ``t`` writes. Unrolling the recurrence gives

        ``u_t = β_t v_t - β_t γ_t S₀ᵀ k_t - β_t Σ_{s<t} exp(c_t - c_s) (k_t·k_s) u_s``
        ``out_t = γ_t S₀ᵀ q_t + Σ_{s<=t} exp(c_t - c_s) (q_t·k_s) u_s``
        ``S_C = γ_C S₀ + Σ_s exp(c_C - c_s) k_s u_sᵀ``

    The first line is a unit lower-triangular system for all ``u`` at once. Only exponentials of ``c_t - c_s
    <= 0`` appear, so nothing overflows however strong the decay.
    """
    B, H, T, _ = k.shape
    pad = -T % chunk  # zero steps at the end: k = 0 writes nothing and g = 0 keeps the state
    q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))  # (B, H, N·C, D)
    g, beta = (F.pad(x, (0, pad)) for x in (g, beta))  # (B, H, N·C)
    n = (T + pad) // chunk
    q, k, v = (x.reshape(B, H, n, chunk, x.shape[-1]) for x in (q, k, v))  # (B, H, N, C, D)
    c = g.reshape(B, H, n, chunk).cumsum(-1)  # (B, H, N, C): log decay from the chunk's start, step included
    beta = beta.reshape(B, H, n, chunk)  # (B, H, N, C)
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()  # (C, C): s <= t
    decay = (c[..., :, None] - c[..., None, :]).masked_fill(~causal, -math.inf).exp()  # (B, H, N, C, C)
    system = (beta[..., None] * (k @ k.transpose(-1, -2)) * decay).tril(
        -1
    )  # (B, H, N, C, C): A, strictly lower
    system = system + torch.eye(chunk, device=q.device)  # I + A
    # U = (I + A)⁻¹ βV  -  (I + A)⁻¹ diag(βγ) K S₀: the part without S₀ and the part that reads it.
    from_values = torch.linalg.solve_triangular(system, beta[..., None] * v, upper=False)  # (B, H, N, C, Dv)
    reading_keys = torch.linalg.solve_triangular(
        system, (beta * c.exp())[..., None] * k, upper=False
    )  # (B, H, N, C, Dk)
    scores = (q @ k.transpose(-1, -2)) * decay  # (B, H, N, C, C): zero above the diagonal
    outs = []
    for i in range(n):  # only the chunk boundaries are sequential
        u = from_values[:, :, i] - reading_keys[:, :, i] @ state  # (B, H, C, Dv): the corrections
        outs.append((q[:, :, i] * c[:, :, i, :, None].exp()) @ state + scores[:, :, i] @ u)  # (B, H, C, Dv)
        to_end = c[:, :, i, -1:] - c[:, :, i]  # (B, H, C): log decay from each step to the chunk's end
        state = (
            state * c[:, :, i, -1, None, None].exp()
            + (k[:, :, i] * to_end[..., None].exp()).transpose(-1, -2) @ u
        )  # (B, H, Dk, Dv)
    return torch.cat(outs, dim=2)[:, :, :T], state  # (B, H, T, Dv), (B, H, Dk, Dv)


def gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    *,
    chunk_size: int | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Gated DeltaNet over a sequence: ``(out, final state or None)``.

    Per step ``S_t = exp(g_t) S_{t-1} + β_t k_t (v_t - exp(g_t) S_{t-1}ᵀ k_t)ᵀ`` and ``out_t = S_tᵀ q_t · scale``
    (``scale`` defaults to ``1/√Dk``), from ``initial_state`` (zeros if ``None``). ``chunk_size=None`` runs one
    token at a time (:func:`gated_delta_step`); ``chunk_size=C`` runs the chunked form, equal to it (a sequence
    not divisible by ``C`` is padded with steps that change nothing). Keys are used as given: Qwen3-Next
    L2-normalises ``q`` and ``k`` first, which keeps ``β k kᵀ`` a contraction.

    Equal to transformers' ``torch_recurrent_gated_delta_rule`` and ``torch_chunk_gated_delta_rule`` (which take
    ``(B, T, H, D)``), final state included. Running a sequence in two pieces, the second from the first's final
    state, equals running it whole: the state is the whole memory.

    Shapes:
        q, k ``(B, H, T, Dk)``; v ``(B, H, T, Dv)``; g, beta ``(B, H, T)``; initial_state ``(B, H, Dk, Dv)``.
        Returns out ``(B, H, T, Dv)`` in ``v``'s dtype and the final state ``(B, H, Dk, Dv)`` in float32.

    Example:
        >>> q, k, v = torch.randn(1, 2, 10, 4), F.normalize(torch.randn(1, 2, 10, 4), dim=-1), torch.randn(1, 2, 10, 3)
        >>> g, beta = -torch.rand(1, 2, 10), torch.rand(1, 2, 10)
        >>> step, state = gated_delta_rule(q, k, v, g, beta, output_final_state=True)
        >>> chunked, state_chunked = gated_delta_rule(q, k, v, g, beta, chunk_size=4, output_final_state=True)
        >>> torch.allclose(step, chunked, atol=1e-5), torch.allclose(state, state_chunked, atol=1e-5)
        (True, True)
    """
    sizes = _check_inputs(q, k, v, g, beta, initial_state)
    scale = check_scale(scale, sizes["Dk"])
    B, H, Dk, Dv = sizes["B"], sizes["H"], sizes["Dk"], sizes["Dv"]
    if initial_state is None:
        state = torch.zeros(B, H, Dk, Dv, device=v.device)  # (B, H, Dk, Dv)
    else:
        state = initial_state.float()
    args = (q.float() * scale, k.float(), v.float(), g.float(), beta.float(), state)
    if chunk_size is None:
        out, state = _recurrent(*args)
    else:
        out, state = _chunked(*args, check_positive_int("chunk_size", chunk_size))
    return out.to(v.dtype), (state if output_final_state else None)


def state_bytes(num_heads: int, k_dim: int, v_dim: int, *, bytes_per_value: int = 2) -> int:
    """Bytes of one layer's Gated DeltaNet state for one sequence, whatever its length: ``H · Dk · Dv`` values.

    A KV cache holds ``2 · H_kv · D`` values *per token*; at length ``T`` it passes the state once
    ``T > Dk · Dv · H / (2 · H_kv · D)``.

    Example:
        >>> state_bytes(32, 128, 128)  # Qwen3-Next-80B-A3B's linear layers: 32 value heads of 128 x 128, bfloat16
        1048576
    """
    for name, value in {"num_heads": num_heads, "k_dim": k_dim, "v_dim": v_dim}.items():
        check_positive_int(name, value)
    return num_heads * k_dim * v_dim * check_positive_int("bytes_per_value", bytes_per_value)


# ----------------------------------------------------------------------------------------------
# The layer: Qwen3-Next's Gated DeltaNet, a drop-in for an attention layer
# ----------------------------------------------------------------------------------------------


def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x / sqrt(‖x‖² + eps)`` over the last dim: unit keys keep ``I - β k kᵀ`` a contraction for ``β <= 1``.

    (``eps`` inside the root, as flash-linear-attention and transformers do; ``F.normalize`` clamps instead.)
    """
    return x * torch.rsqrt(x.float().square().sum(-1, keepdim=True) + eps).to(x.dtype)  # (..., D)


class DeltaStateLayer:
    """One Gated DeltaNet layer's memory while decoding, the counterpart of a KV cache layer.

    It holds the recurrent state ``(B, H, Dk, Dv)`` and the last ``conv_size - 1`` inputs of the short
    convolution ``(B, channels, conv_size - 1)``: a fixed size, however many tokens have been read.
    ``seq_len`` counts those tokens, as :class:`attn_edu.kv_cache.KVCacheLayer`'s does.
    """

    def __init__(self) -> None:
        self.state: torch.Tensor | None = None  # (B, H, Dk, Dv), float32
        self.conv: torch.Tensor | None = None  # (B, channels, conv_size - 1)
        self.seq_len = 0

    def nbytes(self) -> int:
        """Bytes held, independent of ``seq_len``."""
        return sum(x.numel() * x.element_size() for x in (self.state, self.conv) if x is not None)

    def reset(self) -> None:
        """Forget everything read."""
        self.state = self.conv = None
        self.seq_len = 0


class GatedDeltaNet(nn.Module):
    """Qwen3-Next's linear-attention layer: projections, a short causal convolution, the gated delta rule,
    a gated RMSNorm, and the output projection. It takes and returns ``(B, T, C)`` like an attention layer,
    so it can replace one in a decoder block (Yang, Kautz and Hatamizadeh, ICLR 2025, §3.3; Qwen3-Next).

    Per token: ``q, k, v`` from their projections pass a depthwise causal convolution of ``conv_size`` steps
    and SiLU; ``q`` and ``k`` are L2-normalised; ``β = sigmoid(b)`` and ``g = -exp(A_log) · softplus(a +
    dt_bias)`` come from two more projections, one number per head; :func:`gated_delta_rule` mixes the tokens;
    each head's output is RMS-normalised and multiplied by ``silu(z)`` (a gate from its own projection, as in
    gated attention), then ``out_proj``. ``num_k_heads`` query/key heads serve ``num_heads`` value heads
    (``num_heads / num_k_heads`` each, consecutive), as GQA shares key/value heads.

    ``kv_cache`` (a :class:`DeltaStateLayer`) makes it read on from where the last call stopped; a forward with
    ``T`` tokens uses the chunked form (``chunk_size``), one token the recurrent step. ``mask`` and
    ``score_bias`` must be ``None``: there is no score matrix, and the rule is causal by construction.

    Shapes:
        x ``(B, T, C)``; returns ``(B, T, C)``.

    Example:
        >>> layer = GatedDeltaNet(16, 4, num_k_heads=2, k_dim=8, v_dim=4)
        >>> layer(torch.randn(2, 5, 16)).shape
        torch.Size([2, 5, 16])
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        num_k_heads: int | None = None,
        k_dim: int | None = None,
        v_dim: int | None = None,
        conv_size: int = 4,
        chunk_size: int = 64,
        eps: float = 1e-6,
    ) -> None:
        super().__init__()
        C, H = check_positive_int("embed_dim", embed_dim), check_positive_int("num_heads", num_heads)
        H_k = H if num_k_heads is None else check_positive_int("num_k_heads", num_k_heads)
        if H % H_k:
            raise ValueError(f"num_k_heads: must divide num_heads={H}, got {H_k}")
        Dk = C // H if k_dim is None else check_positive_int("k_dim", k_dim)
        Dv = Dk if v_dim is None else check_positive_int("v_dim", v_dim)
        self.num_heads, self.num_k_heads, self.k_dim, self.v_dim = H, H_k, Dk, Dv
        self.conv_size = check_positive_int("conv_size", conv_size)
        self.chunk_size, self.eps = check_positive_int("chunk_size", chunk_size), eps
        self.q_proj = nn.Linear(C, H_k * Dk, bias=False)
        self.k_proj = nn.Linear(C, H_k * Dk, bias=False)
        self.v_proj = nn.Linear(C, H * Dv, bias=False)
        self.gate_proj = nn.Linear(C, H * Dv, bias=False)  # z: the output gate
        self.beta_proj = nn.Linear(C, H, bias=False)  # b: write strength, β = sigmoid(b)
        self.decay_proj = nn.Linear(C, H, bias=False)  # a: with A_log and dt_bias, the decay
        channels = 2 * H_k * Dk + H * Dv
        self.conv_weight = nn.Parameter(torch.randn(channels, 1, conv_size) / math.sqrt(conv_size))
        # The decay exp(-A · softplus(a + dt_bias)) starts slow, as in Mamba-2 and flash-linear-attention: A in
        # [1, 16] and a time step softplus(dt_bias) drawn log-uniformly in [0.001, 0.1] (dt_bias its inverse).
        self.A_log = nn.Parameter(torch.empty(H).uniform_(1.0, 16.0).log())  # (H,)
        dt = torch.empty(H).uniform_(math.log(1e-3), math.log(1e-1)).exp()  # (H,)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # (H,): softplus(dt_bias) = dt
        self.norm_weight = nn.Parameter(torch.ones(Dv))
        self.out_proj = nn.Linear(H * Dv, C, bias=False)

    def _conv(self, x: torch.Tensor, cache: DeltaStateLayer | None) -> torch.Tensor:
        """Depthwise causal convolution over time, then SiLU: ``(B, channels, T)`` in and out."""
        K = self.conv_size
        past = x.new_zeros(*x.shape[:2], K - 1) if cache is None or cache.conv is None else cache.conv
        padded = torch.cat([past, x], dim=-1)  # (B, channels, K - 1 + T): the steps before, then these
        if cache is not None:
            cache.conv = padded[..., padded.shape[-1] - (K - 1) :]  # (B, channels, K - 1)
        return F.silu(F.conv1d(padded, self.conv_weight.to(x.dtype), groups=x.shape[1]))  # (B, channels, T)

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: None = None,
        is_causal: bool = True,
        score_bias: None = None,
        kv_cache: DeltaStateLayer | None = None,
    ) -> torch.Tensor:
        check_floating("x", x)
        B, T, _ = check_shape("x", x, "B T C", C=self.q_proj.in_features).values()
        if mask is not None or score_bias is not None or not is_causal:
            raise ValueError(
                "mask: Gated DeltaNet has no score matrix to mask and is causal by construction; pass mask=None, "
                "score_bias=None and is_causal=True"
            )
        H, H_k, Dk, Dv = self.num_heads, self.num_k_heads, self.k_dim, self.v_dim
        mixed = torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1)  # (B, T, channels)
        mixed = self._conv(mixed.transpose(1, 2), kv_cache).transpose(1, 2)  # (B, T, channels)
        q, k, v = mixed.split([H_k * Dk, H_k * Dk, H * Dv], dim=-1)
        q, k = (  # eps 1e-6 always, as transformers' layer fixes it; self.eps is the output norm's
            l2_normalize(y.view(B, T, H_k, Dk).transpose(1, 2)) for y in (q, k)
        )  # (B, H_k, T, Dk)
        q, k = (y.repeat_interleave(H // H_k, dim=1) for y in (q, k))  # (B, H, T, Dk): value heads share them
        v = v.view(B, T, H, Dv).transpose(1, 2)  # (B, H, T, Dv)
        beta = self.beta_proj(x).sigmoid().transpose(1, 2)  # (B, H, T)
        g = -self.A_log.float().exp() * F.softplus(self.decay_proj(x).float() + self.dt_bias)  # (B, T, H)
        state = None if kv_cache is None else kv_cache.state
        out, state = gated_delta_rule(
            q,
            k,
            v,
            g.transpose(1, 2),
            beta,
            chunk_size=None if T == 1 else self.chunk_size,
            initial_state=state,
            output_final_state=kv_cache is not None,
        )  # (B, H, T, Dv)
        if kv_cache is not None:
            kv_cache.state, kv_cache.seq_len = state, kv_cache.seq_len + T
        out = out.transpose(1, 2).float()  # (B, T, H, Dv)
        out = out * torch.rsqrt(
            out.square().mean(-1, keepdim=True) + self.eps
        )  # (B, T, H, Dv): RMS-normalised
        z = self.gate_proj(x).view(B, T, H, Dv).float()  # (B, T, H, Dv)
        out = (self.norm_weight * out.to(x.dtype)) * F.silu(z)  # (B, T, H, Dv): gated, as Qwen3-Next's norm
        return self.out_proj(out.to(x.dtype).reshape(B, T, H * Dv))  # (B, T, C)

    @classmethod
    def from_hf(cls, layer: nn.Module) -> GatedDeltaNet:
        """Copy a transformers ``Qwen3NextGatedDeltaNet``.

        Its two fused projections interleave per query/key head group ``[q | k | v of the group's value heads |
        z of them]`` and ``[b | a]``; here each has its own projection, so the rows are regrouped.
        """
        H, H_k, Dk, Dv = layer.num_v_heads, layer.num_k_heads, layer.head_k_dim, layer.head_v_dim
        ours = cls(
            layer.hidden_size,
            H,
            num_k_heads=H_k,
            k_dim=Dk,
            v_dim=Dv,
            conv_size=layer.conv_kernel_size,
            eps=layer.layer_norm_epsilon,
        )
        r = H // H_k
        qkvz = layer.in_proj_qkvz.weight.detach().view(H_k, 2 * Dk + 2 * r * Dv, -1)  # per group
        q, k, v, z = qkvz.split([Dk, Dk, r * Dv, r * Dv], dim=1)
        b, a = layer.in_proj_ba.weight.detach().view(H_k, 2 * r, -1).split([r, r], dim=1)
        with torch.no_grad():
            for proj, rows in [
                (ours.q_proj, q),
                (ours.k_proj, k),
                (ours.v_proj, v),
                (ours.gate_proj, z),
                (ours.beta_proj, b),
                (ours.decay_proj, a),
            ]:
                proj.weight.copy_(rows.reshape(-1, rows.shape[-1]))  # groups in order, heads in order in each
            ours.conv_weight.copy_(layer.conv1d.weight)
            ours.A_log.copy_(layer.A_log)
            ours.dt_bias.copy_(layer.dt_bias)
            ours.norm_weight.copy_(layer.norm.weight)
            ours.out_proj.weight.copy_(layer.out_proj.weight)
        return ours


__all__ = [
    "DeltaStateLayer",
    "GatedDeltaNet",
    "gated_delta_rule",
    "gated_delta_step",
    "l2_normalize",
    "state_bytes",
]
