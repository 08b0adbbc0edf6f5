"""attn_edu.viz: each figure shows exactly the numbers it was given, labels what they mean, and
rejects bad input with a message naming the argument."""

import colorsys
import math

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.patches import Arc, FancyArrowPatch

from attn_edu import viz
from attn_edu.masks import causal_mask
from attn_edu.viz.common import contrast_ratio

matplotlib.use("Agg")  # no display needed; set before any figure exists


@pytest.fixture(autouse=True)
def no_leftover_figures():
    before = set(plt.get_fignums())
    yield
    for number in set(plt.get_fignums()) - before:
        plt.close(number)


def softmax_rows(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.softmax(torch.randn(*shape, generator=torch.Generator().manual_seed(seed)), dim=-1)


def image_of(ax) -> np.ndarray:
    return np.asarray(ax.images[0].get_array())


def cells_of(ax) -> np.ndarray:
    """The numbers behind a heatmap (drawn with imshow: the seaborn mesh was three times slower to draw)."""
    return image_of(ax)


def heatmaps_of(fig) -> list:
    return [ax for ax in fig.axes if ax.images and ax.get_title()]  # not the (untitled) colour bar


# ---------------------------------------------------------------------------------------------------
# plot_attention
# ---------------------------------------------------------------------------------------------------


def test_plot_attention_shows_the_weights_with_tokens_and_values():
    weights = softmax_rows(3, 4)
    queries, keys = ["a", "b", "c"], ["w", "x", "y", "z"]
    fig = viz.plot_attention(weights, query_labels=queries, key_labels=keys, title="one head")
    heatmap, colorbar = fig.axes
    np.testing.assert_allclose(cells_of(heatmap), weights.numpy(), rtol=1e-6)
    assert heatmap.get_title() == "one head"
    assert [t.get_text() for t in heatmap.get_xticklabels()] == keys
    assert [t.get_text() for t in heatmap.get_yticklabels()] == queries
    assert "key" in heatmap.get_xlabel() and "query" in heatmap.get_ylabel()
    written = sorted(t.get_text() for t in heatmap.texts)  # small matrix: every value is written
    assert written == sorted(f"{v:.2f}" for v in weights.flatten().tolist())
    assert heatmap.images[0].get_clim() == (
        0.0,
        pytest.approx(float(weights.max())),
    )  # scale starts at 0
    assert colorbar.get_ylabel().startswith("attention weight") and "white" in colorbar.get_ylabel()


def test_plot_attention_large_matrix_is_not_annotated_and_accepts_arrays():
    weights = softmax_rows(20, 30).numpy()
    fig = viz.plot_attention(weights)
    assert len(fig.axes[0].texts) == 0
    np.testing.assert_allclose(cells_of(fig.axes[0]), weights, rtol=1e-6)


@pytest.mark.parametrize(
    ("size", "annotate", "written"),
    [
        (viz.ANNOTATE_MAX_SIZE, None, True),
        (viz.ANNOTATE_MAX_SIZE + 1, None, False),
        (viz.ANNOTATE_MAX_SIZE + 1, True, True),
        (2, False, False),
    ],
)
def test_plot_attention_writes_values_up_to_the_size_limit_unless_told(size, annotate, written):
    weights = softmax_rows(2, size)
    fig = viz.plot_attention(weights, annotate=annotate)
    texts = sorted(t.get_text() for t in fig.axes[0].texts)
    assert texts == (sorted(f"{v:.2f}" for v in weights.flatten().tolist()) if written else [])


def test_plot_attention_draws_into_given_axes_without_new_figure():
    fig, ax = plt.subplots()
    count = len(plt.get_fignums())
    weights = softmax_rows(2, 2).requires_grad_()  # detached inside, no error
    original = weights.detach().clone()
    assert viz.plot_attention(weights, ax=ax) is fig
    assert len(plt.get_fignums()) == count
    torch.testing.assert_close(weights.detach(), original)  # input untouched


def test_plot_attention_half_precision():
    weights = softmax_rows(3, 3).to(torch.bfloat16)
    fig = viz.plot_attention(weights)
    np.testing.assert_allclose(cells_of(fig.axes[0]), weights.float().numpy())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"weights": torch.rand(2, 3, 4)}, r"weights: expected shape \(T, S\), got \(2, 3, 4\)"),
        ({"weights": torch.rand(3, 4), "query_labels": ["a"]}, r"query_labels: expected T=3 labels"),
        ({"weights": torch.rand(3, 4), "key_labels": "abcd"}, r"key_labels: expected S=4 labels"),
        ({"weights": torch.tensor([[float("nan"), 1.0]])}, r"weights: expected finite values"),
        ({"weights": torch.ones(2, 2, dtype=torch.bool)}, r"weights: expected real numbers"),
        ({"weights": torch.rand(2, 2), "ax": "left"}, r"ax: expected a matplotlib Axes"),
        ({"weights": "not numbers"}, r"weights: expected"),
    ],
)
def test_plot_attention_rejects_bad_input(kwargs, match):
    weights = kwargs.pop("weights")
    with pytest.raises(ValueError, match=match):
        viz.plot_attention(weights, **kwargs)


# ---------------------------------------------------------------------------------------------------
# plot_heads
# ---------------------------------------------------------------------------------------------------


def test_plot_heads_wraps_heads_and_shares_one_scale():
    weights = softmax_rows(6, 5, 5)
    tokens = list("abcde")
    fig = viz.plot_heads(weights, labels=tokens, max_cols=4, title="six heads")
    heads = heatmaps_of(fig)
    assert len(fig.axes) == 7 and len(heads) == 6  # 6 panels + 1 shared colour bar; 2 empty cells removed
    for h, ax in enumerate(heads):
        assert ax.get_title() == f"head {h}"
        np.testing.assert_allclose(cells_of(ax), weights[h].numpy(), rtol=1e-6)
        assert ax.images[0].get_clim() == heads[0].images[0].get_clim()
    assert [t.get_text() for t in heads[0].get_yticklabels()] == tokens
    assert fig.get_suptitle() == "six heads"
    assert heads[0].images[0].get_clim()[1] == pytest.approx(float(weights.max()))


def test_plot_heads_layer_by_head_grid():
    weights = softmax_rows(2, 3, 4, 6)  # (L, H, T, S)
    fig = viz.plot_heads(weights, labels=list("uvwxyz"))  # 6 labels = S: the key axis
    heads = heatmaps_of(fig)
    assert len(heads) == 6
    for n, ax in enumerate(heads):
        layer, h = divmod(n, 3)
        assert ax.get_title() == f"layer {layer} · head {h}"
        np.testing.assert_allclose(cells_of(ax), weights[layer, h].numpy(), rtol=1e-6)
    bottom = heads[-1]
    assert [t.get_text() for t in bottom.get_xticklabels()] == list("uvwxyz")


def test_plot_heads_writes_values_in_small_panels_only():
    weights = softmax_rows(2, 3, 4)
    heads = heatmaps_of(viz.plot_heads(weights))
    for head, ax in zip(weights, heads):
        assert sorted(t.get_text() for t in ax.texts) == sorted(f"{v:.2f}" for v in head.flatten().tolist())
    large = viz.plot_heads(softmax_rows(2, 7, 7))
    assert not any(ax.texts for ax in large.axes)


@pytest.mark.parametrize(
    ("weights", "kwargs", "match"),
    [
        (torch.rand(3, 3), {}, r"weights: expected shape \(H, T, S\) or \(L, H, T, S\), got \(3, 3\)"),
        (torch.rand(2, 3, 4), {"labels": ["a", "b"]}, r"labels: expected T=3 or S=4 token labels"),
        (torch.rand(2, 3, 4), {"max_cols": 0}, r"max_cols: expected a positive int"),
    ],
)
def test_plot_heads_rejects_bad_input(weights, kwargs, match):
    with pytest.raises(ValueError, match=match):
        viz.plot_heads(weights, **kwargs)


# ---------------------------------------------------------------------------------------------------
# plot_mask
# ---------------------------------------------------------------------------------------------------


def test_plot_mask_colours_allowed_cells_and_states_polarity():
    mask = causal_mask(3, 5)
    fig = viz.plot_mask(mask, title="kv cache")
    ax = fig.axes[0]
    np.testing.assert_array_equal(image_of(ax), mask.int().numpy())
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["True: may attend", "False: hidden"]
    assert legend.get_title().get_text() == "mask[t, s]"
    assert ax.get_title() == "kv cache"
    cmap, norm = ax.images[0].cmap, ax.images[0].norm  # visible and hidden cells get different colours
    assert cmap(norm(1)) != cmap(norm(0))


