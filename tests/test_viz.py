"""attn_edu.viz: each figure shows exactly the numbers it was given, labels what they mean, and
rejects bad input with a message naming the argument."""

import math

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.patches import Arc, FancyArrowPatch

from attn_edu import viz
from attn_edu.masks import causal_mask

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
    assert colorbar.get_ylabel() == "attention weight"


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
        viz.plot_histograms({"a": [1, 2]}, xlabel="x"),
        viz.plot_distribution([1.0]),
        viz.plot_soft_lookup([0.0, 1.0], [1.0, 2.0], 0.5, [0.5, 0.5], 1.5),
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
