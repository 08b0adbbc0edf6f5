"""Measured numbers: curves over a shared x axis, histograms of samples, and probability distributions.

Used by most notebooks (variance against ``d_k`` in 03, gradient norms against depth in 08, times against
sequence length in 10-12...) and by the explorers of 02, 03, 08 and 10. A curve measured over several
seeds is drawn as its median with a band from the lowest to the highest run, so a claim that holds
across seeds is seen to hold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt  # noqa: F401 (the doctests close their figures)
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

from attn_edu._validate import check_positive_int
from attn_edu.viz.common import as_numbers, as_tensor, new_axes, token_labels


def _curve(name: str, y: Any, N: int) -> np.ndarray:
    """One curve ``(N,)``, or several runs of it ``(runs, N)`` (one row per seed)."""
    t = as_tensor(name, y)
    if t.ndim > 2:
        raise ValueError(f"{name}: expected shape (N) or (runs, N) with N={N}, got {tuple(t.shape)}")
    if t.ndim < 2:
        return as_numbers(name, t, "N", N=N)[0]
    runs, _ = as_numbers(name, t, "runs N", N=N)
    if runs.shape[0] == 0:
        raise ValueError(f"{name}: expected at least one run, got shape {tuple(t.shape)}")
    return runs


def plot_curves(
    x: Sequence[float] | torch.Tensor | np.ndarray,
    ys: Mapping[str, Sequence[float] | Sequence[Sequence[float]] | torch.Tensor | np.ndarray],
    *,
    xlabel: str,
    ylabel: str,
    logx: bool = False,
    logy: bool = False,
    title: str | None = None,
    ax: Axes | None = None,
    styles: Mapping[str, Mapping[str, Any]] | None = None,
    xticks: Sequence[float] | None = None,
) -> Figure:
    """Line plot of measured curves that share one x axis (variance vs d_k, loss vs step, time vs N).

    Each value of ``ys`` is one curve, or several runs of it (e.g. one row per seed). Runs are drawn
    as their median with a band from the lowest to the highest run (``seaborn.lineplot`` with
    ``estimator="median", errorbar=("pi", 100)``), aggregated over the runs at each x (in x order).
    ``styles`` maps a curve's name to matplotlib line settings (``color``, ``linestyle``, ``marker``...),
    e.g. to pair colours by meaning or to dash a derived curve; other curves keep the default cycle.
    ``xticks`` puts the x ticks at those values only, written as plain numbers (8, 16, 32 on a log axis).
    A band takes its curve's colour. Drawing on the ``ax`` of an earlier call adds curves (over another
    x range, say) to its figure.

    Shapes:
        x ``(N,)``; each value of ``ys`` ``(N,)`` or ``(runs, N)``.

    Example:
        >>> fig = plot_curves([1, 2, 4], {"measured": [1.0, 2.1, 3.9]}, xlabel="d_k", ylabel="Var(q·k)", logx=True)
        >>> fig.axes[0].get_xscale()
        'log'
        >>> plt.close(fig)

        Three seeds, one row each: the line is their median, the band spans them.

        >>> seeds = [[1.0, 2.0, 4.1], [1.2, 1.9, 3.8], [0.9, 2.2, 4.0]]
        >>> fig = plot_curves([1, 2, 4], {"3 seeds": seeds}, xlabel="d_k", ylabel="Var(q·k)")
        >>> fig.axes[0].get_lines()[0].get_ydata().tolist()
        [1.0, 2.0, 4.0]
        >>> len(fig.axes[0].collections)    # the band
        1
        >>> plt.close(fig)

        A derivation drawn dashed, without markers, over the measured points:

        >>> fig = plot_curves([1, 2, 4], {"measured": [1.0, 2.1, 3.9], "derived": [1, 2, 4]}, xlabel="d_k",
        ...                   ylabel="Var(q·k)", styles={"derived": {"linestyle": "--", "marker": None}})
        >>> [line.get_linestyle() for line in fig.axes[0].get_lines()]
        ['-', '--']
        >>> plt.close(fig)
    """
    xs, sizes = as_numbers("x", x, "N")
    if not isinstance(ys, Mapping) or not ys:
        raise ValueError(
            f"ys: expected a non-empty dict {{name: values of shape (N,)}}, got {type(ys).__name__}"
        )
    curves = {str(name): _curve(f"ys[{name!r}]", y, sizes["N"]) for name, y in ys.items()}
    if logx and (xs <= 0).any():
        raise ValueError(f"x: expected positive values for logx=True, got min {xs.min()}")
    if logy:
        for name, y in curves.items():
            if (y <= 0).any():
                raise ValueError(f"ys[{name!r}]: expected positive values for logy=True, got min {y.min()}")
    styles = {} if styles is None else styles
    if not isinstance(styles, Mapping) or not set(map(str, styles)) <= set(curves):
        unknown = sorted(set(map(str, styles)) - set(curves)) if isinstance(styles, Mapping) else styles
        raise ValueError(
            f"styles: expected a dict {{curve name: line properties}} over {list(curves)}, got {unknown}"
        )
    fig, ax = new_axes(ax, (5.5, 3.5))
    for name, y in curves.items():
        style = {"marker": "o" if sizes["N"] <= 20 else None, **styles.get(name, {})}
        if y.ndim == 1:
            ax.plot(xs, y, label=name, **style)
        else:  # runs: one long table of (x, y) points, aggregated at each x
            runs = y.shape[0]
            import seaborn as sns  # here, not at the top: importing it (and pandas) takes half a second

            sns.lineplot(x=np.tile(xs, runs), y=y.reshape(-1), estimator="median", errorbar=("pi", 100),
                         label=name, legend=False, ax=ax, **style)  # fmt: skip
    # Scales are set after drawing, so the median of the runs is taken in data space.
    ax.set_xscale("log" if logx else "linear")
    ax.set_yscale("log" if logy else "linear")
    if xticks is not None:
        ax.xaxis.set_major_locator(FixedLocator([float(t) for t in xticks]))
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title is not None:
        ax.set_title(title)
    return fig


def plot_against_derivation(
    x: Sequence[float] | torch.Tensor | np.ndarray,
    pairs: Mapping[str, tuple[Any, Any]],
    *,
    xlabel: str,
    ylabel: str,
    logx: bool = False,
    logy: bool = False,
    title: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Measured points beside the curve a derivation predicts, one colour per quantity.

    Each value of ``pairs`` is ``(measured, derived)`` for one quantity (``Var(q·k)`` measured over random
    vectors, and ``d_k``, say): the measurement is drawn as markers without a line, labelled
    ``"<name>, measured"``, the derivation as a dashed line without markers, ``"<name>, derived"``, both in the
    quantity's colour (the default colour cycle, in the order given). Markers on their dashed line: the
    derivation holds. Drawn by :func:`plot_curves`, whose checks apply.

    Shapes:
        x ``(N,)``; measured and derived ``(N,)`` each.

    Example:
        >>> fig = plot_against_derivation([1, 2, 4], {"Var(q·k)": ([1.1, 1.9, 4.2], [1, 2, 4])},
        ...                               xlabel="d_k", ylabel="variance", logx=True)
        >>> [(line.get_label(), line.get_linestyle()) for line in fig.axes[0].get_lines()]
        [('Var(q·k), measured', 'None'), ('Var(q·k), derived', '--')]
        >>> plt.close(fig)
    """
    if not isinstance(pairs, Mapping) or not pairs:
        raise ValueError(
            f"pairs: expected a non-empty dict {{name: (measured, derived)}}, got {type(pairs).__name__}"
        )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    ys, styles = {}, {}
    for index, (name, pair) in enumerate(pairs.items()):
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise ValueError(
                f"pairs[{name!r}]: expected a pair (measured, derived), got {type(pair).__name__}"
            )
        color = colors[index % len(colors)]
        ys[f"{name}, measured"], ys[f"{name}, derived"] = pair
        styles[f"{name}, measured"] = {"color": color, "linestyle": "none", "marker": "o", "markersize": 7}
        styles[f"{name}, derived"] = {"color": color, "linestyle": "--", "marker": None}
    return plot_curves(
        x, ys, xlabel=xlabel, ylabel=ylabel, logx=logx, logy=logy, title=title, ax=ax, styles=styles
    )