def test_plot_mask_legend_false_draws_the_same_cells_without_a_legend():
    mask = causal_mask(3, 5)
    with_legend, without = viz.plot_mask(mask), viz.plot_mask(mask, legend=False)
    np.testing.assert_array_equal(image_of(without.axes[0]), image_of(with_legend.axes[0]))
    assert without.axes[0].get_legend() is None and with_legend.axes[0].get_legend() is not None
    plt.close(with_legend)
    plt.close(without)


@pytest.mark.parametrize(
    ("mask", "match"),
    [
        (torch.ones(3, 3), r"mask: expected a bool mask"),
        (torch.ones(1, 3, 3, dtype=torch.bool), r"mask: expected shape \(T, S\)"),
    ],
)
def test_plot_mask_rejects_bad_input(mask, match):
    with pytest.raises(ValueError, match=match):
        viz.plot_mask(mask)


# ---------------------------------------------------------------------------------------------------
# Positions and rotations
# ---------------------------------------------------------------------------------------------------


def sin_cos_table(num_positions: int, dim: int) -> torch.Tensor:
    pos = torch.arange(num_positions, dtype=torch.float64)[:, None]
    omega = 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    return torch.stack(((pos * omega).sin(), (pos * omega).cos()), dim=-1).reshape(num_positions, dim)


def test_plot_positional_encoding_shows_the_table_on_a_symmetric_scale():
    pe = sin_cos_table(20, 8)
    fig = viz.plot_positional_encoding(pe)
    ax = fig.axes[0]
    np.testing.assert_allclose(image_of(ax), pe.numpy())
    low, high = ax.images[0].get_clim()
    assert low == -high == pytest.approx(-float(pe.abs().max()))
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("dimension", "position")
    with pytest.raises(ValueError, match=r"pe: expected shape \(N, dim\)"):
        viz.plot_positional_encoding(torch.rand(5))


def test_plot_encoding_curves_draws_the_chosen_columns():
    pe = sin_cos_table(30, 8)
    fig = viz.plot_encoding_curves(pe, [0, 5])
    lines = fig.axes[0].get_lines()
    assert [line.get_label() for line in lines] == ["dim 0", "dim 5"]
    for line, d in zip(lines, [0, 5]):
        np.testing.assert_allclose(line.get_xdata(), np.arange(30))
        np.testing.assert_allclose(line.get_ydata(), pe[:, d].numpy())
    with pytest.raises(ValueError, match=r"dims: expected indices in 0 .. 7"):
        viz.plot_encoding_curves(pe, [8])
    with pytest.raises(ValueError, match=r"dims: expected a non-empty list"):
        viz.plot_encoding_curves(pe, [])


def test_plot_encoding_curves_names_the_columns_as_asked():
    fig = viz.plot_encoding_curves(sin_cos_table(30, 8), [0, 4], labels=["pair 0", "pair 2"])
    assert [text.get_text() for text in fig.axes[0].get_legend().get_texts()] == ["pair 0", "pair 2"]
    with pytest.raises(ValueError, match=r"labels: expected len\(dims\)=2 labels"):
        viz.plot_encoding_curves(sin_cos_table(30, 8), [0, 4], labels=["pair 0"])


def test_plot_position_similarity_shares_one_scale_from_minus_one_to_one():
    a = torch.eye(4) * 2 - 1  # +1 on the diagonal, -1 elsewhere
    b = torch.full((4, 4), 0.25)
    fig = viz.plot_position_similarity({"a": a, "b": b}, title="two tables")
    panels = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in panels] == ["a", "b"]
    for ax, data in zip(panels, (a, b)):
        np.testing.assert_allclose(image_of(ax), data.numpy())
        assert ax.images[0].get_clim() == (-1.0, 1.0)
        assert ax.images[0].cmap(ax.images[0].norm(0.0))[:3] == pytest.approx((1.0, 1.0, 1.0), abs=0.05)
    assert fig.get_suptitle() == "two tables"
    with pytest.raises(ValueError, match=r"similarities\['a'\]: expected a square"):
        viz.plot_position_similarity({"a": torch.zeros(2, 3)})
    with pytest.raises(ValueError, match=r"entries in \[-1, 1\]"):
        viz.plot_position_similarity({"a": torch.full((2, 2), 2.0)})
    with pytest.raises(ValueError, match="similarities: expected a non-empty dict"):
        viz.plot_position_similarity({})


def test_plot_rotation_draws_one_arrow_per_vector_and_arcs_of_the_angles():
    angles = torch.tensor([0.0, 0.5, -2.0])
    start = torch.tensor([0.6, 0.8])
    c, s = angles.cos(), angles.sin()
    vectors = torch.stack((start[0] * c - start[1] * s, start[0] * s + start[1] * c), dim=-1)  # (3, 2)
    fig = viz.plot_rotation(vectors, angles, title="pair 0")
    ax = fig.axes[0]
    arrows = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    arcs = [p for p in ax.patches if isinstance(p, Arc)]
    assert len(arrows) == 3 and len(arcs) == 2  # angle 0 needs no arc
    spans = sorted(arc.theta2 - arc.theta1 for arc in arcs)
    np.testing.assert_allclose(spans, sorted(math.degrees(abs(a)) for a in [0.5, -2.0]), atol=1e-4)
    for arc, angle in zip(arcs, [0.5, -2.0]):  # each arc ends (or starts) at the rotated direction
        end = math.degrees(math.atan2(*(start[[1, 0]].tolist())) + angle)
        assert min(abs((edge - end + 180) % 360 - 180) for edge in (arc.theta1, arc.theta2)) < 1e-3
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["0.00 rad", "0.50 rad", "-2.00 rad"]
    assert ax.get_xlim()[1] >= 1.0 and ax.get_ylim()[0] <= -1.0  # unit-length arrows fit


def test_plot_rotation_rejects_mismatched_angles():
    with pytest.raises(ValueError, match=r"angles: expected shape \(N\) with N=3"):
        viz.plot_rotation(torch.rand(3, 2), [0.0, 1.0])
    with pytest.raises(ValueError, match=r"vectors: expected shape \(N, 2\)"):
        viz.plot_rotation(torch.rand(3, 3), [0.0, 1.0, 2.0])


def test_plot_relative_angles_draws_the_largest_angle_within_l_and_s_l_against_a_full_turn():
    theta = 10000.0 ** (-torch.arange(8, dtype=torch.float64) / 8)  # (D/2,) for D = 16
    fig = viz.plot_relative_angles(theta, context=64, factor=4)
    ax = fig.axes[0]
    trained, stretched, turn = ax.get_lines()
    np.testing.assert_allclose(trained.get_ydata(), 64 * theta.numpy())
    np.testing.assert_allclose(stretched.get_ydata(), 256 * theta.numpy())
    np.testing.assert_allclose(turn.get_ydata(), 2 * math.pi)
    assert trained.get_xdata().tolist() == list(range(8)) and ax.get_yscale() == "log"
    below = trained.get_ydata() < 2 * math.pi  # the pairs that never turned a full circle in training
    assert below.tolist() == [False] * 3 + [True] * 5
    with pytest.raises(ValueError, match="context"):
        viz.plot_relative_angles(theta, context=0, factor=4)
    with pytest.raises(ValueError, match="inv_freq: expected positive"):
        viz.plot_relative_angles(-theta, context=64, factor=4)


def test_plot_rope_frequencies_shows_each_scaling_and_its_wavelength_in_its_own_style():
    theta = torch.tensor([1.0, 0.1, 0.01])
    scalings = {"original": theta, "PI": theta / 4, "same as PI": theta / 4}
    fig = viz.plot_rope_frequencies(scalings, context=64)
    left, right = fig.axes
    for name, line in zip(scalings, left.get_lines()):
        np.testing.assert_allclose(line.get_ydata(), scalings[name].numpy(), rtol=1e-6)
    for name, line in zip(scalings, right.get_lines()):
        np.testing.assert_allclose(line.get_ydata(), 2 * math.pi / scalings[name].numpy(), rtol=1e-6)
    styles = [line.get_linestyle() for line in left.get_lines()]
    assert len(set(styles)) == 3  # curves on top of each other stay visible
    marked = [line for line in right.get_lines() if line.get_label().startswith("trained context")]
    assert len(marked) == 1 and marked[0].get_ydata()[0] == 64
    with pytest.raises(ValueError, match=r"frequencies\['PI'\]"):
        viz.plot_rope_frequencies({"original": theta, "PI": theta[:2]}, context=64)


