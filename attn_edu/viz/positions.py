"""Positions: a position table as a heatmap or as curves, and the rotations of RoPE as arrows.

Used by notebooks 06 (sinusoidal encodings: each sin/cos pair is a clock hand with its own speed; the
similarity of a table's rows, sinusoidal beside learned) and
07 (RoPE turns each pair of a query or key by an angle that grows with its position), and by their
explorers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Arc, Circle, FancyArrowPatch
from matplotlib.ticker import MaxNLocator

from attn_edu._validate import check_positive_int
from attn_edu.viz.common import as_numbers, as_tensor, new_axes, token_labels
from attn_edu.viz.measurements import plot_curves


def plot_positional_encoding(
    pe: torch.Tensor | np.ndarray, *, title: str | None = None, ax: Axes | None = None
) -> Figure:
    """Heatmap of a position table: one row per position, one column per dimension.

    For the sinusoidal table (Vaswani et al., 2017, §3.5) the left columns flicker fast and the
    right ones change slowly: each sin/cos pair is a clock hand with its own speed.

    Shapes:
        pe ``(N, dim)``: ``N`` positions.

    Example:
        >>> fig = plot_positional_encoding(torch.randn(16, 8))
        >>> fig.axes[0].get_xlabel()
        'dimension'
        >>> plt.close(fig)
    """
    data, sizes = as_numbers("pe", pe, "N dim")
    fig, ax = new_axes(ax, (6.0, 4.0))
    extent = float(np.abs(data).max()) or 1.0  # symmetric scale: 0 is white
    image = ax.imshow(data, cmap="RdBu_r", vmin=-extent, vmax=extent, aspect="auto", interpolation="nearest")
    ax.set_xlabel("dimension")
    ax.set_ylabel("position")
    ax.set_title(title if title is not None else f"positional encoding ({sizes['N']} × {sizes['dim']})")
    fig.colorbar(image, ax=ax, shrink=0.8)
    return fig


def plot_encoding_curves(
    pe: torch.Tensor | np.ndarray,
    dims: Sequence[int],
    *,
    labels: Sequence[str] | None = None,
    title: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """A few columns of a position table drawn against position: the "clock hands" one by one.

    The legend names each column ``dim d``, or ``labels`` (one per column, e.g. ``"pair 4 (sine)"``).

    Shapes:
        pe ``(N, dim)``; dims: column indices in ``0 .. dim-1``; labels: as many as dims.

    Example:
        >>> pe = torch.stack([torch.arange(8.0).sin(), torch.arange(8.0).cos()], dim=1)   # (8, 2)
        >>> fig = plot_encoding_curves(pe, [0, 1])
        >>> [line.get_label() for line in fig.axes[0].get_lines()]
        ['dim 0', 'dim 1']
        >>> plt.close(fig)
    """
    data, sizes = as_numbers("pe", pe, "N dim")
    if isinstance(dims, (int, str)) or not dims:
        raise ValueError(f"dims: expected a non-empty list of column indices, got {dims!r}")
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or not 0 <= d < sizes["dim"]:
            raise ValueError(
                f"dims: expected indices in 0 .. {sizes['dim'] - 1} (pe has dim={sizes['dim']}), got {d!r}"
            )
    names = token_labels("labels", labels, len(dims), "len(dims)") or [f"dim {int(d)}" for d in dims]
    fig, ax = new_axes(ax, (6.0, 3.0))
    positions = np.arange(sizes["N"])
    for d, name in zip(dims, names):
        ax.plot(positions, data[:, d], marker="." if sizes["N"] <= 64 else None, label=name)
    ax.set_xlabel("position")
    ax.set_ylabel("value")
    ax.legend(loc="upper right", fontsize=8)
    if title is not None:
        ax.set_title(title)
    return fig


def plot_position_similarity(
    similarities: Mapping[str, torch.Tensor | np.ndarray], *, title: str | None = None
) -> Figure:
    """Side-by-side heatmaps of position-by-position similarity (e.g. cosines of table rows), one scale.

    Every panel uses the same diverging scale from −1 to 1 with 0 white, so two tables can be compared
    cell by cell: red = the two positions' vectors point the same way, blue = opposite ways.

    Shapes:
        each value ``(N, N)`` with entries in ``[−1, 1]`` (see :func:`attn_edu.positional.position_similarity`).

    Example:
        >>> fig = plot_position_similarity({"a": torch.eye(3), "b": -torch.eye(3)})
        >>> len(fig.axes), fig.axes[0].images[0].get_clim()             # two panels and one colour bar
        (3, (-1.0, 1.0))
        >>> plt.close(fig)
    """
    if not isinstance(similarities, Mapping) or not similarities:
        raise ValueError(
            f"similarities: expected a non-empty dict {{name: (N, N) matrix}}, got {type(similarities).__name__}"
        )
    panels = []
    for name, matrix in similarities.items():
        data, sizes = as_numbers(f"similarities[{name!r}]", matrix, "N M")
        if sizes["N"] != sizes["M"] or np.abs(data).max() > 1 + 1e-6:
            raise ValueError(
                f"similarities[{name!r}]: expected a square (N, N) matrix with entries in [-1, 1], "
                f"got shape {data.shape} with largest |entry| {np.abs(data).max():.3g}"
            )
        panels.append((str(name), data))
    fig, axes = plt.subplots(1, len(panels), figsize=(3.0 * len(panels) + 1.2, 3.9), layout="constrained")
    axes = np.atleast_1d(axes)
    for ax, (name, data) in zip(axes, panels):
        image = ax.imshow(data, cmap="RdBu_r", vmin=-1.0, vmax=1.0, interpolation="nearest")
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("position q")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0].set_ylabel("position p")
    fig.colorbar(image, ax=axes.tolist(), label="cosine similarity", shrink=0.9)
    if title is not None:
        fig.suptitle(title)
    return fig


def plot_rotation(
    vectors: torch.Tensor | np.ndarray,
    angles: torch.Tensor | np.ndarray | Sequence[float],
    *,
    labels: Sequence[str] | None = None,
    title: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """2-D vectors as arrows from the origin, each with an arc showing the angle it was rotated by.

    Pass the vectors *after* rotation (e.g. from :func:`attn_edu.rope.rotate_2d`) and their angles in
    radians; the arc of arrow ``n`` runs from its direction before rotation to its direction after.
    In RoPE (Su et al., 2021, §3.2) the pair ``(x_2i, x_2i+1)`` of a token at position ``m`` turns by
    ``m · θ_i``.

    Shapes:
        vectors ``(N, 2)`` (or ``(2,)`` for one arrow); angles ``(N,)``.

    Example:
        >>> fig = plot_rotation(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), [0.0, math.pi / 2])
        >>> len(fig.axes[0].patches)         # the orbit, two arrows, one arc (angle 0 has none)
        4
        >>> plt.close(fig)
    """
    v = as_tensor("vectors", vectors)
    if v.ndim == 1:
        v = v[None]  # (1, 2)
    points, sizes = as_numbers("vectors", v, "N 2")
    a = as_tensor("angles", angles)
    turns, _ = as_numbers("angles", a.reshape(-1) if a.ndim == 0 else a, "N", N=sizes["N"])
    names = token_labels("labels", labels, sizes["N"], "N") or [f"{angle:.2f} rad" for angle in turns]
    fig, ax = new_axes(ax, (4.5, 4.5))
    radius = float(np.linalg.norm(points, axis=1).max()) or 1.0
    ax.add_patch(Circle((0, 0), radius, fill=False, linestyle=":", color="grey"))  # the pair's orbit
    colors = plt.get_cmap("plasma")(np.linspace(0.0, 0.8, sizes["N"]))
    for n, ((x, y), angle, name, color) in enumerate(zip(points, turns, names, colors)):
        ax.add_patch(FancyArrowPatch((0, 0), (x, y), arrowstyle="-|>", mutation_scale=15, color=color, lw=2))
        ax.plot([], [], color=color, label=name)  # legend entry for the arrow
        if abs(angle) > 1e-9:  # arc from the direction before rotation to the direction after
            end = math.degrees(math.atan2(y, x))
            start = end - math.degrees(angle)
            low, high = (start, end) if angle > 0 else (end, start)
            r = radius * (0.25 + 0.08 * n)  # nested arcs, so several angles stay readable
            ax.add_patch(Arc((0, 0), 2 * r, 2 * r, theta1=low, theta2=high, color=color))
    limit = 1.15 * radius
    ax.set_xlim(-limit, limit)
    ax.set_ylim(-limit, limit)
    ax.set_aspect("equal")
    ax.axhline(0, color="grey", linewidth=0.5)
    ax.axvline(0, color="grey", linewidth=0.5)
    ax.set_xlabel("x₂ᵢ")
    ax.set_ylabel("x₂ᵢ₊₁")
    ax.legend(loc="upper right", fontsize=8)
    if title is not None:
        ax.set_title(title)
    return fig


# --- RoPE past its training length (nb 07) -----------------------------------------------------------


def plot_relative_angles(
    inv_freq: torch.Tensor | np.ndarray | Sequence[float],
    *,
    context: int,
    factor: float,
    title: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """The largest relative angle each RoPE pair meets within the trained context, and within ``factor`` times it.

    A query and a key fewer than ``L = context`` positions apart meet pair ``i`` at angles up to ``L·θ_i``.
    Pairs above the 2π line turned full circles in training and met every angle; pairs below met an arc
    only, and at distances up to ``s·L`` they go past it, to angles the trained weights never saw (the
    argument of Chen et al., 2023, and Peng et al., 2023, §2, for why RoPE models fail past ``L``). Log y.

    Shapes:
        inv_freq ``(D/2,)``: ``θ_i``, one per pair.

    Example:
        >>> fig = plot_relative_angles(torch.tensor([1.0, 0.1, 0.01]), context=64, factor=4)
        >>> [line.get_label() for line in fig.axes[0].get_lines()]
        ['|m − n| < L = 64 (training)', '|m − n| < 4L = 256', '2π (one full turn)']
        >>> plt.close(fig)
    """
    theta, sizes = as_numbers("inv_freq", inv_freq, "D/2")
    if isinstance(context, bool) or not isinstance(context, (int, np.integer)) or context < 1:
        raise ValueError(f"context: expected the trained length L, an int >= 1, got {context!r}")
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 1 <= factor < math.inf:
        raise ValueError(f"factor: expected a context-extension factor s >= 1, got {factor!r}")
    if (theta <= 0).any():
        raise ValueError(f"inv_freq: expected positive frequencies, got min {theta.min()}")
    turn = "2π (one full turn)"
    curves = {
        f"|m − n| < L = {context} (training)": context * theta,
        f"|m − n| < {factor:g}L = {factor * context:g}": factor * context * theta,
        turn: np.full(sizes["D/2"], 2 * math.pi),
    }
    return plot_curves(
        np.arange(sizes["D/2"]),
        curves,
        xlabel="pair index i",
        ylabel="largest relative angle (m − n)·θ_i (rad)",
        logy=True,
        title=title if title is not None else "Slow pairs meet relative angles never seen in training",
        ax=ax,
        styles={turn: {"color": "black", "linestyle": ":", "marker": None}},
    )


LINESTYLES = ("-", "--", "-.", ":")  # one per curve in turn, so that curves lying on each other stay visible


def plot_rope_frequencies(
    frequencies: Mapping[str, torch.Tensor | np.ndarray | Sequence[float]],
    *,
    context: int,
    title: str | None = None,
) -> Figure:
    """Two panels: each pair's frequency ``θ_i`` under several RoPE scalings, and its wavelength ``2π/θ_i``.

    The right panel marks the trained context ``L = context``: pairs whose wavelength is longer than ``L``
    never turned a full circle in training. Each curve gets its own line style as well as its colour, so
    that two scalings that agree on some pairs (YaRN and position interpolation on the slow ones) both stay
    visible. Both y axes are logarithmic.

    Shapes:
        each value of ``frequencies`` ``(D/2,)``, all of one length.

    Example:
        >>> theta = torch.tensor([1.0, 0.1, 0.01])
        >>> fig = plot_rope_frequencies({"original": theta, "PI": theta / 4}, context=64)
        >>> [ax.get_ylabel() for ax in fig.axes]
        ['θ_i (rad per token)', 'wavelength 2π/θ_i (tokens)']
        >>> plt.close(fig)
    """
    if not isinstance(frequencies, Mapping) or not frequencies:
        raise ValueError(
            f"frequencies: expected a non-empty dict {{name: θ of shape (D/2,)}}, got {type(frequencies).__name__}"
        )
    if isinstance(context, bool) or not isinstance(context, (int, np.integer)) or context < 1:
        raise ValueError(f"context: expected the trained length L, an int >= 1, got {context!r}")
    pairs = np.arange(as_tensor("frequencies", next(iter(frequencies.values()))).shape[-1])  # (D/2,)
    thetas = {
        str(k): as_numbers(f"frequencies[{k!r}]", v, "P", P=len(pairs))[0] for k, v in frequencies.items()
    }
    for name, theta in thetas.items():
        if (theta <= 0).any():
            raise ValueError(f"frequencies[{name!r}]: expected positive frequencies, got min {theta.min()}")
    styles = {name: {"linestyle": LINESTYLES[n % len(LINESTYLES)]} for n, name in enumerate(thetas)}
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.0, 3.8), layout="constrained")
    shared = {"xlabel": "pair index i", "logy": True, "styles": styles}
    plot_curves(pairs, thetas, ylabel="θ_i (rad per token)", title="frequencies", ax=left, **shared)
    wavelengths = {name: 2 * math.pi / theta for name, theta in thetas.items()}  # (D/2,) each
    plot_curves(
        pairs, wavelengths, ylabel="wavelength 2π/θ_i (tokens)", title="wavelengths", ax=right, **shared
    )
    right.axhline(context, color="black", linestyle="--", linewidth=1, label=f"trained context L = {context}")
    right.legend(fontsize=8)
    if title is not None:
        fig.suptitle(title)
    return fig


def plot_loss_by_position(
    curves: Mapping[str, torch.Tensor | np.ndarray | Sequence[float] | Sequence[Sequence[float]]],
    *,
    context: int,
    bins: int = 16,
    floor: float | None = None,
    floor_label: str = "bigram model",
    ylabel: str = "loss (nats per token)",
    title: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """A language model's loss at each position of its windows, averaged over ``bins`` positions a point.

    Each value of ``curves`` is one loss per position, or one row per seed (drawn as the median with a band
    from the lowest to the highest seed, as in :func:`~attn_edu.viz.plot_curves`). A dashed line marks the
    trained context ``L = context``; ``floor``, if given, a dotted line (the loss of a bigram model, say,
    which reads one token).

    Shapes:
        each value of ``curves`` ``(T,)`` or ``(runs, T)``, with ``T`` a multiple of ``bins``.

    Example:
        >>> fig = plot_loss_by_position({"model": torch.linspace(3.0, 1.0, 32)}, context=16, bins=8, floor=2.0)
        >>> fig.axes[0].get_lines()[0].get_xdata().tolist()       # the centre of each bin of 8 positions
        [3.5, 11.5, 19.5, 27.5]
        >>> plt.close(fig)
    """
    if not isinstance(curves, Mapping) or not curves:
        raise ValueError(
            f"curves: expected a non-empty dict {{name: loss of shape (T,) or (runs, T)}}, got {type(curves).__name__}"
        )
    if isinstance(context, bool) or not isinstance(context, (int, np.integer)) or context < 1:
        raise ValueError(f"context: expected the trained length L, an int >= 1, got {context!r}")
    check_positive_int("bins", bins)
    losses = {str(name): as_tensor(f"curves[{name!r}]", y).double() for name, y in curves.items()}
    T = next(iter(losses.values())).shape[-1]
    for name, y in losses.items():
        if y.ndim not in (1, 2) or y.shape[-1] != T or T % bins:
            raise ValueError(
                f"curves[{name!r}]: expected shape (T,) or (runs, T), T = {T} a multiple of bins = {bins}, "
                f"got {tuple(y.shape)}"
            )
    centres = torch.arange(T, dtype=torch.float64).unflatten(0, (-1, bins)).mean(-1)  # (T / bins,)
    binned = {name: y.unflatten(-1, (-1, bins)).mean(-1) for name, y in losses.items()}  # (..., T / bins)
    fig = plot_curves(centres, binned, xlabel="position in the window", ylabel=ylabel, title=title, ax=ax)
    axes = fig.axes[0] if ax is None else ax
    axes.axvline(context, color="black", linestyle="--", linewidth=1, label=f"L = {context}")
    if floor is not None:
        axes.axhline(float(floor), color="grey", linestyle=":", linewidth=1.5, label=floor_label)
    axes.legend(fontsize=8)
    return fig


def plot_shift_fit(
    periods: torch.Tensor | np.ndarray | Sequence[float],
    pair_errors: torch.Tensor | np.ndarray | Sequence[float],
    num_positions: int,
    *,
    title: str | None = None,
) -> Figure:
    """How well a shift map fitted from data recovers the rotation ``M_k``, one point per sin/cos pair.

    ``pair_errors[i]`` is the largest error of the fitted map's 2×2 block of pair ``i`` against ``M_k``'s
    (notebook 06, section 3); ``periods[i]`` that pair's positions per turn (:func:`attn_edu.positional.wavelengths`).
    Both axes are logarithmic, errors below 1e-16 are drawn at 1e-16, and a dashed line marks the number of
    positions in the data: pairs that turn within it are recovered, slower ones are not.

    Shapes:
        periods ``(P,)`` and pair_errors ``(P,)``, one entry per pair.

    Example:
        >>> fig = plot_shift_fit([6.3, 63.0, 630.0], [1e-15, 1e-12, 0.8], num_positions=100)
        >>> fig.axes[0].get_xscale(), fig.axes[0].get_lines()[1].get_xdata()[0]
        ('log', 100)
        >>> plt.close(fig)
    """
    x = as_tensor("periods", periods).double().flatten()
    y = as_tensor("pair_errors", pair_errors).double().flatten()
    if x.numel() != y.numel() or x.numel() == 0:
        raise ValueError(
            f"periods and pair_errors: expected one entry per pair each, got {x.numel()} and {y.numel()}"
        )
    check_positive_int("num_positions", num_positions)
    fig, ax = new_axes(None, (6.5, 3.2))
    ax.loglog(x.numpy(), y.clamp(min=1e-16).numpy(), "o-", label="fitted block − $M_k$ block")
    ax.axvline(num_positions, color="0.5", linestyle="--", label=f"{num_positions} positions of data")
    ax.set_xlabel("period of the pair (positions per turn)")
    ax.set_ylabel("max |error| in the 2×2 block")
    ax.legend(fontsize=8)
    if title is not None:
        ax.set_title(title)
    return fig


def plot_length_test(
    accuracy: Mapping[str, torch.Tensor | np.ndarray],
    baseline: torch.Tensor | np.ndarray | Sequence[float],
    *,
    lag: int,
    train_length: int,
    baseline_label: str = "best from a bag of words",
    title: str | None = None,
) -> Figure:
    """Accuracy at each position of models trained at one length and tested on longer sequences.

    Each value of ``accuracy`` is one row per seed (drawn as the median with a band from the lowest to the
    highest seed, :func:`~attn_edu.viz.plot_curves`), from position ``lag`` on (earlier positions have no
    answer); a curve may stop early (a learned table with no rows past ``train_length``). ``baseline`` is
    drawn dashed in black over the longest curve's positions, and a grey band marks the training length.
    Absolute schemes (names starting ``sinusoidal`` or ``learned``) are drawn in oranges, learned relative
    ones (``Shaw``, ``T5``) in blues, ALiBi in purple and NoPE in grey, so colours pair by meaning; the learned
    table's curve is dotted, so that it shows where it runs under another.

    Shapes:
        each value of ``accuracy`` ``(runs, T)``; baseline ``(T_max,)``, positions ``0 .. T_max − 1``.

    Example:
        >>> acc = {"Shaw": torch.ones(3, 8), "learned": torch.ones(3, 4)}
        >>> fig = plot_length_test(acc, torch.full((8,), 0.5), lag=2, train_length=4)
        >>> [line.get_label() for line in fig.axes[0].get_lines()]
        ['Shaw', 'learned', 'best from a bag of words']
        >>> plt.close(fig)
    """
    if not isinstance(accuracy, Mapping) or not accuracy:
        raise ValueError(
            f"accuracy: expected a non-empty dict {{name: (runs, T)}}, got {type(accuracy).__name__}"
        )
    check_positive_int("lag", lag)
    check_positive_int("train_length", train_length)
    base = as_tensor("baseline", baseline).double().flatten()
    T_max = base.numel()
    colours = {
        "nope": "0.35",
        "sinusoidal": "#d95f02",
        "learned": "#f59e4c",
        "shaw": "#1f78b4",
        "t5": "#6baed6",
        "alibi": "#7b3294",
    }
    fig, ax = plt.subplots(figsize=(9.5, 4.2), layout="constrained")
    for name, runs in accuracy.items():
        runs = as_tensor(f"accuracy[{name!r}]", runs).double()
        if runs.ndim != 2 or not lag < runs.shape[1] <= T_max:
            raise ValueError(
                f"accuracy[{name!r}]: expected (runs, T) with {lag} < T <= {T_max}, got {tuple(runs.shape)}"
            )
        colour = colours.get(str(name).split()[0].lower())
        style = {"marker": None} | ({"color": colour} if colour else {})
        if str(name).lower().startswith("learned"):  # dotted, so that it shows where it runs under another
            style |= {"linestyle": ":", "linewidth": 2.5}
        positions = torch.arange(lag, runs.shape[1])
        ylabel = f"accuracy (median and range of {runs.shape[0]} runs)"
        plot_curves(
            positions, {name: runs[:, lag:]}, styles={name: style}, xlabel="position t", ylabel=ylabel, ax=ax
        )
    ax.plot(
        range(lag, T_max),
        base[lag:].numpy(),
        color="black",
        linestyle="--",
        linewidth=1,
        label=baseline_label,
    )
    ax.axvspan(-0.5, train_length - 0.5, color="0.92", zorder=0, label=f"training length ({train_length})")
    ax.set_xlim(-0.5, T_max - 0.5)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if title is not None:
        ax.set_title(title)
    return fig
