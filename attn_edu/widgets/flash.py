"""Notebook 12 (FlashAttention): step through the online softmax one block at a time."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial

import ipywidgets as widgets
import torch
from matplotlib.figure import Figure

from attn_edu import viz
from attn_edu._validate import check_positive_int, check_shape
from attn_edu.flash import online_softmax_steps
from attn_edu.widgets.explorer import WIDE_LABELS, Explorer, as_float_tensor

# Scores whose maximum grows several times from left to right, so most block sizes show a rescale.
ONLINE_SOFTMAX_SCORES = (0.5, 1.2, -0.3, 2.0, 0.1, 3.1, -1.0, 1.7, 4.0, 0.2, 2.5, -0.6)


def _online_softmax_view(x: torch.Tensor, *, block_size: int, step: int) -> tuple[dict, Figure]:
    stats = list(online_softmax_steps(x, block_size))  # [(m_i, l_i) after each block]
    m_values = torch.stack([m_i for m_i, _ in stats])  # (n_blocks,)
    l_values = torch.stack([l_i for _, l_i in stats])  # (n_blocks,)
    step = min(step, len(stats))
    m_i, l_i = float(m_values[step - 1]), float(l_values[step - 1])
    m_old = float(m_values[step - 2]) if step > 1 else -math.inf
    # The factor that rescales the sum of the blocks already read: exp(m_old - m_new). It is 1 when the
    # maximum did not move, below 1 when this block raised it (0 before the first block: nothing to rescale).
    alpha = math.exp(m_old - m_i)
    seen = min(step * block_size, x.shape[-1])
    estimate = torch.exp(x[:seen] - m_i) / l_i  # (seen,)
    figure = viz.plot_online_softmax(x, m_values, l_values, block_size=block_size, step=step)
    state = {
        "block_size": block_size,
        "step": step,
        "num_blocks": len(stats),
        "m_values": m_values,
        "l_values": l_values,
        "m_i": m_i,
        "l_i": l_i,
        "alpha": alpha,
        "rescaled": step > 1 and m_i > m_old,
        "estimate": estimate,
    }
    return state, figure


def _sync_online_softmax_steps(x: torch.Tensor, controls: dict[str, widgets.ValueWidget]) -> None:
    # One step per block: the number of blocks follows the block size.
    controls["step"].max = math.ceil(x.shape[-1] / controls["block_size"].value)


def online_softmax_explorer(
    scores: Sequence[float] | torch.Tensor | None = None, *, block_size: int = 3
) -> Explorer:
    """Step through the online softmax one block at a time: the running max ``m_i``, the running sum
    ``l_i``, and the rescaling ``l_i ← l_i · exp(m_old − m_new) + Σ exp(x_block − m_new)``.

    The block size slider re-cuts the scores into blocks; the step slider reads them one by one. The
    numbers come from :func:`attn_edu.flash.online_softmax_steps` (Milakov & Gimelshein 2018), the
    streaming softmax inside FlashAttention. After the last block the estimate equals ``torch.softmax``
    whatever the block size.

    Shapes:
        scores ``(N,)`` (default: :data:`ONLINE_SOFTMAX_SCORES`, N = 12).

    Example:
        >>> ex = online_softmax_explorer([1.0, 3.0, 2.0], block_size=2)
        >>> ex.set(step=2)
        >>> round(ex.state["m_i"], 3), round(ex.state["l_i"], 3), ex.state["alpha"]
        (3.0, 1.503, 1.0)
    """
    x = torch.tensor(ONLINE_SOFTMAX_SCORES) if scores is None else as_float_tensor("scores", scores)
    check_shape("scores", x, "N")
    if not torch.isfinite(x).all():
        raise ValueError("scores: expected finite values, got NaN or inf")
    N = x.shape[0]
    check_positive_int("block_size", block_size)
    if block_size > N:
        raise ValueError(f"block_size: expected at most N={N}, got {block_size}")
    slider = partial(widgets.IntSlider, min=1, continuous_update=False, style=WIDE_LABELS)
    controls = {
        "block_size": slider(value=block_size, max=N, description="block size"),
        "step": slider(value=1, max=math.ceil(N / block_size), description="blocks read"),
    }
    return Explorer(
        controls,
        partial(_online_softmax_view, x),
        title="Online softmax: one block at a time",
        sync=partial(_sync_online_softmax_steps, x),
    )