def plot_curve_panels(
    x: Sequence[float] | torch.Tensor | np.ndarray,
    panels: Mapping[str, Mapping[str, Any]],
    *,
    xlabel: str,
    logx: bool = False,
    logy: bool = False,
    references: Mapping[str, tuple[float, str]] | None = None,
    styles: Mapping[str, Mapping[str, Any]] | None = None,
    title: str | None = None,
) -> Figure:
    """Side-by-side panels over one shared x axis, each showing one quantity (entropy, max weight...).

    ``panels`` maps each panel's y label to its curves, ``{name: values}``, as :func:`plot_curves` takes
    them (one curve, or runs drawn as their median and band). A curve name keeps one colour in every panel
    (the default colour cycle, in order of first appearance), so "scaled" and "unscaled" read the same on the
    left as on the right; ``styles`` overrides that per name. ``references`` maps a panel's y label to
    ``(y, label)``: a dotted black line at ``y``, such as the entropy of a uniform row.

    Shapes:
        x ``(N,)``; each curve ``(N,)`` or ``(runs, N)``.

    Example:
        >>> panels = {"entropy (nats)": {"scaled": [2.4, 2.4], "unscaled": [2.2, 0.1]},
        ...           "max weight": {"scaled": [0.2, 0.3], "unscaled": [0.3, 0.97]}}
        >>> fig = plot_curve_panels([1, 1024], panels, xlabel="d_k", logx=True,
        ...                         references={"entropy (nats)": (2.77, "uniform row")})
        >>> [ax.get_ylabel() for ax in fig.axes]
        ['entropy (nats)', 'max weight']
        >>> [line.get_label() for line in fig.axes[0].get_lines()]
        ['scaled', 'unscaled', 'uniform row']
        >>> plt.close(fig)
    """
    if not isinstance(panels, Mapping) or not panels:
        raise ValueError(
            f"panels: expected a non-empty dict {{y label: {{name: values}}}}, got {type(panels).__name__}"
        )
    for ylabel, curves in panels.items():
        if not isinstance(curves, Mapping) or not curves:
            raise ValueError(
                f"panels[{ylabel!r}]: expected a non-empty dict {{name: values}}, got {curves!r:.60}"
            )
    references = {} if references is None else references
    if not isinstance(references, Mapping) or not set(references) <= set(panels):
        unknown = sorted(set(references) - set(panels)) if isinstance(references, Mapping) else references
        raise ValueError(
            f"references: expected a dict {{y label: (y, label)}} over {list(panels)}, got {unknown}"
        )
    styles = {} if styles is None else styles
    names = list(dict.fromkeys(str(name) for curves in panels.values() for name in curves))
    if not isinstance(styles, Mapping) or not set(map(str, styles)) <= set(names):
        unknown = sorted(set(map(str, styles)) - set(names)) if isinstance(styles, Mapping) else styles
        raise ValueError(
            f"styles: expected a dict {{curve name: line properties}} over {names}, got {unknown}"
        )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    style_of = {
        name: {"color": colors[i % len(colors)], **styles.get(name, {})} for i, name in enumerate(names)
    }
    fig, axes = plt.subplots(
        1, len(panels), figsize=(5.5 * len(panels), 3.6), layout="constrained", squeeze=False
    )
    for ax, (ylabel, curves) in zip(axes[0], panels.items()):
        panel_styles = {str(name): style_of[str(name)] for name in curves}
        try:
            plot_curves(
                x, curves, xlabel=xlabel, ylabel=ylabel, logx=logx, logy=logy, ax=ax, styles=panel_styles
            )
        except ValueError:
            plt.close(fig)  # a bad curve leaves no half-drawn figure behind
            raise
        if ylabel in references:
            y, label = references[ylabel]
            ax.axhline(float(y), color="black", linestyle=":", label=label)
            ax.legend(fontsize=8)
    if title is not None:
        fig.suptitle(title)
    return fig


