"""Schematic diagrams of attention itself, notebooks 02 to 09: one query's path, self- and cross-attention, masks,
heads and their grouping, position clocks and rotations, norm placement, the three architectures.

Every function takes the sizes it draws (defaults: the example of the notebook section it sits beside, listed in
:data:`attn_edu.viz.diagrams.DIAGRAMS`), checks them (a ``ValueError`` names the argument), and returns the
figure. The drawing kit is :mod:`attn_edu.viz.diagrams_kit`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Circle

from attn_edu.viz.common import ROLE_COLORS
from attn_edu.viz.diagrams_kit import (
    HIDDEN,
    INK,
    SMALL,
    arrow,
    box,
    canvas,
    check_int,
    elbow,
    frame,
    grid,
    legend_row,
    text,
    tint,
)

Q, K, V, SC, M, O = (ROLE_COLORS[r] for r in ("query", "key", "value", "scores", "mask", "output"))  # noqa: E741


def _visible(T: int, S: int, causal: bool) -> np.ndarray:
    """(T, S) bool, bottom-right causal (query t sees keys 0 .. S - T + t) or all True."""
    t, s = np.arange(T)[:, None], np.arange(S)[None, :]
    return s <= t + (S - T) if causal else np.ones((T, S), dtype=bool)


def query_path(
    *,
    T: int = 6,
    S: int = 6,
    D: int = 4,
    Dv: int = 5,
    query: int = 2,
    causal: bool = False,
    token: str = "sat",
) -> Figure:
    """One query's path through scaled dot-product attention, with every shape.

    ``q_t`` (1, D) meets ``Kᵀ`` (D, S): S scores; ÷ √D; the mask hides keys (dashed when there is none);
    softmax over the S keys makes weights that sum to 1; they mix the rows of ``V`` (S, Dv) into ``o_t``
    (1, Dv). Defaults: notebook 02's six-token sentence, ``D = 4``, ``Dv = 5``, the query "sat".
    """
    for name, value in (("T", T), ("S", S), ("D", D), ("Dv", Dv)):
        check_int(name, value, 1, 12)
    check_int("query", query, 0, T - 1)
    visible = _visible(T, S, causal)[query]  # (S,)
    c = min(0.25, 1.45 / max(S, D, Dv))  # inches per cell
    fig, ax = canvas(10.0, 4.7, f"one query's path: row {query} of the (T, S) = ({T}, {S}) attention")
    y = 3.55  # row 1's centre line: q_t · Kᵀ -> scores -> ÷ √D -> mask
    grid(ax, 0.3, y + c / 2, 1, D, c, Q)
    text(ax, 0.3 + D * c / 2, y - 0.45, f"$q_{{{query}}}$ ('{token}')\n(1, D) = (1, {D})")
    x = 0.45 + D * c
    text(ax, x, y, "·", size=16)
    _, k_bottom, _, _ = grid(ax, x + 0.15, y + D * c / 2, D, S, c, K)
    text(ax, x + 0.15 + S * c / 2, k_bottom - 0.2, rf"$K^\top$ (D, S) = ({D}, {S})")
    x += 0.15 + S * c
    steps = [
        ("", [tint(SC, 0.55)] * S, rf"scores $q K^\top$" f"\n(1, S) = (1, {S})", INK),
        (rf"$\div \sqrt{{{D}}}$", [tint(SC, 0.4)] * S, "scaled\n(1, S)", INK),
        ("mask", [tint(SC, 0.4) if v else HIDDEN for v in visible],
         f"{int(visible.sum())} of {S} keys visible" if causal else "no mask here:\nall keys visible", M),
    ]  # fmt: skip
    for label, cells, note, color in steps:
        arrow(ax, (x + 0.05, y), (x + 0.55, y), label, color=color)
        grid(ax, x + 0.6, y + c / 2, 1, S, c, [cells])
        text(ax, x + 0.6 + S * c / 2, y - 0.45, note)
        x += 0.6 + S * c
    if not causal:
        frame(ax, x - S * c - 0.04, y - c / 2 - 0.04, S * c + 0.08, c + 0.08, color=M, lw=0.8)
    # Row 2: softmax -> weights · V = o_t
    y2 = 1.45
    raw = np.where(visible, np.cos(np.arange(S) * 1.3) + 1.5, -np.inf)
    weights = np.exp(raw - raw.max())
    weights /= weights.sum()
    x2 = 0.9
    # softmax: down from under the masked row, left below every label of row 1, down onto the weights
    y_leg = y - 1.05
    elbow(ax, [(x - S * c / 2, y - 0.78), (x - S * c / 2, y_leg), (x2 + S * c / 2, y_leg),
               (x2 + S * c / 2, y2 + c / 2 + 0.05)], "softmax over the S keys")  # fmt: skip
    w_cells = [tint(SC, 0.15 + 0.85 * w / weights.max()) if v else HIDDEN for w, v in zip(weights, visible)]
    grid(ax, x2, y2 + c / 2, 1, S, c, [w_cells])
    text(ax, x2 + S * c / 2, y2 - 0.45, "weights (1, S):\n≥ 0, sum to 1")
    x2 += S * c + 0.15
    text(ax, x2, y2, "·", size=16)
    _, v_bottom, _, _ = grid(ax, x2 + 0.15, y2 + S * c / 2, S, Dv, c, V)
    text(ax, x2 + 0.15 + Dv * c / 2, v_bottom - 0.2, f"V (S, Dv) = ({S}, {Dv})")
    x2 += 0.15 + Dv * c
    arrow(ax, (x2 + 0.05, y2), (x2 + 0.55, y2), "=")
    grid(ax, x2 + 0.6, y2 + c / 2, 1, Dv, c, O)
    text(ax, x2 + 0.6 + Dv * c / 2, y2 - 0.45, f"$o_{{{query}}}$: V's rows, mixed\n(1, Dv) = (1, {Dv})")
    legend_row(ax, 0.3, 0.25, [("query", Q), ("key", K), ("value", V), ("scores, weights", SC),
                               ("output", O), ("hidden", HIDDEN)])  # fmt: skip
    return fig


def self_vs_cross(
    *, T: int = 6, S: int = 6, T_cross: int = 3, C: int = 8, C_cross: int = 12, D: int = 4
) -> Figure:
    """Self-attention (Q, K, V from one sequence, ``S = T``) beside cross-attention (Q from another sequence).

    Defaults: notebook 02 §6, the English sentence (T = S = 6, C = 8) and three French tokens of size 12.
    """
    for name, value in (("T", T), ("S", S), ("T_cross", T_cross), ("C", C), ("C_cross", C_cross), ("D", D)):
        check_int(name, value, 1, 64)
    fig, ax = canvas(9.6, 3.6, "self-attention and cross-attention: where Q, K and V come from")
    for x0, title, _source, n_q, c_q in (
        (0.2, "self-attention: S = T", "X  (T, C)", T, C),
        (5.0, "cross-attention: T ≠ S allowed", "French  (T, C')", T_cross, C_cross),
    ):
        text(ax, x0 + 2.2, 3.0, title, size=10, weight="bold")
        if x0 < 1:
            box(ax, x0, 1.2, 1.3, 0.7, "X", shape=f"(T, C) = ({T}, {C})")
            src_kv = (x0 + 1.3, 1.55)
            q_from = (x0 + 1.3, 1.55)
        else:
            box(ax, x0, 2.0, 1.3, 0.7, "French", shape=f"(T, C') = ({n_q}, {c_q})")
            box(ax, x0, 0.5, 1.3, 0.7, "English X", shape=f"(S, C) = ({S}, {C})")
            q_from, src_kv = (x0 + 1.3, 2.35), (x0 + 1.3, 0.85)
        yq, yk, yv = 2.35, 1.55, 0.75
        box(ax, x0 + 1.9, yq - 0.3, 1.0, 0.6, "Q", "query", shape=f"({n_q}, {D})")
        box(ax, x0 + 1.9, yk - 0.3, 1.0, 0.6, "K", "key", shape=f"({S if x0 > 1 else T}, {D})")
        box(ax, x0 + 1.9, yv - 0.3, 1.0, 0.6, "V", "value", shape=f"({S if x0 > 1 else T}, Dv)")
        arrow(ax, q_from, (x0 + 1.9, yq), color=Q)
        arrow(ax, src_kv, (x0 + 1.9, yk), color=K)
        arrow(ax, src_kv, (x0 + 1.9, yv), color=V)
        n_k = S if x0 > 1 else T
        box(ax, x0 + 3.4, 1.25, 1.0, 0.6, "attend", "scores", shape=f"({n_q}, {n_k})")
        for y, color in ((yq, Q), (yk, K), (yv, V)):
            arrow(ax, (x0 + 2.9, y), (x0 + 3.4, 1.55), color=color)
        box(ax, x0 + 3.4, 0.25, 1.0, 0.6, "out", "output", shape=f"({n_q}, Dv)")
        arrow(ax, (x0 + 3.9, 1.25), (x0 + 3.9, 0.85), color=O)
    text(ax, 4.8, 0.1, "only D must match: Q and K meet in dot products of length D", size=SMALL)
    return fig


def mask_kinds(*, T: int = 6, lengths: Sequence[int] = (6, 4, 2), sequence: int = 1) -> Figure:
    """The causal mask, a padding mask and both combined, as (T, S) grids of who may attend to whom.

    Defaults: notebook 04 §1-3, ``T = 6`` and a batch of lengths 6, 4 and 2 (sequence 1, length 4, drawn).
    """
    check_int("T", T, 1, 16)
    lengths = list(lengths)
    if not lengths or any(isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= T for n in lengths):
        raise ValueError(f"lengths: expected one int in 0 .. T={T} per sequence, got {lengths!r}")
    check_int("sequence", sequence, 0, len(lengths) - 1)
    n = lengths[sequence]
    causal = _visible(T, T, True)
    padding = np.broadcast_to(np.arange(T)[None, :] < n, (T, T))
    c = min(0.3, 2.2 / T)
    fig, ax = canvas(9.6, 3.7, f"masks for T = {T}: True (dark) may attend, grey is hidden")
    panels = [
        ("causal: key s ≤ query t", causal),
        (f"padding: sequence {sequence} has {n} real keys", padding),
        ("combined: causal AND padding", causal & padding),
    ]
    for i, (title, mask) in enumerate(panels):
        x0 = 0.5 + i * 3.15
        cells = [[M if mask[t, s] else HIDDEN for s in range(T)] for t in range(T)]
        _, y0, w, h = grid(ax, x0, 3.05, T, T, c, cells)
        text(ax, x0 + w / 2, y0 - 0.2, "key s →")
        text(ax, x0 - 0.2, y0 + h / 2, "query t →", rotation=90)
        text(ax, x0 + w / 2, y0 - 0.5, title)
    text(
        ax,
        4.8,
        0.15,
        f"each panel is (T, S) = ({T}, {T}); a real batch holds one padding mask per sequence: (B, 1, T, S)",
    )
    return fig


def cache_alignment(*, T: int = 2, S: int = 6) -> Figure:
    """Where the causal diagonal goes when queries are fewer than keys (a KV cache): bottom-right, not top-left.

    Defaults: notebook 04 §6, 4 cached tokens and 2 new ones (``T = 2`` queries, ``S = 6`` keys).
    """
    check_int("S", S, 1, 16)
    check_int("T", T, 1, S)
    c = min(0.38, 3.4 / S)
    fig, ax = canvas(9.6, 3.0, f"T = {T} new queries, S = {S} keys ({S - T} of them cached)")
    for i, (title, right) in enumerate(((f"bottom-right: causal_mask({T}, {S}) ✓", True),
                                        ("top-left: PyTorch's is_causal when T ≠ S ✗", False))):  # fmt: skip
        x0 = 1.3 + i * 4.7
        t, s = np.arange(T)[:, None], np.arange(S)[None, :]
        mask = s <= t + (S - T) if right else s <= t
        cells = [[M if mask[a, b] else HIDDEN for b in range(S)] for a in range(T)]
        _, y0, w, h = grid(ax, x0, 2.0, T, S, c, cells)
        for col in range(S):
            ax.add_patch(Circle((x0 + (col + 0.5) * c, 2.15), 0.06, color=K if col < S - T else Q))
        if S > T:
            text(ax, x0 + (S - T) * c / 2, 2.38, "cached keys", color=K)
        text(ax, x0 + (S - T / 2) * c, 2.38, "new", color=Q)
        for row in range(T):
            text(ax, x0 - 0.55, 2.0 - (row + 0.5) * c, f"t={row} @ {S - T + row}", size=SMALL)
        text(ax, x0 + w / 2, y0 - 0.3, title, weight="bold" if right else "normal")
        note = (f"the new token at position {S - 1} sees all {S} keys" if right
                else f"the last query sees only keys 0 .. {T - 1}: the cache is ignored")  # fmt: skip
        text(ax, x0 + w / 2, y0 - 0.6, note)
    text(
        ax,
        4.8,
        0.2,
        f"query t sits at absolute position S − T + t = {S - T} + t",
    )
    return fig


def split_heads(*, T: int = 5, C: int = 12, H: int = 3) -> Figure:
    """Split the model dimension into H heads, attend in each, concatenate, mix with W^O (a sum of row blocks).

    Defaults: notebook 05 §2-3, ``T = 5``, ``C = 12``, ``H = 3`` (``D = 4``).
    """
    check_int("T", T, 1, 16)
    check_int("H", H, 1, 8)
    check_int("C", C, H, 64)
    if C % H:
        raise ValueError(f"C: expected a multiple of H={H} (each head gets D = C / H channels), got {C}")
    D = C // H
    shade = [0.35 + 0.65 * h / max(H - 1, 1) for h in range(H)]  # head h's tint, the same in every panel
    fig, ax = canvas(
        10.0, 3.5, f"H = {H} heads of D = C / H = {D}: split, attend, concatenate, mix with $W^O$"
    )
    c = min(0.14, 1.5 / C)
    mid = 1.85  # the centre line of the three matrices
    cells = [[tint(Q, shade[ch // D]) for ch in range(C)] for _ in range(T)]
    _, y0, w, h = grid(ax, 0.3, mid + T * c / 2, T, C, c, cells, lw=0.3)
    text(ax, 0.3 + w / 2, y0 - 0.3, f"q_proj(x)\n(B, T, C) = (B, {T}, {C})")
    spacing = min(0.75, 2.4 / H)
    for i in range(H):
        y = mid + (H / 2 - i - 0.5) * spacing  # head i's box centre
        arrow(ax, (0.35 + w, mid), (2.65, y), color=Q)
        box(ax, 2.7, y - 0.25, 1.9, 0.5, f"head {i} attends", shape=f"(B, T, D) = (B, {T}, {D})", size=SMALL)
        ax.patches[-1].set_facecolor(tint(Q, 0.6 * shade[i]))
        arrow(ax, (4.6, y), (5.25, mid + (H / 2 - i - 0.5) * (T * c / H)), color=O)
    text(ax, 3.65, 0.3, "K and V are split the same way")
    cat = [[tint(O, shade[ch // D]) for ch in range(C)] for _ in range(T)]
    _, yc, wc, hc = grid(ax, 5.3, mid + T * c / 2, T, C, c, cat, lw=0.3)
    text(ax, 5.3 + wc / 2, yc - 0.3, f"concat: (B, T, C)\nhead h in channels {D}h .. {D}h+{D - 1}")
    x_w = 5.3 + wc + 0.65
    arrow(ax, (5.3 + wc + 0.05, mid), (x_w - 0.05, mid), "$\\cdot\\, W^O$")
    rows = [[tint(INK, 0.15 + 0.2 * (r // D)) for _ in range(C)] for r in range(C)]
    _, yw, ww, hw = grid(ax, x_w, mid + C * c * 0.4, C, C, c * 0.8, rows, lw=0.2)
    text(ax, x_w + ww / 2, yw - 0.3, "$W^O$ (C, C): head h meets\nonly row block h")
    text(
        ax,
        x_w + ww / 2,
        0.3,
        "$= \\Sigma_h\\, \\mathrm{head}_h W^O_h$: every head\nwrites into all C channels",
    )
    return fig


def kv_grouping(*, H: int = 6, H_kv: int = 2) -> Figure:
    """Which key/value head each query head reads: MHA (``H_kv = H``), GQA (``H_kv`` groups), MQA (one).

    Defaults: notebook 05 §4, ``H = 6`` query heads and ``H_kv = 2`` for GQA.
    """
    check_int("H", H, 1, 16)
    check_int("H_kv", H_kv, 1, H)
    if H % H_kv:
        raise ValueError(
            f"H_kv: expected a divisor of H={H} (each kv head serves H / H_kv query heads), got {H_kv}"
        )
    fig, ax = canvas(
        9.6, 3.4, f"H = {H} query heads share key/value heads: query head h reads kv head h // (H / H_kv)"
    )
    gap = min(0.55, 2.6 / H)
    for i, (name, kv) in enumerate(
        ((f"MHA: H_kv = H = {H}", H), (f"GQA: H_kv = {H_kv}", H_kv), ("MQA: H_kv = 1", 1))
    ):
        x0 = 0.35 + i * 3.15
        text(ax, x0 + 1.35, 2.95, name, weight="bold")
        group = H // kv
        for h in range(H):
            x = x0 + h * gap
            box(ax, x, 2.15, gap * 0.8, 0.4, f"q{h}", "query", size=SMALL)
            j = h // group
            xk = x0 + (j * group + (group - 1) / 2) * gap
            arrow(ax, (x + gap * 0.4, 2.15), (xk + gap * 0.4, 1.25), color=INK)
        for j in range(kv):
            xk = x0 + (j * group + (group - 1) / 2) * gap
            box(ax, xk, 0.8, gap * 0.8, 0.45, f"kv{j}", "key", size=SMALL)
        text(ax, x0 + 1.35, 0.45, f"cache: {kv} K and {kv} V heads per layer\n({kv}/{H} of MHA's)")
    return fig
