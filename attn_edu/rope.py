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

Context extension (scaling the frequencies so a model trained on ``L`` tokens reads ``s·L``: position
interpolation, NTK-aware and YaRN) is :mod:`attn_edu.rope_scaling`; :class:`RotaryEmbedding` takes one as
``scaling=``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from attn_edu._validate import (
    check_floating,
    check_frequency_base,
    check_positive_int,
    check_rope_dim,
    check_shape,
    check_tensor,
)

if TYPE_CHECKING:
    from attn_edu.rope_scaling import RopeScaling

LAYOUTS = ("half", "interleaved")


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
    check_rope_dim("head_dim", head_dim)
    i = torch.arange(head_dim // 2, dtype=torch.float64)  # (D/2,)
    return (check_frequency_base(base) ** (-2.0 * i / head_dim)).float()  # (D/2,)


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
    check_rope_dim("x.shape[-1] (D)", x.shape[-1])
    return torch.cat((x[..., 0::2], x[..., 1::2]), dim=-1)  # (..., D)


def half_to_interleaved(x: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`interleaved_to_half`: put coordinate ``i`` next to ``i + D/2``.

    Example:
        >>> half_to_interleaved(torch.tensor([0, 2, 4, 1, 3, 5]))
        tensor([0, 1, 2, 3, 4, 5])
    """
    check_rope_dim("x.shape[-1] (D)", x.shape[-1])
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
    check_rope_dim("x.shape[-1] (D)", sizes["D"])
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
    check_rope_dim("x.shape[-1] (D)", sizes["D"])
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
        >>> rotate_2d(torch.tensor([1.0, 0.0]), torch.pi / 2).round(decimals=4)
        tensor([0., 1.])
    """
    check_floating("vec", vec)
    check_shape("vec", vec, "... 2")
    angle = torch.as_tensor(angle, dtype=vec.dtype, device=vec.device)
    cos, sin = angle.cos(), angle.sin()
    x, y = vec[..., 0], vec[..., 1]
    return torch.stack((x * cos - y * sin, x * sin + y * cos), dim=-1)  # (..., 2)


# ---------------------------------------------------------------------------------------------------
# The module used by attention layers
# ---------------------------------------------------------------------------------------------------


class RotaryEmbedding(nn.Module):
    """Rotate queries and keys of an attention layer by their positions (no trainable weights).

    ``forward(q, k, offset=m0)`` treats the ``T`` tokens as positions ``m0 .. m0 + T − 1``; with a KV
    cache, ``offset`` is the number of cached tokens, and the cache stores keys already rotated.
    With ``max_positions`` the cos/sin table for positions ``0 .. max_positions − 1`` is computed once;
    later positions are computed on the fly (RoPE itself has no length limit). A YaRN attention
    factor multiplies cos and sin, as Hugging Face does. With ``rotary_dim = R < D`` (*partial* RoPE:
    GPT-NeoX, Qwen3-Next's ``partial_rotary_factor``) only the first ``R`` coordinates of each head turn, at
    the frequencies of a head of size ``R``; the other ``D − R`` carry no position at all.

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
        rotary_dim: int | None = None,
    ) -> None:
        super().__init__()
        self.head_dim = check_positive_int("head_dim", head_dim)
        self.rotary_dim = check_rope_dim("rotary_dim", head_dim if rotary_dim is None else rotary_dim)
        if self.rotary_dim > head_dim:
            raise ValueError(f"rotary_dim: expected at most head_dim={head_dim}, got {rotary_dim}")
        self.base = check_frequency_base(base)
        self.layout = _check_layout(layout)
        from attn_edu.rope_scaling import RopeScaling  # it builds on this module's frequencies

        if scaling is not None and not isinstance(scaling, RopeScaling):
            raise ValueError(f"scaling: expected a RopeScaling or None, got {type(scaling).__name__}")
        self.scaling = scaling
        if scaling is None:
            inv_freq, self.attention_factor = rope_frequencies(self.rotary_dim, base=self.base), 1.0
        else:
            inv_freq, self.attention_factor = scaling.frequencies(self.rotary_dim, self.base)
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
        cos, sin = self._table(offset, sizes["T"])  # (T, R/2) each, once for both
        return self._turn(q, cos, sin), self._turn(k, cos, sin)  # (B, H, T, D), (B, H_kv, T, D)

    def rotate(self, x: torch.Tensor, *, offset: int = 0) -> torch.Tensor:
        """One tensor's tokens turned to positions ``offset .. offset + T − 1``: queries and keys apart, as a
        cache that stores keys unrotated needs (StreamingLLM, :class:`attn_edu.kv_cache.StreamingKVCacheLayer`).

        Shapes:
            x ``(..., T, D)``; returns the same shape.
        """
        check_floating("x", x)
        T = check_shape("x", x, "... T D", D=self.head_dim)["T"]
        return self._turn(x, *self._table(offset, T))  # (..., T, D)

    def _table(self, offset: int, T: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of positions ``offset .. offset + T − 1``, ``(T, R/2)`` each: from the cached table if it
        reaches that far."""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset: expected an int >= 0 (tokens already in the cache), got {offset!r}")
        if self.max_positions is not None and offset + T <= self.max_positions:
            return self.cos_cached[offset : offset + T], self.sin_cached[offset : offset + T]
        return self._cos_sin(torch.arange(offset, offset + T))

    def _turn(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        R = self.rotary_dim  # partial RoPE: the coordinates past R pass unturned
        if R == self.head_dim:
            return _rotate(x, cos, sin, self.layout)  # (..., T, D)
        return torch.cat([_rotate(x[..., :R], cos, sin, self.layout), x[..., R:]], dim=-1)  # (..., T, D)

    def extra_repr(self) -> str:
        partial = "" if self.rotary_dim == self.head_dim else f", rotary_dim={self.rotary_dim}"
        return f"head_dim={self.head_dim}{partial}, base={self.base}, layout={self.layout!r}, scaling={self.scaling}"


_SCALING_NAMES = ("RopeScaling", "linear_scaled_frequencies", "ntk_scaled_frequencies", "angle_overshoot")
_SCALING_NAMES += ("yarn_frequencies", "yarn_frequencies_by_turns", "yarn_attention_factor")


def __getattr__(name: str) -> object:
    """``from attn_edu.rope import yarn_frequencies`` (the API's old home) still works: the scalings now live
    in :mod:`attn_edu.rope_scaling`, which builds on this module (PEP 562)."""
    if name in _SCALING_NAMES:
        from attn_edu import rope_scaling

        return getattr(rope_scaling, name)
    raise AttributeError(f"module 'attn_edu.rope' has no attribute {name!r}")
