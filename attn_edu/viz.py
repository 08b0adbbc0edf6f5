"""Pictures of attention: heatmaps, masks, positional clocks, rotations and measured curves.

Every function here is pure: it takes tensors (or arrays, or lists), checks them, draws, and returns
the :class:`matplotlib.figure.Figure`. Nothing is shown (end a notebook cell with ``plt.show()``),
nothing is stored, and a figure passed in through ``ax=`` stays the caller's to close. Models never
keep attention maps for plotting: ask them for the weights, then hand the weights to these functions.

Conventions: rows are queries (``T``), columns are keys (``S``); masks are bool, ``True`` = may attend.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Arc, Circle, FancyArrowPatch, Patch

from attn_edu._validate import check_shape

# Heatmaps get their values written in each cell up to this many rows/columns; beyond it the
# numbers overlap and the colour alone has to speak.
ANNOTATE_MAX_SIZE = 10

# Mask colours: hidden cells recede (light grey), visible cells stand out.
MASK_COLORS = ("#d9d9d9", "#2b6cb0")


# ---------------------------------------------------------------------------------------------------
# Input checks and small drawing helpers
# ---------------------------------------------------------------------------------------------------


def _as_tensor(name: str, x: Any) -> torch.Tensor:
    """Accept a tensor, a numpy array, a list or a number; return a detached CPU tensor."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    try:
        return torch.as_tensor(np.asarray(x))
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(
            f"{name}: expected a tensor, array or list of numbers, got {type(x).__name__}"
        ) from None


def _numbers(name: str, x: Any, spec: str, **known: int) -> tuple[np.ndarray, dict[str, int]]:
    """Check ``x`` against ``spec`` and return it as finite float64 numbers, with its sizes."""
    t = _as_tensor(name, x)
    sizes = check_shape(name, t, spec, **known)
    if t.dtype == torch.bool or t.is_complex():
        raise ValueError(f"{name}: expected real numbers, got dtype {t.dtype}")
    arr = t.double().numpy()
    if not np.isfinite(arr).all():
        raise ValueError(
            f"{name}: expected finite values, got NaN or inf (a fully masked softmax row? "
            "attn_edu.attention returns zeros there)"
        )
    return arr, sizes


def _labels(name: str, labels: Sequence[Any] | None, size: int, letter: str) -> list[str] | None:
    if labels is None:
        return None
    if isinstance(labels, str) or len(labels) != size:
        got = repr(labels) if isinstance(labels, str) else f"{len(labels)} labels"
        raise ValueError(f"{name}: expected {letter}={size} labels (one per token), got {got}")
    return [str(label) for label in labels]


def _check_ax(ax: Axes | None) -> None:
    if ax is not None and not isinstance(ax, Axes):
        raise ValueError(f"ax: expected a matplotlib Axes or None, got {type(ax).__name__}")


