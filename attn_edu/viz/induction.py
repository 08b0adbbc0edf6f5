"""A model learning to copy: its loss while it trains, and its loss at each position of a repeated sequence.

Used by notebook 13. A model that forms induction heads shows a **plateau** near the loss of guessing and then a
sudden **fall** (Olsson et al., 2022, section 3): :func:`plot_training_loss` draws the loss of every step, a
running mean that smooths the step-to-step noise, and the two stretches shaded. On random tokens repeated once
the first copy cannot be predicted and the second can be copied: :func:`plot_loss_by_repeat` draws the loss at
each position, with the start of the second copy marked, for one or several lengths of the repeat.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt  # noqa: F401 (the doctests close their figures)
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from attn_edu._validate import check_positive_int
from attn_edu.viz.common import as_numbers, new_axes


def _level(name: str, value: float) -> float:
    """A horizontal line's height: a finite number."""
    try:
        level = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a finite number, got {value!r}") from None
    if not math.isfinite(level):
        raise ValueError(f"{name}: expected a finite number, got {level}")
    return level


def _steps(name: str, stretch: tuple[int, int] | None, N: int) -> tuple[int, int] | None:
    """``None``, or a ``(first, last)`` pair of steps with ``1 <= first < last <= N``."""
    if stretch is None:
        return None
    if (
        not isinstance(stretch, (tuple, list))
        or len(stretch) != 2
        or not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in stretch)
        or not 1 <= stretch[0] < stretch[1] <= N
    ):
        raise ValueError(
            f"{name}: expected (first, last) steps with 1 <= first < last <= {N}, got {stretch!r}"
        )
    return int(stretch[0]), int(stretch[1])


def plot_training_loss(
    losses: Sequence[float] | torch.Tensor | np.ndarray,
    *,
    guess: float,
    window: int = 10,
    plateau: tuple[int, int] | None = None,
    fall: tuple[int, int] | None = None,
    title: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """A training run's loss at every step, its ``window``-step mean, the loss of guessing, two shaded stretches.

    The mean drawn at step ``s`` (counted from 1) averages steps ``s - window + 1 .. s``. ``plateau`` and
    ``fall``, each ``(first, last)`` steps, are shaded grey and red: where the loss waits near ``guess`` (the
    loss of a uniform guess, ``log V``), and where it falls fastest (:func:`attn_edu.train.steepest_fall`).

    Shapes:
        losses ``(N,)``, one per step.

    Example:
        >>> fig = plot_training_loss([4.0] * 30 + [1.0] * 30, guess=4.2, plateau=(5, 25), fall=(20, 40))
        >>> [line.get_label() for line in fig.axes[0].get_lines()]
        ['training loss', 'mean of 10 steps', 'guessing: log V']
        >>> len(fig.axes[0].patches)    # the two shaded stretches
        2
        >>> plt.close(fig)
    """
    y, sizes = as_numbers("losses", losses, "N")
    N = sizes["N"]
    check_positive_int("window", window)
    if window > N:
        raise ValueError(f"window: expected at most N={N} steps, got {window}")
    guess = _level("guess", guess)
    plateau, fall = _steps("plateau", plateau, N), _steps("fall", fall, N)
    steps = np.arange(1, N + 1)
    mean = np.convolve(y, np.ones(window) / window, mode="valid")  # (N - window + 1,): steps window .. N
    fig, ax = new_axes(ax, (7.0, 3.8))
    ax.plot(steps, y, color="tab:blue", alpha=0.45, linewidth=1, label="training loss")
    ax.plot(steps[window - 1 :], mean, color="black", linewidth=1.5, label=f"mean of {window} steps")
    ax.plot(steps, np.full(N, guess), color="grey", linestyle=":", label="guessing: log V")
    if plateau is not None:
        ax.axvspan(*plateau, color="grey", alpha=0.15, label=f"plateau (steps {plateau[0]}-{plateau[1]})")
    if fall is not None:
        ax.axvspan(*fall, color="tab:red", alpha=0.12, label=f"steepest fall (steps {fall[0]}-{fall[1]})")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title is not None:
        ax.set_title(title)
    return fig


def plot_loss_by_repeat(
    curves: Mapping[str, Sequence[float] | torch.Tensor | np.ndarray],
    *,
    guess: float | None = None,
    title: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Next-token loss at each position of ``n`` random tokens repeated once, one curve per sequence length.

    ``2n`` tokens give ``2n - 1`` predictions: ``curves[name][i]`` is the loss of predicting the token at position
    ``i + 1``, so a curve's length says its ``n``. The second copy starts at position ``n``; a dotted line in the
    curve's colour marks it. ``guess`` (the loss of a uniform guess, ``log V``), if given, is a grey dashed line.

    Shapes:
        each value of ``curves`` ``(2n - 1,)``; ``n`` may differ from curve to curve.

    Example:
        >>> fig = plot_loss_by_repeat({"n = 3": [4.0, 4.0, 4.0, 0.1, 0.1]}, guess=4.2)
        >>> line, start, guess = fig.axes[0].get_lines()
        >>> line.get_xdata().tolist(), list(start.get_xdata())    # a vertical line at n = 3
        ([1, 2, 3, 4, 5], [3, 3])
        >>> plt.close(fig)
    """
    if not isinstance(curves, Mapping) or not curves:
        raise ValueError(
            f"curves: expected a non-empty dict {{name: loss of shape (2n - 1,)}}, got {type(curves).__name__}"
        )
    losses = {}
    for name, values in curves.items():
        y, sizes = as_numbers(f"curves[{name!r}]", values, "T")
        if sizes["T"] % 2 == 0:
            raise ValueError(
                f"curves[{name!r}]: expected 2n - 1 losses (n tokens repeated once), got an even T={sizes['T']}"
            )
        losses[str(name)] = y
    fig, ax = new_axes(ax, (7.0, 3.8))
    longest = 0
    for name, y in losses.items():
        n = (len(y) + 1) // 2
        (line,) = ax.plot(np.arange(1, len(y) + 1), y, label=name)
        ax.axvline(n, color=line.get_color(), linestyle=":", linewidth=1.2)
        longest = max(longest, len(y))
    if guess is not None:
        level = _level("guess", guess)
        ax.plot([1, longest], [level, level], color="grey", linestyle="--", label="guessing: log V")
    ax.set_xlabel("position of the predicted token (dotted: the second copy starts)")
    ax.set_ylabel("cross-entropy (nats)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title is not None:
        ax.set_title(title)
    return fig
