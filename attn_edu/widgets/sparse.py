"""Notebook 11 (sparse attention): build a Longformer / BigBird pattern from sliders."""

from __future__ import annotations

from functools import partial

import ipywidgets as widgets
import torch
from matplotlib.figure import Figure

from attn_edu import viz
from attn_edu._validate import check_positive_int
from attn_edu.sparse import dilated_window_mask, global_tokens_mask, mask_density, random_blocks_mask
from attn_edu.widgets.explorer import WIDE_LABELS, Explorer


def _sparse_pattern_view(
    *, T: int, seed: int, window: int, dilation: int, global_tokens: int, random_keys: int
) -> tuple[dict, Figure]:
    mask = dilated_window_mask(T, window=window, dilation=dilation, causal=False)  # (T, T)
    names = [f"window {window}" + (f", dilation {dilation}" if dilation > 1 else "")]
    if global_tokens:
        mask = mask | global_tokens_mask(T, global_positions=list(range(global_tokens)))  # (T, T)
        names.append(f"{global_tokens} global")
    if random_keys:
        generator = torch.Generator().manual_seed(seed)
        mask = mask | random_blocks_mask(T, num_random=random_keys, generator=generator)  # (T, T)
        names.append(f"{random_keys} random")
    pairs = int(mask.sum())
    density = mask_density(mask)
    title = " | ".join(names) + f"\n{pairs} of {T * T} pairs (density {density:.2f})"
    figure = viz.plot_mask(mask, title=title)
    state = {"mask": mask, "pairs": pairs, "density": density, "keys_per_query": mask.sum(dim=-1)}
    return state, figure


def sparse_pattern_explorer(T: int = 32, *, seed: int = 0) -> Explorer:
    """Build a Longformer / BigBird pattern from sliders: a (dilated) window, global tokens, random keys.

    The mask is ``window | global | random`` (Beltagy et al. 2020, §3.1; Zaheer et al. 2020, §2), made by
    :mod:`attn_edu.sparse` (bidirectional window; global tokens at positions ``0 .. g - 1``; random
    keys drawn with ``seed``). The title counts the (query, key) pairs computed: the cost relative to full
    attention is the density.

    Example:
        >>> ex = sparse_pattern_explorer(8)
        >>> ex.set(window=2, global_tokens=0, random_keys=0)
        >>> ex.state["pairs"]                      # 8 diagonal + 2·7 neighbours
        22
    """
    check_positive_int("T", T)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed: expected an int >= 0, got {seed!r}")
    slider = partial(widgets.IntSlider, min=1, continuous_update=False, style=WIDE_LABELS)
    controls = {
        "window": slider(value=min(3, T), max=T, description="window"),
        "dilation": slider(value=1, max=max(1, min(4, T)), description="dilation"),
        "global_tokens": slider(value=min(1, T), min=0, max=min(4, T), description="global tokens"),
        "random_keys": slider(value=min(2, T), min=0, max=min(4, T), description="random keys"),
    }
    return Explorer(
        controls, partial(_sparse_pattern_view, T=T, seed=seed), title=f"Sparse attention patterns (T = {T})"
    )
