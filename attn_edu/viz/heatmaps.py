"""Heatmaps of ``(T, S)`` matrices: attention weights, one head or many, boolean masks and score biases.

Used by notebooks 01, 02, 04, 05, 06, 09, 11, 12 and 13 and their explorers. Rows are queries
(``T``), columns are keys (``S``). Weights and scores have one colour scale in every figure, built on the
scores' role colour (:data:`attn_edu.viz.common.WEIGHTS_CMAP`): it starts at 0, and no attention is always
white, the lightest colour; the larger the weight, the darker the red. Values of both signs (raw scores, a
score bias) get the same red above 0 and a neutral grey below it, white at 0. Masks use two colours and a
legend that states the polarity (``True`` = may attend).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from attn_edu._validate import check_mask, check_positive_int, check_shape
from attn_edu.viz.common import (
    HIDDEN_COLOR,
    ROLE_COLORS,
    as_numbers,
    as_tensor,
    new_axes,
    score_scale,
    text_color_on,
    token_labels,
)

# Heatmaps get their values written in each cell up to this many rows/columns; beyond it the
# numbers overlap and the colour alone has to speak.
ANNOTATE_MAX_SIZE = 10

# The colour bar of every weight heatmap says which end is "no attention" (a matrix with negative numbers holds
# scores, not weights: white is 0 there).
WEIGHTS_LABEL = "attention weight (white = none)"
SCORES_LABEL = "score (white = 0)"

# Mask colours: hidden cells recede (light grey), visible cells stand out in the mask's role colour
# (common.ROLE_COLORS, the colour of a mask in every diagram).
MASK_COLORS = (HIDDEN_COLOR, ROLE_COLORS["mask"])


def _cell_size(rows: int, cols: int) -> tuple[float, float]:
    # About half an inch per token, clipped so that long sequences still fit on a screen.
    return min(max(2.5, 0.45 * cols + 1.5), 11.0), min(max(2.0, 0.45 * rows + 1.0), 9.0)


def _set_token_ticks(ax: Axes, query_labels: list[str] | None, key_labels: list[str] | None) -> None:
    if key_labels is not None:
        ax.set_xticks(range(len(key_labels)), key_labels, rotation=90 if len(key_labels) > 6 else 0)
    if query_labels is not None:
        ax.set_yticks(range(len(query_labels)), query_labels)


def _color_limits(data: np.ndarray) -> tuple[float, float]:
    """Weights (non-negative) start the scale at 0, so that 'no attention' is always white, the lightest colour."""
    _, low, high = score_scale(data.min(), data.max())
    return low, high


def _draw_heatmap(ax: Axes, data: np.ndarray, *, annotate: bool, limits: tuple[float, float]) -> Any:
    """Draw a (T, S) matrix on the shared scale, one cell per query/key; write the values when asked."""
    cmap, low, high = score_scale(*limits)
    image = ax.imshow(data, cmap=cmap, vmin=low, vmax=high, interpolation="nearest")
    T, S = data.shape
    if annotate:
        for t in range(T):
            for s in range(S):
                color = text_color_on(image.cmap(image.norm(data[t, s])))  # dark text on light cells
                ax.text(s, t, f"{data[t, s]:.2f}", ha="center", va="center", fontsize=8, color=color)
    if max(T, S) <= 16:  # every token gets a tick when there are few
        ax.set_xticks(range(S))
        ax.set_yticks(range(T))
    return image


def _scale_label(image: Any) -> str:
    """The colour bar's label: weights when the scale starts at 0, scores when it goes below."""
    return WEIGHTS_LABEL if image.norm.vmin >= 0 else SCORES_LABEL


