"""Schematic diagrams of positions and of what is built around attention, notebooks 06 to 09: the sinusoidal
clock, a RoPE pair turning, pre-norm against post-norm, and the three architectures' wiring.

Conventions as in :mod:`attn_edu.viz.diagrams_attention`: sizes in, checked, a figure out; defaults from the
example beside which each diagram sits (:data:`attn_edu.viz.diagrams.DIAGRAMS`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Arc, Circle

from attn_edu.viz.common import ROLE_COLORS
from attn_edu.viz.diagrams_kit import INK, SMALL, arrow, box, canvas, check_int, text, tint

Q, K, V, SC, M, O = (ROLE_COLORS[r] for r in ("query", "key", "value", "scores", "mask", "output"))  # noqa: E741


def _hand(ax, cx: float, cy: float, r: float, angle: float, color: str, *, ghost: bool = False) -> None:
    """A clock hand from the centre at ``angle`` radians (counter-clockwise from 3 o'clock)."""
    end = (cx + r * math.cos(angle), cy + r * math.sin(angle))
    arrow(ax, (cx, cy), end, color=color, dashed=ghost)


def sinusoidal_clock(
    *,
    dim: int = 64,
    pairs: Sequence[int] = (0, 4, 8, 16),
    position: int = 3,
    shift: int = 2,
    base: float = 10000.0,
) -> Figure:
    """The sinusoidal encoding as clock hands: pair i turns ω_i = base^(-2i/dim) radians per token.

    Each face is one pair ``(sin, cos)``; the solid hand is ``position``, the dashed one ``position + shift``.
    The turn between them, ``shift · ω_i``, does not depend on ``position``: a shift is a rotation ``M_k``.
    Defaults: notebook 06 §2-3, ``dim = 64`` and the pairs 0, 4, 8 and 16 of its curves.
    """
    check_int("dim", dim, 2, 4096)
    if dim % 2:
        raise ValueError(f"dim: expected an even number (sin and cos pairs), got {dim}")
    pairs = list(pairs)
    if not 1 <= len(pairs) <= 6 or any(isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < dim // 2
                                         for p in pairs):  # fmt: skip
        raise ValueError(
            f"pairs: expected 1 to 6 pair indices in 0 .. dim/2 - 1 = {dim // 2 - 1}, got {pairs!r}"
        )
    check_int("position", position, 0, 100_000)
    check_int("shift", shift, 0, 100_000)
    if not base > 1:
        raise ValueError(f"base: expected a number > 1, got {base!r}")
    n = len(pairs)
    width = min(10.0, 0.6 + 2.2 * n)
    fig, ax = canvas(
        width, 3.5, f"clock hands at position {position} (solid) and {position + shift} (dashed)"
    )
    r = 0.8
    for j, i in enumerate(pairs):
        cx, cy = 1.3 + j * 2.2, 1.85
        omega = base ** (-2 * i / dim)
        ax.add_patch(Circle((cx, cy), r, fill=False, edgecolor=INK, lw=0.8))
        # sin on the vertical axis, cos on the horizontal: the hand's angle is position * omega
        _hand(ax, cx, cy, r * 0.92, position * omega, Q)
        _hand(ax, cx, cy, r * 0.92, (position + shift) * omega, Q, ghost=True)
        turn = shift * omega
        if turn > 0.05:
            deg = math.degrees(position * omega)
            ax.add_patch(
                Arc((cx, cy), 0.7, 0.7, theta1=deg, theta2=deg + math.degrees(turn), color=SC, lw=1.2)
            )
        text(ax, cx, cy - r - 0.22, f"pair {i}: ω = {omega:.3g}")
        text(ax, cx, cy - r - 0.45, f"wavelength {2 * math.pi / omega:,.0f} tokens")
        text(ax, cx, cy + r + 0.17, f"turn {shift}ω = {math.degrees(turn):.3g}°", color=SC)
    text(
        ax,
        width / 2,
        0.2,
        f"$PE(pos + {shift}) = M_{{{shift}}}\\, PE(pos)$: every pair turns by its own angle, whatever pos",
    )
    return fig


def rope_pair(*, pair: Sequence[float] = (1.0, 0.4), theta: float = 0.5, m: int = 3, n: int = 1) -> Figure:
    """RoPE on one pair: the query turns by mθ, the key by nθ; their angle, hence their score, is (m − n)θ.

    Defaults: notebook 07 §1-2, the pair (1.0, 0.4) at θ = 0.5 rad per token; a query at 3, a key at 1.
    """
    values = list(pair)
    if len(values) != 2 or not all(isinstance(x, (int, float)) and math.isfinite(x) for x in values):
        raise ValueError(f"pair: expected two finite numbers (one pair of coordinates), got {pair!r}")
    if math.hypot(*values) == 0:
        raise ValueError("pair: expected a non-zero pair (a zero vector has no angle to turn)")
    if not (isinstance(theta, (int, float)) and math.isfinite(theta) and 0 < theta < math.pi):
        raise ValueError(f"theta: expected radians per token in (0, π), got {theta!r}")
    check_int("m", m, 0, 1000)
    check_int("n", n, 0, 1000)
    fig, ax = canvas(9.0, 3.6, f"RoPE turns q by m·θ and k by n·θ (θ = {theta} rad per token)")
    length = math.hypot(*values)
    start = math.atan2(values[1], values[0])
    scale = 1.1 / length
    for j, (title, turns) in enumerate((("before: q and k, unturned", (0, 0)),
                                        (f"after: q at m = {m}, k at n = {n}", (m, n)))):  # fmt: skip
        cx, cy = 1.9 + j * 4.4, 1.6
        ax.add_patch(Circle((cx, cy), 1.2, fill=False, edgecolor=tint(INK, 0.3), lw=0.8))
        aq, ak = start + turns[0] * theta, start + 0.35 + turns[1] * theta
        for angle, color, name in ((aq, Q, "q"), (ak, K, "k")):
            end = (cx + length * scale * math.cos(angle), cy + length * scale * math.sin(angle))
            arrow(ax, (cx, cy), end, color=color)
            text(
                ax,
                cx + 1.3 * math.cos(angle) * 1.05,
                cy + 1.3 * math.sin(angle) * 1.05,
                name,
                color=color,
                size=11,
            )
        low, high = sorted((aq, ak))
        ax.add_patch(
            Arc((cx, cy), 0.8, 0.8, theta1=math.degrees(low), theta2=math.degrees(high), color=SC, lw=1.3)
        )
        gap = ak - aq
        text(ax, cx, 0.12, f"{title}: angle {math.degrees(gap):.0f}°", size=SMALL)
    text(ax, 4.5, 3.0, f"q·k depends on (n − m)·θ = {(n - m) * theta:.2f} rad only; lengths do not change",
         color=SC)  # fmt: skip
    return fig


def norm_placement(*, B: int = 16, T: int = 12, C: int = 32) -> Figure:
    """Post-norm ``x ← Norm(x + F(x))`` beside pre-norm ``x ← x + F(Norm(x))``, one block each.

    In post-norm the residual path crosses a LayerNorm in every block; in pre-norm it is a plain sum, from the
    embeddings to the last block. Defaults: notebook 08 §6, the sorting task's batch of 16 sequences of 12 tokens,
    ``C = 32``.
    """
    for name, value in (("B", B), ("T", T), ("C", C)):
        check_int(name, value, 1, 100_000)
    fig, ax = canvas(
        9.4, 5.0, f"one transformer block, two placements of the norm; x is (B, T, C) = ({B}, {T}, {C})"
    )
    panels = (("post-norm (Vaswani et al., 2017)", False), ("pre-norm (GPT-2 and later)", True))
    for j, (title, pre) in enumerate(panels):
        x0 = 0.3 + j * 4.7
        text(ax, x0 + 2.0, 4.45, title, weight="bold", size=10)
        spine = x0 + 0.5  # the residual stream, drawn as a vertical line
        ax.plot([spine, spine], (0.4, 4.05), color=O, lw=2.5, solid_capstyle="butt", zorder=1)
        text(ax, spine, 0.22, "x in", color=O)
        text(ax, spine, 4.2, "x out", color=O)
        for k, (name, y) in enumerate((("attention", 0.6), ("feed-forward", 2.3))):
            plus_y = y + 1.1
            ax.add_patch(Circle((spine, plus_y), 0.13, facecolor="white", edgecolor=O, lw=1.5, zorder=3))
            text(ax, spine, plus_y, "+", size=11, zorder=4)
            role = "scores" if k == 0 else None
            if pre:
                box(ax, x0 + 1.0, y + 0.0, 1.3, 0.36, "LayerNorm", "mask", size=SMALL)
                box(ax, x0 + 1.0, y + 0.55, 1.3, 0.4, name, role, size=SMALL)
                arrow(ax, (spine, y + 0.18), (x0 + 1.0, y + 0.18))
                arrow(ax, (x0 + 1.65, y + 0.36), (x0 + 1.65, y + 0.55))
                arrow(ax, (x0 + 1.65, y + 0.95), (spine + 0.13, plus_y), bend=0.2)
            else:
                box(ax, x0 + 1.0, y + 0.3, 1.3, 0.4, name, role, size=SMALL)
                arrow(ax, (spine, y + 0.1), (x0 + 1.0, y + 0.5))
                arrow(ax, (x0 + 1.65, y + 0.7), (spine + 0.13, plus_y), bend=0.2)
                box(ax, spine - 0.6, plus_y + 0.25, 1.2, 0.34, "LayerNorm", "mask", size=SMALL)
        note = ("the skip path crosses a norm\nafter every sub-layer: the\ngradient to block 1 is\nrescaled "
                "at each one" if not pre else "the skip path is a plain\nsum: the gradient reaches\nblock 1 "
                "unchanged (one\nfinal LayerNorm after\nthe last block)")  # fmt: skip
        text(ax, x0 + 2.55, 2.2, note, ha="left", size=SMALL)
    return fig


def architectures(*, S: int = 6, S_real: int = 5, T: int = 4) -> Figure:
    """Encoder (BERT), decoder (GPT) and encoder-decoder (T5) wiring: which stack reads which, under which mask.

    Defaults: notebook 09 §1, a source of 5 real tokens padded to ``S = 6`` and ``T = 4`` output tokens.
    """
    check_int("S", S, 1, 64)
    check_int("S_real", S_real, 1, S)
    check_int("T", T, 1, 64)
    fig, ax = canvas(10.0, 4.2, "three ways to wire attention: who reads whom, under which mask")
    source, target = f"source: S = {S} ({S - S_real} pad)", f"output so far: T = {T}"
    columns = [  # x, width, title, input, mask
        (0.2, 2.3, "encoder (BERT)", source, "padding mask (S, S)"),
        (2.8, 2.3, "decoder (GPT)", target, "causal mask (T, T)"),
        (5.5, 1.7, "", source, "padding (S, S)"),
        (7.85, 2.0, "", target, "causal (T, T)"),
    ]
    for x0, w, title, given, mask in columns:
        cx = x0 + w / 2
        if title:
            text(ax, cx, 3.75, title, weight="bold", size=10)
        box(ax, x0, 0.25, w, 0.45, given, size=SMALL)
        box(ax, x0, 1.0, w, 0.6, "self-attention", "scores", shape=mask, size=SMALL)
        arrow(ax, (cx, 0.7), (cx, 1.0), color=Q)
        top = 1.6
        if x0 > 7:
            box(ax, x0, 1.9, w, 0.6, "cross-attention", "key", shape=f"(T, S) = ({T}, {S})", size=SMALL)
            arrow(ax, (cx, 1.6), (cx, 1.9), color=Q)
            top = 2.5
        box(ax, x0, top + 0.25, w, 0.4, "feed-forward", size=SMALL)
        arrow(ax, (cx, top), (cx, top + 0.25))
        stack = "encoder " if x0 == 5.5 else "decoder " if x0 > 7 else ""
        text(ax, cx, top + 0.8, f"{stack}× L blocks", size=SMALL)
    text(ax, 7.75, 3.75, "encoder-decoder (T5)", weight="bold", size=10)
    # the encoder's output feeds every decoder block's cross-attention: K and V, computed once
    arrow(ax, (7.2, 2.05), (7.85, 2.2), color=K)
    text(ax, 7.5, 2.4, "K, V", color=K)
    return fig