def test_plot_loss_by_position_averages_bins_and_marks_l_and_the_floor():
    runs = torch.rand(3, 32, generator=torch.Generator().manual_seed(0))  # (runs, T)
    fig = viz.plot_loss_by_position({"model": runs}, context=16, bins=8, floor=0.25, ylabel="loss")
    ax = fig.axes[0]
    median = ax.get_lines()[0]
    bin_means = runs.reshape(3, 4, 8).mean(-1)  # (runs, 4): each seed's mean over 8 positions
    np.testing.assert_allclose(median.get_xdata(), [3.5, 11.5, 19.5, 27.5])
    np.testing.assert_allclose(median.get_ydata(), bin_means.median(0).values.double().numpy(), rtol=1e-6)
    labels = {line.get_label(): line for line in ax.get_lines()}
    assert labels["L = 16"].get_xdata()[0] == 16 and labels["bigram model"].get_ydata()[0] == 0.25
    with pytest.raises(ValueError, match="multiple of bins"):
        viz.plot_loss_by_position({"model": runs[:, :30]}, context=16, bins=8)


# ---------------------------------------------------------------------------------------------------
# Curves, histograms, distributions
# ---------------------------------------------------------------------------------------------------


def test_plot_curves_plots_each_series_with_the_requested_scales():
    x = [1, 4, 16, 64]
    ys = {"unscaled": [1.1, 3.9, 16.2, 63.0], "scaled": torch.tensor([1.0, 0.98, 1.02, 1.0])}
    fig = viz.plot_curves(x, ys, xlabel="d_k", ylabel="Var(q·k)", logx=True, logy=True, title="variance")
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["unscaled", "scaled"]
    np.testing.assert_allclose(lines[0].get_ydata(), ys["unscaled"])
    np.testing.assert_allclose(lines[1].get_ydata(), ys["scaled"].numpy())
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("d_k", "Var(q·k)", "variance")


def test_plot_curves_over_runs_draws_the_median_and_a_band_from_lowest_to_highest():
    x = [1, 2, 4, 8]
    seeds = torch.tensor(
        [[1.0, 2.0, 4.0, 8.0], [1.5, 1.0, 5.0, 7.0], [0.5, 3.0, 4.5, 9.0], [2.0, 2.5, 3.0, 8.5]]
    )  # (runs, N): four seeds
    single = [1.0, 1.1, 0.9, 1.0]
    fig = viz.plot_curves(x, {"one run": single, "4 seeds": seeds}, xlabel="d_k", ylabel="y", logy=True)
    ax = fig.axes[0]
    one, median = ax.get_lines()
    assert [one.get_label(), median.get_label()] == ["one run", "4 seeds"]
    np.testing.assert_allclose(one.get_ydata(), single)  # a single run is drawn as it is
    np.testing.assert_allclose(median.get_xdata(), x)
    np.testing.assert_allclose(median.get_ydata(), np.median(seeds.numpy(), axis=0))  # even count: mean of 2
    (band,) = ax.collections  # only the runs get a band
    corners = band.get_paths()[0].vertices
    for xi, low, high in zip(x, seeds.min(0).values.tolist(), seeds.max(0).values.tolist()):
        at_x = corners[np.isclose(corners[:, 0], xi), 1]
        assert (at_x.min(), at_x.max()) == (pytest.approx(low), pytest.approx(high))
    assert matplotlib.colors.same_color(band.get_facecolor()[0][:3], median.get_color())
    assert not matplotlib.colors.same_color(one.get_color(), median.get_color())
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["one run", "4 seeds"]
    assert ax.get_yscale() == "log"


def test_plot_curves_styles_the_named_curves_and_adds_to_a_given_axes():
    dashed = {"derived": {"color": "black", "linestyle": "--"}, "runs": {"color": "tab:red", "marker": None}}
    fig = viz.plot_curves(
        [1, 2, 3],
        {"derived": [1, 2, 3], "runs": [[1, 1, 1], [2, 2, 2]]},
        xlabel="x",
        ylabel="y",
        styles=dashed,
    )
    derived, runs = fig.axes[0].get_lines()
    assert (derived.get_linestyle(), matplotlib.colors.same_color(derived.get_color(), "black")) == (
        "--",
        True,
    )
    assert matplotlib.colors.same_color(runs.get_color(), "tab:red") and runs.get_marker() in (None, "None")
    again = viz.plot_curves([1, 2], {"short": [5, 6]}, xlabel="x", ylabel="y", ax=fig.axes[0])
    assert again is fig and [line.get_label() for line in fig.axes[0].get_lines()] == [
        "derived",
        "runs",
        "short",
    ]
    with pytest.raises(
        ValueError, match=r"styles: expected a dict \{curve name: line properties\} over \[.a.\], got \[.b.\]"
    ):
        viz.plot_curves([1, 2], {"a": [1, 2]}, xlabel="x", ylabel="y", styles={"b": {"color": "red"}})


def test_plot_curves_over_runs_accepts_lists_and_a_single_run():
    fig = viz.plot_curves(
        [0, 1, 2], {"lists": [[1, 2, 3], [3, 2, 1]], "one row": [[5, 5, 6]]}, xlabel="x", ylabel="y"
    )
    lists, row = fig.axes[0].get_lines()
    np.testing.assert_allclose(lists.get_ydata(), [2, 2, 2])
    np.testing.assert_allclose(row.get_ydata(), [5, 5, 6])


def test_plot_curves_styles_pair_colours_and_dash_a_derived_curve():
    styles = {"derived": {"linestyle": "--", "marker": None, "color": "black"}, "seeds": {"color": "tab:red"}}
    ys = {"measured": [1.0, 2.1, 3.9], "derived": [1, 2, 4], "seeds": [[1, 2, 3], [2, 3, 4]]}
    fig = viz.plot_curves([1, 2, 4], ys, xlabel="d_k", ylabel="y", styles=styles)
    measured, derived, seeds = fig.axes[0].get_lines()
    assert (measured.get_linestyle(), measured.get_marker()) == ("-", "o")  # unstyled: as before
    assert (derived.get_linestyle(), derived.get_marker()) == ("--", "None")
    assert matplotlib.colors.same_color(derived.get_color(), "black")
    assert matplotlib.colors.same_color(seeds.get_color(), "tab:red")
    (band,) = fig.axes[0].collections
    assert matplotlib.colors.same_color(band.get_facecolor()[0][:3], "tab:red")  # the band follows its curve
    with pytest.raises(ValueError, match=r"styles: expected a dict .* got \['typo'\]"):
        viz.plot_curves([1, 2], {"a": [1, 2]}, xlabel="x", ylabel="y", styles={"typo": {"color": "red"}})


@pytest.mark.parametrize(
    ("x", "ys", "kwargs", "match"),
    [
        ([1, 2, 3], {"a": [1, 2]}, {}, r"ys\['a'\]: expected shape \(N\) with N=3"),
        ([1, 2], {}, {}, r"ys: expected a non-empty dict"),
        ([0, 1], {"a": [1, 2]}, {"logx": True}, r"x: expected positive values for logx"),
        ([1, 2], {"a": [0, 2]}, {"logy": True}, r"ys\['a'\]: expected positive values for logy"),
        ([1, 2, 3], {"a": [[1, 2]]}, {}, r"ys\['a'\]: expected shape \(runs, N\) with N=3"),
        ([1, 2], {"a": torch.ones(2, 2, 2)}, {}, r"ys\['a'\]: expected shape \(N\) or \(runs, N\) with N=2"),
        ([1, 2], {"a": torch.ones(0, 2)}, {}, r"ys\['a'\]: expected at least one run"),
        ([1, 2], {"a": [[1, 2], [0, 2]]}, {"logy": True}, r"ys\['a'\]: expected positive values for logy"),
    ],
)
def test_plot_curves_rejects_bad_input(x, ys, kwargs, match):
    with pytest.raises(ValueError, match=match):
        viz.plot_curves(x, ys, xlabel="x", ylabel="y", **kwargs)


def test_plot_against_derivation_draws_each_measurement_as_markers_in_the_colour_of_its_dashed_derivation():
    d_ks = [1, 4, 16]
    pairs = {
        "Var(q·k)": ([1.1, 3.8, 16.5], d_ks),
        "Var(q·k/√d_k)": (torch.tensor([1.1, 0.95, 1.03]), [1, 1, 1]),
    }
    fig = viz.plot_against_derivation(d_ks, pairs, xlabel="d_k", ylabel="variance", logx=True, logy=True)
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines) == [
        "Var(q·k), measured",
        "Var(q·k), derived",
        "Var(q·k/√d_k), measured",
        "Var(q·k/√d_k), derived",
    ]
    for name, (measured, derived) in pairs.items():
        dots, dashes = lines[f"{name}, measured"], lines[f"{name}, derived"]
        np.testing.assert_allclose(dots.get_ydata(), np.asarray(measured, dtype=float))
        np.testing.assert_allclose(dashes.get_ydata(), derived)
        assert (dots.get_linestyle(), dashes.get_linestyle()) == ("None", "--")
        assert dots.get_marker() == "o" and dashes.get_marker() in (None, "None")
        assert matplotlib.colors.same_color(dots.get_color(), dashes.get_color())
    first, second = (lines[f"{name}, measured"].get_color() for name in pairs)
    assert not matplotlib.colors.same_color(first, second)
    assert (ax.get_xscale(), ax.get_yscale(), ax.get_ylabel()) == ("log", "log", "variance")


