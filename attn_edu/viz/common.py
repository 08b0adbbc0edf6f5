"""What every figure of :mod:`attn_edu.viz` does first: check its input, and find the axes to draw on.

Used by every file of the package. Each plot function turns its arguments into plain numbers with
:func:`as_numbers` (or :func:`as_tensor` when it looks at the shape first), checks token labels with
:func:`token_labels`, and draws on :func:`new_axes`: the caller's ``ax=`` or a fresh figure. Errors
name the argument, the expected shape in legend letters, and what arrived.

It also holds the colours every figure shares, one per role in attention (:data:`ROLE_COLORS`): a query is
the same blue in a schematic diagram, a heatmap's legend and a kernel's traffic picture.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from attn_edu._validate import check_shape

# One colour per role, shared by the diagrams (attn_edu.viz.diagrams), the masks of heatmaps.py and the
# kernel-traffic pictures. Queries blue, keys orange and outputs green are those FlashAttention's data-flow
# figure (flash.py) already used; the others are picked from the same palette (seaborn "deep"), so that no
# two roles are alike for a reader with red-green colour blindness (values purple, scores red, masks grey).
ROLE_COLORS = {
    "query": "#4c72b0",
    "key": "#dd8452",
    "value": "#8172b3",
    "scores": "#c44e52",  # scores and the weights softmax makes of them
    "mask": "#595959",  # a mask, and the cells it lets through in a mask picture
    "output": "#55a868",
}
HIDDEN_COLOR = "#d9d9d9"  # what a mask hides, a tile that is skipped: light grey, receding


def as_tensor(name: str, x: Any) -> torch.Tensor:
    """Accept a tensor, a numpy array, a list or a number; return a detached CPU tensor.

    Example:
        >>> as_tensor("weights", [[1.0, 0.0]]).shape
        torch.Size([1, 2])
    """
    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    try:
        return torch.as_tensor(np.asarray(x))
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(
            f"{name}: expected a tensor, array or list of numbers, got {type(x).__name__}"
        ) from None


def as_numbers(name: str, x: Any, spec: str, **known: int) -> tuple[np.ndarray, dict[str, int]]:
    """Check ``x`` against ``spec`` (legend letters, as in ``check_shape``) and return it as finite
    float64 numbers, with its sizes.

    Example:
        >>> data, sizes = as_numbers("weights", torch.eye(2), "T S")
        >>> data.dtype, sizes
        (dtype('float64'), {'T': 2, 'S': 2})
    """
    t = as_tensor(name, x)
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


def token_labels(name: str, labels: Sequence[Any] | None, size: int, letter: str) -> list[str] | None:
    """``None``, or exactly ``size`` labels (one per token along axis ``letter``) as strings.

    Example:
        >>> token_labels("key_labels", ["the", 7], 2, "S")
        ['the', '7']
    """
    if labels is None:
        return None
    if isinstance(labels, str) or len(labels) != size:
        got = repr(labels) if isinstance(labels, str) else f"{len(labels)} labels"
        raise ValueError(f"{name}: expected {letter}={size} labels (one per token), got {got}")
    return [str(label) for label in labels]


def new_axes(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    """The caller's axes (and its figure), or a fresh figure of ``figsize`` inches with one axes.

    A figure that comes in through ``ax=`` stays the caller's to close.

    Example:
        >>> fig, ax = new_axes(None, (3.0, 2.0))
        >>> new_axes(ax, (9.0, 9.0))[0] is fig
        True
        >>> plt.close(fig)
    """
    if ax is not None and not isinstance(ax, Axes):
        raise ValueError(f"ax: expected a matplotlib Axes or None, got {type(ax).__name__}")
    if ax is not None:
        return ax.figure, ax
    fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    return fig, ax
