"""The drawing kit of the schematic diagrams: one canvas, one box, one arrow, one grid, one set of fonts.

Used by :mod:`attn_edu.viz.diagrams_attention` and :mod:`attn_edu.viz.diagrams_steps`, so that every
diagram speaks one visual language: a role keeps its colour (:data:`attn_edu.viz.common.ROLE_COLORS`), boxes
are labelled with the shape legend's letters (``B``, ``T``, ``S``, ``H``, ``D``, ``C``), symbols are written in
matplotlib's mathtext (``$W^O$``, ``$K^\\top$``, ``$\\sqrt{D}$``: no carets), text is never smaller
than :data:`SMALL` points, arrows all look alike, and no canvas is wider than :data:`MAX_WIDTH` inches (a
notebook's width). The canvas is measured in inches: ``box(ax, 1.0, 2.0, ...)`` sits one inch from the left
edge and two from the bottom, whatever the figure's size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, PathPatch, Rectangle
from matplotlib.textpath import TextPath
from matplotlib.transforms import Affine2D

from attn_edu.viz.common import HIDDEN_COLOR, ROLE_COLORS

FONT = 10.0  # points: the text in boxes
SMALL = 9.0  # points: shapes and notes, the smallest text of any diagram
TITLE = 11.0  # points: a diagram's title
MAX_WIDTH = 10.0  # inches: a notebook's width
INK = "#333333"  # outlines, arrows and text that belong to no role
LINE = 1.45  # font sizes between the lines of a text that holds mathtext (matplotlib's own spacing, about)
BASELINE = 0.33  # how far a line's centre sits above its baseline, in font sizes
ARROW = {"arrowstyle": "-|>", "color": INK, "lw": 1.2, "mutation_scale": 11, "shrinkA": 2, "shrinkB": 2}


def check_int(name: str, value: Any, low: int, high: int | None = None) -> int:
    """``value`` if it is an int in ``low .. high``; otherwise a ``ValueError`` naming ``name``.

    Example:
        >>> check_int("T", 6, 1, 32)
        6
    """
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < low
        or (high is not None and value > high)
    ):
        span = f"{low} .. {high}" if high is not None else f">= {low}"
        raise ValueError(f"{name}: expected an int in {span}, got {value!r}")
    return value


def tint(color: str, amount: float = 0.25) -> tuple[float, float, float]:
    """``color`` mixed with white: ``amount`` 1 is the colour itself, 0 is white (the fill of a role's box)."""
    r, g, b = to_rgb(color)
    return (1 - amount + amount * r, 1 - amount + amount * g, 1 - amount + amount * b)


def role_color(role: str | None) -> str:
    """The colour of a role (``"query"``, ``"key"``, ...), or the neutral ink for ``None``."""
    if role is None:
        return INK
    if role not in ROLE_COLORS:
        raise ValueError(f"role: expected one of {sorted(ROLE_COLORS)} or None, got {role!r}")
    return ROLE_COLORS[role]


def canvas(width: float, height: float, title: str | None = None) -> tuple[Figure, Axes]:
    """A blank figure ``width`` × ``height`` inches whose axes count inches from the bottom-left corner.

    The title, if any, sits in the top 0.35 inch; draw below ``height - 0.35``.
    """
    if width > MAX_WIDTH:
        raise ValueError(
            f"width: a diagram is at most {MAX_WIDTH} inches wide (a notebook's width), got {width}"
        )
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_aspect("equal")
    ax.axis("off")
    if title is not None:
        ax.text(width / 2, height - 0.2, title, ha="center", va="center", fontsize=TITLE, weight="bold")
    return fig, ax


def _math_line(ax: Axes, x: float, y: float, s: str, size: float, options: dict[str, Any]) -> None:
    """One line holding mathtext (``$W^O$``), drawn as an outline: centred on ``y``, placed on ``x`` as ``ha`` says.

    An SVG keeps plain text as text, but the glyphs of mathtext, each placed on its own and some from fonts a
    browser lacks (the radical's), come out misplaced there; as outlines they look as matplotlib drew them.
    """
    weight = options.get("weight", "normal")
    path = TextPath((0, 0), s, size=size, prop=FontProperties(weight=weight))
    ink = path.get_extents()  # points, from the baseline's start
    ha = options.get("ha", "center")
    left = {"left": ink.x0, "right": ink.x1}.get(ha, (ink.x0 + ink.x1) / 2)
    place = Affine2D().translate(-left, -BASELINE * size).scale(1 / 72).translate(x, y)
    patch = PathPatch(
        path, facecolor=options.get("color", INK), edgecolor="none", transform=place + ax.transData
    )
    if "zorder" in options:
        patch.set_zorder(options["zorder"])
    ax.add_patch(patch)


def text(ax: Axes, x: float, y: float, s: str, *, size: float = SMALL, **kwargs: Any) -> None:
    """Text centred on ``(x, y)`` in the diagrams' font (``ha``/``va``/``color`` may be overridden).

    A line with mathtext (``$K^\\top$``) is drawn as an outline (:func:`_math_line`), the others as text;
    lines are ``LINE`` font sizes apart, as matplotlib sets a multi-line text.
    """
    options = {"ha": "center", "va": "center", "color": INK, **kwargs}
    size = max(size, SMALL)
    if "$" not in s:
        ax.text(x, y, s, fontsize=size, **options)
        return
    if options["va"] != "center" or options.get("rotation"):
        raise ValueError(f"s: mathtext is drawn centred and level only, got {s!r} with {kwargs}")
    lines = s.split("\n")
    step = LINE * size / 72  # inches between baselines
    for i, line in enumerate(lines):
        y_line = y + step * ((len(lines) - 1) / 2 - i)
        if "$" in line:
            _math_line(ax, x, y_line, line, size, options)
        else:
            ax.text(x, y_line, line, fontsize=size, **options)


def box(
    ax: Axes,
    x: float,
    y: float,
    w: float,
    h: float,
    label: str = "",
    role: str | None = None,
    *,
    shape: str | None = None,
    strong: bool = False,
    dashed: bool = False,
    size: float = FONT,
) -> tuple[float, float]:
    """A rounded box at ``(x, y)`` (bottom-left), ``w`` × ``h`` inches, tinted with its role's colour.

    ``label`` is centred (raised when a ``shape`` such as ``"(T, D)"`` is written under it); ``strong`` fills
    the box with the full colour (white text). Returns the box's centre, for arrows.
    """
    color = role_color(role)
    face = color if strong else (tint(color, 0.22) if role is not None else "white")
    ax.add_patch(
        FancyBboxPatch(
            (x, y), w, h, boxstyle="round,pad=0,rounding_size=0.06", facecolor=face, edgecolor=color,
            lw=1.2, ls="--" if dashed else "-",
        )
    )  # fmt: skip
    ink = "white" if strong else INK
    if shape is None:
        text(ax, x + w / 2, y + h / 2, label, size=size, color=ink)
    else:
        text(ax, x + w / 2, y + h * 0.62, label, size=size, color=ink)
        text(ax, x + w / 2, y + h * 0.27, shape, size=SMALL, color=ink)
    return x + w / 2, y + h / 2


def arrow(
    ax: Axes,
    start: tuple[float, float],
    end: tuple[float, float],
    label: str | None = None,
    *,
    color: str = INK,
    bend: float = 0.0,
    dashed: bool = False,
    offset: tuple[float, float] = (0.0, 0.12),
) -> None:
    """The diagrams' one arrow, from ``start`` to ``end`` (``bend`` curves it), with an optional label."""
    style = {**ARROW, "color": color, "linestyle": "--" if dashed else "-"}
    ax.add_patch(FancyArrowPatch(start, end, connectionstyle=f"arc3,rad={bend}", **style))
    if label:
        mid = ((start[0] + end[0]) / 2 + offset[0], (start[1] + end[1]) / 2 + offset[1])
        text(ax, *mid, label, color=color if color != INK else INK)


def elbow(
    ax: Axes,
    points: Sequence[tuple[float, float]],
    label: str | None = None,
    *,
    color: str = INK,
    label_at: tuple[float, float] | None = None,
) -> None:
    """An arrow along straight legs through ``points`` (first to last), for a path that must go round text.

    ``label`` sits at ``label_at`` (default: just above the middle of the longest leg).
    """
    if len(points) < 2:
        raise ValueError(f"points: expected at least 2 points, got {len(points)}")
    xs, ys = zip(*points[:-1])
    ax.plot([*xs, points[-1][0]], [*ys, points[-1][1]], color=color, lw=ARROW["lw"], solid_capstyle="butt")
    ax.add_patch(FancyArrowPatch(points[-2], points[-1], **{**ARROW, "color": color, "shrinkA": 0}))
    if label:
        if label_at is None:
            legs = list(zip(points, points[1:]))
            (x1, y1), (x2, y2) = max(
                legs, key=lambda leg: abs(leg[1][0] - leg[0][0]) + abs(leg[1][1] - leg[0][1])
            )
            label_at = ((x1 + x2) / 2, (y1 + y2) / 2 + 0.14)
        text(ax, *label_at, label, color=color)


def grid(
    ax: Axes,
    x: float,
    y_top: float,
    rows: int,
    cols: int,
    cell: float,
    colors: str | Sequence[Sequence[Any]],
    *,
    edge: str = "white",
    lw: float = 0.8,
) -> tuple[float, float, float, float]:
    """A ``rows`` × ``cols`` matrix of square cells whose top-left corner is ``(x, y_top)``.

    ``colors`` is one colour for every cell or a ``rows`` × ``cols`` nested list (``None`` leaves a cell
    blank). Returns ``(x, y_bottom, width, height)``.
    """
    for r in range(rows):
        for c in range(cols):
            face = colors if isinstance(colors, str) else colors[r][c]
            if face is None:
                continue
            ax.add_patch(
                Rectangle(
                    (x + c * cell, y_top - (r + 1) * cell), cell, cell, facecolor=face, edgecolor=edge, lw=lw
                )
            )
    return x, y_top - rows * cell, cols * cell, rows * cell


def frame(ax: Axes, x: float, y: float, w: float, h: float, *, color: str = INK, lw: float = 1.2) -> None:
    """An outline without fill: a matrix's border, the tile being worked on."""
    ax.add_patch(Rectangle((x, y), w, h, fill=False, edgecolor=color, lw=lw))


def legend_row(ax: Axes, x: float, y: float, items: Sequence[tuple[str, Any]], *, gap: float = 0.25) -> None:
    """Colour swatches with their meaning, in one row starting at ``(x, y)``."""
    for label, color in items:
        ax.add_patch(Rectangle((x, y - 0.07), 0.16, 0.16, facecolor=color, edgecolor=INK, lw=0.5))
        ax.text(x + 0.22, y, label, fontsize=SMALL, va="center", ha="left", color=INK)
        x += 0.22 + 0.075 * len(label) + gap


HIDDEN = HIDDEN_COLOR