@pytest.mark.parametrize(
    ("pairs", "match"),
    [
        ({}, r"pairs: expected a non-empty dict"),
        ({"a": [1.0, 2.0, 3.0]}, r"pairs\['a'\]: expected a pair \(measured, derived\)"),
        ({"a": ([1.0, 2.0], [1.0, 2.0])}, r"ys\['a, measured'\]: expected shape \(N\) with N=3"),
    ],
)
def test_plot_against_derivation_rejects_bad_input(pairs, match):
    with pytest.raises(ValueError, match=match):
        viz.plot_against_derivation([1, 2, 3], pairs, xlabel="x", ylabel="y")


def test_plot_curve_panels_draws_each_panel_as_plot_curves_does_and_keeps_one_colour_per_name():
    x = [1, 2, 4]
    runs = [[2.0, 1.0, 0.5], [3.0, 1.5, 0.2], [2.5, 2.0, 0.1]]  # three seeds
    panels = {
        "max weight": {"unscaled": [0.3, 0.6, 0.9]},  # "unscaled" first here, second on the right
        "entropy (nats)": {"scaled": [2.4, 2.3, 2.3], "unscaled": runs},
    }
    fig = viz.plot_curve_panels(
        x, panels, xlabel="d_k", logx=True, references={"entropy (nats)": (math.log(16), "uniform row")}
    )
    left, right = fig.axes
    assert [ax.get_ylabel() for ax in fig.axes] == list(panels)
    assert all(ax.get_xlabel() == "d_k" and ax.get_xscale() == "log" for ax in fig.axes)
    for ax, curves in zip(fig.axes, panels.values()):
        peer = viz.plot_curves(x, curves, xlabel="d_k", ylabel="y", logx=True)  # the same curves, alone
        for ours, theirs in zip(ax.get_lines(), peer.axes[0].get_lines()):
            assert ours.get_label() == theirs.get_label()
            np.testing.assert_allclose(ours.get_ydata(), theirs.get_ydata())
        assert len(ax.collections) == len(peer.axes[0].collections)  # the runs' band
        plt.close(peer)
    (unscaled_left,) = left.get_lines()
    scaled, unscaled_right, reference = right.get_lines()
    assert matplotlib.colors.same_color(unscaled_left.get_color(), unscaled_right.get_color())
    assert not matplotlib.colors.same_color(scaled.get_color(), unscaled_right.get_color())
    assert reference.get_label() == "uniform row" and reference.get_linestyle() == ":"
    np.testing.assert_allclose(reference.get_ydata(), [math.log(16)] * 2)
    assert "uniform row" in [t.get_text() for t in right.get_legend().get_texts()]


def test_plot_curve_panels_styles_a_name_in_every_panel_and_titles_the_figure():
    panels = {"loss": {"a": [1, 2], "b": [2, 1]}, "entropy": {"a": [0, 1], "b": [1, 0]}}
    fig = viz.plot_curve_panels(
        [0, 1], panels, xlabel="step", styles={"b": {"linestyle": "--", "color": "black"}}, title="two runs"
    )
    for ax in fig.axes:
        a, b = ax.get_lines()
        assert a.get_linestyle() == "-" and b.get_linestyle() == "--"
        assert matplotlib.colors.same_color(b.get_color(), "black")
    assert fig.get_suptitle() == "two runs"


@pytest.mark.parametrize(
    ("panels", "kwargs", "match"),
    [
        ({}, {}, r"panels: expected a non-empty dict"),
        ({"y": {}}, {}, r"panels\['y'\]: expected a non-empty dict \{name: values\}"),
        ({"y": {"a": [1, 2]}}, {"references": {"z": (1.0, "one")}}, r"references: expected .* got \['z'\]"),
        ({"y": {"a": [1, 2]}}, {"styles": {"b": {"color": "red"}}}, r"styles: expected .* got \['b'\]"),
        ({"y": {"a": [1, 2, 3]}}, {}, r"ys\['a'\]: expected shape \(N\) with N=2"),
    ],
)
def test_plot_curve_panels_rejects_bad_input_and_leaves_no_figure(panels, kwargs, match):
    before = plt.get_fignums()
    with pytest.raises(ValueError, match=match):
        viz.plot_curve_panels([1, 2], panels, xlabel="x", **kwargs)
    assert plt.get_fignums() == before


def test_plot_histograms_counts_on_shared_bins():
    a = torch.rand(50, generator=torch.Generator().manual_seed(1))
    b = torch.rand(5, 6, generator=torch.Generator().manual_seed(2)) * 2  # any shape, flattened
    fig = viz.plot_histograms({"a": a, "b": b}, xlabel="weight", bins=8)
    edges = np.linspace(float(min(a.min(), b.min())), float(max(a.max(), b.max())), 9)  # shared by both
    ax = fig.axes[0]
    bars = ax.containers  # one set of bars per sample
    assert [container.get_label() for container in bars] == ["a", "b"]
    for container, sample in zip(bars, [a, b]):
        drawn_edges = [bar.get_x() for bar in container] + [container[-1].get_x() + container[-1].get_width()]
        np.testing.assert_allclose(drawn_edges, edges, rtol=1e-6)
        np.testing.assert_array_equal(container.datavalues, np.histogram(sample.flatten().numpy(), edges)[0])
    assert sum(container.datavalues.sum() for container in bars) == 80
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b"]
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_yscale()) == ("weight", "count", "linear")
    with pytest.raises(ValueError, match=r"samples\['a'\]: expected at least one value"):
        viz.plot_histograms({"a": []}, xlabel="w")
    with pytest.raises(ValueError, match=r"bins: expected a positive int"):
        viz.plot_histograms({"a": [1.0]}, xlabel="w", bins=0)


def test_plot_histograms_log_counts_keep_the_counts():
    weights = softmax_rows(64, 16).flatten()  # many weights near 0, a few large: log counts show both
    fig = viz.plot_histograms({"w": weights}, xlabel="weight", bins=10, logy=True)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    edges = np.linspace(float(weights.min()), float(weights.max()), 11)
    np.testing.assert_array_equal(ax.containers[0].datavalues, np.histogram(weights.numpy(), edges)[0])


def test_plot_distribution_bars_are_the_probabilities():
    probs = torch.tensor([0.5, 0.3, 0.2, 0.0])
    reference = torch.tensor([0.4, 0.3, 0.2, 0.1])
    fig = viz.plot_distribution(probs, labels=list("abcd"), reference=reference)
    patches = fig.axes[0].patches
    np.testing.assert_allclose([p.get_height() for p in patches[:4]], probs.numpy(), rtol=1e-6)
    np.testing.assert_allclose([p.get_height() for p in patches[4:]], reference.numpy(), rtol=1e-6)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == list("abcd")
    with pytest.raises(ValueError, match=r"probs: expected non-negative"):
        viz.plot_distribution([0.5, -0.1])
    with pytest.raises(ValueError, match=r"reference: expected shape \(V\) with V=4"):
        viz.plot_distribution(probs, reference=[1.0])


# ---------------------------------------------------------------------------------------------------
# plot_soft_lookup
# ---------------------------------------------------------------------------------------------------


def test_plot_soft_lookup_one_dimensional():
    keys = torch.tensor([0.0, 1.0, 2.5, 4.0])
    values = torch.tensor([1.0, -1.0, 2.0, 0.5])
    weights = torch.softmax(-((1.2 - keys) ** 2), dim=0)
    output = weights @ values
    fig = viz.plot_soft_lookup(keys, values, 1.2, weights, output, title="lookup")
    lookup, bars = fig.axes
    np.testing.assert_allclose([p.get_height() for p in bars.patches], weights.numpy(), rtol=1e-6)
    np.testing.assert_allclose([p.get_x() + p.get_width() / 2 for p in bars.patches], keys.numpy(), atol=1e-9)
    points, star = lookup.collections[0], lookup.collections[1]
    np.testing.assert_allclose(points.get_offsets(), torch.stack((keys, values), 1).numpy())
    np.testing.assert_allclose(star.get_offsets(), [[1.2, float(output)]], rtol=1e-6)
    alpha = points.get_facecolors()[:, 3]
    assert int(np.argmax(alpha)) == int(weights.argmax())  # the most-read key is the most opaque
    assert lookup.get_title() == "lookup"


