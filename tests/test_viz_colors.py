"""attn_edu.viz colours: one colour per role (query, key, value, scores, mask, output) in every figure, and one
colour scale, built on the scores' red, for every heatmap of weights or scores; white is always "no attention"."""

import ast
import colorsys
import inspect
import re
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.colors import to_rgb, to_rgba
from matplotlib.patches import FancyBboxPatch, Rectangle

from attn_edu import viz
from attn_edu.masks import causal_mask
from attn_edu.viz import heatmaps
from attn_edu.viz.common import (
    BELOW_ZERO_CMAP,
    HIDDEN_COLOR,
    ROLE_COLORS,
    SCORES_CMAP,
    WEIGHTS_CMAP,
    contrast_ratio,
)

matplotlib.use("Agg")

VIZ = Path(viz.__file__).parent


@pytest.fixture(autouse=True)
def no_leftover_figures():
    before = set(plt.get_fignums())
    yield
    for number in set(plt.get_fignums()) - before:
        plt.close(number)


def lightness(color) -> float:
    """CIE L* (0 black .. 100 white) of an sRGB colour."""
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in to_rgb(color)]
    y = 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    return 116 * y ** (1 / 3) - 16 if y > 216 / 24389 else 24389 / 27 * y


def hue(color) -> float:
    return colorsys.rgb_to_hsv(*to_rgb(color))[0]


def saturation(color) -> float:
    return colorsys.rgb_to_hsv(*to_rgb(color))[1]


def causal_weights(T: int = 6) -> torch.Tensor:
    scores = torch.randn(T, T, generator=torch.Generator().manual_seed(0))
    return torch.softmax(scores.masked_fill(~causal_mask(T), float("-inf")), dim=-1)  # (T, T), zeros above


# ---------------------------------------------------------------------------------------------------
# One scale for every heatmap of weights or scores
# ---------------------------------------------------------------------------------------------------

WEIGHTS = causal_weights()
HEATMAPS = {  # every figure of heatmaps.py that draws weights or scores, on a tiny input; the scale it must use
    "plot_attention": (lambda: viz.plot_attention(WEIGHTS, annotate=True), WEIGHTS_CMAP),
    "plot_attention of raw scores": (lambda: viz.plot_attention(torch.randn(3, 4)), SCORES_CMAP),
    "plot_heads": (lambda: viz.plot_heads(torch.stack([WEIGHTS, WEIGHTS.T.tril()])), WEIGHTS_CMAP),
    "plot_heads by layer": (lambda: viz.plot_heads(WEIGHTS.expand(2, 3, 6, 6)), WEIGHTS_CMAP),
    "plot_attention_panels": (lambda: viz.plot_attention_panels([WEIGHTS, torch.eye(3)]), WEIGHTS_CMAP),
    "plot_alignment": (
        lambda: viz.plot_alignment(WEIGHTS[:2, :3], source_words=list("abc"), target_words=list("xy")),
        WEIGHTS_CMAP,
    ),
    "plot_score_bias, never negative": (lambda: viz.plot_score_bias(torch.rand(2, 3, 3)), WEIGHTS_CMAP),
    "plot_score_bias, never positive": (lambda: viz.plot_score_bias(-torch.rand(2, 3, 3)), BELOW_ZERO_CMAP),
    "plot_score_bias, both signs": (lambda: viz.plot_score_bias(torch.randn(2, 3, 3)), SCORES_CMAP),
}


def test_every_heatmap_function_of_weights_or_scores_is_checked_here():
    drawn = {name.split(" ")[0].rstrip(",") for name in HEATMAPS}
    public = {
        name
        for name, fn in inspect.getmembers(heatmaps, inspect.isfunction)
        if name.startswith("plot_") and fn.__module__ == heatmaps.__name__
    }
    assert public - {"plot_mask"} == drawn  # masks are booleans, in their own two colours


@pytest.mark.parametrize("name", list(HEATMAPS))
def test_every_heatmap_of_weights_or_scores_uses_the_shared_scale_white_at_zero(name):
    draw, expected = HEATMAPS[name]
    fig = draw()
    images = [image for ax in fig.axes for image in ax.images]
    assert images, f"{name}: no heatmap drawn"
    for image in images:
        assert image.get_cmap().name == expected.name, f"{name}: drawn with {image.get_cmap().name!r}"
        white = image.cmap(image.norm(0.0))
        assert white[:3] == pytest.approx((1.0, 1.0, 1.0), abs=0.02), f"{name}: 0 is not white"
    labels = [ax.get_ylabel() for ax in fig.axes if not ax.images and ax.get_ylabel()]  # the colour bar
    assert labels and all("white" in label for label in labels), f"{name}: colour bar says {labels}"
    if expected is not WEIGHTS_CMAP:  # below 0: scores, not weights
        assert not any("weight" in label for label in labels), f"{name}: colour bar says {labels}"


