"""Decoding with a KV cache: measured times against the length, the cache against the weights, and what the
sampling rules leave of a distribution.

Used by notebook 10. Each function draws with :func:`attn_edu.viz.plot_curves` or
:func:`attn_edu.viz.plot_distribution` and returns the figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

from attn_edu.viz.common import as_numbers
from attn_edu.viz.measurements import plot_curves, plot_distribution


def _base2_ticks(ax: Any, xs: np.ndarray) -> None:
    """Log-2 x axis ticked at the measured x values, written as plain numbers (32, 64, ...)."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(xs))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_locator(NullLocator())


def plot_decode_times(
    new_tokens: Sequence[int] | np.ndarray,
    cache_s: Sequence[Sequence[float]] | np.ndarray | torch.Tensor,
    no_cache_s: Sequence[Sequence[float]] | np.ndarray | torch.Tensor,
) -> Figure:
    """Two panels: generation time with and without the KV cache against the number of new tokens ``N``, and
    the speed-up, run by run (``no_cache_s[r] / cache_s[r]``, runs timed in pairs).

    Each curve is the median of the runs with a band from the fastest to the slowest; the x axis is in powers
    of two, ticked at the measured ``N``.

    Shapes:
        new_tokens ``(N,)``; cache_s, no_cache_s ``(runs, N)`` seconds.

    Example:
        >>> fig = plot_decode_times([32, 64], [[0.1, 0.2], [0.1, 0.3]], [[0.2, 0.8], [0.3, 0.9]])
        >>> [ax.get_xscale() for ax in fig.axes], fig.axes[0].get_xticks().tolist()
        (['log', 'log'], [32.0, 64.0])
        >>> plt.close(fig)
    """
    xs, sizes = as_numbers("new_tokens", new_tokens, "N")
    cached, runs = as_numbers("cache_s", cache_s, "runs N", N=sizes["N"])
    full = as_numbers("no_cache_s", no_cache_s, "runs N", N=sizes["N"], runs=runs["runs"])[0]
    if (cached <= 0).any() or (full <= 0).any():
        raise ValueError("cache_s, no_cache_s: expected times > 0 seconds")
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.4), layout="constrained")
    plot_curves(
        xs,
        {"no cache": full, "KV cache": cached},
        xlabel="new tokens N",
        ylabel="seconds",
        logx=True,
        logy=True,
        title="generation time (median, band: fastest to slowest)",
        ax=left,
    )
    plot_curves(
        xs,
        {"measured speed-up": full / cached},
        xlabel="new tokens N",
        ylabel="no cache / cache",
        logx=True,
        title="speed-up, run by run (median and range)",
        ax=right,
    )
    for ax in (left, right):
        _base2_ticks(ax, xs)
    return fig


def plot_cache_vs_weights(
    seq_lens: Sequence[int] | np.ndarray,
    cache_gib: Mapping[str, Sequence[float] | np.ndarray | torch.Tensor],
    weights_gib: Mapping[str, float],
    *,
    title: str | None = None,
) -> Figure:
    """Log-log KV-cache size against the context length, one curve per model, with each model's weights as a
    dotted horizontal line: where a curve crosses its line, the cache of one sequence outweighs the model.

    Shapes:
        seq_lens ``(N,)``; each value of ``cache_gib`` ``(N,)`` GiB.

    Example:
        >>> fig = plot_cache_vs_weights([1024, 4096], {"m": [0.5, 2.0]}, {"m weights": 1.0})
        >>> [line.get_label() for line in fig.axes[0].get_lines()]
        ['m', 'm weights']
        >>> plt.close(fig)
    """
    if not isinstance(weights_gib, Mapping) or not all(float(v) > 0 for v in weights_gib.values()):
        raise ValueError(f"weights_gib: expected a dict {{label: GiB > 0}}, got {weights_gib!r}")
    fig = plot_curves(
        seq_lens,
        cache_gib,
        xlabel="context length S (tokens)",
        ylabel="GiB",
        logx=True,
        logy=True,
        title=title,
    )
    ax = fig.axes[0]
    for label, gib in weights_gib.items():
        ax.axhline(float(gib), color="grey", linestyle=":", label=label)
    ax.legend(fontsize=8)
    return fig


def plot_sampling_rules(
    rules: Mapping[str, Sequence[float] | np.ndarray | torch.Tensor],
    *,
    labels: Sequence[Any] | None = None,
    reference: Sequence[float] | np.ndarray | torch.Tensor | None = None,
    reference_label: str = "plain softmax",
    columns: int = 3,
) -> Figure:
    """A grid of next-token distributions, one panel per rule (greedy, a temperature, top-k, top-p...), each
    titled with its support (the tokens that can still be drawn) and drawn over the dashed ``reference``.

    Shapes:
        each value of ``rules`` ``(V,)``; reference ``(V,)``; labels ``V`` strings.

    Example:
        >>> fig = plot_sampling_rules({"top-k, k = 1": [1.0, 0.0], "plain": [0.7, 0.3]}, reference=[0.7, 0.3])
        >>> [ax.get_title() for ax in fig.axes]
        ['top-k, k = 1: support 1', 'plain: support 2']
        >>> plt.close(fig)
    """
    if not isinstance(rules, Mapping) or not rules:
        raise ValueError(f"rules: expected a non-empty dict {{name: probabilities (V,)}}, got {rules!r}")
    if isinstance(columns, bool) or not isinstance(columns, int) or columns < 1:
        raise ValueError(f"columns: expected an integer >= 1, got {columns!r}")
    columns = min(columns, len(rules))
    rows = -(-len(rules) // columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(4.3 * columns, 3 * rows), layout="constrained", squeeze=False
    )
    for ax, (name, probs) in zip(axes.flat, rules.items()):
        p = as_numbers(f"rules[{name!r}]", probs, "V")[0]
        plot_distribution(
            p, labels=labels, reference=reference, title=f"{name}: support {int((p > 0).sum())}", ax=ax
        )
        if reference is not None:
            handles, _ = ax.get_legend_handles_labels()
            ax.legend(handles, ["probability", reference_label], fontsize=8)
    for ax in axes.flat[len(rules) :]:
        ax.set_visible(False)
    return fig