def test_plot_soft_lookup_two_dimensional_values():
    keys = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    values = torch.tensor([[2.0, 2.0], [3.0, 1.0], [1.0, 3.0]])
    weights = torch.tensor([0.2, 0.5, 0.3])
    output = weights @ values
    fig = viz.plot_soft_lookup(keys, values, torch.tensor([0.5, 0.2]), weights, output)
    assert len(fig.axes) == 1
    offsets = [c.get_offsets() for c in fig.axes[0].collections]
    assert any(np.allclose(o, keys.numpy()) for o in offsets)
    assert any(np.allclose(o, output[None].numpy()) for o in offsets)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((torch.rand(3), torch.rand(3), 0.5, torch.rand(4), 0.1), r"weights: expected shape \(S\) with S=3"),
        ((torch.rand(3), torch.rand(2), 0.5, torch.rand(3), 0.1), r"values: expected shape \(S\) with S=3"),
        ((torch.rand(3, 2), torch.rand(3), 0.5, torch.rand(3), 0.1), r"query: expected shape \(2\)"),
        ((torch.rand(3, 4), torch.rand(3), 0.5, torch.rand(3), 0.1), r"keys: expected shape \(S, 2\)"),
        ((torch.rand(3), torch.rand(3), 0.5, torch.rand(3), [0.1, 0.2]), r"output: expected shape \(1\)"),
    ],
)
def test_plot_soft_lookup_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        viz.plot_soft_lookup(*args)


# ---------------------------------------------------------------------------------------------------
# plot_kernel_regression, plot_alignment
# ---------------------------------------------------------------------------------------------------


def test_plot_kernel_regression_draws_the_training_points_the_truth_and_each_predictor():
    x_train = torch.tensor([0.0, 0.4, 1.1, 2.0])
    y_train = torch.tensor([1.0, -0.5, 0.3, 2.0])
    x_query = torch.linspace(0, 2, 9)
    predictions = {"narrow": torch.sin(x_query), "wide": torch.full((9,), float(y_train.mean()))}
    fig = viz.plot_kernel_regression(x_query, predictions, x_train, y_train, truth=x_query**2, title="NW")
    (ax,) = fig.axes
    np.testing.assert_allclose(ax.collections[0].get_offsets(), torch.stack((x_train, y_train), 1).numpy())
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines) == ["true function", "narrow", "wide"]
    for name, curve in {"true function": x_query**2, **predictions}.items():
        np.testing.assert_allclose(lines[name].get_xdata(), x_query.numpy(), rtol=1e-6)
        np.testing.assert_allclose(lines[name].get_ydata(), curve.numpy(), rtol=1e-6)
    assert lines["true function"].get_linestyle() == "--"
    assert [t.get_text() for t in ax.get_legend().get_texts()][0] == "training points (keys, values)"
    assert ax.get_title() == "NW"


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((torch.rand(5), {"a": torch.rand(4)}, torch.rand(3), torch.rand(3)), {}, r"predictions\['a'\]"),
        ((torch.rand(5), {}, torch.rand(3), torch.rand(3)), {}, "predictions: expected a non-empty mapping"),
        ((torch.rand(5), {"a": torch.rand(5)}, torch.rand(3), torch.rand(2)), {}, r"y_train: expected shape"),
        (
            (torch.rand(5), {"a": torch.rand(5)}, torch.rand(3), torch.rand(3)),
            {"truth": torch.rand(6)},
            "truth",
        ),
    ],
)
def test_plot_kernel_regression_rejects_bad_input(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        viz.plot_kernel_regression(*args, **kwargs)


def test_plot_alignment_puts_every_snapshot_on_one_scale_with_both_sentences():
    snapshots = softmax_rows(3, 4, 5)  # (N, T, S)
    source, target = ["a", "grey", "fox", "runs", "<pad>"], ["un", "renard", "gris", "court"]
    fig = viz.plot_alignment(snapshots, source_words=source, target_words=target, titles=["0", "15", "200"])
    panels = heatmaps_of(fig)
    assert [ax.get_title() for ax in panels] == ["0", "15", "200"] and len(fig.axes) == 4  # and a colour bar
    for ax, weights in zip(panels, snapshots):
        np.testing.assert_allclose(cells_of(ax), weights.numpy(), rtol=1e-6)
        assert ax.images[0].get_clim() == (0.0, pytest.approx(float(snapshots.max())))
        assert [label.get_text() for label in ax.get_xticklabels()] == source
        assert not ax.texts  # several panels: the colour speaks
    assert [label.get_text() for label in panels[0].get_yticklabels()] == target
    assert not any(label.get_visible() for label in panels[1].get_yticklabels())
    assert "source word" in fig.get_supxlabel() and "target word" in fig.get_supylabel()


def test_plot_alignment_writes_the_weights_of_one_small_matrix():
    weights = torch.tensor([[0.9, 0.1, 0.0], [0.0, 0.2, 0.8], [0.0, 0.7, 0.3]])
    fig = viz.plot_alignment(
        weights, source_words=["the", "black", "cat"], target_words=["le", "chat", "noir"]
    )
    ax = fig.axes[0]  # the heatmap, then its colour bar
    assert sorted(t.get_text() for t in ax.texts) == sorted(f"{w:.2f}" for w in weights.flatten().tolist())


@pytest.mark.parametrize(
    ("weights", "kwargs", "match"),
    [
        (torch.rand(3), {}, r"weights: expected shape \(T, S\) or \(N, T, S\)"),
        (torch.rand(2, 3), {"source_words": ["a", "b"]}, r"source_words: expected S=3 labels"),
        (torch.rand(2, 3), {"target_words": ["x"]}, r"target_words: expected T=2 labels"),
        (torch.rand(2, 2, 3), {"titles": ["only one"]}, r"titles: expected one title per matrix \(N=2\)"),
    ],
)
def test_plot_alignment_rejects_bad_input(weights, kwargs, match):
    words = {"source_words": ["a", "b", "c"], "target_words": ["x", "y"], **kwargs}
    with pytest.raises(ValueError, match=match):
        viz.plot_alignment(weights, **words)


def test_every_plot_returns_a_new_figure_and_opens_no_other():
    before = len(plt.get_fignums())
    figures = [
        viz.plot_attention(softmax_rows(2, 2)),
        viz.plot_heads(softmax_rows(2, 2, 2)),
        viz.plot_mask(causal_mask(2)),
        viz.plot_positional_encoding(torch.rand(4, 2)),
        viz.plot_encoding_curves(torch.rand(4, 2), [1]),
        viz.plot_rotation(torch.rand(2), [0.3]),
        viz.plot_curves([1, 2], {"a": [1, 2]}, xlabel="x", ylabel="y"),
        viz.plot_curves([1, 2], {"runs": [[1, 2], [2, 3]]}, xlabel="x", ylabel="y"),
        viz.plot_against_derivation([1, 2], {"a": ([1, 2], [1, 2])}, xlabel="x", ylabel="y"),
        viz.plot_curve_panels([1, 2], {"y": {"a": [1, 2]}, "z": {"a": [2, 1]}}, xlabel="x"),
        viz.plot_histograms({"a": [1, 2]}, xlabel="x"),
        viz.plot_distribution([1.0]),
        viz.plot_soft_lookup([0.0, 1.0], [1.0, 2.0], 0.5, [0.5, 0.5], 1.5),
        viz.plot_kernel_regression([0.0, 1.0], {"a": [1.0, 2.0]}, [0.5], [1.5]),
        viz.plot_alignment(softmax_rows(2, 2), source_words=["a", "b"], target_words=["x", "y"]),
    ]
    assert len({id(f) for f in figures}) == len(figures)
    assert len(plt.get_fignums()) == before + len(figures)


def test_plot_score_bias_one_panel_per_head_on_one_scale_with_zero_white():
    bias = -torch.arange(12.0).reshape(1, 3, 4).repeat(5, 1, 1) * torch.arange(1.0, 6.0)[:, None, None]
    fig = viz.plot_score_bias(bias, max_cols=3)  # ALiBi-like: never positive
    images = [ax.images[0] for ax in fig.axes if ax.images]
    assert len(images) == 5  # one panel per head; the sixth grid cell is removed
    for image in images:  # one-sided, shared: from the lowest bias of any head to 0
        assert image.get_clim() == (-float(bias.abs().max()), 0.0)
        assert image.cmap(image.norm(0.0))[:3] == pytest.approx(
            (1.0, 1.0, 1.0), abs=0.05
        )  # 0 is (near) white
    plt.close(fig)
    mixed = torch.tensor([[[-2.0, 0.5], [1.0, 0.0]]])  # T5-like: both signs
    fig = viz.plot_score_bias(mixed)
    image = fig.axes[0].images[0]
    assert image.get_clim() == (-2.0, 2.0)  # symmetric, so 0 sits in the white middle
    assert image.cmap(image.norm(0.0))[:3] == pytest.approx((1.0, 1.0, 1.0), abs=0.05)
    plt.close(fig)
    fig = viz.plot_score_bias(-mixed.clamp(max=0))  # never negative
    assert fig.axes[0].images[0].get_clim() == (0.0, 2.0)
    plt.close(fig)


def test_plot_score_bias_rejects_bad_input():
    with pytest.raises(ValueError, match=r"bias: expected shape \(H, T, S\)"):
        viz.plot_score_bias(torch.zeros(3, 4))
    with pytest.raises(ValueError, match="max_cols"):
        viz.plot_score_bias(torch.zeros(2, 3, 4), max_cols=0)


# ---------------------------------------------------------------------------------------------------
# plot_online_softmax
# ---------------------------------------------------------------------------------------------------


def test_plot_online_softmax_shows_the_estimate_so_far_and_the_final_softmax():
    x = torch.tensor([1.0, 3.0, 2.0, 0.5, 4.0])
    seen = x[:4]  # block size 2, step 2: two blocks read
    m_values = [3.0, 3.0, 4.0]
    l_values = [
        float(torch.exp(x[:2] - 3).sum()),
        float(torch.exp(seen - 3).sum()),
        float(torch.exp(x - 4).sum()),
    ]
    fig = viz.plot_online_softmax(x, m_values, l_values, block_size=2, step=2)
    left, right = fig.axes
    np.testing.assert_allclose([bar.get_height() for bar in left.patches], x.numpy())
    heights = [bar.get_height() for bar in right.patches]
    np.testing.assert_allclose(heights[:4], torch.softmax(seen, dim=-1).numpy(), rtol=1e-6)  # estimate
    np.testing.assert_allclose(heights[4:], torch.softmax(x, dim=-1).numpy(), rtol=1e-6)  # final
    assert left.lines[0].get_ydata()[0] == 3.0  # the running max after two blocks
    assert "block 2 of 3" in left.get_title()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"m_values": [1.0]}, r"m_values: expected shape \(n_blocks\)"),
        ({"step": 3}, r"step: expected an int in 1..2"),
        ({"l_values": [1.0, 0.0]}, "l_values: expected positive running sums"),
        ({"block_size": 0}, "block_size: expected a positive int"),
    ],
)
def test_plot_online_softmax_rejects_bad_input(kwargs, match):
    args = {"x": [1.0, 2.0, 3.0], "m_values": [2.0, 3.0], "l_values": [1.4, 1.5], "block_size": 2, "step": 1}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        viz.plot_online_softmax(args.pop("x"), args.pop("m_values"), args.pop("l_values"), **args)