def test_the_weights_scale_runs_from_white_through_the_scores_red_and_darkens_steadily():
    steps = [lightness(WEIGHTS_CMAP(i)) for i in range(WEIGHTS_CMAP.N)]
    assert steps[0] == pytest.approx(100.0, abs=0.5)  # no attention: white
    assert all(b < a for a, b in zip(steps, steps[1:])), "lightness must fall at every step"
    middle = WEIGHTS_CMAP(0.5)  # the role colour itself sits on the scale
    assert np.allclose(middle[:3], to_rgb(ROLE_COLORS["scores"]), atol=0.01)
    for i in range(1, WEIGHTS_CMAP.N):  # one hue: the scores' red, lighter or darker
        assert hue(WEIGHTS_CMAP(i)) == pytest.approx(hue(ROLE_COLORS["scores"]), abs=0.01)


def test_the_signed_scale_is_the_weights_scale_above_zero_and_a_grey_of_equal_lightness_below():
    for x in np.linspace(0.0, 0.5, 26):
        above, below = SCORES_CMAP(0.5 + x), SCORES_CMAP(0.5 - x)
        assert np.allclose(above, WEIGHTS_CMAP(2 * x), atol=0.01)
        assert np.allclose(below, BELOW_ZERO_CMAP(1 - 2 * x), atol=0.01)  # dark grey (lowest) up to white (0)
        assert saturation(below) < 0.02, "below 0 must be neutral grey"
        assert lightness(below) == pytest.approx(lightness(above), abs=2.5)


@pytest.mark.parametrize("cmap", [WEIGHTS_CMAP, SCORES_CMAP, BELOW_ZERO_CMAP], ids=lambda c: c.name)
def test_no_shared_scale_uses_the_query_blue_or_the_key_orange(cmap):
    for role in ("query", "key", "value", "output"):
        for i in range(cmap.N):
            color = cmap(i)
            neutral = saturation(color) < 0.02
            assert neutral or hue(color) != pytest.approx(hue(ROLE_COLORS[role]), abs=0.05), (
                f"{cmap.name}[{i}] = {matplotlib.colors.to_hex(color)} has the {role}'s hue"
            )


@pytest.mark.parametrize(
    "weights",
    [causal_weights(), torch.linspace(0, 1, 100).reshape(10, 10), torch.linspace(-1, 1, 100).reshape(10, 10)],
    ids=["causal", "every weight", "both signs"],
)
def test_values_written_in_the_cells_are_readable(weights):
    fig = viz.plot_attention(weights, annotate=True)
    ax = fig.axes[0]
    image = ax.images[0]
    assert len(ax.texts) == weights.numel()
    for text in ax.texts:
        s, t = (round(v) for v in text.get_position())
        cell = image.cmap(image.norm(float(image.get_array()[t, s])))
        ratio = contrast_ratio(text.get_color(), cell)
        assert ratio >= 4.5, (
            f"{text.get_text()} in {text.get_color()} on {matplotlib.colors.to_hex(cell)}: {ratio:.2f}"
        )


def test_the_soft_lookup_draws_each_role_in_its_colour_and_the_weights_on_the_shared_scale():
    keys, values = (
        torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]),
        torch.tensor([[2.0, 2.0], [3.0, 1.0], [1.0, 3.0]]),
    )
    weights = torch.tensor([0.2, 0.5, 0.3])
    fig = viz.plot_soft_lookup(keys, values, torch.tensor([0.5, 0.2]), weights, weights @ values)
    by_label = {c.get_label(): c for c in fig.axes[0].collections}
    key_points = next(c for label, c in by_label.items() if label.startswith("keys"))
    assert key_points.get_cmap().name == WEIGHTS_CMAP.name
    assert np.allclose(key_points.get_edgecolor()[0], to_rgba(ROLE_COLORS["key"]))
    assert np.allclose(by_label["query"].get_facecolor()[0][:3], to_rgb(ROLE_COLORS["query"]))
    assert np.allclose(by_label["values"].get_facecolor()[0][:3], to_rgb(ROLE_COLORS["value"]))
    assert np.allclose(by_label["output = Σ w·v"].get_facecolor()[0][:3], to_rgb(ROLE_COLORS["output"]))
    fig = viz.plot_soft_lookup(keys[:, 0], values[:, 0], 0.5, weights, weights @ values[:, 0])
    lookup, bars = fig.axes
    assert lookup.lines[0].get_color() == ROLE_COLORS["query"]
    assert all(np.allclose(p.get_facecolor()[:3], to_rgb(ROLE_COLORS["scores"])) for p in bars.patches)


# ---------------------------------------------------------------------------------------------------
# FlashAttention's pictures: every role its own colour, no role's colour for what is not that role
# ---------------------------------------------------------------------------------------------------


