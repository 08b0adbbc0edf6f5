"""Attention as a soft dictionary lookup: a query reads every value, weighted by how well keys match.

Used by notebook 01 and its explorer. The output is ``Σ_s w_s · v_s``: Nadaraya–Watson kernel
regression (1964, :func:`plot_kernel_regression`), and the additive attention of Bahdanau et al. (2015),
whose trained weights align two sentences (:func:`attn_edu.viz.heatmaps.plot_alignment`). The query, keys,
values, weights and output keep their role colours (:data:`attn_edu.viz.common.ROLE_COLORS`); weights drawn
as colours use the shared scale of every heatmap (:data:`attn_edu.viz.common.WEIGHTS_CMAP`, white = none).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt  # noqa: F401 (the doctests close their figures)
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

from attn_edu.viz.common import ROLE_COLORS, WEIGHTS_CMAP, as_numbers, as_tensor, new_axes


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
    star on it. With 2-D keys the keys are points in the plane sized and shaded by weight (white: none)
    and the query a cross; 2-D values are drawn in the same plane, with the output as a diamond among them.
    Each role has its colour in every figure: query blue, keys orange, values purple, weights the scores'
    red, output green.

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
    k = as_tensor("keys", keys)
    if k.ndim == 2 and k.shape[1] == 1:
        k = k[:, 0]  # (S,)
    if k.ndim == 1:
        key_dim, (k_np, sizes) = 1, as_numbers("keys", k, "S")
    else:
        key_dim, (k_np, sizes) = 2, as_numbers("keys", k, "S 2")
    S = sizes["S"]
    w, _ = as_numbers("weights", weights, "S", S=S)
    v = as_tensor("values", values)
    if v.ndim == 2 and v.shape[1] == 1:
        v = v[:, 0]  # (S,)
    v_np, _ = as_numbers("values", v, "S" if v.ndim == 1 or key_dim == 1 else "S 2", S=S)
    q, _ = as_numbers("query", as_tensor("query", query).reshape(-1), str(key_dim))
    out, _ = as_numbers("output", as_tensor("output", output).reshape(-1), "1" if v_np.ndim == 1 else "2")
    fig, ax = new_axes(ax, (6.0, 4.0))
    alpha = 0.15 + 0.85 * w / max(float(w.max()), 1e-12)  # the most-read key is fully opaque

    if key_dim == 1:
        colors = np.tile(to_rgba(ROLE_COLORS["key"]), (S, 1))
        colors[:, 3] = alpha  # points in the key's colour, opacity = weight
        ax.scatter(k_np, v_np, s=50, c=colors, label="key/value pairs (opacity = weight)")
        ax.axvline(q[0], color=ROLE_COLORS["query"], linestyle="--", label=f"query = {q[0]:.2f}")
        ax.scatter([q[0]], [out[0]], marker="*", s=250, color=ROLE_COLORS["output"], edgecolors="black",
                   zorder=3, label=f"output = {out[0]:.2f}")  # fmt: skip
        ax.set_xlabel("key")
        ax.set_ylabel("value")
        bars = ax.twinx()
        gaps = np.diff(np.sort(k_np))
        width = 0.8 * float(gaps[gaps > 0].min()) if (gaps > 0).any() else 0.5
        bars.bar(k_np, w, width=width, color=ROLE_COLORS["scores"], alpha=0.3)
        bars.set_ylim(0, 1.0 if w.max() <= 1 else float(w.max()) * 1.1)
        bars.set_ylabel("weight (bars)")
        ax.set_zorder(bars.get_zorder() + 1)  # points and markers in front of the bars
        ax.patch.set_visible(False)
    else:
        ax.scatter(k_np[:, 0], k_np[:, 1], s=30 + 400 * w, c=w, cmap=WEIGHTS_CMAP, vmin=0,
                   edgecolors=ROLE_COLORS["key"], linewidths=1.5, label="keys (size, shade = weight)")  # fmt: skip
        ax.scatter([q[0]], [q[1]], marker="X", s=200, color=ROLE_COLORS["query"], label="query")
        if v_np.ndim == 2:
            ax.scatter(v_np[:, 0], v_np[:, 1], marker="s", color=ROLE_COLORS["value"],
                       alpha=0.3 + 0.7 * alpha / alpha.max(), label="values")  # fmt: skip
            ax.scatter([out[0]], [out[1]], marker="D", s=150, color=ROLE_COLORS["output"], edgecolors="black",
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


def plot_kernel_regression(
    x_query: torch.Tensor | np.ndarray | Sequence[float],
    predictions: Mapping[str, torch.Tensor | np.ndarray | Sequence[float]],
    x_train: torch.Tensor | np.ndarray | Sequence[float],
    y_train: torch.Tensor | np.ndarray | Sequence[float],
    *,
    truth: torch.Tensor | np.ndarray | Sequence[float] | None = None,
    title: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Kernel regression as attention pooling: the training pairs, and each predictor's curve over the queries.

    Nadaraya (1964) and Watson (1964) predict at a query ``x`` with ``Σ_i w_i(x) · y_i``, the weights a softmax
    of a kernel score between ``x`` and each training input ``x_i``: the training inputs are the keys, their
    targets the values. The training pairs ``(x_i, y_i)`` are drawn as points, each predictor as a curve, and
    ``truth`` (the function the noisy targets came from), when given, as a dashed black line. The legend
    stands outside the axes, where it hides no point.

    Shapes:
        x_query ``(T,)``, each prediction ``(T,)``, truth ``(T,)``; x_train, y_train ``(S,)``.

    Example:
        >>> x = torch.linspace(0, 1, 5)
        >>> fig = plot_kernel_regression(x, {"average": torch.full((5,), 0.5)}, x, x, truth=x)
        >>> len(fig.axes[0].get_lines()), len(fig.axes[0].collections)    # truth, one predictor; the points
        (2, 1)
        >>> plt.close(fig)
    """
    queries, sizes = as_numbers("x_query", x_query, "T")
    inputs, train_sizes = as_numbers("x_train", x_train, "S")
    targets, _ = as_numbers("y_train", y_train, "S", S=train_sizes["S"])
    if not isinstance(predictions, Mapping) or not predictions:
        raise ValueError(
            "predictions: expected a non-empty mapping from a predictor's name to its (T,) curve"
        )
    curves = {
        name: as_numbers(f"predictions[{name!r}]", y, "T", T=sizes["T"])[0] for name, y in predictions.items()
    }
    fig, ax = new_axes(ax, (8.0, 4.0))
    ax.scatter(inputs, targets, s=12, color="black", alpha=0.5, label="training points (keys, values)")
    if truth is not None:
        true_curve, _ = as_numbers("truth", truth, "T", T=sizes["T"])
        ax.plot(queries, true_curve, color="black", linestyle="--", linewidth=1.5, label="true function")
    for name, curve in curves.items():
        ax.plot(queries, curve, linewidth=1.8, label=name)
    ax.set_xlabel("x (query)")
    ax.set_ylabel("y")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title is not None:
        ax.set_title(title)
    return fig