def test_plot_token_rows_draws_one_box_per_token_and_colours_the_highlighted_ones():
    fig = viz.plot_token_rows(
        {"original": ["a", "b", "c", "d"], "input": ["a", "<X0>", "d"]},
        highlight={"original": [False, True, True, False], "input": torch.tensor([False, True, False])},
        title="span",
    )
    ax = fig.axes[0]
    colours = [patch.get_facecolor() for patch in ax.patches]
    assert len(colours) == 7
    orange = matplotlib.colors.to_rgba("#f6ad55")
    assert [c == orange for c in colours] == [False, True, True, False, False, True, False]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["original (4)", "input (3)"]
    plt.close(fig)


@pytest.mark.parametrize(
    ("rows", "highlight", "match"),
    [
        ({}, None, "rows: expected a non-empty dict"),
        ({"x": "abc"}, None, r"rows\['x'\]: expected a list of tokens"),
        ({"x": ["a"]}, {"y": [True]}, "highlight: 'y' is not a row"),
        ({"x": ["a", "b"]}, {"x": [True]}, r"highlight\['x'\]: expected 2 flags"),
    ],
)
def test_plot_token_rows_rejects_bad_input(rows, highlight, match):
    with pytest.raises(ValueError, match=match):
        viz.plot_token_rows(rows, highlight=highlight)


@pytest.mark.parametrize(("n", "tile"), [(512, 64), (100, 32), (7, 7), (5, 2)])
def test_causal_tile_kinds_agree_with_the_pairs_each_tile_holds(n, tile):
    from attn_edu.viz.flash import causal_tile_kinds

    kinds = causal_tile_kinds(n, tile)
    visible = causal_mask(n)
    for i in range(kinds.shape[0]):
        for j in range(kinds.shape[1]):
            pairs = visible[i * tile : (i + 1) * tile, j * tile : (j + 1) * tile]
            expected = 0 if not pairs.any() else (1 if pairs.all() else 2)
            assert kinds[i, j] == expected, (i, j)
    blocks = math.ceil(n / tile)
    assert int((kinds > 0).sum()) == blocks * (blocks + 1) // 2  # on and below the diagonal
    if n % tile == 0 and tile > 1:  # whole tiles: exactly the diagonal ones need a mask
        assert torch.equal(kinds.diagonal(), torch.full((blocks,), 2)) and int((kinds == 2).sum()) == blocks


def test_plot_causal_tiles_draws_the_three_kinds_of_tile():
    fig = viz.plot_causal_tiles(512, 64)
    ax = fig.axes[0]
    drawn = ax.get_images()[0].get_array()
    assert drawn.shape == (8, 8) and set(np.unique(drawn).tolist()) == {0, 1, 2}
    assert len(ax.get_legend().get_texts()) == 3
    plt.close(fig)


def test_plot_attention_memory_dashes_the_paper_count_and_keeps_zero_on_the_log_axis():
    sizes = [512, 1024, 2048]
    fig = viz.plot_attention_memory(sizes, [16.0, 64.0, 256.0], [0.0, 1.0, 2.0], heads=8)
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    paper = lines["two (n, n) matrices per head (paper)"]
    assert paper.get_linestyle() == "--"
    assert paper.get_ydata()[1] / paper.get_ydata()[0] == pytest.approx(4.0)  # quadratic in n
    assert min(lines["tiled (measured)"].get_ydata()) > 0  # 0 MiB drawn where a log axis can show it
    plt.close(fig)
    with pytest.raises(ValueError, match="one value per size"):
        viz.plot_attention_memory(sizes, [1.0], [1.0, 2.0, 3.0])


def test_plot_head_effects_draws_one_bar_per_head_coloured_by_layer():
    effects = torch.tensor([[0.5, 0.0, -0.1], [0.25, 0.75, 0.125]])  # (L, H)
    fig = viz.plot_head_effects(effects, title="ablation")
    ax = fig.axes[0]
    bars = ax.patches
    np.testing.assert_allclose([b.get_height() for b in bars], effects.flatten().numpy())
    assert [t.get_text() for t in ax.get_xticklabels()] == ["L0H0", "L0H1", "L0H2", "L1H0", "L1H1", "L1H2"]
    colours = [b.get_facecolor() for b in bars]
    assert colours[0] == colours[1] == colours[2] != colours[3] == colours[4] == colours[5]
    assert ax.get_title() == "ablation"
    with pytest.raises(ValueError, match=r"effects: expected shape \(L, H\)"):
        viz.plot_head_effects([0.1, 0.2])


# ---------------------------------------------------------------------------------------------------
# plot_masks (a row of patterns)
# ---------------------------------------------------------------------------------------------------


def test_plot_masks_draws_each_mask_as_plot_mask_does_and_counts_its_pairs():
    masks = {"causal": causal_mask(4, 6), "first key": torch.zeros(3, 5, dtype=torch.bool)}
    masks["first key"][:, 0] = True
    fig = viz.plot_masks(masks, title="two patterns")
    assert len(fig.axes) == 2 and fig.get_suptitle() == "two patterns"
    for ax, (name, mask) in zip(fig.axes, masks.items()):
        alone = viz.plot_mask(mask, legend=False)
        np.testing.assert_array_equal(image_of(ax), image_of(alone.axes[0]))
        plt.close(alone)
        pairs = int(mask.sum())
        assert ax.get_title() == f"{name}: {pairs} pairs ({pairs / mask.numel():.0%})"
    assert fig.axes[0].get_legend() is None  # one legend for the row, on the last panel
    legend = fig.axes[-1].get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["True: may attend", "False: hidden"]
    assert legend.get_title().get_text() == "mask[t, s]"


