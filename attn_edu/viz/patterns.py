"""Boolean patterns side by side: sparse-attention masks, and who depends on whom after stacked layers.

Used by notebook 11. Each panel is drawn by :func:`attn_edu.viz.plot_mask` (rows are queries ``t``, columns
keys ``s``); the row shares one legend, whose words say what ``True`` means in that row: "may attend" for a
mask, "depends on" for the reach of stacked layers (a boolean matrix power, not a mask).
"""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from attn_edu.viz.common import as_tensor
from attn_edu.viz.heatmaps import MASK_COLORS, plot_mask


def plot_masks(
    masks: Mapping[str, torch.Tensor | np.ndarray],
    *,
    count_pairs: bool = True,
    legend: tuple[str, str, str] = ("mask[t, s]", "may attend", "hidden"),
    title: str | None = None,
) -> Figure:
    """A row of boolean ``(T, S)`` patterns, one panel each, titled by name and sharing one legend.

    With ``count_pairs`` each panel's title also gives the (query, key) pairs it keeps and their share
    of ``T · S`` (what a sparse pattern costs). ``legend`` is the legend's title and what ``True`` and
    ``False`` mean: ``True: may attend`` by default, as in :mod:`attn_edu.masks`; for the reach of stacked
    layers, say ``("reach[t, s]", "depends on", "does not")``.

    Shapes:
        each value of ``masks`` ``(T, S)`` bool (sizes may differ from panel to panel).

    Example:
        >>> fig = plot_masks({"causal": torch.tril(torch.ones(4, 4, dtype=torch.bool)),
        ...                   "all": torch.ones(4, 4, dtype=torch.bool)})
        >>> [ax.get_title() for ax in fig.axes]
        ['causal: 10 pairs (62%)', 'all: 16 pairs (100%)']
        >>> [t.get_text() for t in fig.axes[-1].get_legend().get_texts()]
        ['True: may attend', 'False: hidden']
        >>> plt.close(fig)
        >>> fig = plot_masks({"2 layers": torch.eye(3, dtype=torch.bool)}, count_pairs=False,
        ...                  legend=("reach[t, s]", "depends on", "does not"))
        >>> fig.axes[0].get_title(), fig.axes[0].get_legend().get_title().get_text()
        ('2 layers', 'reach[t, s]')
        >>> plt.close(fig)
    """
    if not isinstance(masks, Mapping) or not masks:
        raise ValueError(
            f"masks: expected a non-empty dict {{name: bool mask of shape (T, S)}}, got {type(masks).__name__}"
        )
    if not (isinstance(legend, tuple) and len(legend) == 3 and all(isinstance(x, str) for x in legend)):
        raise ValueError(f"legend: expected (title, what True means, what False means), got {legend!r}")
    patterns = {str(name): as_tensor(f"masks[{name!r}]", mask) for name, mask in masks.items()}
    fig, axes = plt.subplots(1, len(patterns), figsize=(5.0 * len(patterns), 4.2), layout="constrained")
    axes = np.atleast_1d(axes)
    for ax, (name, mask) in zip(axes, patterns.items()):
        if count_pairs and mask.dtype == torch.bool and mask.ndim == 2:
            pairs = int(mask.sum())
            name = f"{name}: {pairs} pairs ({pairs / max(mask.numel(), 1):.0%})"
        plot_mask(mask, title=name, ax=ax, legend=False)  # checks the shape and the dtype
    legend_title, true_means, false_means = legend
    handles = [
        Patch(color=MASK_COLORS[1], label=f"True: {true_means}"),
        Patch(color=MASK_COLORS[0], label=f"False: {false_means}"),
    ]
    axes[-1].legend(
        handles=handles, title=legend_title, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8
    )
    if title is not None:
        fig.suptitle(title)
    return fig
