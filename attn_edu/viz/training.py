"""Training curves: the loss of a few set-ups, each trained from several seeds, on one axes.

Used by notebook 08 (pre-norm against post-norm). A single run's loss is noisy from step to step and its
last digits move from machine to machine, so each curve is a trailing mean over a few steps, and each set-up
is drawn as the median of its seeds with a band from the lowest to the highest: a claim that holds for every
seed is seen to hold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt  # noqa: F401 (the doctests close their figures)
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from attn_edu._validate import check_positive_int
from attn_edu.viz.common import as_numbers
from attn_edu.viz.measurements import plot_curves


def moving_average(values: Sequence[float] | torch.Tensor | np.ndarray, window: int) -> np.ndarray:
    """Trailing mean: entry ``i`` is the mean of ``values[max(0, i - window + 1) : i + 1]``.

    The first ``window - 1`` entries average the fewer values there are, so the curve starts at step 1.

    Shapes:
        values ``(N,)``; returns ``(N,)``.

    Example:
        >>> moving_average([1.0, 2.0, 3.0, 4.0], window=2).tolist()
        [1.0, 1.5, 2.5, 3.5]
    """
    check_positive_int("window", window)
    x, _ = as_numbers("values", values, "N")
    return np.array([x[max(0, i - window + 1) : i + 1].mean() for i in range(x.size)])


def plot_loss_bands(
    losses: Mapping[str, Sequence[Sequence[float]] | torch.Tensor | np.ndarray],
    *,
    window: int = 5,
    chance: float | None = None,
    title: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Training loss against step for each set-up: the median of its runs and a band over them.

    Each value of ``losses`` holds one row of per-step losses per run (seed); every row is first smoothed with
    a trailing mean over ``window`` steps (:func:`moving_average`), then the set-up is drawn by
    :func:`attn_edu.viz.plot_curves`: its median over the runs, with a band from the lowest to the highest.
    ``chance`` draws a dotted line at the loss of a uniform guess (``log V``), if given.

    Shapes:
        each value of ``losses`` ``(runs, steps)``; every set-up has the same number of steps.

    Example:
        >>> pre_norm = [[2.3, 1.0, 0.5], [2.3, 1.4, 0.9], [2.3, 1.2, 0.7]]   # three seeds
        >>> fig = plot_loss_bands({"pre-norm": pre_norm}, window=1, chance=2.3)
        >>> fig.axes[0].get_lines()[0].get_ydata().tolist()   # the median seed at every step
        [2.3, 1.2, 0.7]
        >>> plt.close(fig)
    """
    check_positive_int("window", window)
    if not isinstance(losses, Mapping) or not losses:
        raise ValueError(
            "losses: expected a non-empty dict {name: losses of shape (runs, steps)}, "
            f"got {type(losses).__name__}"
        )
    smoothed, steps = {}, None
    for name, runs in losses.items():
        known = {} if steps is None else {"N": steps}
        table, sizes = as_numbers(f"losses[{name!r}]", runs, "runs N", **known)
        if sizes["runs"] == 0 or sizes["N"] == 0:
            raise ValueError(f"losses[{name!r}]: expected at least one run of at least one step, got none")
        steps = sizes["N"]
        smoothed[str(name)] = np.stack([moving_average(row, window) for row in table])  # (runs, steps)
    ylabel = "training loss" if window == 1 else f"training loss ({window}-step mean)"
    fig = plot_curves(np.arange(1, steps + 1), smoothed, xlabel="step", ylabel=ylabel, title=title, ax=ax)
    if chance is not None:
        ax = fig.axes[0] if ax is None else ax
        ax.axhline(float(chance), color="grey", linestyle=":", label="chance")
        ax.legend(fontsize=8)
    return fig