def test_plot_masks_says_what_true_means_when_the_pattern_is_not_a_mask():
    reach = causal_mask(5) & ~causal_mask(5).roll(3, dims=0)  # any bool pattern
    fig = viz.plot_masks(
        {"after 2 layers": reach}, count_pairs=False, legend=("reach[t, s]", "depends on", "no")
    )
    ax = fig.axes[0]
    assert ax.get_title() == "after 2 layers"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["True: depends on", "False: no"]
    assert ax.get_legend().get_title().get_text() == "reach[t, s]"


@pytest.mark.parametrize(
    ("masks", "kwargs", "match"),
    [
        ({}, {}, r"masks: expected a non-empty dict"),
        ({"float": torch.ones(3, 3)}, {}, r"mask: expected a bool mask"),
        ({"3-d": torch.ones(1, 3, 3, dtype=torch.bool)}, {}, r"mask: expected shape \(T, S\)"),
        ({"ok": causal_mask(3)}, {"legend": ("title", "only two")}, r"legend: expected \(title"),
    ],
)
def test_plot_masks_rejects_bad_input(masks, kwargs, match):
    with pytest.raises(ValueError, match=match):
        viz.plot_masks(masks, **kwargs)


# ---------------------------------------------------------------------------------------------------
# plot_attention_panels
# ---------------------------------------------------------------------------------------------------


def test_plot_attention_panels_draws_each_matrix_with_its_own_tokens_on_one_scale():
    small, large = softmax_rows(3, 3, seed=1), softmax_rows(9, 9, seed=2)
    fig = viz.plot_attention_panels(
        [small, large], labels=[list("abc"), list("rstuvwxyz")], titles=["toy", "real"], title="side by side"
    )
    panels = heatmaps_of(fig)
    assert len(fig.axes) == 3 and [ax.get_title() for ax in panels] == ["toy", "real"]  # + one colour bar
    for ax, weights, tokens in zip(panels, [small, large], ["abc", "rstuvwxyz"]):
        np.testing.assert_allclose(cells_of(ax), weights.numpy(), rtol=1e-6)
        assert [t.get_text() for t in ax.get_xticklabels()] == list(tokens)
        assert [t.get_text() for t in ax.get_yticklabels()] == list(tokens)
        assert ax.images[0].get_clim() == pytest.approx((0.0, max(float(small.max()), float(large.max()))))
    assert len(panels[0].texts) == 9 and not panels[1].texts  # values only in the small panel
    assert fig.get_suptitle() == "side by side"


def test_plot_attention_panels_labels_the_keys_of_a_cross_attention_panel():
    weights = softmax_rows(2, 4)
    fig = viz.plot_attention_panels([weights], labels=[list("wxyz")], titles=["cross"])
    (ax,) = heatmaps_of(fig)
    assert [t.get_text() for t in ax.get_xticklabels()] == list("wxyz")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0", "1"]  # no query labels given: positions


@pytest.mark.parametrize(
    ("weights", "kwargs", "match"),
    [
        (torch.rand(2, 2), {}, r"weights: expected a non-empty list"),
        ([], {}, r"weights: expected a non-empty list"),
        ([torch.rand(2)], {}, r"weights\[0\]: expected shape \(T, S\)"),
        ([torch.rand(2, 2)], {"titles": ["a", "b"]}, r"titles: expected one entry per panel \(1\)"),
        ([torch.rand(2, 3)], {"labels": [["a"]]}, r"labels\[0\]: expected T=2 or S=3 token labels"),
    ],
)
def test_plot_attention_panels_rejects_bad_input(weights, kwargs, match):
    with pytest.raises(ValueError, match=match):
        viz.plot_attention_panels(weights, **kwargs)


# ----------------------------------------------------------------------------- a model learning to copy (nb 13)


def test_plot_training_loss_draws_each_step_its_running_mean_and_the_shaded_stretches():
    losses = [4.0] * 30 + [3.0, 2.0, 1.0] + [0.5] * 27
    fig = viz.plot_training_loss(losses, guess=4.16, window=5, plateau=(5, 25), fall=(28, 38))
    ax = fig.axes[0]
    raw, mean, guess = ax.get_lines()
    assert raw.get_xdata().tolist() == list(range(1, 61)) and raw.get_ydata().tolist() == losses
    assert mean.get_xdata().tolist() == list(range(5, 61))  # a mean of 5 steps exists from step 5 on
    for step, value in zip(mean.get_xdata(), mean.get_ydata()):
        assert value == pytest.approx(sum(losses[step - 5 : step]) / 5)
    assert set(guess.get_ydata().tolist()) == {4.16}
    spans = sorted(patch.get_extents().width for patch in ax.patches)
    assert len(ax.patches) == 2 and spans[0] > 0  # plateau and fall, both drawn
    assert [t.get_text() for t in ax.get_legend().get_texts()][-2:] == [
        "plateau (steps 5-25)",
        "steepest fall (steps 28-38)",
    ]
    plt.close(fig)
    assert len(viz.plot_training_loss(losses, guess=4.16).axes[0].patches) == 0  # nothing to shade


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"losses": [[1.0, 2.0]]}, r"losses: expected shape \(N\)"),
        ({"window": 0}, "window"),
        ({"window": 61}, "window: expected at most N=60"),
        ({"plateau": (30, 10)}, r"plateau: expected \(first, last\) steps with 1 <= first < last <= 60"),
        ({"fall": (1, 61)}, "fall: expected"),
        ({"guess": float("nan")}, "guess: expected a finite number, got nan"),
    ],
)
def test_plot_training_loss_rejects_bad_input(kwargs, match):
    arguments = {"losses": [1.0] * 60, "guess": 4.0, **kwargs}
    with pytest.raises(ValueError, match=match):
        viz.plot_training_loss(arguments.pop("losses"), **arguments)


def test_plot_loss_by_repeat_puts_each_prediction_at_its_position_and_marks_each_second_copy():
    short, long = torch.rand(31).tolist(), torch.rand(47).tolist()  # n = 16 and n = 24 tokens, repeated once
    fig = viz.plot_loss_by_repeat({"n = 16": short, "n = 24": long}, guess=4.16)
    lines = fig.axes[0].get_lines()
    curves = [line for line in lines if len(line.get_xdata()) > 2]
    starts = [line for line in lines if len(set(line.get_xdata())) == 1]
    assert [c.get_xdata().tolist() for c in curves] == [list(range(1, 32)), list(range(1, 48))]
    assert [c.get_ydata().tolist() for c in curves] == [short, long]
    assert [list(s.get_xdata())[0] for s in starts] == [16, 24]  # the first token of each second copy
    assert [s.get_color() for s in starts] == [c.get_color() for c in curves]  # each in its curve's colour
    guess = [line for line in lines if line.get_label() == "guessing: log V"]
    assert len(guess) == 1 and set(guess[0].get_ydata().tolist()) == {4.16}
    assert guess[0].get_xdata().tolist() == [1, 47]


@pytest.mark.parametrize(
    ("curves", "match"),
    [
        ({}, "curves: expected a non-empty dict"),
        ({"n = 2": [1.0, 2.0, 3.0, 4.0]}, r"curves\['n = 2'\]: expected 2n - 1 losses .* got an even T=4"),
        ({"n = 2": [[1.0, 2.0, 3.0]]}, r"curves\['n = 2'\]: expected shape \(T\)"),
    ],
)
def test_plot_loss_by_repeat_rejects_bad_input(curves, match):
    with pytest.raises(ValueError, match=match):
        viz.plot_loss_by_repeat(curves)


# ---------------------------------------------------------------------------------------------------
# moving_average, plot_loss_bands
# ---------------------------------------------------------------------------------------------------


def test_moving_average_is_a_trailing_mean_that_starts_at_the_first_value():
    values = torch.randn(30, generator=torch.Generator().manual_seed(0)).double().numpy()
    window = 5
    full = np.convolve(values, np.ones(window) / window, mode="valid")  # the means over whole windows
    smoothed = viz.moving_average(values, window)
    np.testing.assert_allclose(smoothed[window - 1 :], full, rtol=1e-12)
    np.testing.assert_allclose(
        smoothed[:window], np.cumsum(values[:window]) / np.arange(1, window + 1), rtol=1e-12
    )
    np.testing.assert_array_equal(viz.moving_average(values, 1), values)
    np.testing.assert_allclose(viz.moving_average([2.5] * 7, 3), [2.5] * 7)