def _new_axes(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    """The caller's axes (and its figure), or a fresh figure with one axes."""
    _check_ax(ax)
    if ax is not None:
        return ax.figure, ax
    fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    return fig, ax


def _cell_size(rows: int, cols: int) -> tuple[float, float]:
    # About half an inch per token, clipped so that long sequences still fit on a screen.
    return min(max(2.5, 0.45 * cols + 1.5), 11.0), min(max(2.0, 0.45 * rows + 1.0), 9.0)


def _set_token_ticks(ax: Axes, query_labels: list[str] | None, key_labels: list[str] | None) -> None:
    if key_labels is not None:
        ax.set_xticks(range(len(key_labels)), key_labels, rotation=90 if len(key_labels) > 6 else 0)
    if query_labels is not None:
        ax.set_yticks(range(len(query_labels)), query_labels)


def _color_limits(data: np.ndarray) -> tuple[float, float]:
    """Weights (non-negative) start the scale at 0 so that 'no attention' is always the darkest colour."""
    low, high = float(data.min()), float(data.max())
    if low >= 0:
        return 0.0, high if high > 0 else 1.0
    return low, high if high > low else low + 1.0


def _draw_heatmap(ax: Axes, data: np.ndarray, *, annotate: bool, limits: tuple[float, float]) -> Any:
    """Draw a (T, S) matrix as an image with one cell per query/key; write the values when asked."""
    image = ax.imshow(data, cmap="viridis", vmin=limits[0], vmax=limits[1], interpolation="nearest")
    T, S = data.shape
    if annotate:
        for t in range(T):
            for s in range(S):
                r, g, b, _ = image.cmap(image.norm(data[t, s]))
                light = 0.299 * r + 0.587 * g + 0.114 * b > 0.5  # dark text on light cells
                ax.text(s, t, f"{data[t, s]:.2f}", ha="center", va="center", fontsize=8,
                        color="black" if light else "white")  # fmt: skip
    if max(T, S) <= 16:  # every token gets a tick when there are few
        ax.set_xticks(range(S))
        ax.set_yticks(range(T))
    return image


# ---------------------------------------------------------------------------------------------------
# Attention weights
# ---------------------------------------------------------------------------------------------------


def plot_attention(
    weights: torch.Tensor | np.ndarray,
    *,
    query_labels: Sequence[Any] | None = None,
    key_labels: Sequence[Any] | None = None,
    title: str | None = None,
    ax: Axes | None = None,
    annotate: bool | None = None,
) -> Figure:
    """Heatmap of one attention matrix: row ``t`` shows how query ``t`` spreads its attention over the keys.

    Each row of a softmax attention matrix sums to 1 (a zero row is a fully masked query). The
    colour scale starts at 0; values are written in the cells when the matrix is small
    (``annotate=None`` means: when ``T`` and ``S`` are at most ``ANNOTATE_MAX_SIZE``).

    Shapes:
        weights ``(T, S)``; query_labels ``T`` strings, key_labels ``S`` strings.

    Example:
        >>> fig = plot_attention(torch.tensor([[1.0, 0.0], [0.4, 0.6]]), key_labels=["the", "cat"])
        >>> len(fig.axes)                    # the heatmap and its colour bar
        2
        >>> plt.close(fig)
    """
    data, sizes = _numbers("weights", weights, "T S")
    T, S = sizes["T"], sizes["S"]
    query_labels = _labels("query_labels", query_labels, T, "T")
    key_labels = _labels("key_labels", key_labels, S, "S")
    fig, ax = _new_axes(ax, _cell_size(T, S))
    if annotate is None:
        annotate = max(T, S) <= ANNOTATE_MAX_SIZE
    image = _draw_heatmap(ax, data, annotate=annotate, limits=_color_limits(data))
    _set_token_ticks(ax, query_labels, key_labels)
    ax.set_xlabel("key (S)")
    ax.set_ylabel("query (T)")
    if title is not None:
        ax.set_title(title)
    fig.colorbar(image, ax=ax, label="attention weight", shrink=0.8)
    return fig


def plot_heads(
    weights: torch.Tensor | np.ndarray,
    *,
    labels: Sequence[Any] | None = None,
    max_cols: int = 4,
    title: str | None = None,
) -> Figure:
    """A grid of attention heatmaps: one per head, or one row per layer and one column per head.

    All panels share one colour scale (and one colour bar), so heads can be compared by eye.
    ``labels`` names the tokens: they label the key axis when there are ``S`` of them and the query
    axis when there are ``T`` (both in self-attention). With ``(H, T, S)`` input the heads wrap after
    ``max_cols`` columns; with ``(L, H, T, S)`` (``L`` layers) the grid is ``L × H``.

    Shapes:
        weights ``(H, T, S)`` or ``(L, H, T, S)``.

    Example:
        >>> fig = plot_heads(torch.softmax(torch.randn(6, 3, 3), dim=-1), max_cols=4)
        >>> len(fig.axes)                    # six heads (two rows of 4 and 2) and one colour bar
        7
        >>> plt.close(fig)
    """
    t = _as_tensor("weights", weights)
    if t.ndim not in (3, 4):
        raise ValueError(f"weights: expected shape (H, T, S) or (L, H, T, S), got {tuple(t.shape)}")
    if isinstance(max_cols, bool) or not isinstance(max_cols, int) or max_cols <= 0:
        raise ValueError(f"max_cols: expected a positive int, got {max_cols!r}")
    data, sizes = _numbers("weights", t, "... H T S")
    H, T, S = sizes["H"], sizes["T"], sizes["S"]
    if labels is not None and (isinstance(labels, str) or len(labels) not in (T, S)):
        count = repr(labels) if isinstance(labels, str) else f"{len(labels)} labels"
        raise ValueError(f"labels: expected T={T} or S={S} token labels, got {count}")
    key_labels = _labels("labels", labels, S, "S") if labels is not None and len(labels) == S else None
    query_labels = _labels("labels", labels, T, "T") if labels is not None and len(labels) == T else None

    if data.ndim == 3:  # heads wrap into rows of max_cols
        cols = min(H, max_cols)
        rows = math.ceil(H / cols)
        panels = [((h // cols, h % cols), data[h], f"head {h}") for h in range(H)]
    else:  # one row per layer
        L = data.shape[0]
        rows, cols = L, H
        panels = [
            ((layer, h), data[layer, h], f"layer {layer} · head {h}") for layer in range(L) for h in range(H)
        ]
    width, height = _cell_size(T, S)
    fig, grid = plt.subplots(
        rows,
        cols,
        squeeze=False,
        figsize=(min(cols * width, 16), min(rows * height, 14)),
        layout="constrained",
    )
    limits = _color_limits(data)
    used = {position for position, _, _ in panels}
    for (r, c), head, name in panels:
        ax = grid[r, c]
        image = _draw_heatmap(ax, head, annotate=max(T, S) <= 6, limits=limits)
        _set_token_ticks(ax, query_labels, key_labels)
        ax.set_title(name, fontsize=9)
        if (r + 1, c) in used:  # tick labels only on the outer edge of the grid
            ax.tick_params(labelbottom=False)
        if c > 0:
            ax.tick_params(labelleft=False)
    for r in range(rows):
        for c in range(cols):
            if (r, c) not in used:
                fig.delaxes(grid[r, c])
    fig.colorbar(image, ax=[grid[r, c] for r, c in sorted(used)], label="attention weight", shrink=0.8)
    fig.supxlabel("key (S)")
    fig.supylabel("query (T)")
    if title is not None:
        fig.suptitle(title)
    return fig


# ---------------------------------------------------------------------------------------------------
# Masks
# ---------------------------------------------------------------------------------------------------


def plot_mask(mask: torch.Tensor | np.ndarray, *, title: str | None = None, ax: Axes | None = None) -> Figure:
    """Picture of a boolean mask: coloured cells may be attended, grey cells are hidden.

    Row ``t`` is query ``t``, column ``s`` is key ``s``; the legend states the polarity
    (``True`` = may attend, the convention of :mod:`attn_edu.masks`).

    Shapes:
        mask ``(T, S)`` bool.

    Example:
        >>> fig = plot_mask(torch.tril(torch.ones(3, 3, dtype=torch.bool)), title="causal")
        >>> [text.get_text() for text in fig.axes[0].get_legend().get_texts()]
        ['True: may attend', 'False: hidden']
        >>> plt.close(fig)
    """
    t = _as_tensor("mask", mask)
    sizes = check_shape("mask", t, "T S")
    if t.dtype != torch.bool:
        raise ValueError(
            f"mask: expected dtype torch.bool (True = may attend), got {t.dtype}; build it with attn_edu.masks"
        )
    T, S = sizes["T"], sizes["S"]
    width, height = _cell_size(T, S)
    fig, ax = _new_axes(ax, (width + 1.5, height))
    cmap = ListedColormap(list(MASK_COLORS))
    ax.imshow(t.numpy().astype(np.int8), cmap=cmap, vmin=0, vmax=1, interpolation="nearest")
    if max(T, S) <= 32:  # thin white lines between cells make single positions countable
        ax.set_xticks(np.arange(S + 1) - 0.5, minor=True)
        ax.set_yticks(np.arange(T + 1) - 0.5, minor=True)
        ax.grid(which="minor", color="white", linewidth=1)
        ax.tick_params(which="minor", length=0)
    if max(T, S) <= 16:
        ax.set_xticks(range(S))
        ax.set_yticks(range(T))
    ax.set_xlabel("key s")
    ax.set_ylabel("query t")
    handles = [
        Patch(color=MASK_COLORS[1], label="True: may attend"),
        Patch(color=MASK_COLORS[0], label="False: hidden"),
    ]
    ax.legend(handles=handles, title="mask[t, s]", loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8)
    if title is not None:
        ax.set_title(title)
    return fig


# ---------------------------------------------------------------------------------------------------
# Positions
# ---------------------------------------------------------------------------------------------------


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
    data, sizes = _numbers("pe", pe, "N dim")
    fig, ax = _new_axes(ax, (6.0, 4.0))
    extent = float(np.abs(data).max()) or 1.0  # symmetric scale: 0 is white
    image = ax.imshow(data, cmap="RdBu_r", vmin=-extent, vmax=extent, aspect="auto", interpolation="nearest")
    ax.set_xlabel("dimension")
    ax.set_ylabel("position")
    ax.set_title(title if title is not None else f"positional encoding ({sizes['N']} × {sizes['dim']})")
    fig.colorbar(image, ax=ax, shrink=0.8)
    return fig


def plot_encoding_curves(
    pe: torch.Tensor | np.ndarray, dims: Sequence[int], *, title: str | None = None, ax: Axes | None = None
) -> Figure:
    """A few columns of a position table drawn against position: the "clock hands" one by one.

    Shapes:
        pe ``(N, dim)``; dims: column indices in ``0 .. dim-1``.

    Example:
        >>> pe = torch.stack([torch.arange(8.0).sin(), torch.arange(8.0).cos()], dim=1)   # (8, 2)
        >>> fig = plot_encoding_curves(pe, [0, 1])
        >>> [line.get_label() for line in fig.axes[0].get_lines()]
        ['dim 0', 'dim 1']
        >>> plt.close(fig)
    """
    data, sizes = _numbers("pe", pe, "N dim")
    if isinstance(dims, (int, str)) or not dims:
        raise ValueError(f"dims: expected a non-empty list of column indices, got {dims!r}")
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or not 0 <= d < sizes["dim"]:
            raise ValueError(
                f"dims: expected indices in 0 .. {sizes['dim'] - 1} (pe has dim={sizes['dim']}), got {d!r}"
            )
    fig, ax = _new_axes(ax, (6.0, 3.0))
    positions = np.arange(sizes["N"])
    for d in dims:
        ax.plot(positions, data[:, d], marker="." if sizes["N"] <= 64 else None, label=f"dim {int(d)}")
    ax.set_xlabel("position")
    ax.set_ylabel("value")
    ax.legend(loc="upper right", fontsize=8)
    if title is not None:
        ax.set_title(title)
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
    v = _as_tensor("vectors", vectors)
    if v.ndim == 1:
        v = v[None]  # (1, 2)
    points, sizes = _numbers("vectors", v, "N 2")
    a = _as_tensor("angles", angles)
    turns, _ = _numbers("angles", a.reshape(-1) if a.ndim == 0 else a, "N", N=sizes["N"])
    names = _labels("labels", labels, sizes["N"], "N") or [f"{angle:.2f} rad" for angle in turns]
    fig, ax = _new_axes(ax, (4.5, 4.5))
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


# ---------------------------------------------------------------------------------------------------
# Measured numbers: curves, histograms, distributions
# ---------------------------------------------------------------------------------------------------


def plot_curves(
    x: Sequence[float] | torch.Tensor | np.ndarray,
    ys: Mapping[str, Sequence[float] | torch.Tensor | np.ndarray],
    *,
    xlabel: str,
    ylabel: str,
    logx: bool = False,
    logy: bool = False,
    title: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Line plot of measured curves that share one x axis (variance vs d_k, loss vs step, time vs N).

    Shapes:
        x ``(N,)``; each value of ``ys`` ``(N,)``.

    Example:
        >>> fig = plot_curves([1, 2, 4], {"measured": [1.0, 2.1, 3.9]}, xlabel="d_k", ylabel="Var(q·k)", logx=True)
        >>> fig.axes[0].get_xscale()
        'log'
        >>> plt.close(fig)
    """
    xs, sizes = _numbers("x", x, "N")
    if not isinstance(ys, Mapping) or not ys:
        raise ValueError(
            f"ys: expected a non-empty dict {{name: values of shape (N,)}}, got {type(ys).__name__}"
        )
    curves = {str(name): _numbers(f"ys[{name!r}]", y, "N", N=sizes["N"])[0] for name, y in ys.items()}
    if logx and (xs <= 0).any():
        raise ValueError(f"x: expected positive values for logx=True, got min {xs.min()}")
    if logy:
        for name, y in curves.items():
            if (y <= 0).any():
                raise ValueError(f"ys[{name!r}]: expected positive values for logy=True, got min {y.min()}")
    fig, ax = _new_axes(ax, (5.5, 3.5))
    for name, y in curves.items():
        ax.plot(xs, y, marker="o" if sizes["N"] <= 20 else None, label=name)
    ax.set_xscale("log" if logx else "linear")
    ax.set_yscale("log" if logy else "linear")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title is not None:
        ax.set_title(title)
    return fig


def plot_histograms(
    samples: Mapping[str, Sequence[float] | torch.Tensor | np.ndarray],
    *,
    xlabel: str,
    bins: int = 30,
    logy: bool = False,
    title: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Overlaid histograms of a few samples on shared bins (e.g. softmax weights with and without 1/√d_k).

    Shapes:
        each value of ``samples`` holds numbers of any shape; they are flattened.

    Example:
        >>> fig = plot_histograms({"a": [0.1, 0.2, 0.2], "b": [0.5, 0.9]}, xlabel="weight", bins=4)
        >>> [patch.get_data().values.tolist() for patch in fig.axes[0].patches]   # counts per bin
        [[3, 0, 0, 0], [0, 0, 1, 1]]
        >>> plt.close(fig)
    """
    if not isinstance(samples, Mapping) or not samples:
        raise ValueError(f"samples: expected a non-empty dict {{name: values}}, got {type(samples).__name__}")
    if isinstance(bins, bool) or not isinstance(bins, int) or bins <= 0:
        raise ValueError(f"bins: expected a positive int, got {bins!r}")
    data = {}
    for name, values in samples.items():
        flat = _as_tensor(f"samples[{name!r}]", values).reshape(-1)
        data[str(name)] = _numbers(f"samples[{name!r}]", flat, "N")[0]
        if data[str(name)].size == 0:
            raise ValueError(f"samples[{name!r}]: expected at least one value, got none")
    low = min(float(v.min()) for v in data.values())
    high = max(float(v.max()) for v in data.values())
    edges = np.linspace(low, high if high > low else low + 1.0, bins + 1)  # shared bins: comparable bars
    fig, ax = _new_axes(ax, (5.5, 3.5))
    for name, values in data.items():
        counts, _ = np.histogram(values, bins=edges)
        # One filled step outline per sample (cheaper to redraw in a widget than one bar per bin).
        ax.stairs(counts, edges, fill=True, alpha=0.55, label=name, baseline=0.5 if logy else 0)
    if logy:
        ax.set_yscale("log")  # empty bins sit on the 0.5 baseline: counts below 1 are 0
    ax.set_xlabel(xlabel)
    ax.set_ylabel("count")
    ax.legend(fontsize=8)
    if title is not None:
        ax.set_title(title)
    return fig


def plot_distribution(
    probs: torch.Tensor | np.ndarray | Sequence[float],
    *,
    labels: Sequence[Any] | None = None,
    reference: torch.Tensor | np.ndarray | Sequence[float] | None = None,
    title: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Bar chart of a probability distribution over tokens, optionally over an outlined ``reference``.

    Used for sampling: ``reference`` is the plain softmax, the bars what is left after temperature,
    top-k and top-p.

    Shapes:
        probs ``(V,)``; reference ``(V,)``; labels ``V`` strings.

    Example:
        >>> fig = plot_distribution([0.7, 0.2, 0.1], labels=["a", "b", "c"])
        >>> [round(float(bar.get_height()), 1) for bar in fig.axes[0].patches]
        [0.7, 0.2, 0.1]
        >>> plt.close(fig)
    """
    p, sizes = _numbers("probs", probs, "V")
    if (p < 0).any():
        raise ValueError(f"probs: expected non-negative probabilities, got min {p.min()}")
    ref = None if reference is None else _numbers("reference", reference, "V", V=sizes["V"])[0]
    names = _labels("labels", labels, sizes["V"], "V")
    fig, ax = _new_axes(ax, (min(max(4.0, 0.35 * sizes["V"] + 1.5), 12.0), 3.5))
    positions = np.arange(sizes["V"])
    ax.bar(positions, p, color="#2b6cb0", label="probability")
    if ref is not None:
        ax.bar(positions, ref, fill=False, edgecolor="grey", linestyle="--", label="reference")
        ax.legend(fontsize=8)
    if names is not None:
        ax.set_xticks(positions, names, rotation=90 if sizes["V"] > 8 else 0)
    ax.set_xlabel("token")
    ax.set_ylabel("probability")
    ax.set_ylim(0, max(1e-9, float(p.max()), 0.0 if ref is None else float(ref.max())) * 1.1)
    if title is not None:
        ax.set_title(title)
    return fig


# ---------------------------------------------------------------------------------------------------
# Attention as a soft lookup
# ---------------------------------------------------------------------------------------------------


def plot_soft_lookup(
    keys: torch.Tensor | np.ndarray,
    values: torch.Tensor | np.ndarray,
    query: torch.Tensor | np.ndarray | float,
    weights: torch.Tensor | np.ndarray,
    output: torch.Tensor | np.ndarray | float,
    *,
    title: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Attention as a soft dictionary lookup: which keys the query matched, and the blended output.

    The output is ``Σ_s w_s · v_s`` (Nadaraya–Watson kernel regression, 1964; Bahdanau et al., 2015).
    With 1-D keys, each key/value pair is a point ``(k_s, v_s)`` whose opacity is its weight; the
    weights are also drawn as bars on a second y axis; the query is a vertical line and the output a
    star on it. With 2-D keys the keys are points in the plane sized by weight and the query a cross;
    2-D values are drawn in the same plane, with the output as a diamond among them.

    Shapes:
        1-D: keys ``(S,)``, values ``(S,)``, query a number, weights ``(S,)``, output a number.
        2-D: keys ``(S, 2)``, values ``(S,)`` or ``(S, 2)``, query ``(2,)``, weights ``(S,)``,
        output a number or ``(2,)`` like one value.

    Example:
        >>> keys = torch.tensor([0.0, 1.0, 2.0]); values = torch.tensor([1.0, 3.0, 2.0])
        >>> weights = torch.tensor([0.2, 0.6, 0.2])
        >>> fig = plot_soft_lookup(keys, values, 1.0, weights, weights @ values)
        >>> len(fig.axes)                    # the lookup and the twin axis of weight bars
        2
        >>> plt.close(fig)
    """
    k = _as_tensor("keys", keys)
    if k.ndim == 2 and k.shape[1] == 1:
        k = k[:, 0]  # (S,)
    if k.ndim == 1:
        key_dim, (k_np, sizes) = 1, _numbers("keys", k, "S")
    else:
        key_dim, (k_np, sizes) = 2, _numbers("keys", k, "S 2")
    S = sizes["S"]
    w, _ = _numbers("weights", weights, "S", S=S)
    v = _as_tensor("values", values)
    if v.ndim == 2 and v.shape[1] == 1:
        v = v[:, 0]  # (S,)
    v_np, _ = _numbers("values", v, "S" if v.ndim == 1 or key_dim == 1 else "S 2", S=S)
    q, _ = _numbers("query", _as_tensor("query", query).reshape(-1), str(key_dim))
    out, _ = _numbers("output", _as_tensor("output", output).reshape(-1), "1" if v_np.ndim == 1 else "2")
    fig, ax = _new_axes(ax, (6.0, 4.0))
    alpha = 0.15 + 0.85 * w / max(float(w.max()), 1e-12)  # the most-read key is fully opaque

    if key_dim == 1:
        colors = np.zeros((S, 4))
        colors[:, 2], colors[:, 3] = 0.7, alpha  # blue points, opacity = weight
        ax.scatter(k_np, v_np, s=50, c=colors, label="key/value pairs (opacity = weight)")
        ax.axvline(q[0], color="crimson", linestyle="--", label=f"query = {q[0]:.2f}")
        ax.scatter(
            [q[0]], [out[0]], marker="*", s=250, color="crimson", zorder=3, label=f"output = {out[0]:.2f}"
        )
        ax.set_xlabel("key")
        ax.set_ylabel("value")
        bars = ax.twinx()
        gaps = np.diff(np.sort(k_np))
        width = 0.8 * float(gaps[gaps > 0].min()) if (gaps > 0).any() else 0.5
        bars.bar(k_np, w, width=width, color="grey", alpha=0.3)
        bars.set_ylim(0, 1.0 if w.max() <= 1 else float(w.max()) * 1.1)
        bars.set_ylabel("weight (bars)")
        ax.set_zorder(bars.get_zorder() + 1)  # points and markers in front of the bars
        ax.patch.set_visible(False)
    else:
        ax.scatter(k_np[:, 0], k_np[:, 1], s=30 + 400 * w, c=w, cmap="Blues", vmin=0, edgecolors="black",
                   label="keys (size = weight)")  # fmt: skip
        ax.scatter([q[0]], [q[1]], marker="X", s=200, color="crimson", label="query")
        if v_np.ndim == 2:
            ax.scatter(v_np[:, 0], v_np[:, 1], marker="s", color="darkorange", alpha=0.3 + 0.7 * alpha / alpha.max(),
                       label="values")  # fmt: skip
            ax.scatter([out[0]], [out[1]], marker="D", s=150, color="darkorange", edgecolors="black",
                       label="output = Σ w·v")  # fmt: skip
        else:
            for (x, y), value in zip(k_np, v_np):
                ax.annotate(f"{value:.2g}", (x, y), textcoords="offset points", xytext=(6, 6), fontsize=8)
            ax.plot([], [], " ", label=f"output = {out[0]:.2f}")
        ax.set_xlabel("feature 0")
        ax.set_ylabel("feature 1")
        ax.set_aspect("equal", adjustable="datalim")
    ax.legend(loc="best", fontsize=8)
    if title is not None:
        ax.set_title(title)
    return fig


# ---------------------------------------------------------------------------------------------------
# Additive score biases (T5, ALiBi)
# ---------------------------------------------------------------------------------------------------


def plot_score_bias(
    bias: torch.Tensor | np.ndarray, *, max_cols: int = 4, title: str | None = None
) -> Figure:
    """One heatmap per head of an additive score bias (T5 buckets, ALiBi), on one shared colour scale.

    A bias is added to ``q·k`` *before* the softmax, so it can be negative: the colour scale is
    diverging and centred on 0 (white = no change to the score, blue = pushed down, red = pushed up).

    Shapes:
        bias ``(H, T, S)``.

    Example:
        >>> fig = plot_score_bias(-torch.arange(6.0).reshape(1, 2, 3).repeat(3, 1, 1))
        >>> len(fig.axes)                    # three heads and one colour bar
        4
        >>> plt.close(fig)
    """
    data, sizes = _numbers("bias", bias, "H T S")
    if isinstance(max_cols, bool) or not isinstance(max_cols, int) or max_cols <= 0:
        raise ValueError(f"max_cols: expected a positive int, got {max_cols!r}")
    H, T, S = sizes["H"], sizes["T"], sizes["S"]
    cols = min(H, max_cols)
    rows = math.ceil(H / cols)
    width, height = _cell_size(T, S)
    fig, grid = plt.subplots(
        rows,
        cols,
        squeeze=False,
        figsize=(min(cols * width, 16), min(rows * height, 14)),
        layout="constrained",
    )
    extent = float(np.abs(data).max()) or 1.0  # symmetric scale: 0 is white
    for h in range(rows * cols):
        ax = grid[h // cols, h % cols]
        if h >= H:
            fig.delaxes(ax)
            continue
        image = ax.imshow(data[h], cmap="RdBu_r", vmin=-extent, vmax=extent, interpolation="nearest")
        ax.set_title(f"head {h}", fontsize=9)
    fig.colorbar(image, ax=grid[:, :].ravel().tolist()[:H], label="score bias", shrink=0.8)
    fig.supxlabel("key (S)")
    fig.supylabel("query (T)")
    if title is not None:
        fig.suptitle(title)
    return fig


# ---------------------------------------------------------------------------------------------------
# Online softmax (FlashAttention)
# ---------------------------------------------------------------------------------------------------


def plot_online_softmax(
    x: torch.Tensor | np.ndarray | Sequence[float],
    m_values: torch.Tensor | np.ndarray | Sequence[float],
    l_values: torch.Tensor | np.ndarray | Sequence[float],
    *,
    block_size: int,
    step: int,
    title: str | None = None,
) -> Figure:
    """One streaming pass of the online softmax, stopped after ``step`` blocks.

    Left: the scores ``x`` as bars, coloured by block (read, being read, not read yet), with the
    running maximum ``m_i`` as a line. Right: the softmax estimate so far, ``exp(x - m_i) / l_i`` on the
    entries already read, beside the final softmax (outlined). Each new block that raises the maximum
    shrinks every earlier estimate by the same factor ``exp(m_old - m_new)`` (Milakov & Gimelshein 2018);
    after the last block the estimate *is* the softmax.

    Shapes:
        x ``(N,)``; m_values and l_values ``(n_blocks,)``: the running max and sum after each block,
        ``n_blocks = ceil(N / block_size)``.

    Example:
        >>> fig = plot_online_softmax([1.0, 3.0, 2.0], [3.0, 3.0], [1.135, 1.503], block_size=2, step=1)
        >>> len(fig.axes)
        2
        >>> plt.close(fig)
    """
    xs, sizes = _numbers("x", x, "N")
    N = sizes["N"]
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size <= 0:
        raise ValueError(f"block_size: expected a positive int, got {block_size!r}")
    n_blocks = math.ceil(N / block_size)
    m_run, _ = _numbers("m_values", m_values, "n_blocks", n_blocks=n_blocks)
    l_run, _ = _numbers("l_values", l_values, "n_blocks", n_blocks=n_blocks)
    if isinstance(step, bool) or not isinstance(step, int) or not 1 <= step <= n_blocks:
        raise ValueError(f"step: expected an int in 1..{n_blocks} (the blocks read so far), got {step!r}")
    if (l_run <= 0).any():
        raise ValueError(f"l_values: expected positive running sums, got min {l_run.min()}")
    seen = min(step * block_size, N)
    block_of = np.arange(N) // block_size
    colors = np.where(block_of < step - 1, "#2b6cb0", np.where(block_of == step - 1, "#dd6b20", "#d9d9d9"))
    estimate = np.exp(xs[:seen] - m_run[step - 1]) / l_run[step - 1]
    final = np.exp(xs - m_run[-1]) / l_run[-1]

    fig, (left, right) = plt.subplots(1, 2, figsize=(11.0, 3.6), layout="constrained")
    positions = np.arange(N)
    left.bar(positions, xs, color=colors)
    left.axhline(
        m_run[step - 1], color="crimson", linestyle="--", label=f"running max m_i = {m_run[step - 1]:.2f}"
    )
    for boundary in range(block_size, N, block_size):
        left.axvline(boundary - 0.5, color="grey", linewidth=0.8, alpha=0.6)
    left.set_xlabel("position (blue: read, orange: this block, grey: not read yet)")
    left.set_ylabel("score x")
    left.legend(loc="best", fontsize=8)
    left.set_title(f"block {step} of {n_blocks} (block size {block_size})", fontsize=10)

    right.bar(positions[:seen], estimate, color=colors[:seen], label="exp(x - m_i) / l_i so far")
    right.bar(positions, final, fill=False, edgecolor="black", linestyle="--", label="final softmax")
    right.set_xlim(-0.6, N - 0.4)
    right.set_ylim(0, max(float(estimate.max()), float(final.max())) * 1.15)
    right.set_xlabel("position")
    right.set_ylabel("probability")
    right.legend(loc="upper left", fontsize=8)
    right.set_title(f"l_i = {l_run[step - 1]:.3f}: estimates sum to 1 over what was read", fontsize=10)
    if title is not None:
        fig.suptitle(title)
    return fig


# ---------------------------------------------------------------------------------------------------
# 09: token sequences (pre-training objectives)
# ---------------------------------------------------------------------------------------------------


def plot_token_rows(
    rows: Mapping[str, Sequence[Any]],
    *,
    highlight: Mapping[str, Sequence[bool]] | None = None,
    title: str | None = None,
) -> Figure:
    """Token sequences drawn as rows of boxes, one labelled row per sequence (original, input, target...).

    Highlighted boxes (e.g. corrupted tokens, sentinels, ``[MASK]``) are orange, the others light
    blue. Rows may have different lengths: that difference is often the point (T5's span corruption
    shortens both the encoder input and the decoder target).

    Shapes:
        each value of ``rows`` holds ``N`` tokens (any length ``N >= 0`` per row); ``highlight[name]``
        holds ``N`` bools for that row.

    Example:
        >>> fig = plot_token_rows({"input": ["a", "<X0>", "d"], "target": ["<X0>", "b", "c"]},
        ...                       highlight={"input": [False, True, False]})
        >>> len(fig.axes[0].patches)          # one box per token
        6
        >>> plt.close(fig)
    """
    if not isinstance(rows, Mapping) or not rows:
        raise ValueError(f"rows: expected a non-empty dict {{name: tokens}}, got {type(rows).__name__}")
    tokens = {}
    for name, row in rows.items():
        if isinstance(row, str) or not isinstance(row, Sequence):
            raise ValueError(f"rows[{name!r}]: expected a list of tokens, got {type(row).__name__}")
        tokens[str(name)] = [str(token) for token in row]
    marks = {name: [False] * len(row) for name, row in tokens.items()}
    for name, flags in (highlight or {}).items():
        if str(name) not in tokens:
            raise ValueError(f"highlight: {name!r} is not a row; expected one of {list(tokens)}")
        if isinstance(flags, torch.Tensor):
            flags = flags.tolist()
        if len(flags) != len(tokens[str(name)]):
            raise ValueError(
                f"highlight[{name!r}]: expected {len(tokens[str(name)])} flags (one per token), got {len(flags)}"
            )
        marks[str(name)] = [bool(f) for f in flags]

    # One box width for every row, wide enough for the longest token, so columns line up.
    width = max(1.0, 0.13 * max((len(t) for row in tokens.values() for t in row), default=1) + 0.25)
    longest = max(1, max(len(row) for row in tokens.values())) * width
    fig, ax = plt.subplots(
        figsize=(min(1.2 + longest * 0.55, 16), 0.7 + 0.55 * len(tokens)), layout="constrained"
    )
    for r, (name, row) in enumerate(tokens.items()):
        y = -r
        for i, (token, marked) in enumerate(zip(row, marks[name])):
            x = i * width
            ax.add_patch(
                plt.Rectangle(
                    (x, y - 0.35),
                    width * 0.94,
                    0.7,
                    facecolor="#f6ad55" if marked else "#bee3f8",
                    edgecolor="#4a5568",
                    linewidth=0.6,
                )
            )
            ax.text(x + width * 0.47, y, token, ha="center", va="center", fontsize=8)
    ax.set_xlim(-0.1, longest + 0.1)
    ax.set_ylim(-len(tokens) + 0.4, 0.6)
    ax.set_yticks([-r for r in range(len(tokens))], [f"{name} ({len(row)})" for name, row in tokens.items()])
    ax.set_xticks([])
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)
    if title is not None:
        ax.set_title(title, fontsize=10)
    return fig
