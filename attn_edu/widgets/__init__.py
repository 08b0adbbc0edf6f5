"""Interactive explorers for the course notebooks: move a slider, watch attention change.

Each explorer is a thin layer: a pure *view* function computes the numbers with :mod:`attn_edu` and
draws them with :mod:`attn_edu.viz`; an :class:`Explorer` holds the ipywidgets controls, calls the view
whenever a control moves, and shows the new figure in an :class:`ipywidgets.Output`. Nothing here needs a
browser: tests (and curious learners) set ``explorer.controls["d_k"].value = 256`` and read
``explorer.state`` and ``explorer.figure``.

Every figure is closed right after it is shown (it stays readable as ``explorer.figure``), so moving
a slider a thousand times does not pile up open figures.

The files, in course order (import every name from here: ``from attn_edu.widgets import mask_explorer``)::

    explorer.py    Explorer: controls + pure view + Output, redraw, figure closing
    shapes.py      shape_explorer                                    (nb 00)
    lookup.py      soft_lookup_explorer                              (nb 01)
    heads.py       token_attention_explorer, head_explorer           (nb 02, 05, 13)
    scaling.py     scaling_explorer                                  (nb 03)
    masks.py       mask_explorer                                     (nb 04)
    positions.py   positional_explorer                               (nb 06)
    rope.py        rope_explorer                                     (nb 07)
    norms.py       norm_explorer                                     (nb 08)
    spans.py       span_corruption_explorer, SPAN_SENTENCE           (nb 09)
    sampling.py    sampling_explorer                                 (nb 10)
    sparse.py      sparse_pattern_explorer                           (nb 11)
    flash.py       online_softmax_explorer, ONLINE_SOFTMAX_SCORES    (nb 12)
    steps.py       kv_cache_explorer, flash_tile_explorer: diagrams that step in time (nb 10, 12)
    ablation.py    ablation_explorer                                 (nb 13)
    model_cards.py cache_explorer                                    (nb 14)

The core library never imports this package (the core knows no screen).
"""

# In course order, as in the list above, not alphabetical.
# isort: off
from attn_edu.widgets.explorer import Explorer, View
from attn_edu.widgets.shapes import shape_explorer
from attn_edu.widgets.lookup import soft_lookup_explorer
from attn_edu.widgets.heads import head_explorer, token_attention_explorer
from attn_edu.widgets.scaling import scaling_explorer
from attn_edu.widgets.masks import mask_explorer
from attn_edu.widgets.positions import positional_explorer
from attn_edu.widgets.rope import rope_explorer
from attn_edu.widgets.norms import norm_explorer
from attn_edu.widgets.spans import SPAN_SENTENCE, span_corruption_explorer
from attn_edu.widgets.sampling import sampling_explorer
from attn_edu.widgets.sparse import sparse_pattern_explorer
from attn_edu.widgets.flash import ONLINE_SOFTMAX_SCORES, online_softmax_explorer
from attn_edu.widgets.steps import flash_tile_explorer, kv_cache_explorer
from attn_edu.widgets.ablation import ablation_explorer
from attn_edu.widgets.model_cards import cache_explorer
# isort: on

__all__ = [
    "Explorer",
    "View",
    "shape_explorer",
    "soft_lookup_explorer",
    "token_attention_explorer",
    "head_explorer",
    "scaling_explorer",
    "mask_explorer",
    "positional_explorer",
    "rope_explorer",
    "norm_explorer",
    "SPAN_SENTENCE",
    "span_corruption_explorer",
    "sampling_explorer",
    "sparse_pattern_explorer",
    "ONLINE_SOFTMAX_SCORES",
    "online_softmax_explorer",
    "kv_cache_explorer",
    "flash_tile_explorer",
    "ablation_explorer",
    "cache_explorer",
]
