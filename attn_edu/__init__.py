"""attn-edu: the reference implementations behind the attention course.

Each module holds one concept and is imported by the notebook that teaches it
(``course/NN_*.ipynb``); the README maps notebooks to modules.

Shape legend, used in every docstring and every ``# (B, H, T, D)`` comment:

====== ==========================================================
``B``  batch size
``T``  query length (tokens that ask)
``S``  key/value length (tokens that answer; ``S == T`` in self-attention)
``H``  query heads
``H_kv`` key/value heads (GQA: ``1 <= H_kv <= H``; MQA: ``H_kv == 1``)
``D``  head dimension (``d_k``; ``Dv`` when values differ)
``C``  model dimension (``C == H * D``)
``V``  vocabulary size
====== ==========================================================

Submodules load on first use (``attn_edu.masks``...); Triton is never imported unless you ask for
:mod:`attn_edu.kernels.triton_flash`.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

SHAPE_LEGEND: dict[str, str] = {
    "B": "batch size",
    "T": "query length",
    "S": "key/value length",
    "H": "query heads",
    "H_kv": "key/value heads",
    "D": "head dimension",
    "C": "model dimension (H * D)",
    "V": "vocabulary size",
}


def __getattr__(name: str) -> Any:
    # Lazy submodules: `import attn_edu; attn_edu.masks.causal_mask(3)` works without importing
    # every module (and never Triton) at start-up.
    if name.startswith("_"):
        raise AttributeError(name)
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as err:
        if err.name == f"{__name__}.{name}":
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
        raise
