"""Pictures of whole models read from their configurations (notebook 14)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

# one colour per kind of layer, in attn_edu.model_cards.KINDS order: full, sliding, linear, mla
KIND_COLORS = {"full": "#cf222e", "sliding": "#fb8f44", "linear": "#2da44e", "mla": "#8250df"}


def plot_layer_kinds(models: Mapping[str, Sequence[str]], *, title: str | None = None) -> Figure:
    """One row per model, one cell per layer (first layer left), coloured by its kind: which layers keep every
    token (full, MLA), which keep a window, which a fixed state.

    Example:
        >>> fig = plot_layer_kinds({"a": ["sliding", "full"], "b": ["linear", "linear", "linear", "full"]})
        >>> fig.axes[0].get_yticklabels()[1].get_text()
        'b'
        >>> plt.close(fig)
    """
    if not isinstance(models, Mapping) or not models:
        raise ValueError(f"models: expected a dict {{name: [kind per layer]}}, got {models!r}")
    kinds = list(KIND_COLORS)
    for name, layers in models.items():
        unknown = sorted(set(layers) - set(kinds))
        if unknown or not layers:
            raise ValueError(f"models[{name!r}]: expected layer kinds from {kinds}, got {list(layers)[:8]}")
    width = max(len(layers) for layers in models.values())
    grid = np.full((len(models), width), np.nan)
    for row, layers in enumerate(models.values()):
        grid[row, : len(layers)] = [kinds.index(kind) for kind in layers]
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(models) + 1.2))
    cmap = ListedColormap(list(KIND_COLORS.values())).with_extremes(bad="white")
    ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=-0.5, vmax=len(kinds) - 0.5, aspect="auto")
    ax.set_yticks(range(len(models)), list(models))
    ax.set_xlabel("layer (from 0)")
    ax.set_xticks(range(0, width, 4))
    ax.set_xlim(-0.5, width + 2)  # room for each row's layer count
    for row, layers in enumerate(models.values()):
        ax.text(len(layers) - 0.3, row, f" {len(layers)}", va="center", fontsize=8)
    handles = [Patch(color=color, label=kind) for kind, color in KIND_COLORS.items()]
    ax.legend(
        handles=handles, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.25), fontsize=8, frameon=False
    )
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig
