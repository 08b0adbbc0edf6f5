"""Notebook 14 (reading a 2026 model): slide the context length and watch which models' caches grow."""

from __future__ import annotations

import ipywidgets as widgets
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from attn_edu.model_cards import PUBLISHED, layer_cache_bytes, layer_kinds
from attn_edu.viz import KIND_COLORS
from attn_edu.widgets.explorer import Explorer

GIB = 2**30


def _cache_view(*, tokens: int, dtype_bytes: int) -> tuple[dict, Figure]:
    figure, ax = plt.subplots(figsize=(9, 3.4), layout="constrained")
    state = {"tokens": tokens, "dtype_bytes": dtype_bytes, "gib": {}}
    names = list(PUBLISHED)
    for row, (name, card) in enumerate(PUBLISHED.items()):
        sizes, kinds = (
            layer_cache_bytes(card.config, tokens, dtype_bytes=dtype_bytes),
            layer_kinds(card.config),
        )
        left = 0.0
        for kind, color in KIND_COLORS.items():  # one bar per model, split by what each kind of layer keeps
            part = sum(size for size, k in zip(sizes, kinds, strict=True) if k == kind) / GIB
            ax.barh(row, part, left=left, color=color, label=kind if row == 0 else None)
            left += part
        state["gib"][name] = left
        ax.text(left, row, f" {left:.3g} GiB", va="center", fontsize=8)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlim(0, max(state["gib"].values()) * 1.25)
    ax.set_xlabel(f"GiB kept for one sequence of {tokens:,} tokens, {dtype_bytes} byte(s) a number")
    ax.legend(fontsize=8, loc="lower right")
    return state, figure


def cache_explorer() -> Explorer:
    """The memory each published model keeps while decoding one sequence, split by kind of layer, as the context
    grows from 1k to 1M tokens (:func:`attn_edu.model_cards.layer_cache_bytes`), in bfloat16 or in 8 bits.

    Example:
        >>> ex = cache_explorer()
        >>> ex.set(tokens=2**20)
        >>> round(ex.state["gib"]["gpt-oss-20b"], 1)   # 12 full layers x 1,024 numbers x 2 bytes x 2^20 tokens
        24.0
    """
    controls = {
        "tokens": widgets.SelectionSlider(
            options=[2**k for k in range(10, 21)], value=2**17, description="tokens", continuous_update=False
        ),
        "dtype_bytes": widgets.Dropdown(
            options=[("bfloat16 (2 bytes)", 2), ("8-bit (1 byte)", 1)], value=2, description="numbers"
        ),
    }
    return Explorer(controls, _cache_view, title="What each model keeps, by kind of layer")