def _grid(rows: int, cols: int, T: int, S: int) -> tuple[Figure, np.ndarray]:
    """A ``rows × cols`` grid of panels, each about as large as one ``(T, S)`` heatmap."""
    width, height = _cell_size(T, S)
    # One factor for both sides: capping only the width would leave square panels with empty bands between rows.
    shrink = min(1.0, 16 / (cols * width), 14 / (rows * height))
    return plt.subplots(
        rows,
        cols,
        squeeze=False,
        figsize=(cols * width * shrink, rows * height * shrink),
        layout="constrained",
    )


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
    colour scale starts at 0 (white: no attention); values are written in the cells when the matrix is small
    (``annotate=None`` means: when ``T`` and ``S`` are at most ``ANNOTATE_MAX_SIZE``).

    Shapes:
        weights ``(T, S)``; query_labels ``T`` strings, key_labels ``S`` strings.

    Example:
        >>> fig = plot_attention(torch.tensor([[1.0, 0.0], [0.4, 0.6]]), key_labels=["the", "cat"])
        >>> len(fig.axes)                    # the heatmap and its colour bar
        2
        >>> plt.close(fig)
    """
    data, sizes = as_numbers("weights", weights, "T S")
    T, S = sizes["T"], sizes["S"]
    query_labels = token_labels("query_labels", query_labels, T, "T")
    key_labels = token_labels("key_labels", key_labels, S, "S")
    fig, ax = new_axes(ax, _cell_size(T, S))
    if annotate is None:
        annotate = max(T, S) <= ANNOTATE_MAX_SIZE
    image = _draw_heatmap(ax, data, annotate=annotate, limits=_color_limits(data))
    _set_token_ticks(ax, query_labels, key_labels)
    ax.set_xlabel("key (S)")
    ax.set_ylabel("query (T)")
    if title is not None:
        ax.set_title(title)
    fig.colorbar(image, ax=ax, label=_scale_label(image), shrink=0.8)
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
    t = as_tensor("weights", weights)
    if t.ndim not in (3, 4):
        raise ValueError(f"weights: expected shape (H, T, S) or (L, H, T, S), got {tuple(t.shape)}")
    check_positive_int("max_cols", max_cols)
    data, sizes = as_numbers("weights", t, "... H T S")
    H, T, S = sizes["H"], sizes["T"], sizes["S"]
    if labels is not None and (isinstance(labels, str) or len(labels) not in (T, S)):
        count = repr(labels) if isinstance(labels, str) else f"{len(labels)} labels"
        raise ValueError(f"labels: expected T={T} or S={S} token labels, got {count}")
    key_labels = token_labels("labels", labels, S, "S") if labels is not None and len(labels) == S else None
    query_labels = token_labels("labels", labels, T, "T") if labels is not None and len(labels) == T else None

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
    fig, grid = _grid(rows, cols, T, S)
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
    fig.colorbar(
        image,
        ax=[grid[r, c] for r, c in sorted(used)],
        label=_scale_label(image),
        shrink=0.8,
    )
    fig.supxlabel("key (S)")
    fig.supylabel("query (T)")
    if title is not None:
        fig.suptitle(title)
    return fig


def plot_attention_panels(
    weights: Sequence[torch.Tensor | np.ndarray],
    *,
    labels: Sequence[Sequence[Any] | None] | None = None,
    titles: Sequence[str] | None = None,
    title: str | None = None,
) -> Figure:
    """Attention matrices side by side, each with its own tokens, on one shared colour scale.

    Where :func:`plot_heads` compares the heads of one sequence, this compares matrices that need not share a
    size or tokens: a toy sentence beside a real model's WordPieces, or two trainings of one pattern. One colour
    scale (from 0 to the largest weight of any panel) and one colour bar: equal colours are equal weights in
    every panel. ``labels[i]`` names panel ``i``'s tokens, on the key axis when it has ``S_i`` of them and on
    the query axis when it has ``T_i`` (both in self-attention). Values are written in panels of at most
    6 × 6.

    Shapes:
        weights: a sequence of ``(T_i, S_i)`` matrices; labels and titles: one entry per matrix.

    Example:
        >>> fig = plot_attention_panels(
        ...     [torch.eye(2), torch.full((3, 3), 1 / 3)], labels=[["a", "b"], None], titles=["one", "two"]
        ... )
        >>> len(fig.axes)                    # two heatmaps and one colour bar
        3
        >>> plt.close(fig)
    """
    if isinstance(weights, (torch.Tensor, np.ndarray)) or not len(weights):
        raise ValueError("weights: expected a non-empty list of (T, S) matrices, one per panel")
    panels = [as_numbers(f"weights[{i}]", w, "T S") for i, w in enumerate(weights)]
    for name, given in (("labels", labels), ("titles", titles)):
        if given is not None and (isinstance(given, str) or len(given) != len(panels)):
            raise ValueError(f"{name}: expected one entry per panel ({len(panels)}), got {given!r}")
    limits = (0.0, max(_color_limits(data)[1] for data, _ in panels))
    widths = [_cell_size(sizes["T"], sizes["S"]) for _, sizes in panels]
    fig, axes = plt.subplots(
        1,
        len(panels),
        squeeze=False,
        figsize=(sum(w for w, _ in widths), max(h for _, h in widths)),
        width_ratios=[sizes["S"] for _, sizes in panels],
        layout="constrained",
    )
    for i, (ax, (data, sizes)) in enumerate(zip(axes[0], panels)):
        T, S = sizes["T"], sizes["S"]
        tokens = None if labels is None else labels[i]
        if tokens is not None and (isinstance(tokens, str) or len(tokens) not in (T, S)):
            raise ValueError(f"labels[{i}]: expected T={T} or S={S} token labels, got {tokens!r}")
        key_labels = (
            token_labels(f"labels[{i}]", tokens, S, "S") if tokens is not None and len(tokens) == S else None
        )
        query_labels = (
            token_labels(f"labels[{i}]", tokens, T, "T") if tokens is not None and len(tokens) == T else None
        )
        image = _draw_heatmap(ax, data, annotate=max(T, S) <= 6, limits=limits)
        _set_token_ticks(ax, query_labels, key_labels)
        ax.set_xlabel("key (S)")
        ax.set_ylabel("query (T)" if i == 0 else "")
        ax.set_title("" if titles is None else titles[i], fontsize=10)
    fig.colorbar(image, ax=list(axes[0]), label=_scale_label(image), shrink=0.8)
    if title is not None:
        fig.suptitle(title)
    return fig


def plot_alignment(
    weights: torch.Tensor | np.ndarray,
    *,
    source_words: Sequence[Any],
    target_words: Sequence[Any],
    titles: Sequence[str] | None = None,
    title: str | None = None,
) -> Figure:
    """Which source word each written word read: a translator's cross-attention, labelled with both sentences.

    Bahdanau et al. (2014, Fig. 3) drew their translator's weights this way: one row per word written (the
    queries, ``T``), one column per source word read (the keys, ``S``); a diagonal where the two word orders
    agree, a crossing where they differ. Several matrices (snapshots of one training run, say) stand in one row
    of panels on one colour scale from 0, so a spread row and a sharp one compare by eye; the target words label
    the first panel's rows. A single small matrix (at most ``ANNOTATE_MAX_SIZE`` a side) has its weights written
    in its cells.

    Shapes:
        weights ``(T, S)`` or ``(N, T, S)``; source_words ``S`` labels; target_words ``T`` labels;
        titles ``N`` strings.

    Example:
        >>> fig = plot_alignment(torch.eye(2)[[1, 0]], source_words=["white", "dog"], target_words=["chien", "blanc"])
        >>> [label.get_text() for label in fig.axes[0].get_yticklabels()]
        ['chien', 'blanc']
        >>> plt.close(fig)
    """
    t = as_tensor("weights", weights)
    if t.ndim not in (2, 3):
        raise ValueError(f"weights: expected shape (T, S) or (N, T, S), got {tuple(t.shape)}")
    data, sizes = as_numbers("weights", t if t.ndim == 3 else t[None], "N T S")
    N, T, S = sizes["N"], sizes["T"], sizes["S"]
    keys = token_labels("source_words", source_words, S, "S")
    queries = token_labels("target_words", target_words, T, "T")
    if titles is not None and (isinstance(titles, str) or len(titles) != N):
        raise ValueError(f"titles: expected one title per matrix (N={N}), got {titles!r}")
    width, height = _cell_size(T, S)
    fig, axes = plt.subplots(
        1, N, squeeze=False, figsize=(min(N * width + 1.0, 12.0), height + 0.5), layout="constrained"
    )
    limits = (0.0, _color_limits(data)[1])
    annotate = N == 1 and max(T, S) <= ANNOTATE_MAX_SIZE
    for n, ax in enumerate(axes[0]):
        image = _draw_heatmap(ax, data[n], annotate=annotate, limits=limits)
        _set_token_ticks(ax, queries, keys)
        if n > 0:
            ax.tick_params(labelleft=False)
        if titles is not None:
            ax.set_title(titles[n], fontsize=9)
    fig.colorbar(image, ax=list(axes[0]), label=_scale_label(image), shrink=0.8)
    fig.supxlabel("source word read (key, S)")
    fig.supylabel("target word written (query, T)")
    if title is not None:
        fig.suptitle(title)
    return fig


# ---------------------------------------------------------------------------------------------------
# Masks
# ---------------------------------------------------------------------------------------------------


def plot_mask(
    mask: torch.Tensor | np.ndarray, *, title: str | None = None, ax: Axes | None = None, legend: bool = True
) -> Figure:
    """Picture of a boolean mask: dark cells may be attended, light grey cells are hidden.

    Row ``t`` is query ``t``, column ``s`` is key ``s``; the legend states the polarity
    (``True`` = may attend, the convention of :mod:`attn_edu.masks`). In a row of masks drawn side by
    side (``ax=``), pass ``legend=False`` for all panels but the last, so the figure shows it once.

    Shapes:
        mask ``(T, S)`` bool.

    Example:
        >>> fig = plot_mask(torch.tril(torch.ones(3, 3, dtype=torch.bool)), title="causal")
        >>> [text.get_text() for text in fig.axes[0].get_legend().get_texts()]
        ['True: may attend', 'False: hidden']
        >>> plt.close(fig)
        >>> plot_mask(torch.ones(2, 2, dtype=torch.bool), legend=False).axes[0].get_legend() is None
        True
        >>> plt.close("all")
    """
    t = as_tensor("mask", mask)
    sizes = check_shape("mask", t, "T S")
    check_mask("mask", t)  # bool, True = may attend: the wording of every mask argument
    T, S = sizes["T"], sizes["S"]
    width, height = _cell_size(T, S)
    fig, ax = new_axes(ax, (width + 1.5, height))
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
    if legend:
        ax.legend(
            handles=handles, title="mask[t, s]", loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8
        )
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

    A bias is added to ``q·k`` *before* the softmax. White is always 0 (no change to the score). The scale is
    the one every heatmap of scores shares (:func:`attn_edu.viz.common.score_scale`): a bias of both signs
    (learned T5 buckets) gets a diverging scale centred on 0 (grey = pushed down, red = pushed up); a bias of
    one sign (ALiBi's, never positive) a one-sided scale from 0 to its extreme, so no colour is spent on
    values that never occur.

    Shapes:
        bias ``(H, T, S)``.

    Example:
        >>> fig = plot_score_bias(-torch.arange(6.0).reshape(1, 2, 3).repeat(3, 1, 1))
        >>> len(fig.axes)                    # three heads and one colour bar
        4
        >>> fig.axes[0].images[0].get_clim()  # never positive: from the lowest bias to 0
        (-5.0, 0.0)
        >>> plt.close(fig)
    """
    data, sizes = as_numbers("bias", bias, "H T S")
    check_positive_int("max_cols", max_cols)
    H, T, S = sizes["H"], sizes["T"], sizes["S"]
    cols = min(H, max_cols)
    rows = math.ceil(H / cols)
    # Panels sized to the matrix (no ticks labels or colour bar of their own to make room for), with the
    # shared labels and colour bar close around them: about 0.2 inch per token, 1.8 to 3 inches a side.
    side = min(3.0, max(1.8, 0.2 * max(T, S) + 0.4))
    fig, grid = plt.subplots(
        rows,
        cols,
        squeeze=False,
        figsize=(cols * (side + 0.1) + 1.4, rows * (side + 0.35) + 0.8),
        layout="constrained",
    )
    cmap, vmin, vmax = score_scale(data.min(), data.max())  # one-sided from 0 (white), or symmetric about it
    for h in range(rows * cols):
        ax = grid[h // cols, h % cols]
        if h >= H:
            fig.delaxes(ax)
            continue
        image = ax.imshow(data[h], cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # token positions: whole numbers
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        if h % cols:  # query numbers once per row of panels
            ax.tick_params(labelleft=False)
        ax.set_title(f"head {h}", fontsize=9)
    fig.colorbar(image, ax=grid[:, :].ravel().tolist()[:H], label="score bias (white = 0)", shrink=0.8)
    fig.supxlabel("key (S)")
    fig.supylabel("query (T)")
    if title is not None:
        fig.suptitle(title)
    return fig
