"""Notebook 03 (why scale by 1/√d_k): grow ``d_k`` and watch the unscaled softmax saturate."""

from __future__ import annotations

import math
from functools import partial

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from attn_edu import viz
from attn_edu._validate import check_positive_int
from attn_edu.attention import attention_entropy, attention_weights
from attn_edu.widgets.explorer import WIDE_LABELS, Explorer


def _scaling_view(
    num_queries: int, num_keys: int, seed: int, *, d_k: int, temperature: float
) -> tuple[dict, Figure]:
    generator = torch.Generator().manual_seed(seed)  # same draws for a given d_k: reproducible pictures
    q = torch.randn(num_queries, 1, d_k, generator=generator)  # (B, T=1, D) unit-variance entries
    k = torch.randn(num_queries, num_keys, d_k, generator=generator)  # (B, S, D)
    scaled = attention_weights(q, k, scale=1.0 / (math.sqrt(d_k) * temperature))[:, 0]  # (B, S)
    unscaled = attention_weights(q, k, scale=1.0 / temperature)[:, 0]  # (B, S)
    # in float64, like notebook 03's own entropy(), so the state matches the notebook's digits
    entropy_scaled = attention_entropy(scaled.double())  # (B,)
    entropy_unscaled = attention_entropy(unscaled.double())  # (B,)
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5), layout="constrained")
    viz.plot_histograms({"q·k / √d_k": scaled, "q·k (unscaled)": unscaled}, xlabel="softmax weight", logy=True,
                        title=f"d_k = {d_k}, temperature {temperature:.3g}", ax=left)  # fmt: skip
    viz.plot_histograms({"q·k / √d_k": entropy_scaled, "q·k (unscaled)": entropy_unscaled},
                        xlabel="entropy of a row (nats)", title="spread of each query's attention", ax=right)  # fmt: skip
    right.axvline(math.log(num_keys), color="black", linestyle=":", label=f"uniform: log {num_keys}")
    right.legend(fontsize=8)
    state = {
        "d_k": d_k,
        "temperature": temperature,
        "weights_scaled": scaled,
        "weights_unscaled": unscaled,
        "entropy_scaled": float(entropy_scaled.mean()),
        "entropy_unscaled": float(entropy_unscaled.mean()),
        "max_weight_scaled": float(scaled.max(dim=-1).values.mean()),
        "max_weight_unscaled": float(unscaled.max(dim=-1).values.mean()),
    }
    return state, figure


def scaling_explorer(*, num_queries: int = 200, num_keys: int = 16, seed: int = 0) -> Explorer:
    """Grow ``d_k`` and watch unscaled softmax weights collapse onto one key while scaled ones do not.

    For random ``q, k`` with unit-variance entries, ``Var(q·k) = d_k``: without the ``1/√d_k`` of
    Vaswani et al. (2017, §3.2.1, footnote 4) the scores spread out and the softmax saturates
    (weights near 0 or 1, entropy near 0, vanishing gradients). The weights come from
    :func:`attn_edu.attention.attention_weights` with ``scale = 1/(√d_k·τ)`` or ``1/τ``, the entropies
    from :func:`attn_edu.attention.attention_entropy`.

    Example:
        >>> ex = scaling_explorer(num_queries=32)
        >>> ex.set(d_k=512)
        >>> ex.state["entropy_unscaled"] < ex.state["entropy_scaled"]
        True
    """
    check_positive_int("num_queries", num_queries)
    check_positive_int("num_keys", num_keys)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed: expected an int, got {seed!r}")
    controls = {
        "d_k": widgets.SelectionSlider(
            options=[2**n for n in range(11)], value=16, description="d_k", continuous_update=False
        ),  # fmt: skip
        "temperature": widgets.FloatLogSlider(
            value=1.0,
            base=10,
            min=-1,
            max=1,
            step=0.05,
            description="temperature",
            continuous_update=False,
            style=WIDE_LABELS,
        ),  # fmt: skip
    }
    view = partial(_scaling_view, num_queries, num_keys, seed)
    return Explorer(controls, view, title="Softmax saturation with and without 1/√d_k")
