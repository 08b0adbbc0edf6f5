"""Notebook 00 (shapes): change ``T``, ``S`` and ``D`` and watch which shapes move in one attention call."""

from __future__ import annotations

from functools import partial

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from attn_edu import viz
from attn_edu.attention import attention_weights
from attn_edu.widgets.explorer import WIDE_LABELS, Explorer


def _shape_view(*, T: int, S: int, D: int, causal: bool) -> tuple[dict, Figure]:
    generator = torch.Generator().manual_seed(0)
    B, H = 2, 4
    q = torch.randn(B, H, T, D, generator=generator)  # (B, H, T, D)
    k = torch.randn(B, H, S, D, generator=generator)  # (B, H, S, D)
    weights = attention_weights(q, k, is_causal=causal)  # (B, H, T, S)
    shapes = {"q": (B, H, T, D), "k": (B, H, S, D), "v": (B, H, S, D), "weights": tuple(weights.shape),
              "output": (B, H, T, D)}  # fmt: skip
    figure, ax = plt.subplots(figsize=(4.5, 3.5), layout="constrained")
    title = f"weights of batch 0, head 0: (T, S) = ({T}, {S})"
    viz.plot_attention(weights[0, 0], title=title, ax=ax)
    ax.set_xlabel("key position s (S)")
    ax.set_ylabel("query position t (T)")
    return {"shapes": shapes, "weights": weights}, figure


def shape_explorer() -> Explorer:
    """Change ``T``, ``S`` and ``D`` and watch which shapes move: the weights are always ``(B, H, T, S)``.

    Batch ``B = 2`` and heads ``H = 4`` stay fixed; ``D`` changes q and k but never the weight matrix.

    Example:
        >>> ex = shape_explorer()
        >>> ex.set(T=3, S=5)
        >>> ex.state["shapes"]["weights"]
        (2, 4, 3, 5)
    """
    slider = partial(widgets.IntSlider, min=1, max=12, continuous_update=False, style=WIDE_LABELS)
    controls = {
        "T": slider(value=4, description="T (queries)"),
        "S": slider(value=6, description="S (keys)"),
        "D": widgets.SelectionSlider(
            options=[2, 4, 8, 16, 32, 64], value=8, description="D (head dim)", style=WIDE_LABELS
        ),
        "causal": widgets.Checkbox(value=False, description="causal"),
    }
    return Explorer(controls, _shape_view, title="Shapes in one attention call (B = 2, H = 4)")
