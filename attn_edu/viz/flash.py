"""FlashAttention's online softmax, one block at a time: the running max and sum, and the estimate so far.

Used by notebook 12's explorer, which computes the numbers with
:func:`attn_edu.flash.online_softmax_steps`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from attn_edu._validate import check_positive_int
from attn_edu.viz.common import as_numbers


def plot_online_softmax(
    x: torch.Tensor | np.ndarray | Sequence[float],
    m_values: torch.Tensor | np.ndarray | Sequence[float],
    l_values: torch.Tensor | np.ndarray | Sequence[float],
    *,
    block_size: int,
    step: int,
    title: str | None = None,
) -> Figure:
    """One streaming pass of the online softmax, stopped after ``step`` blocks.

    Left: the scores ``x`` as bars, coloured by block (read, being read, not read yet), with the
    running maximum ``m_i`` as a line. Right: the softmax estimate so far, ``exp(x - m_i) / l_i`` on the
    entries already read, beside the final softmax (outlined). Each new block that raises the maximum
    shrinks every earlier estimate by the same factor ``exp(m_old - m_new)`` (Milakov & Gimelshein 2018);
    after the last block the estimate *is* the softmax.

    Shapes:
        x ``(N,)``; m_values and l_values ``(n_blocks,)``: the running max and sum after each block,
        ``n_blocks = ceil(N / block_size)``.

    Example:
        >>> fig = plot_online_softmax([1.0, 3.0, 2.0], [3.0, 3.0], [1.135, 1.503], block_size=2, step=1)
        >>> len(fig.axes)
        2
        >>> plt.close(fig)
    """
    xs, sizes = as_numbers("x", x, "N")
    N = sizes["N"]
    check_positive_int("block_size", block_size)
    n_blocks = math.ceil(N / block_size)
    m_run, _ = as_numbers("m_values", m_values, "n_blocks", n_blocks=n_blocks)
    l_run, _ = as_numbers("l_values", l_values, "n_blocks", n_blocks=n_blocks)
    if isinstance(step, bool) or not isinstance(step, int) or not 1 <= step <= n_blocks:
        raise ValueError(f"step: expected an int in 1..{n_blocks} (the blocks read so far), got {step!r}")
    if (l_run <= 0).any():
        raise ValueError(f"l_values: expected positive running sums, got min {l_run.min()}")
    seen = min(step * block_size, N)
    block_of = np.arange(N) // block_size
    colors = np.where(block_of < step - 1, "#2b6cb0", np.where(block_of == step - 1, "#dd6b20", "#d9d9d9"))
    estimate = np.exp(xs[:seen] - m_run[step - 1]) / l_run[step - 1]
    final = np.exp(xs - m_run[-1]) / l_run[-1]

    fig, (left, right) = plt.subplots(1, 2, figsize=(11.0, 3.6), layout="constrained")
    positions = np.arange(N)
    left.bar(positions, xs, color=colors)
    left.axhline(
        m_run[step - 1], color="crimson", linestyle="--", label=f"running max m_i = {m_run[step - 1]:.2f}"
    )
    for boundary in range(block_size, N, block_size):
        left.axvline(boundary - 0.5, color="grey", linewidth=0.8, alpha=0.6)
    left.set_xlabel("position (blue: read, orange: this block, grey: not read yet)")
    left.set_ylabel("score x")
    left.legend(loc="best", fontsize=8)
    left.set_title(f"block {step} of {n_blocks} (block size {block_size})", fontsize=10)

    right.bar(positions[:seen], estimate, color=colors[:seen], label="exp(x - m_i) / l_i so far")
    right.bar(positions, final, fill=False, edgecolor="black", linestyle="--", label="final softmax")
    right.set_xlim(-0.6, N - 0.4)
    right.set_ylim(0, max(float(estimate.max()), float(final.max())) * 1.15)
    right.set_xlabel("position")
    right.set_ylabel("probability")
    right.legend(loc="upper left", fontsize=8)
    right.set_title(f"l_i = {l_run[step - 1]:.3f}: estimates sum to 1 over what was read", fontsize=10)
    if title is not None:
        fig.suptitle(title)
    return fig