def test_the_flash_dataflow_gives_k_and_v_their_own_colours_and_sram_none():
    fig = viz.plot_flash_dataflow(num_blocks=4, query_block=1, key_block=2)
    ax = fig.axes[0]
    blocks = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_width() == pytest.approx(0.8)]
    shaded = {  # the HBM blocks of each column that carry a colour
        name: {matplotlib.colors.to_hex(p.get_facecolor()) for p in blocks if p.get_x() == pytest.approx(x)}
        - {"#ffffff"}
        for name, x in (("Q", 0.4), ("K", 1.6), ("V", 2.8))
    }
    assert shaded["K"] and shaded["V"] and not shaded["K"] & shaded["V"], shaded
    assert ROLE_COLORS["key"] in shaded["K"] and ROLE_COLORS["value"] in shaded["V"]
    assert shaded["Q"] == {ROLE_COLORS["query"]}
    on_chip = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_width() == pytest.approx(1.0)]
    tile_colors = {matplotlib.colors.to_hex(p.get_facecolor()) for p in on_chip}
    assert {ROLE_COLORS[r] for r in ("query", "key", "value", "output")} <= tile_colors
    memories = [p for p in ax.patches if isinstance(p, FancyBboxPatch)]  # the HBM and SRAM outlines
    assert len(memories) == 2
    for memory in memories:
        assert saturation(memory.get_edgecolor()) < 0.02, "a memory is a place, not a role: neutral"
    arrows = {a.arrow_patch.get_edgecolor()[:3] for a in ax.texts if getattr(a, "arrow_patch", None)}
    for role in ("query", "key", "value", "output"):
        assert any(np.allclose(a, to_rgb(ROLE_COLORS[role])) for a in arrows), f"no {role} arrow"


def test_causal_tiles_are_scores_red_masked_ones_hatched_in_the_mask_grey_with_no_query_or_key_colour():
    fig = viz.plot_causal_tiles(256, 64)
    ax = fig.axes[0]
    image = ax.images[0]
    kinds = np.asarray(image.get_array())
    rgba = image.cmap(image.norm(kinds))
    assert np.allclose(rgba[kinds == 0][:, :3], to_rgb(HIDDEN_COLOR))  # skipped: recedes
    for kind in (1, 2):  # computed: the scores' red, light
        for color in rgba[kinds == kind]:
            assert hue(color) == pytest.approx(hue(ROLE_COLORS["scores"]), abs=0.01), (
                f"a computed tile ({kind}) in {matplotlib.colors.to_hex(color)}, not a shade of the scores' red"
            )
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert len(hatched) == int((kinds == 2).sum())  # one hatching per masked tile
    for patch in hatched:
        assert np.allclose(patch.get_edgecolor()[:3], to_rgb(ROLE_COLORS["mask"]))
        i, j = round(patch.get_y() + 0.5), round(patch.get_x() + 0.5)
        assert kinds[i, j] == 2
    legend = ax.get_legend().legend_handles
    used = (
        [h.get_facecolor() for h in legend] + [h.get_edgecolor() for h in legend] + list(rgba.reshape(-1, 4))
    )
    for role in ("query", "key"):
        assert not any(np.allclose(c[:3], to_rgb(ROLE_COLORS[role]), atol=0.02) for c in used), role


def test_the_online_softmax_draws_scores_in_the_scores_red_and_what_is_not_read_yet_receding():
    x = torch.tensor([1.0, 3.0, 2.0, 0.5, 4.0, 0.0])
    m = [3.0, 3.0, 4.0]
    ell = [float(torch.exp(x[: 2 * (i + 1)] - m[i]).sum()) for i in range(3)]
    fig = viz.plot_online_softmax(x, m, ell, block_size=2, step=2)
    left = fig.axes[0]
    faces = [p.get_facecolor() for p in left.patches]
    for face in faces[:4]:  # read, or being read: scores
        assert hue(face) == pytest.approx(hue(ROLE_COLORS["scores"]), abs=0.01), (
            f"a score bar in {matplotlib.colors.to_hex(face)}, not a shade of the scores' red"
        )
    assert faces[0] != faces[2]  # the block being read stands out from the ones read before it
    for face in faces[4:]:
        assert np.allclose(face[:3], to_rgb(HIDDEN_COLOR))


# ---------------------------------------------------------------------------------------------------
# No figure spells out a role's colour: it asks common.ROLE_COLORS, so a change there changes every figure
# ---------------------------------------------------------------------------------------------------

ROLE_HEXES = {color.lower() for color in [*ROLE_COLORS.values(), HIDDEN_COLOR]}


def role_hex_literals(source: str) -> list[tuple[int, str]]:
    """(line, string) of every string constant in ``source`` that spells out a role colour."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            for hex_color in re.findall(r"#[0-9a-fA-F]{6}\b", node.value):
                if hex_color.lower() in ROLE_HEXES:
                    found.append((node.lineno, hex_color))
    return found


def test_the_scan_finds_a_role_colour_spelled_out():
    assert role_hex_literals('colors = {"q": "#4C72B0", "x": "#123456"}\n') == [(1, "#4C72B0")]


def test_no_figure_module_spells_out_a_role_colour_outside_common():
    modules = sorted(path for path in VIZ.glob("*.py") if path.name != "common.py")
    assert len(modules) > 10
    found = [
        f"{path.name}:{line}: {color}"
        for path in modules
        for line, color in role_hex_literals(path.read_text(encoding="utf-8"))
    ]
    assert not found, "use attn_edu.viz.common.ROLE_COLORS / HIDDEN_COLOR, not the hex: " + ", ".join(found)
