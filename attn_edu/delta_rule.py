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
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

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


__all__ = ["gated_delta_rule", "gated_delta_step", "state_bytes"]
