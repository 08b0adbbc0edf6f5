"""Notebook 04 (masks): switch causal, padding and sliding-window masks on and off, see their AND."""

from __future__ import annotations

from functools import partial

import ipywidgets as widgets
import torch
from matplotlib.figure import Figure

from attn_edu import viz
from attn_edu._validate import check_positive_int
from attn_edu.masks import causal_mask, combine_masks, key_mask, padding_mask
from attn_edu.sparse import sliding_window_mask
from attn_edu.widgets.explorer import WIDE_LABELS, Explorer


def _mask_view(
    *, T: int, S: int, causal: bool, padding: bool, length: int, sliding_window: bool, window: int
) -> tuple[dict, Figure]:
    parts, names = [], []
    if causal:
        parts.append(causal_mask(T, S))  # (T, S)
        names.append("causal")
    if padding:
        parts.append(key_mask(padding_mask([length], S))[0, 0])  # (1, S): hides keys length .. S-1
        names.append(
            f"padding (length {length})" if length < S else f"padding (all {S} keys real: none hidden)"
        )
    if sliding_window:
        parts.append(sliding_window_mask(T, S, window=window, causal=causal))  # (T, S)
        names.append(f"window {window}")
    combined = combine_masks(*parts)
    mask = torch.ones(T, S, dtype=torch.bool) if combined is None else combined.expand(T, S).clone()  # (T, S)
    fully_masked = [t for t in range(T) if not bool(mask[t].any())]
    title = " ∧ ".join(names) if names else "no mask"
    if fully_masked:
        title += f"\nfully masked rows {fully_masked}: attention returns zeros there"
    figure = viz.plot_mask(mask, title=title)
    return {"mask": mask, "fully_masked_rows": fully_masked, "density": float(mask.float().mean())}, figure


def _most_real_keys(S: int) -> int:
    # At S real keys the padding mask hides nothing, and ticking "padding" would look dead: stop one short,
    # so that padding always hides at least the last key (with a single key there is nothing to pad).
    return max(S - 1, 1)


def _sync_mask_bounds(controls: dict[str, widgets.ValueWidget]) -> None:
    # Lengths stay below the number of keys; windows cannot exceed it.
    controls["length"].max = _most_real_keys(controls["S"].value)
    controls["window"].max = max(controls["S"].value, controls["T"].value)


def mask_explorer(T: int = 6, S: int | None = None, *, max_len: int = 12) -> Explorer:
    """Switch causal, padding and sliding-window masks on and off and see their combination.

    Masks come from :mod:`attn_edu.masks` (``causal_mask``, ``padding_mask`` → ``key_mask``,
    ``combine_masks``) and :func:`attn_edu.sparse.sliding_window_mask`; they combine by logical AND.
    Try ``T > S`` with causal on: the top rows see no key at all. The ``real keys`` slider runs from 1 to
    ``S - 1``, so that ticking padding always hides at least the last key.

    Example:
        >>> ex = mask_explorer(4)
        >>> ex.set(padding=True, length=2)
        >>> ex.state["mask"].int()
        tensor([[1, 0, 0, 0],
                [1, 1, 0, 0],
                [1, 1, 0, 0],
                [1, 1, 0, 0]], dtype=torch.int32)
    """
    check_positive_int("max_len", max_len)
    check_positive_int("T", T)
    S = T if S is None else check_positive_int("S", S)
    if max(T, S) > max_len:
        raise ValueError(f"T, S: expected at most max_len={max_len}, got T={T}, S={S}")
    slider = partial(widgets.IntSlider, min=1, max=max_len, continuous_update=False, style=WIDE_LABELS)
    controls = {
        "T": slider(value=T, description="T (queries)"),
        "S": slider(value=S, description="S (keys)"),
        "causal": widgets.Checkbox(value=True, description="causal"),
        "padding": widgets.Checkbox(value=False, description="padding"),
        "length": slider(value=_most_real_keys(S), max=_most_real_keys(S), description="real keys"),
        "sliding_window": widgets.Checkbox(value=False, description="sliding window"),
        "window": slider(value=min(2, S), max=max(T, S), description="window"),
    }
    return Explorer(controls, _mask_view, title="Masks (True = may attend)", sync=_sync_mask_bounds)
