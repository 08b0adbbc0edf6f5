"""Pictures of attention: heatmaps, masks, positional clocks, rotations and measured curves.

Every function here is pure: it takes tensors (or arrays, or lists), checks them, draws, and returns
the :class:`matplotlib.figure.Figure`. Nothing is shown (end a notebook cell with ``plt.show()``),
nothing is stored, and a figure passed in through ``ax=`` stays the caller's to close. Models never
keep attention maps for plotting: ask them for the weights, then hand the weights to these functions.

Conventions: rows are queries (``T``), columns are keys (``S``); masks are bool, ``True`` = may attend.

The files, by kind of figure in course order (import every name from here:
``from attn_edu import viz; viz.plot_heads(...)``)::

    common.py        input checks and the axes to draw on, shared by every file below
    lookup.py        plot_soft_lookup                                            (nb 01)
    heatmaps.py      plot_attention, plot_heads, plot_mask, plot_score_bias,
                     ANNOTATE_MAX_SIZE, MASK_COLORS                (nb 01, 02, 04-06, 09, 11-13)
    measurements.py  plot_curves (one run or a band over runs), plot_histograms,
                     plot_distribution                                           (nb 03, 08, 10, ...)
    positions.py     plot_positional_encoding, plot_encoding_curves, plot_position_similarity,
                     plot_rotation                                               (nb 06, 07)
    sequences.py     plot_token_rows                                             (nb 09)
    flash.py         plot_online_softmax                                         (nb 12)

matplotlib draws every figure; seaborn draws the histograms and the bands over runs.
"""

# In course order, as in the list above, not alphabetical.
# isort: off
from attn_edu.viz.lookup import plot_soft_lookup
from attn_edu.viz.heatmaps import (
    ANNOTATE_MAX_SIZE,
    MASK_COLORS,
    plot_attention,
    plot_heads,
    plot_mask,
    plot_score_bias,
)
from attn_edu.viz.measurements import plot_curves, plot_distribution, plot_histograms
from attn_edu.viz.positions import (
    plot_encoding_curves,
    plot_position_similarity,
    plot_positional_encoding,
    plot_rotation,
)
from attn_edu.viz.sequences import plot_token_rows
from attn_edu.viz.flash import plot_online_softmax
# isort: on

__all__ = [
    "plot_soft_lookup",
    "ANNOTATE_MAX_SIZE",
    "MASK_COLORS",
    "plot_attention",
    "plot_heads",
    "plot_mask",
    "plot_score_bias",
    "plot_curves",
    "plot_histograms",
    "plot_distribution",
    "plot_positional_encoding",
    "plot_encoding_curves",
    "plot_position_similarity",
    "plot_rotation",
    "plot_token_rows",
    "plot_online_softmax",
]
