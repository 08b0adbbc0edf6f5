"""Rotary position embeddings (RoPE): rotate queries and keys by an angle proportional to position.

    RoPE(x, m)_pair i = R(m · θ_i) · (x_a, x_b),   θ_i = base^(−2i/D)   (Su et al., 2021, RoFormer, §3.2)

Each pair of coordinates of a query or key is turned by ``m · θ_i`` at position ``m``. Rotations
compose, so ``<R(mθ) q, R(nθ) k> = <q, R((n−m)θ) k>``: the attention score depends on the content and
on the *offset* ``m − n`` only, never on absolute positions (notebook 07 checks this).

Two layouts pick which coordinates form a pair; the maths is the same, the weights are not
interchangeable without permuting them (:func:`interleaved_to_half`):

- ``"half"``: coordinate ``i`` pairs with ``i + D/2`` (``rotate_half``): GPT-NeoX, Llama, Hugging Face.
- ``"interleaved"``: coordinate ``2i`` pairs with ``2i + 1``: the RoFormer paper, GPT-J, Meta's
  original Llama code (the complex-number view, :func:`apply_rope_complex`).

Context extension (scaling the frequencies so a model trained on ``L`` tokens reads ``s·L``):
position interpolation (``linear``), the NTK-aware base change (``ntk``) and YaRN (``yarn``; the
reference code's ramp, and the paper's in :func:`yarn_frequencies_by_turns`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from attn_edu._validate import check_floating, check_positive_int, check_shape, check_tensor

LAYOUTS = ("half", "interleaved")


def _check_head_dim(name: str, head_dim: int, *, minimum: int = 2) -> int:
    check_positive_int(name, head_dim)
    if head_dim % 2:
        raise ValueError(
            f"{name}: RoPE rotates pairs of coordinates, so the head dim D must be even, got D={head_dim}"
        )
    if head_dim < minimum:
        raise ValueError(f"{name}: expected D >= {minimum}, got D={head_dim}")
    return head_dim


def _check_base(base: float) -> float:
    if not isinstance(base, (int, float)) or not math.isfinite(base) or base <= 1:
        raise ValueError(f"base: expected a finite number > 1 (10000.0 in RoFormer), got {base!r}")
    return float(base)


def _check_factor(factor: float) -> float:
    if not isinstance(factor, (int, float)) or not math.isfinite(factor) or factor < 1:
        raise ValueError(f"factor: expected a context-extension factor >= 1 (e.g. 4.0), got {factor!r}")
    return float(factor)


def _check_layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise ValueError(
            f"layout: expected 'half' (HF/Llama/GPT-NeoX) or 'interleaved' (RoFormer/GPT-J), got {layout!r}"
        )
    return layout


# ---------------------------------------------------------------------------------------------------
# Frequencies and angles
# ---------------------------------------------------------------------------------------------------


def rope_frequencies(head_dim: int, *, base: float = 10000.0) -> torch.Tensor:
    """The rotation speed of each pair, ``θ_i = base^(−2i/D)`` for ``i = 0 .. D/2 − 1`` ("inv_freq").

    The same geometric ladder as the sinusoidal encoding: pair 0 turns one radian per token, the
    last pair almost ``base`` times slower. Computed in float64, returned as float32.

    Shapes:
        returns ``(D/2,)`` float32.

    Example:
        >>> rope_frequencies(4, base=100.0)         # 100^0, 100^(−2/4)
        tensor([1.0000, 0.1000])
    """
    _check_head_dim("head_dim", head_dim)
    i = torch.arange(head_dim // 2, dtype=torch.float64)  # (D/2,)
    return (_check_base(base) ** (-2.0 * i / head_dim)).float()  # (D/2,)


def rope_angles(positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """The angle ``m · θ_i`` for every position ``m`` and pair ``i`` (an outer product).

    Shapes:
        positions ``(..., T)`` (ints or floats), inv_freq ``(D/2,)``; returns ``(..., T, D/2)`` in the
        float dtype of ``inv_freq``.

    Example:
        >>> rope_angles(torch.arange(3), torch.tensor([1.0, 0.1]))
        tensor([[0.0000, 0.0000],
                [1.0000, 0.1000],
                [2.0000, 0.2000]])
    """
    check_tensor("positions", positions)
    check_floating("inv_freq", inv_freq)
    check_shape("inv_freq", inv_freq, "D/2")
    return positions.to(inv_freq.dtype)[..., None] * inv_freq  # (..., T, D/2)


# ---------------------------------------------------------------------------------------------------
# The two layouts
# ---------------------------------------------------------------------------------------------------


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``(x_1, x_2) -> (−x_2, x_1)`` for the two halves of the last dim: a 90° turn of every
    pair ``(x_i, x_(i+D/2))``, the "half" layout.

    Example:
        >>> rotate_half(torch.tensor([1.0, 2.0, 3.0, 4.0]))
        tensor([-3., -4.,  1.,  2.])
    """
    first, second = x.chunk(2, dim=-1)  # (..., D/2) each
    return torch.cat((-second, first), dim=-1)  # (..., D)


def rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    """``(x_2i, x_2i+1) -> (−x_2i+1, x_2i)``: a 90° turn of every adjacent pair, the "interleaved" layout.

    Example:
        >>> rotate_every_two(torch.tensor([1.0, 2.0, 3.0, 4.0]))
        tensor([-2.,  1., -4.,  3.])
    """
    pairs = x.unflatten(-1, (-1, 2))  # (..., D/2, 2)
    turned = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1)  # (..., D/2, 2)
    return turned.flatten(-2)  # (..., D)


def interleaved_to_half(x: torch.Tensor) -> torch.Tensor:
    """Reorder the last dim from the interleaved layout to the half layout: evens first, then odds.

    Pair ``(2i, 2i+1)`` lands on ``(i, i + D/2)``. Applied to the *output rows* of a query/key
    projection, it converts RoFormer/Meta weights into the Hugging Face layout.

    Example:
        >>> interleaved_to_half(torch.tensor([0, 1, 2, 3, 4, 5]))
        tensor([0, 2, 4, 1, 3, 5])
    """
    _check_head_dim("x.shape[-1] (D)", x.shape[-1])
    return torch.cat((x[..., 0::2], x[..., 1::2]), dim=-1)  # (..., D)


def half_to_interleaved(x: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`interleaved_to_half`: put coordinate ``i`` next to ``i + D/2``.

    Example:
        >>> half_to_interleaved(torch.tensor([0, 2, 4, 1, 3, 5]))
        tensor([0, 1, 2, 3, 4, 5])
    """
    _check_head_dim("x.shape[-1] (D)", x.shape[-1])
    first, second = x.chunk(2, dim=-1)  # (..., D/2) each
    return torch.stack((first, second), dim=-1).flatten(-2)  # (..., D)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """``x · cos + turn90(x) · sin`` pair by pair; cos/sin are ``(..., T, D/2)``, one per pair."""
    if layout == "half":
        cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)  # (..., T, D)
        turned = rotate_half(x)  # (..., T, D)
    else:
        cos, sin = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)  # (..., T, D)
        turned = rotate_every_two(x)  # (..., T, D)
    # cos/sin are cast to x's dtype, as Hugging Face does, so half-precision runs match theirs.
    return x * cos.to(x.dtype) + turned * sin.to(x.dtype)  # (..., T, D)


def _positions_for(x: torch.Tensor, positions: torch.Tensor | None, offset: int) -> torch.Tensor:
    T = x.shape[-2]
    if positions is None:
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset: expected an int >= 0 (tokens already in the cache), got {offset!r}")
        return torch.arange(offset, offset + T, device=x.device)  # (T,)
    check_tensor("positions", positions)
    if positions.ndim == 0 or positions.shape[-1] != T:
        raise ValueError(f"positions: expected shape (..., T) with T={T}, got {tuple(positions.shape)}")
    return positions.to(x.device) + offset  # (..., T)


def _angle_dtype(x: torch.Tensor) -> torch.dtype:
    # Angles grow with position; float16/bfloat16 would lose whole radians by position ~1000.
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def apply_rope(
    x: torch.Tensor,
    positions: torch.Tensor | None = None,
    *,
    base: float = 10000.0,
    inv_freq: torch.Tensor | None = None,
    layout: str = "half",
    offset: int = 0,
) -> torch.Tensor:
    """Rotate every coordinate pair of ``x`` by ``position · θ_i`` (Su et al., 2021, eq. 34).

        x'_a = x_a cos(mθ_i) − x_b sin(mθ_i)
        x'_b = x_a sin(mθ_i) + x_b cos(mθ_i)

    where ``(a, b) = (i, i + D/2)`` in the ``"half"`` layout and ``(2i, 2i + 1)`` in the
    ``"interleaved"`` layout. Positions default to ``offset .. offset + T − 1``; pass ``inv_freq``
    (e.g. from a scaling function) to override ``base``. Apply it to queries and keys, never values.

    Shapes:
        x ``(..., T, D)`` with ``D`` even; positions ``(T,)`` or broadcastable ``(..., T)``;
        inv_freq ``(D/2,)``; returns ``(..., T, D)`` in x's dtype.

    Example:
        >>> x = torch.tensor([[1.0, 1.0, 0.0, 0.0]])   # T=1, D=4: pairs (x0, x2) = (1, 0), (x1, x3) = (1, 0)
        >>> apply_rope(x, torch.tensor([2]), base=100.0)   # pair 0 turns 2 rad, pair 1 turns 0.2 rad
        tensor([[-0.4161,  0.9801,  0.9093,  0.1987]])
    """
    check_floating("x", x)
    sizes = check_shape("x", x, "... T D")
    _check_head_dim("x.shape[-1] (D)", sizes["D"])
    _check_layout(layout)
    if inv_freq is None:
        inv_freq = rope_frequencies(sizes["D"], base=base)
    check_shape("inv_freq", inv_freq, "D/2", **{"D/2": sizes["D"] // 2})
    angles = rope_angles(_positions_for(x, positions, offset), inv_freq.to(x.device, _angle_dtype(x)))
    return _rotate(x, angles.cos(), angles.sin(), layout)  # (..., T, D)


def apply_rope_complex(
    x: torch.Tensor,
    positions: torch.Tensor | None = None,
    *,
    base: float = 10000.0,
    inv_freq: torch.Tensor | None = None,
    offset: int = 0,
) -> torch.Tensor:
    """RoPE as complex multiplication: read pair ``(x_2i, x_2i+1)`` as ``z_i = x_2i + i·x_2i+1``
    and multiply by ``e^(i·m·θ_i)`` (Su et al., 2021, §3.2, eq. 12; Meta's Llama code).

    Multiplying by a unit complex number is a rotation, so this equals
    ``apply_rope(x, layout="interleaved")``.

    Shapes:
        as :func:`apply_rope`; returns ``(..., T, D)``.

    Example:
        >>> x = torch.randn(2, 5, 8)
        >>> torch.allclose(apply_rope_complex(x), apply_rope(x, layout="interleaved"), atol=1e-6)
        True
    """
    check_floating("x", x)
    sizes = check_shape("x", x, "... T D")
    _check_head_dim("x.shape[-1] (D)", sizes["D"])
    if inv_freq is None:
        inv_freq = rope_frequencies(sizes["D"], base=base)
    check_shape("inv_freq", inv_freq, "D/2", **{"D/2": sizes["D"] // 2})
    real_dtype = _angle_dtype(x)
    angles = rope_angles(
        _positions_for(x, positions, offset), inv_freq.to(x.device, real_dtype)
    )  # (..., T, D/2)
    turn = torch.polar(torch.ones_like(angles), angles)  # (..., T, D/2) complex, |turn| = 1
    z = torch.view_as_complex(x.to(real_dtype).unflatten(-1, (-1, 2)).contiguous())  # (..., T, D/2) complex
    return torch.view_as_real(z * turn).flatten(-2).to(x.dtype)  # (..., T, D)


def rotate_2d(vec: torch.Tensor, angle: float | torch.Tensor) -> torch.Tensor:
    """Turn 2-D vectors counter-clockwise by ``angle`` radians: the one operation RoPE repeats.

    Shapes:
        vec ``(..., 2)``, angle a float or a tensor broadcastable to ``(...)``; returns ``(..., 2)``.

    Example:
        >>> rotate_2d(torch.tensor([1.0, 0.0]), math.pi / 2).round(decimals=4)
        tensor([0., 1.])
    """
    check_floating("vec", vec)
    check_shape("vec", vec, "... 2")
    angle = torch.as_tensor(angle, dtype=vec.dtype, device=vec.device)
    cos, sin = angle.cos(), angle.sin()
    x, y = vec[..., 0], vec[..., 1]
    return torch.stack((x * cos - y * sin, x * sin + y * cos), dim=-1)  # (..., 2)


# ---------------------------------------------------------------------------------------------------
# Context extension: scaled frequencies
# ---------------------------------------------------------------------------------------------------


def linear_scaled_frequencies(head_dim: int, factor: float, *, base: float = 10000.0) -> torch.Tensor:
    """Position interpolation (Chen et al., 2023): squeeze ``s·L`` positions into the trained ``0 .. L``.

    Rotating position ``m`` by ``(m/s)·θ_i`` is the same as rotating ``m`` by ``θ_i / s``, so every
    frequency is divided by ``s = factor``. Matches transformers' ``"linear"`` rope type.

    Shapes:
        returns ``(D/2,)`` float32.

    Example:
        >>> linear_scaled_frequencies(4, 2.0, base=100.0)
        tensor([0.5000, 0.0500])
    """
    return rope_frequencies(head_dim, base=base) / _check_factor(factor)  # (D/2,)


def ntk_scaled_frequencies(head_dim: int, factor: float, *, base: float = 10000.0) -> torch.Tensor:
    """NTK-aware scaling ("bloc97", 2023; Peng et al., 2023, §3.1): raise the base, not the positions.

        base' = base · s^(D/(D−2))

    The fastest pair (``θ_0 = 1``) is untouched, so neighbouring tokens stay as distinguishable as in
    training, while the slowest pair is slowed by exactly ``s``, as position interpolation would.
    transformers has no static ``"ntk"`` type; its ``"dynamic"`` type applies this base change with an
    effective factor ``factor · T/L − (factor − 1)`` that grows with the current length ``T``. We use
    the fixed factor; the two agree when that effective factor equals ``s``.

    Shapes:
        returns ``(D/2,)`` float32; needs ``D >= 4``.

    Example:
        >>> inv = ntk_scaled_frequencies(8, 4.0)
        >>> float(inv[0]), round(float(rope_frequencies(8)[-1] / inv[-1]), 3)
        (1.0, 4.0)
    """
    _check_head_dim("head_dim", head_dim, minimum=4)
    new_base = _check_base(base) * _check_factor(factor) ** (head_dim / (head_dim - 2))
    return rope_frequencies(head_dim, base=new_base)  # (D/2,)


def yarn_attention_factor(factor: float) -> float:
    """YaRN's temperature fix ``sqrt(1/t) = 0.1 · ln(s) + 1`` (Peng et al., 2023, eq. 22); 1 for ``s <= 1``.

    Example:
        >>> round(yarn_attention_factor(4.0), 4)
        1.1386
    """
    factor = float(factor)
    return 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0


def _check_yarn_args(
    head_dim: int, factor: float, original_max_positions: int, base: float, beta_fast: float, beta_slow: float
) -> tuple[float, float]:
    """The arguments both YaRN ramps take, checked; returns ``factor`` and ``base`` as floats."""
    _check_head_dim("head_dim", head_dim)
    factor = _check_factor(factor)
    check_positive_int("original_max_positions", original_max_positions)
    base = _check_base(base)
    if not beta_fast > beta_slow > 0:
        raise ValueError(
            f"beta_fast, beta_slow: expected beta_fast > beta_slow > 0, got {beta_fast}, {beta_slow}"
        )
    return factor, base


def yarn_frequencies(
    head_dim: int,
    factor: float,
    *,
    original_max_positions: int,
    base: float = 10000.0,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
) -> tuple[torch.Tensor, float]:
    """YaRN (Peng et al., 2023, §3.2–3.4): interpolate slow pairs, keep fast pairs, blend in between.

    Pair ``i`` completes ``r_i = L / λ_i`` turns over the original context ``L`` (``λ_i = 2π/θ_i``).
    Pairs with many turns (``r > beta_fast``) carry local order and keep ``θ_i``; pairs with under
    ``beta_slow`` turns never wrapped in training and are interpolated to ``θ_i / s``; a linear ramp
    ``γ`` blends the two in between. The returned attention factor ``0.1 · ln(s) + 1`` multiplies
    cos and sin, which scales every score by its square (eq. 22's temperature).

    Where we follow the reference code rather than the paper (as transformers'
    ``"yarn"`` type does, with its default ``truncate=True``): the ramp is linear in the *pair index*
    between ``⌊d(beta_fast)⌋`` and ``⌈d(beta_slow)⌉``, with ``d(r) = D · ln(L / (2π r)) / (2 ln base)``
    the pair index that makes ``r`` turns, whereas the paper's eq. 18 ramp is linear in ``r``.
    The upper index is capped at ``D − 1`` as in that code (pair indices stop at ``D/2 − 1``).

    Shapes:
        returns inv_freq ``(D/2,)`` float32 and the attention factor (a float).

    Example:
        >>> inv, attention_factor = yarn_frequencies(64, 4.0, original_max_positions=2048)
        >>> theta = rope_frequencies(64)
        >>> bool(inv[0] == theta[0]), bool(torch.isclose(inv[-1], theta[-1] / 4)), round(attention_factor, 4)
        (True, True, 1.1386)
    """
    factor, base = _check_yarn_args(head_dim, factor, original_max_positions, base, beta_fast, beta_slow)

    def pair_index_with_turns(turns: float) -> float:
        # Solve L · θ_i / (2π) = turns for i, with θ_i = base^(−2i/D).
        return head_dim * math.log(original_max_positions / (2 * math.pi * turns)) / (2 * math.log(base))

    low = max(math.floor(pair_index_with_turns(beta_fast)), 0)
    high = min(math.ceil(pair_index_with_turns(beta_slow)), head_dim - 1)
    if low == high:
        high += 0.001  # a one-index ramp would divide by zero
    i = torch.arange(head_dim // 2, dtype=torch.float64)  # (D/2,)
    interpolate = ((i - low) / (high - low)).clamp(0.0, 1.0)  # (D/2,) 0 = keep θ_i, 1 = θ_i / s
    theta = rope_frequencies(head_dim, base=base).double()  # (D/2,)
    inv_freq = theta * (1 - interpolate) + (theta / factor) * interpolate  # (D/2,)
    return inv_freq.float(), yarn_attention_factor(factor)


def yarn_frequencies_by_turns(
    head_dim: int,
    factor: float,
    *,
    original_max_positions: int,
    base: float = 10000.0,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
) -> tuple[torch.Tensor, float]:
    """YaRN as the paper writes it: a ramp linear in the number of turns ``r``, not in the pair index.

        r_i = L / λ_i = L · θ_i / (2π)                   turns of pair i over the trained context L
        γ(r) = 0 if r < α,  1 if r > β,  (r − α) / (β − α) otherwise          (Peng et al., 2023, eq. 18)
        θ'_i = (1 − γ(r_i)) · θ_i / s + γ(r_i) · θ_i

    with ``α = beta_slow`` and ``β = beta_fast``. The pairs that keep their frequency (``r > β``) and
    the pairs fully interpolated (``r < α``) are the ones :func:`yarn_frequencies` picks (up to its
    rounding of the two ends to whole pair indices); in between the blends differ. ``r`` falls
    geometrically with ``i``, so a ramp linear in ``r`` reaches most of the way to ``θ_i / s`` within
    a few pairs of the fast end, where the reference code's ramp, linear in ``i``, is still near ``θ_i``.
    Notebook 07 draws both. The attention factor is the same.

    Shapes:
        returns inv_freq ``(D/2,)`` float32 and the attention factor (a float).

    Example:
        >>> by_turns, _ = yarn_frequencies_by_turns(64, 4.0, original_max_positions=512)
        >>> by_index, _ = yarn_frequencies(64, 4.0, original_max_positions=512)
        >>> theta = rope_frequencies(64)
        >>> kept = lambda f: round(float((f[8] - theta[8] / 4) / (theta[8] - theta[8] / 4)), 2)
        >>> kept(by_turns), kept(by_index)              # share of θ_8 kept: 23 % vs 62 %
        (0.23, 0.62)
    """
    factor, base = _check_yarn_args(head_dim, factor, original_max_positions, base, beta_fast, beta_slow)
    theta = rope_frequencies(head_dim, base=base).double()  # (D/2,)
    turns = original_max_positions * theta / (2 * math.pi)  # (D/2,) r_i
    keep = ((turns - beta_slow) / (beta_fast - beta_slow)).clamp(0.0, 1.0)  # (D/2,) γ(r_i): 1 = keep θ_i
    inv_freq = (1 - keep) * theta / factor + keep * theta  # (D/2,)
    return inv_freq.float(), yarn_attention_factor(factor)


def angle_overshoot(
    inv_freq: torch.Tensor, *, context: int, factor: float, base: float = 10000.0
) -> torch.Tensor:
    """How far past its trained range each pair turns when read at ``factor`` times the trained ``context``.

    Trained on ``L = context`` tokens, pair ``i`` met the relative angles ``0 .. L·θ_i``
    (``θ_i = base^(−2i/D)``): every angle if it turned a full circle, an arc otherwise. At distances up to
    ``s·L`` (``s = factor``) it reaches ``s·L·θ'_i``, with ``θ'_i = inv_freq[i]`` (the scaled frequencies):

        overshoot_i = s·L·θ'_i / (L·θ_i)  if  L·θ_i < 2π,  else 1

    Above 1: angles training never showed (unscaled RoPE gives ``s`` on every pair that did not wrap;
    position interpolation gives 1 everywhere). Ratios within 1e-6 of 1 (float32 frequencies) count as 1.

    Shapes:
        inv_freq ``(D/2,)``; returns ``(D/2,)`` float64.

    Example:
        >>> angle_overshoot(rope_frequencies(16), context=64, factor=4.0)   # pairs 0-2 wrap within 64 tokens
        tensor([1., 1., 1., 4., 4., 4., 4., 4.], dtype=torch.float64)
        >>> angle_overshoot(linear_scaled_frequencies(16, 4.0), context=64, factor=4.0).max().item()
        1.0
    """
    check_floating("inv_freq", inv_freq)
    sizes = check_shape("inv_freq", inv_freq, "D/2")
    check_positive_int("context", context)
    factor = _check_factor(factor)
    trained = context * rope_frequencies(2 * sizes["D/2"], base=base).double()  # (D/2,) L·θ_i: angles met
    ratio = factor * context * inv_freq.double().cpu() / trained  # (D/2,)
    ratio = torch.where((ratio - 1).abs() < 1e-6, torch.ones_like(ratio), ratio)  # float32 frequencies
    return torch.where(trained >= 2 * math.pi, torch.ones_like(ratio), ratio)  # (D/2,)


# ---------------------------------------------------------------------------------------------------
# The module used by attention layers
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RopeScaling:
    """How to stretch RoPE beyond the trained context (see the ``*_frequencies`` functions)."""

    kind: str  # "linear" (position interpolation), "ntk" (base change) or "yarn"
    factor: float  # s: the new context is s times the trained one (>= 1)
    original_max_positions: int | None = None  # L, the trained context; required by "yarn"
    beta_fast: float = 32.0  # yarn: pairs with more turns than this over L keep their frequency
    beta_slow: float = 1.0  # yarn: pairs with fewer turns than this are fully interpolated
    # The factor on cos and sin (every score gets its square). None: the method's own, YaRN's
    # 0.1 ln s + 1 and 1 for the others; a number overrides it (1.0: YaRN without its temperature),
    # as transformers' "attention_factor" does.
    attention_factor: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("linear", "ntk", "yarn"):
            raise ValueError(f"kind: expected 'linear', 'ntk' or 'yarn', got {self.kind!r}")
        _check_factor(self.factor)
        if self.kind == "yarn" and self.original_max_positions is None:
            raise ValueError("original_max_positions: required for kind='yarn' (the trained context L)")
        a = self.attention_factor
        if a is not None and (isinstance(a, bool) or not isinstance(a, (int, float)) or not 0 < a < math.inf):
            raise ValueError(f"attention_factor: expected None or a finite number > 0, got {a!r}")

    def frequencies(self, head_dim: int, base: float) -> tuple[torch.Tensor, float]:
        """``(inv_freq (D/2,), attention_factor)`` for this scaling."""
        if self.kind == "linear":
            inv_freq, own = linear_scaled_frequencies(head_dim, self.factor, base=base), 1.0
        elif self.kind == "ntk":
            inv_freq, own = ntk_scaled_frequencies(head_dim, self.factor, base=base), 1.0
        else:
            inv_freq, own = yarn_frequencies(
                head_dim,
                self.factor,
                original_max_positions=self.original_max_positions,
                base=base,
                beta_fast=self.beta_fast,
                beta_slow=self.beta_slow,
            )
        return inv_freq, own if self.attention_factor is None else float(self.attention_factor)


class RotaryEmbedding(nn.Module):
    """Rotate queries and keys of an attention layer by their positions (no trainable weights).

    ``forward(q, k, offset=m0)`` treats the ``T`` tokens as positions ``m0 .. m0 + T − 1``; with a KV
    cache, ``offset`` is the number of cached tokens, and the cache stores keys already rotated.
    With ``max_positions`` the cos/sin table for positions ``0 .. max_positions − 1`` is computed once;
    later positions are computed on the fly (RoPE itself has no length limit). A YaRN attention
    factor multiplies cos and sin, as Hugging Face does.

    Shapes:
        q ``(B, H, T, D)``, k ``(B, H_kv, T, D)``; returns ``(q_rot, k_rot)`` of the same shapes.

    Example:
        >>> rope = RotaryEmbedding(8)
        >>> q, k = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 5, 8)
        >>> q_rot, k_rot = rope(q, k, offset=3)
        >>> q_rot.shape, k_rot.shape
        (torch.Size([2, 4, 5, 8]), torch.Size([2, 2, 5, 8]))
    """

    def __init__(
        self,
        head_dim: int,
        *,
        base: float = 10000.0,
        layout: str = "half",
        scaling: RopeScaling | None = None,
        max_positions: int | None = None,
    ) -> None:
        super().__init__()
        self.head_dim = _check_head_dim("head_dim", head_dim)
        self.base = _check_base(base)
        self.layout = _check_layout(layout)
        if scaling is not None and not isinstance(scaling, RopeScaling):
            raise ValueError(f"scaling: expected a RopeScaling or None, got {type(scaling).__name__}")
        self.scaling = scaling
        if scaling is None:
            inv_freq, self.attention_factor = rope_frequencies(head_dim, base=self.base), 1.0
        else:
            inv_freq, self.attention_factor = scaling.frequencies(head_dim, self.base)
        # Buffers follow .to(device) but are not saved: they are recomputed from the arguments.
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # (D/2,)
        self.max_positions = (
            None if max_positions is None else check_positive_int("max_positions", max_positions)
        )
        if self.max_positions is not None:
            cos, sin = self._cos_sin(torch.arange(self.max_positions))
            self.register_buffer("cos_cached", cos, persistent=False)  # (max_positions, D/2)
            self.register_buffer("sin_cached", sin, persistent=False)  # (max_positions, D/2)

    def _cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        angles = rope_angles(positions.to(self.inv_freq.device), self.inv_freq)  # (T, D/2)
        return angles.cos() * self.attention_factor, angles.sin() * self.attention_factor

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, *, offset: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        check_floating("q", q)
        check_floating("k", k)
        sizes = check_shape("q", q, "... T D", D=self.head_dim)
        check_shape("k", k, "... T D", T=sizes["T"], D=self.head_dim)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset: expected an int >= 0 (tokens already in the cache), got {offset!r}")
        T = sizes["T"]
        if self.max_positions is not None and offset + T <= self.max_positions:
            cos, sin = self.cos_cached[offset : offset + T], self.sin_cached[offset : offset + T]  # (T, D/2)
        else:
            cos, sin = self._cos_sin(torch.arange(offset, offset + T))  # (T, D/2)
        return _rotate(q, cos, sin, self.layout), _rotate(
            k, cos, sin, self.layout
        )  # (B, H, T, D), (B, H_kv, T, D)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base}, layout={self.layout!r}, scaling={self.scaling}"