def test_plot_loss_bands_draws_the_median_of_the_smoothed_runs_a_band_and_the_chance_line():
    generator = torch.Generator().manual_seed(0)
    runs = {
        "pre-norm": (2.3 * torch.exp(-torch.arange(40) / 15) + 0.1 * torch.rand(3, 40, generator=generator)),
        "post-norm": 2.3 + 0.1 * torch.rand(3, 40, generator=generator),
    }
    fig = viz.plot_loss_bands(runs, window=4, chance=2.3, title="lr = 1e-02")
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    for name, losses in runs.items():
        smoothed = np.stack([viz.moving_average(row, 4) for row in losses.double().numpy()])
        np.testing.assert_allclose(lines[name].get_ydata(), np.median(smoothed, axis=0), rtol=1e-6)
        assert lines[name].get_xdata().tolist() == list(range(1, 41))
    assert set(lines["chance"].get_ydata()) == {2.3}
    assert len(ax.collections) == 2  # one band per set-up
    assert ax.get_title() == "lr = 1e-02" and "4-step mean" in ax.get_ylabel()


@pytest.mark.parametrize(
    ("losses", "kwargs", "match"),
    [
        ({}, {}, "losses: expected a non-empty dict"),
        (
            {"a": [[1.0, 2.0]], "b": [[1.0, 2.0, 3.0]]},
            {},
            r"losses\['b'\]: expected shape \(runs, N\) with N=2",
        ),
        ({"a": [1.0, 2.0]}, {}, r"losses\['a'\]: expected shape \(runs, N\)"),
        ({"a": [[1.0, 2.0]]}, {"window": 0}, "window"),
    ],
)
def test_plot_loss_bands_rejects_bad_input(losses, kwargs, match):
    with pytest.raises(ValueError, match=match):
        viz.plot_loss_bands(losses, **kwargs)


def test_plot_shift_fit_draws_one_point_per_pair_on_log_axes_and_marks_the_data_length():
    periods = 2 * math.pi * 10.0 ** torch.linspace(0, 4, 8)
    errors = torch.tensor([0.0, 1e-15, 1e-13, 1e-10, 1e-4, 0.3, 0.7, 1.1])
    fig = viz.plot_shift_fit(periods, errors, 500, title="fit")
    ax = fig.axes[0]
    points, marker = ax.get_lines()
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
    np.testing.assert_allclose(points.get_xdata(), periods.numpy())
    assert points.get_ydata().min() == 1e-16  # an exact 0 is drawn at the floor of the log axis
    np.testing.assert_allclose(points.get_ydata()[1:], errors[1:].numpy())
    assert list(marker.get_xdata()) == [500, 500] and ax.get_title() == "fit"
    plt.close(fig)
    with pytest.raises(ValueError, match="one entry per pair"):
        viz.plot_shift_fit(periods, errors[:3], 500)


def test_plot_length_test_draws_each_scheme_from_lag_on_with_the_baseline_and_the_training_band():
    runs = torch.rand(3, 12)
    fig = viz.plot_length_test(
        {"Shaw": runs, "learned (4 rows)": runs[:, :4]}, torch.linspace(1, 0, 12), lag=2, train_length=4
    )
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines) == ["Shaw", "learned (4 rows)", "best from a bag of words"]
    assert list(lines["Shaw"].get_xdata()) == list(range(2, 12))
    np.testing.assert_allclose(lines["Shaw"].get_ydata(), runs[:, 2:].median(0).values.numpy(), rtol=1e-6)
    assert list(lines["learned (4 rows)"].get_xdata()) == [2, 3]  # the short curve stops where its runs stop
    assert list(lines["best from a bag of words"].get_xdata()) == list(range(2, 12))
    assert (
        lines["Shaw"].get_color() != lines["learned (4 rows)"].get_color()
    )  # relative blue, absolute orange
    assert ax.get_xlim() == (-0.5, 11.5)
    band = [p for p in ax.patches if p.get_label() == "training length (4)"]
    assert len(band) == 1
    plt.close(fig)
    with pytest.raises(ValueError, match="runs, T"):
        viz.plot_length_test({"x": runs[0]}, torch.ones(12), lag=2, train_length=4)


@pytest.mark.parametrize(("num_blocks", "query_block", "key_block"), [(4, 1, 2), (3, 0, 0), (5, 4, 1)])
def test_plot_flash_dataflow_shades_the_key_blocks_already_streamed(num_blocks, query_block, key_block):
    from matplotlib.patches import Rectangle

    fig = viz.plot_flash_dataflow(num_blocks=num_blocks, query_block=query_block, key_block=key_block)
    ax = fig.axes[0]
    blocks = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_width() == pytest.approx(0.8)]
    assert len(blocks) == 4 * num_blocks  # Q, K, V and O in HBM, num_blocks blocks each
    shaded = [p for p in blocks if matplotlib.colors.to_hex(p.get_facecolor()) != "#ffffff"]
    for role, column in (("key", 1.6), ("value", 2.8)):  # K's and V's blocks: read (pale) and the current one
        faces = [p.get_facecolor() for p in shaded if p.get_x() == pytest.approx(column)]
        assert len(faces) == key_block + 1
        assert faces[key_block] == matplotlib.colors.to_rgba(viz.ROLE_COLORS[role])  # the current block
        hue = colorsys.rgb_to_hsv(*faces[key_block][:3])[0]
        for face in faces[:key_block]:  # already read: its role's hue, paler
            assert colorsys.rgb_to_hsv(*face[:3])[0] == pytest.approx(hue, abs=0.02)
            assert contrast_ratio(face, "white") < contrast_ratio(faces[key_block], "white")
    labels = {t.get_text() for t in ax.texts}
    assert f"$Q_{{{query_block}}}$" in labels and f"$K_{{{key_block}}}$" in labels
    plt.close(fig)
    with pytest.raises(ValueError, match="key_block"):
        viz.plot_flash_dataflow(num_blocks=3, key_block=3)


# --- notebook 10: decoding with a KV cache (attn_edu/viz/decoding.py) ---


def test_plot_decode_times_draws_medians_ratios_and_base2_ticks():
    cache_s = np.array([[0.01, 0.02, 0.04], [0.012, 0.021, 0.05], [0.011, 0.03, 0.045]])
    no_cache_s = cache_s * np.array([2.0, 4.0, 8.0])
    fig = viz.plot_decode_times([32, 64, 128], cache_s, no_cache_s)
    left, right = fig.axes
    assert left.get_xticks().tolist() == [32, 64, 128] and right.get_xscale() == "log"
    assert [t.get_text() for t in left.get_xticklabels()] == ["32", "64", "128"]
    medians = {line.get_label(): line.get_ydata().tolist() for line in left.get_lines()}
    assert medians["KV cache"] == np.median(cache_s, axis=0).tolist()
    assert right.get_lines()[0].get_ydata() == pytest.approx([2.0, 4.0, 8.0])  # the paired ratios
    plt.close(fig)
    with pytest.raises(ValueError, match="no_cache_s"):
        viz.plot_decode_times([32, 64, 128], cache_s, no_cache_s[:2])
    with pytest.raises(ValueError, match="> 0"):
        viz.plot_decode_times([32, 64, 128], -cache_s, no_cache_s)


def test_plot_cache_vs_weights_draws_each_curve_and_each_weight_line():
    fig = viz.plot_cache_vs_weights(
        [1024, 2048, 4096], {"a": [0.5, 1.0, 2.0], "b": [0.1, 0.2, 0.4]}, {"w": 1.5}
    )
    ax = fig.axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"a", "b", "w"} and ax.get_xscale() == ax.get_yscale() == "log"
    assert set(lines["w"].get_ydata()) == {1.5} and lines["b"].get_ydata().tolist() == [0.1, 0.2, 0.4]
    plt.close(fig)
    with pytest.raises(ValueError, match="weights_gib"):
        viz.plot_cache_vs_weights([1024], {"a": [1.0]}, {"w": 0.0})


def test_plot_sampling_rules_titles_each_panel_with_its_support():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    plain = torch.softmax(logits, dim=-1)
    kept = torch.softmax(logits.masked_fill(torch.arange(4) >= 2, float("-inf")), dim=-1)
    fig = viz.plot_sampling_rules(
        {"plain": plain, "top-2": kept}, labels=list("abcd"), reference=plain, columns=3
    )
    assert [ax.get_title() for ax in fig.axes] == ["plain: support 4", "top-2: support 2"]
    legend = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert legend == ["probability", "plain softmax"]
    plt.close(fig)
    fig = viz.plot_sampling_rules({name: plain for name in "abcde"}, columns=3)  # 2 x 3, one panel hidden
    assert sum(ax.get_visible() for ax in fig.axes) == 5
    plt.close(fig)
    with pytest.raises(ValueError, match="rules"):
        viz.plot_sampling_rules({})
