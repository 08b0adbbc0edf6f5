"""Token sequences as rows of boxes: what a pre-training objective does to a sentence.

Used by notebook 09's span-corruption explorer: T5 replaces spans of the input by sentinels and the
target lists the dropped spans, so the rows differ in length (the point of the picture).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure


def plot_token_rows(
    rows: Mapping[str, Sequence[Any]],
    *,
    highlight: Mapping[str, Sequence[bool]] | None = None,
    title: str | None = None,
) -> Figure:
    """Token sequences drawn as rows of boxes, one labelled row per sequence (original, input, target...).

    Highlighted boxes (e.g. corrupted tokens, sentinels, ``[MASK]``) are orange, the others light
    blue. Rows may have different lengths: that difference is often the point (T5's span corruption
    shortens both the encoder input and the decoder target).

    Shapes:
        each value of ``rows`` holds ``N`` tokens (any length ``N >= 0`` per row); ``highlight[name]``
        holds ``N`` bools for that row.

    Example:
        >>> fig = plot_token_rows({"input": ["a", "<X0>", "d"], "target": ["<X0>", "b", "c"]},
        ...                       highlight={"input": [False, True, False]})
        >>> len(fig.axes[0].patches)          # one box per token
        6
        >>> plt.close(fig)
    """
    if not isinstance(rows, Mapping) or not rows:
        raise ValueError(f"rows: expected a non-empty dict {{name: tokens}}, got {type(rows).__name__}")
    tokens = {}
    for name, row in rows.items():
        if isinstance(row, str) or not isinstance(row, Sequence):
            raise ValueError(f"rows[{name!r}]: expected a list of tokens, got {type(row).__name__}")
        tokens[str(name)] = [str(token) for token in row]
    marks = {name: [False] * len(row) for name, row in tokens.items()}
    for name, flags in (highlight or {}).items():
        if str(name) not in tokens:
            raise ValueError(f"highlight: {name!r} is not a row; expected one of {list(tokens)}")
        if isinstance(flags, torch.Tensor):
            flags = flags.tolist()
        if len(flags) != len(tokens[str(name)]):
            raise ValueError(
                f"highlight[{name!r}]: expected {len(tokens[str(name)])} flags (one per token), got {len(flags)}"
            )
        marks[str(name)] = [bool(f) for f in flags]

    # One box width for every row, wide enough for the longest token, so columns line up.
    width = max(1.0, 0.13 * max((len(t) for row in tokens.values() for t in row), default=1) + 0.25)
    longest = max(1, max(len(row) for row in tokens.values())) * width
    fig, ax = plt.subplots(
        figsize=(min(1.2 + longest * 0.55, 16), 0.7 + 0.55 * len(tokens)), layout="constrained"
    )
    for r, (name, row) in enumerate(tokens.items()):
        y = -r
        for i, (token, marked) in enumerate(zip(row, marks[name])):
            x = i * width
            ax.add_patch(
                plt.Rectangle(
                    (x, y - 0.35),
                    width * 0.94,
                    0.7,
                    facecolor="#f6ad55" if marked else "#bee3f8",
                    edgecolor="#4a5568",
                    linewidth=0.6,
                )
            )
            ax.text(x + width * 0.47, y, token, ha="center", va="center", fontsize=8)
    ax.set_xlim(-0.1, longest + 0.1)
    ax.set_ylim(-len(tokens) + 0.4, 0.6)
    ax.set_yticks([-r for r in range(len(tokens))], [f"{name} ({len(row)})" for name, row in tokens.items()])
    ax.set_xticks([])
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)
    if title is not None:
        ax.set_title(title, fontsize=10)
    return fig
