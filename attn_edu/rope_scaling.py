"""Context extension for RoPE: scaled frequencies, so that a model trained on ``L`` tokens reads ``s·L``.

Three ways to stretch the rotations of :mod:`attn_edu.rope` (notebook 07), each matching transformers' rope
type of the same name:

- position interpolation (``linear``; Chen et al., 2023): every frequency divided by ``s``;
- the NTK-aware base change (``ntk``; bloc97, 2023): a larger base, so the slow pairs stretch and the fast keep;
- YaRN (``yarn``; Peng et al., 2024): a ramp between the two by how many turns a pair makes over ``L``, and an
  attention temperature (the reference code's ramp in :func:`yarn_frequencies`, the paper's in
  :func:`yarn_frequencies_by_turns`).

:class:`RopeScaling` names one of them for :class:`attn_edu.rope.RotaryEmbedding` (``scaling=``);
:func:`angle_overshoot` measures how far past its trained angles each pair turns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attn_edu._validate import (
    check_floating,
    check_frequency_base,
    check_positive_int,
    check_rope_dim,
    check_shape,
)
from attn_edu.rope import rope_frequencies


def _check_factor(factor: float) -> float:
    if not isinstance(factor, (int, float)) or not math.isfinite(factor) or factor < 1:
        raise ValueError(f"factor: expected a context-extension factor >= 1 (e.g. 4.0), got {factor!r}")
    return float(factor)


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
    check_rope_dim("head_dim", head_dim, minimum=4)
    new_base = check_frequency_base(base) * _check_factor(factor) ** (head_dim / (head_dim - 2))
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
    check_rope_dim("head_dim", head_dim)
    factor = _check_factor(factor)
    check_positive_int("original_max_positions", original_max_positions)
    base = check_frequency_base(base)
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
    truncate: bool = True,
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
    ``truncate=False`` keeps the two ends unrounded, as gpt-oss does (its ``rope_parameters`` say
    ``"truncate": False``; OpenAI, "gpt-oss-120b & gpt-oss-20b Model Card", 2025): the ramp then starts
    and ends between two pair indices.

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

    low, high = pair_index_with_turns(beta_fast), pair_index_with_turns(beta_slow)
    if truncate:  # the reference code's whole pair indices (transformers' default)
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
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


@dataclass(frozen=True)
class RopeScaling:
    """How to stretch RoPE beyond the trained context (see the ``*_frequencies`` functions)."""

    kind: str  # "linear" (position interpolation), "ntk" (base change) or "yarn"
    factor: float  # s: the new context is s times the trained one (>= 1)
    original_max_positions: int | None = None  # L, the trained context; required by "yarn"
    beta_fast: float = 32.0  # yarn: pairs with more turns than this over L keep their frequency
    beta_slow: float = 1.0  # yarn: pairs with fewer turns than this are fully interpolated
    truncate: bool = True  # yarn: round the ramp's ends to whole pair indices (False in gpt-oss)
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
        if not isinstance(self.truncate, bool):
            raise ValueError(f"truncate: expected True or False, got {self.truncate!r}")

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
                truncate=self.truncate,
            )
        return inv_freq, own if self.attention_factor is None else float(self.attention_factor)
