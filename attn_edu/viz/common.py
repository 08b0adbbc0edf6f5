"""What every figure of :mod:`attn_edu.viz` does first: check its input, and find the axes to draw on.

Used by every file of the package. Each plot function turns its arguments into plain numbers with
:func:`as_numbers` (or :func:`as_tensor` when it looks at the shape first), checks token labels with
:func:`token_labels`, and draws on :func:`new_axes`: the caller's ``ax=`` or a fresh figure. Errors
name the argument, the expected shape in legend letters, and what arrived.

It also holds the colours every figure shares, one per role in attention (:data:`ROLE_COLORS`): a query is
the same blue in a schematic diagram, a heatmap's legend and a kernel's traffic picture. Weights and scores
have one colour scale, built on the scores' red (:data:`WEIGHTS_CMAP`, and :func:`score_scale` for values
of either sign): white is always 0, "no attention", the lightest colour of every heatmap.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.colors import Colormap, LinearSegmentedColormap, to_hex, to_rgb
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


def lighter(color: str, share: float) -> str:
    """``color`` mixed with white, ``share`` of the way (0: the colour itself, 1: white): a paler shade.

    Example:
        >>> lighter("#c44e52", 0.0), lighter("#c44e52", 1.0)
        ('#c44e52', '#ffffff')
    """
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share: expected a number in [0, 1], got {share!r}")
    return to_hex(1.0 - (1.0 - np.asarray(to_rgb(color))) * (1.0 - share))


# Attention weights and scores: one colour scale, built on the scores' role colour. White where a query gives
# a key no attention, the scores red in the middle, a darker red at the top. Lightness falls steadily from end
# to end (perceptually ordered), so a darker cell is always a larger weight, in colour and in grey print. A
# scale for values of both signs (raw scores, a score bias) continues below 0 in a neutral grey of the same
# lightness as the red at the same distance from 0: white is always 0. No query blue or key orange on it.
SCORES_DARK = "#562224"  # the scores red at 44 % of its brightness, as light as NEUTRAL_DARK
NEUTRAL_MID = "#757575"  # a grey as light as the scores red: no role's colour
NEUTRAL_DARK = "#333333"  # a grey as light as SCORES_DARK
WEIGHTS_CMAP = LinearSegmentedColormap.from_list(
    "attn_edu_weights", ["#ffffff", ROLE_COLORS["scores"], SCORES_DARK]
)
SCORES_CMAP = LinearSegmentedColormap.from_list(
    "attn_edu_scores", [NEUTRAL_DARK, NEUTRAL_MID, "#ffffff", ROLE_COLORS["scores"], SCORES_DARK]
)  # its upper half is WEIGHTS_CMAP
BELOW_ZERO_CMAP = LinearSegmentedColormap.from_list(
    "attn_edu_scores_below_zero", [NEUTRAL_DARK, NEUTRAL_MID, "#ffffff"]
)  # the lower half of SCORES_CMAP
SHARED_CMAPS = (WEIGHTS_CMAP, SCORES_CMAP, BELOW_ZERO_CMAP)


def score_scale(low: float, high: float) -> tuple[Colormap, float, float]:
    """The shared colour scale (colour map, lowest and highest value) for numbers from ``low`` to ``high``.

    Never negative (attention weights): :data:`WEIGHTS_CMAP` from 0 (white) up. Never positive (ALiBi's bias):
    the grey half below 0, up to 0 (white). Both signs: :data:`SCORES_CMAP`, symmetric about 0, so white is 0.

    Example:
        >>> cmap, vmin, vmax = score_scale(0.0, 0.8)
        >>> cmap.name, vmin, vmax
        ('attn_edu_weights', 0.0, 0.8)
        >>> score_scale(-2.0, 0.5)[0].name, score_scale(-2.0, 0.5)[1:]
        ('attn_edu_scores', (-2.0, 2.0))
    """
    low, high = float(low), float(high)
    if low >= 0:
        return WEIGHTS_CMAP, 0.0, high if high > 0 else 1.0
    if high <= 0:
        return BELOW_ZERO_CMAP, low, 0.0
    extent = max(-low, high)
    return SCORES_CMAP, -extent, extent


def _relative_luminance(color: Any) -> float:
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in to_rgb(color))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast_ratio(first: Any, second: Any) -> float:
    """How far apart two colours are in lightness, as WCAG 2 measures it for text: 1 (same) to 21.

    Example:
        >>> round(contrast_ratio("black", "white"), 1)
        21.0
    """
    a, b = sorted((_relative_luminance(first), _relative_luminance(second)))
    return (b + 0.05) / (a + 0.05)


def text_color_on(background: Any) -> str:
    """Black or white, whichever reads better on ``background``: its contrast is always at least 4.58 : 1.

    Example:
        >>> text_color_on("#ffffff"), text_color_on("#562224")
        ('black', 'white')
    """
    return "black" if contrast_ratio("black", background) >= contrast_ratio("white", background) else "white"


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