def plot_histograms(
    samples: Mapping[str, Sequence[float] | torch.Tensor | np.ndarray],
    *,
    xlabel: str,
    bins: int = 30,
    logy: bool = False,
    title: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Overlaid histograms of a few samples on shared bins (e.g. softmax weights with and without 1/√d_k).

    Drawn with ``seaborn.histplot``, one call per sample on the same bin edges, so bars of equal
    width can be compared directly. With ``logy=True`` empty bins simply have no bar.

    Shapes:
        each value of ``samples`` holds numbers of any shape; they are flattened.

    Example:
        >>> fig = plot_histograms({"a": [0.1, 0.2, 0.2], "b": [0.5, 0.9]}, xlabel="weight", bins=4)
        >>> [bars.datavalues.tolist() for bars in fig.axes[0].containers]   # counts per bin
        [[3, 0, 0, 0], [0, 0, 1, 1]]
        >>> plt.close(fig)
    """
    if not isinstance(samples, Mapping) or not samples:
        raise ValueError(f"samples: expected a non-empty dict {{name: values}}, got {type(samples).__name__}")
    check_positive_int("bins", bins)
    data = {}
    for name, values in samples.items():
        flat = as_tensor(f"samples[{name!r}]", values).reshape(-1)
        data[str(name)] = as_numbers(f"samples[{name!r}]", flat, "N")[0]
        if data[str(name)].size == 0:
            raise ValueError(f"samples[{name!r}]: expected at least one value, got none")
    low = min(float(v.min()) for v in data.values())
    high = max(float(v.max()) for v in data.values())
    edges = np.linspace(low, high if high > low else low + 1.0, bins + 1)  # shared bins: comparable bars
    fig, ax = new_axes(ax, (5.5, 3.5))
    import seaborn as sns  # here, not at the top: importing it (and pandas) takes half a second

    for name, values in data.items():
        sns.histplot(x=values, bins=edges, stat="count", alpha=0.55, label=name, ax=ax)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("count")
    ax.legend(fontsize=8)
    if title is not None:
        ax.set_title(title)
    return fig


def plot_distribution(
    probs: torch.Tensor | np.ndarray | Sequence[float],
    *,
    labels: Sequence[Any] | None = None,
    reference: torch.Tensor | np.ndarray | Sequence[float] | None = None,
    title: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Bar chart of a probability distribution over tokens, optionally over an outlined ``reference``.

    Used for sampling: ``reference`` is the plain softmax, the bars what is left after temperature,
    top-k and top-p.

    Shapes:
        probs ``(V,)``; reference ``(V,)``; labels ``V`` strings.

    Example:
        >>> fig = plot_distribution([0.7, 0.2, 0.1], labels=["a", "b", "c"])
        >>> [round(float(bar.get_height()), 1) for bar in fig.axes[0].patches]
        [0.7, 0.2, 0.1]
        >>> plt.close(fig)
    """
    p, sizes = as_numbers("probs", probs, "V")
    if (p < 0).any():
        raise ValueError(f"probs: expected non-negative probabilities, got min {p.min()}")
    ref = None if reference is None else as_numbers("reference", reference, "V", V=sizes["V"])[0]
    names = token_labels("labels", labels, sizes["V"], "V")
    fig, ax = new_axes(ax, (min(max(4.0, 0.35 * sizes["V"] + 1.5), 12.0), 3.5))
    positions = np.arange(sizes["V"])
    ax.bar(positions, p, color="#2b6cb0", label="probability")
    if ref is not None:
        ax.bar(positions, ref, fill=False, edgecolor="grey", linestyle="--", label="reference")
        ax.legend(fontsize=8)
    if names is not None:
        ax.set_xticks(positions, names, rotation=90 if sizes["V"] > 8 else 0)
    ax.set_xlabel("token")
    ax.set_ylabel("probability")
    ax.set_ylim(0, max(1e-9, float(p.max()), 0.0 if ref is None else float(ref.max())) * 1.1)
    if title is not None:
        ax.set_title(title)
    return fig


def plot_head_effects(
    effects: torch.Tensor | np.ndarray | Sequence[Sequence[float]],
    *,
    ylabel: str = "loss increase (nats)",
    title: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Bar chart of one number per head (the loss change when it is ablated, say), one colour per layer.

    The bars run layer by layer, labelled ``L{layer}H{head}``; a line marks 0.

    Shapes:
        effects ``(L, H)``.

    Example:
        >>> fig = plot_head_effects([[0.5, 0.0], [0.25, -0.1]])
        >>> [t.get_text() for t in fig.axes[0].get_xticklabels()]
        ['L0H0', 'L0H1', 'L1H0', 'L1H1']
        >>> plt.close(fig)
    """
    e, sizes = as_numbers("effects", effects, "L H")
    L, H = sizes["L"], sizes["H"]
    fig, ax = new_axes(ax, (min(max(4.0, 0.45 * L * H + 1.5), 12.0), 2.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    names = [f"L{layer}H{h}" for layer in range(L) for h in range(H)]
    ax.bar(names, e.reshape(-1), color=[colors[layer % len(colors)] for layer in range(L) for _ in range(H)])
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_ylabel(ylabel)
    if title is not None:
        ax.set_title(title)
    return fig
