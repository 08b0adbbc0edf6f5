"""Pictures of attention: heatmaps, masks, positional clocks, rotations and measured curves.

Every function here is pure: it takes tensors (or arrays, or lists), checks them, draws, and returns
the :class:`matplotlib.figure.Figure`. Nothing is shown (end a notebook cell with ``plt.show()``),
nothing is stored, and a figure passed in through ``ax=`` stays the caller's to close. Models never
keep attention maps for plotting: ask them for the weights, then hand the weights to these functions.

Conventions: rows are queries (``T``), columns are keys (``S``); masks are bool, ``True`` = may attend.

The files, by kind of figure in course order (import every name from here:
``from attn_edu import viz; viz.plot_heads(...)``)::

    common.py        input checks and the axes to draw on, shared by every file below
    lookup.py        plot_soft_lookup, plot_kernel_regression                    (nb 01)
    heatmaps.py      plot_attention, plot_heads, plot_attention_panels, plot_alignment, plot_mask,
                     plot_score_bias, ANNOTATE_MAX_SIZE, MASK_COLORS    (nb 01, 02, 04-06, 09, 11-13)
    measurements.py  plot_curves (one run or a band over runs), plot_against_derivation,
                     plot_curve_panels, plot_histograms,
                     plot_distribution, plot_head_effects                        (nb 03, 05, 08, 10, ...)
    positions.py     plot_positional_encoding, plot_encoding_curves, plot_position_similarity,
                     plot_rotation, plot_relative_angles, plot_rope_frequencies,
                     plot_loss_by_position, plot_shift_fit, plot_length_test     (nb 06, 07)
    sequences.py     plot_token_rows                                             (nb 09)
    patterns.py      plot_masks (a row of masks, or of who-depends-on-whom)      (nb 11)
    flash.py         plot_online_softmax, plot_causal_tiles, plot_attention_memory,
                     plot_flash_dataflow, plot_ring_tiles                        (nb 12)
    training.py      plot_loss_bands, moving_average (median and band over seeds)  (nb 08)
    decoding.py      plot_decode_times, plot_cache_vs_weights, plot_sampling_rules  (nb 10)
    induction.py     plot_training_loss, plot_loss_by_repeat (a model learning to copy) (nb 13)
    model_cards.py   plot_layer_kinds, KIND_COLORS (whole models' layers by kind)   (nb 14)

Designed diagrams of mechanisms rather than data, in one visual language (role colours ROLE_COLORS,
the shape legend's letters, one font and one arrow), each sized like the example beside it::

    diagrams.py           DIAGRAMS (name -> function, sizes, notebook, section, alt text) and the
                          command `python -m attn_edu.viz.diagrams build` (SVGs in course/figures/);
                          import it as a module: `from attn_edu.viz.diagrams import DIAGRAMS`
    diagrams_kit.py       canvas, box, arrow, grid: the drawing kit they share
    diagrams_attention.py query_path, self_vs_cross, mask_kinds, cache_alignment, split_heads,
                          kv_grouping                                            (nb 02, 04, 05)
    diagrams_blocks.py    sinusoidal_clock, rope_pair, norm_placement, architectures  (nb 06-09)
    diagrams_steps.py     kv_cache_steps, sparsity_patterns, flash_tile_loop, backward_recompute,
                          induction_circuit                                      (nb 10-13)
    diagrams_traffic.py   plot_kernel_traffic: a Triton kernel's loads and stores, per program,
                          from a run in the interpreter                          (nb 12)

matplotlib draws every figure; seaborn draws the histograms and the bands over runs.
"""

# In course order, as in the list above, not alphabetical.
# isort: off
from attn_edu.viz.lookup import plot_soft_lookup, plot_kernel_regression
from attn_edu.viz.heatmaps import (
    ANNOTATE_MAX_SIZE,
    MASK_COLORS,
    plot_attention,
    plot_heads,
    plot_attention_panels,
    plot_alignment,
    plot_mask,
    plot_score_bias,
)
from attn_edu.viz.measurements import (
    plot_curves,
    plot_against_derivation,
    plot_curve_panels,
    plot_distribution,
    plot_head_effects,
    plot_histograms,
)
from attn_edu.viz.positions import (
    plot_encoding_curves,
    plot_position_similarity,
    plot_positional_encoding,
    plot_rotation,
    plot_relative_angles,
    plot_rope_frequencies,
    plot_loss_by_position,
    plot_shift_fit,
    plot_length_test,
)
from attn_edu.viz.sequences import plot_token_rows
from attn_edu.viz.patterns import plot_masks
from attn_edu.viz.flash import (
    plot_attention_memory,
    plot_causal_tiles,
    plot_flash_dataflow,
    plot_ring_tiles,
    plot_online_softmax,
)
from attn_edu.viz.training import moving_average, plot_loss_bands
from attn_edu.viz.decoding import plot_cache_vs_weights, plot_decode_times, plot_sampling_rules
from attn_edu.viz.induction import plot_loss_by_repeat, plot_training_loss
from attn_edu.viz.model_cards import KIND_COLORS, plot_layer_kinds
from attn_edu.viz.common import ROLE_COLORS, SCORES_CMAP, WEIGHTS_CMAP, text_color_on
from attn_edu.viz.diagrams_traffic import plot_kernel_traffic
# isort: on

__all__ = [
    "plot_soft_lookup",
    "plot_kernel_regression",
    "ANNOTATE_MAX_SIZE",
    "MASK_COLORS",
    "plot_attention",
    "plot_heads",
    "plot_attention_panels",
    "plot_alignment",
    "plot_mask",
    "plot_score_bias",
    "plot_curves",
    "plot_against_derivation",
    "plot_curve_panels",
    "plot_histograms",
    "plot_distribution",
    "plot_head_effects",
    "plot_positional_encoding",
    "plot_encoding_curves",
    "plot_position_similarity",
    "plot_rotation",
    "plot_relative_angles",
    "plot_rope_frequencies",
    "plot_loss_by_position",
    "plot_shift_fit",
    "plot_length_test",
    "plot_token_rows",
    "plot_masks",
    "plot_online_softmax",
    "plot_causal_tiles",
    "plot_attention_memory",
    "plot_flash_dataflow",
    "plot_ring_tiles",
    "plot_loss_bands",
    "moving_average",
    "plot_decode_times",
    "plot_cache_vs_weights",
    "plot_sampling_rules",
    "plot_training_loss",
    "plot_loss_by_repeat",
    "KIND_COLORS",
    "plot_layer_kinds",
    "ROLE_COLORS",
    "WEIGHTS_CMAP",
    "SCORES_CMAP",
    "text_color_on",
    "plot_kernel_traffic",
]
