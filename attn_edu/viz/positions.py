"""Positions: a position table as a heatmap or as curves, and the rotations of RoPE as arrows.

Used by notebooks 06 (sinusoidal encodings: each sin/cos pair is a clock hand with its own speed; the
similarity of a table's rows, sinusoidal beside learned) and
07 (RoPE turns each pair of a query or key by an angle that grows with its position), and by their
explorers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Arc, Circle, FancyArrowPatch
from matplotlib.ticker import MaxNLocator

from attn_edu.viz.common import as_numbers, as_tensor, new_axes, token_labels


def plot_positional_encoding(
    pe: torch.Tensor | np.ndarray, *, title: str | None = None, ax: Axes | None = None
) -> Figure:
    """Heatmap of a position table: one row per position, one column per dimension.

    For the sinusoidal table (Vaswani et al., 2017, §3.5) the left columns flicker fast and the
    right ones change slowly: each sin/cos pair is a clock hand with its own speed.

    Shapes:
        pe ``(N, dim)``: ``N`` positions.

    Example:
        >>> fig = plot_positional_encoding(torch.randn(16, 8))
        >>> fig.axes[0].get_xlabel()
        'dimension'
        >>> plt.close(fig)
    """
    data, sizes = as_numbers("pe", pe, "N dim")
    fig, ax = new_axes(ax, (6.0, 4.0))
    extent = float(np.abs(data).max()) or 1.0  # symmetric scale: 0 is white
    image = ax.imshow(data, cmap="RdBu_r", vmin=-extent, vmax=extent, aspect="auto", interpolation="nearest")
    ax.set_xlabel("dimension")
    ax.set_ylabel("position")
    ax.set_title(title if title is not None else f"positional encoding ({sizes['N']} × {sizes['dim']})")
    fig.colorbar(image, ax=ax, shrink=0.8)
    return fig


def plot_encoding_curves(
    pe: torch.Tensor | np.ndarray,
    dims: Sequence[int],
    *,
    labels: Sequence[str] | None = None,
    title: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """A few columns of a position table drawn against position: the "clock hands" one by one.

    The legend names each column ``dim d``, or ``labels`` (one per column, e.g. ``"pair 4 (sine)"``).

    Shapes:
        pe ``(N, dim)``; dims: column indices in ``0 .. dim-1``; labels: as many as dims.

    Example:
        >>> pe = torch.stack([torch.arange(8.0).sin(), torch.arange(8.0).cos()], dim=1)   # (8, 2)
        >>> fig = plot_encoding_curves(pe, [0, 1])
        >>> [line.get_label() for line in fig.axes[0].get_lines()]
        ['dim 0', 'dim 1']
        >>> plt.close(fig)
    """
    data, sizes = as_numbers("pe", pe, "N dim")
    if isinstance(dims, (int, str)) or not dims:
        raise ValueError(f"dims: expected a non-empty list of column indices, got {dims!r}")
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or not 0 <= d < sizes["dim"]:
            raise ValueError(
                f"dims: expected indices in 0 .. {sizes['dim'] - 1} (pe has dim={sizes['dim']}), got {d!r}"
            )
    names = token_labels("labels", labels, len(dims), "len(dims)") or [f"dim {int(d)}" for d in dims]
    fig, ax = new_axes(ax, (6.0, 3.0))
    positions = np.arange(sizes["N"])
    for d, name in zip(dims, names):
        ax.plot(positions, data[:, d], marker="." if sizes["N"] <= 64 else None, label=name)
    ax.set_xlabel("position")
    ax.set_ylabel("value")
    ax.legend(loc="upper right", fontsize=8)
    if title is not None:
        ax.set_title(title)
    return fig


def plot_position_similarity(
    similarities: Mapping[str, torch.Tensor | np.ndarray], *, title: str | None = None
) -> Figure:
    """Side-by-side heatmaps of position-by-position similarity (e.g. cosines of table rows), one scale.

    Every panel uses the same diverging scale from −1 to 1 with 0 white, so two tables can be compared
    cell by cell: red = the two positions' vectors point the same way, blue = opposite ways.

    Shapes:
        each value ``(N, N)`` with entries in ``[−1, 1]`` (see :func:`attn_edu.positional.position_similarity`).

    Example:
        >>> fig = plot_position_similarity({"a": torch.eye(3), "b": -torch.eye(3)})
        >>> len(fig.axes), fig.axes[0].images[0].get_clim()             # two panels and one colour bar
        (3, (-1.0, 1.0))
        >>> plt.close(fig)
    """
    if not isinstance(similarities, Mapping) or not similarities:
        raise ValueError(
            f"similarities: expected a non-empty dict {{name: (N, N) matrix}}, got {type(similarities).__name__}"
        )
    panels = []
    for name, matrix in similarities.items():
        data, sizes = as_numbers(f"similarities[{name!r}]", matrix, "N M")
        if sizes["N"] != sizes["M"] or np.abs(data).max() > 1 + 1e-6:
            raise ValueError(
                f"similarities[{name!r}]: expected a square (N, N) matrix with entries in [-1, 1], "
                f"got shape {data.shape} with largest |entry| {np.abs(data).max():.3g}"
            )
        panels.append((str(name), data))
    fig, axes = plt.subplots(1, len(panels), figsize=(3.0 * len(panels) + 1.2, 3.9), layout="constrained")
    axes = np.atleast_1d(axes)
    for ax, (name, data) in zip(axes, panels):
        image = ax.imshow(data, cmap="RdBu_r", vmin=-1.0, vmax=1.0, interpolation="nearest")
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("position q")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0].set_ylabel("position p")
    fig.colorbar(image, ax=axes.tolist(), label="cosine similarity", shrink=0.9)
    if title is not None:
        fig.suptitle(title)
    return fig


def plot_rotation(
    vectors: torch.Tensor | np.ndarray,
    angles: torch.Tensor | np.ndarray | Sequence[float],
    *,
    labels: Sequence[str] | None = None,
    title: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """2-D vectors as arrows from the origin, each with an arc showing the angle it was rotated by.

    Pass the vectors *after* rotation (e.g. from :func:`attn_edu.rope.rotate_2d`) and their angles in
    radians; the arc of arrow ``n`` runs from its direction before rotation to its direction after.
    In RoPE (Su et al., 2021, §3.2) the pair ``(x_2i, x_2i+1)`` of a token at position ``m`` turns by
    ``m · θ_i``.

    Shapes:
        vectors ``(N, 2)`` (or ``(2,)`` for one arrow); angles ``(N,)``.

    Example:
        >>> fig = plot_rotation(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), [0.0, math.pi / 2])
        >>> len(fig.axes[0].patches)         # the orbit, two arrows, one arc (angle 0 has none)
        4
        >>> plt.close(fig)
    """
    v = as_tensor("vectors", vectors)
    if v.ndim == 1:
        v = v[None]  # (1, 2)
    points, sizes = as_numbers("vectors", v, "N 2")
    a = as_tensor("angles", angles)
    turns, _ = as_numbers("angles", a.reshape(-1) if a.ndim == 0 else a, "N", N=sizes["N"])
    names = token_labels("labels", labels, sizes["N"], "N") or [f"{angle:.2f} rad" for angle in turns]
    fig, ax = new_axes(ax, (4.5, 4.5))
    radius = float(np.linalg.norm(points, axis=1).max()) or 1.0
    ax.add_patch(Circle((0, 0), radius, fill=False, linestyle=":", color="grey"))  # the pair's orbit
    colors = plt.get_cmap("plasma")(np.linspace(0.0, 0.8, sizes["N"]))
    for n, ((x, y), angle, name, color) in enumerate(zip(points, turns, names, colors)):
        ax.add_patch(FancyArrowPatch((0, 0), (x, y), arrowstyle="-|>", mutation_scale=15, color=color, lw=2))
        ax.plot([], [], color=color, label=name)  # legend entry for the arrow
        if abs(angle) > 1e-9:  # arc from the direction before rotation to the direction after
            end = math.degrees(math.atan2(y, x))
            start = end - math.degrees(angle)
            low, high = (start, end) if angle > 0 else (end, start)
            r = radius * (0.25 + 0.08 * n)  # nested arcs, so several angles stay readable
            ax.add_patch(Arc((0, 0), 2 * r, 2 * r, theta1=low, theta2=high, color=color))
    limit = 1.15 * radius
    ax.set_xlim(-limit, limit)
    ax.set_ylim(-limit, limit)
    ax.set_aspect("equal")
    ax.axhline(0, color="grey", linewidth=0.5)
    ax.axvline(0, color="grey", linewidth=0.5)
    ax.set_xlabel("x₂ᵢ")
    ax.set_ylabel("x₂ᵢ₊₁")
    ax.legend(loc="upper right", fontsize=8)
    if title is not None:
        ax.set_title(title)
    return fig
