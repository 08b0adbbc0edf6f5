"""attn_edu.widgets: moving a control recomputes the numbers (checked against independent formulas),
replaces the figure, shows it in the Output, and leaves no figure open."""

import ast
import math
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.patches import Arc

from attn_edu import widgets
from attn_edu.widgets import explorer

matplotlib.use("Agg")  # no display needed; set before any figure exists


@pytest.fixture(autouse=True)
def no_leftover_figures():
    before = set(plt.get_fignums())
    yield
    leftover = set(plt.get_fignums()) - before
    for number in leftover:
        plt.close(number)
    assert not leftover, "an explorer left figures open"


def seeded(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------------------------------------------
# The Explorer machinery
# ---------------------------------------------------------------------------------------------------


def test_moving_a_control_replaces_the_figure_and_shows_it(monkeypatch):
    shown = []
    monkeypatch.setattr(explorer, "get_ipython", lambda: object())  # pretend a kernel is running
    # the figure goes into the Output's synced state (one display_data entry), replacing the old one
    monkeypatch.setattr(explorer.widgets.Output, "append_display_data", lambda self, fig: shown.append(fig))
    ex = widgets.rope_explorer(8)
    first = ex.figure
    ex.controls["position"].value = 7
    assert ex.figure is not first and shown == [first, ex.figure]
    assert not plt.fignum_exists(first.number) and not plt.fignum_exists(ex.figure.number)
    assert ex.figure.axes  # closed in pyplot, still readable
    for position in range(10):
        ex.controls["position"].value = position
    assert len(shown) == 12


def test_set_moves_several_controls_with_one_redraw(monkeypatch):
    ex = widgets.mask_explorer(4)
    calls = []
    view = ex._view
    monkeypatch.setattr(ex, "_view", lambda **v: calls.append(v) or view(**v))
    ex.set(T=3, S=5, padding=True, length=4)
    assert len(calls) == 1 and calls[0]["S"] == 5
    with pytest.raises(ValueError, match=r"values: unknown controls \['bogus'\]"):
        ex.set(bogus=1)
    with pytest.raises(ValueError, match=r"length: 9 is outside the control's range"):
        ex.set(length=9)  # only 5 keys


def test_explorer_displays_as_its_widget_box():
    ex = widgets.rope_explorer(8)
    bundle = ex._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert ex.widget.children[-1] is ex.output
    assert set(ex.controls.values()) <= set(ex.widget.children[-2].children)


def test_the_package_exports_every_explorer_and_the_core_never_imports_it():
    explorers = [name for name in widgets.__all__ if name.endswith("_explorer")]
    assert len(explorers) == 17
    for name in explorers:  # re-exported from the concept file that holds it
        assert getattr(widgets, name).__module__.startswith("attn_edu.widgets.")
    library = Path(widgets.__file__).parents[1]
    for path in library.rglob("*.py"):
        if "widgets" in path.relative_to(library).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            assert not any(n.startswith("attn_edu.widgets") for n in names), f"{path} imports the widgets"


# ---------------------------------------------------------------------------------------------------
# soft_lookup_explorer
# ---------------------------------------------------------------------------------------------------


def test_soft_lookup_weights_are_a_gaussian_kernel_over_the_keys():
    keys = torch.tensor([0.0, 1.0, 2.0, 3.5])
    values = torch.tensor([5.0, -1.0, 2.0, 0.0])
    ex = widgets.soft_lookup_explorer(keys, values)
    ex.set(query=1.3, temperature=0.5)
    kernel = torch.exp(-((1.3 - keys) ** 2) / 0.5)  # Nadaraya–Watson: normalised Gaussian kernel
    expected = kernel / kernel.sum()
    torch.testing.assert_close(ex.state["weights"], expected)
    torch.testing.assert_close(ex.state["output"], expected @ values)
    star = ex.figure.axes[0].collections[1]
    np.testing.assert_allclose(star.get_offsets(), [[1.3, float(expected @ values)]], rtol=1e-5)


def test_soft_lookup_temperature_moves_between_hard_and_uniform():
    keys = torch.tensor([0.0, 1.0, 2.0, 3.0])
    values = torch.tensor([10.0, 20.0, 30.0, 40.0])
    ex = widgets.soft_lookup_explorer(keys, values)
    ex.set(query=2.1, temperature=0.01)
    assert ex.state["weights"][2] > 0.99 and float(ex.state["output"]) == pytest.approx(30.0, abs=0.1)
    ex.set(temperature=10.0)
    assert float(ex.state["weights"].max() - ex.state["weights"].min()) < 0.25
    before = ex.state["weights"].clone()
    ex.controls["query"].value = 0.0
    assert not torch.allclose(before, ex.state["weights"])


def test_soft_lookup_with_two_dimensional_keys_has_two_query_sliders():
    keys = seeded(6, 2)
    values = seeded(6, 2, seed=1)
    ex = widgets.soft_lookup_explorer(keys, values)
    assert list(ex.controls) == ["query", "query_y", "temperature"]
    ex.set(query=float(keys[4, 0]), query_y=float(keys[4, 1]), temperature=0.01)
    assert int(ex.state["weights"].argmax()) == 4
    assert ex.state["output"].shape == (2,)


@pytest.mark.parametrize(
    ("keys", "values", "kwargs", "match"),
    [
        (torch.rand(4, 3), torch.rand(4), {}, r"keys: expected shape \(S,\) or \(S, 2\)"),
        (torch.rand(4), torch.rand(5), {}, r"values: expected shape \(S\) with S=4"),
        (torch.rand(4), torch.rand(4), {"temperature": 0.0}, r"temperature: expected a number > 0"),
        (torch.rand(4), torch.rand(4, 2), {}, r"values: expected shape \(S\)"),
    ],
)
def test_soft_lookup_rejects_bad_input(keys, values, kwargs, match):
    with pytest.raises(ValueError, match=match):
        widgets.soft_lookup_explorer(keys, values, **kwargs)


# ---------------------------------------------------------------------------------------------------
# scaling_explorer
# ---------------------------------------------------------------------------------------------------


def test_scaling_unscaled_softmax_saturates_as_d_k_grows_scaled_does_not():
    ex = widgets.scaling_explorer(num_queries=64, num_keys=16)
    entropy = {}
    for d_k in (4, 64, 1024):
        ex.controls["d_k"].value = d_k
        assert ex.state["d_k"] == d_k
        for name in ("weights_scaled", "weights_unscaled"):
            torch.testing.assert_close(ex.state[name].sum(-1), torch.ones(64))
        entropy[d_k] = (ex.state["entropy_scaled"], ex.state["entropy_unscaled"])
    uniform = math.log(16)
    assert entropy[4][1] > entropy[64][1] > entropy[1024][1]  # unscaled: collapses onto one key
    assert entropy[1024][1] < 0.3 * uniform and ex.state["max_weight_unscaled"] > 0.8
    scaled = [entropy[d][0] for d in (4, 64, 1024)]
    assert max(scaled) - min(scaled) < 0.15 * uniform  # scaled: the same spread at every d_k
    assert min(scaled) > 0.7 * uniform


def test_scaling_temperature_flattens_and_figure_changes():
    ex = widgets.scaling_explorer(num_queries=32)
    cold = ex.state["entropy_scaled"]
    first = ex.figure
    ex.controls["temperature"].value = 5.0
    assert ex.state["entropy_scaled"] > cold and ex.figure is not first
    assert "temperature 5" in ex.figure.axes[0].get_title()


def test_scaling_a_high_temperature_spreads_even_the_unscaled_rows_at_d_k_1024():
    ex = widgets.scaling_explorer()  # the notebook's explorer: 200 queries, 16 keys
    ex.set(d_k=1024, temperature=1.0)
    cold = dict(ex.state)
    ex.set(temperature=10.0)
    hot = dict(ex.state)
    assert cold["entropy_unscaled"] < 0.1 * math.log(16) < cold["entropy_scaled"]  # saturated, scaled is not
    assert hot["entropy_unscaled"] > 3 * cold["entropy_unscaled"]
    assert hot["entropy_scaled"] > cold["entropy_scaled"]


def test_scaling_rejects_bad_sizes():
    with pytest.raises(ValueError, match=r"num_keys: expected a positive int"):
        widgets.scaling_explorer(num_keys=0)


# ---------------------------------------------------------------------------------------------------
# mask_explorer
# ---------------------------------------------------------------------------------------------------


def expected_mask(T, S, causal, padding, length, sliding_window, window):
    """The rules of notebook 04/11, one cell at a time (bottom-right: query t sits at S - T + t)."""
    out = torch.zeros(T, S, dtype=torch.bool)
    for t in range(T):
        p = S - T + t
        for s in range(S):
            ok = (not causal or s <= p) and (not padding or s < length)
            if sliding_window:
                ok = ok and ((0 <= p - s < window) if causal else abs(p - s) < window)
            out[t, s] = ok
    return out


@pytest.mark.parametrize(
    "settings",
    [
        {"T": 5, "S": 5, "causal": True, "padding": False, "length": 4, "sliding_window": False, "window": 2},
        {"T": 3, "S": 6, "causal": True, "padding": True, "length": 4, "sliding_window": False, "window": 2},
        {"T": 6, "S": 4, "causal": True, "padding": False, "length": 3, "sliding_window": False, "window": 2},
        {"T": 5, "S": 7, "causal": True, "padding": True, "length": 6, "sliding_window": True, "window": 3},
        {"T": 6, "S": 6, "causal": False, "padding": False, "length": 5, "sliding_window": True, "window": 2},
        {"T": 4, "S": 5, "causal": False, "padding": True, "length": 2, "sliding_window": False, "window": 2},
        {
            "T": 4,
            "S": 4,
            "causal": False,
            "padding": False,
            "length": 3,
            "sliding_window": False,
            "window": 2,
        },
    ],
)
def test_mask_explorer_combines_the_rules(settings):
    ex = widgets.mask_explorer(4)
    ex.set(**settings)
    want = expected_mask(**settings)
    torch.testing.assert_close(ex.state["mask"], want)
    np.testing.assert_array_equal(np.asarray(ex.figure.axes[0].images[0].get_array()), want.int().numpy())
    assert ex.state["fully_masked_rows"] == [t for t in range(settings["T"]) if not want[t].any()]


def test_mask_explorer_reports_fully_masked_rows_and_follows_key_count():
    ex = widgets.mask_explorer(4)
    ex.set(T=6, S=4)  # causal with more queries than keys: the first two see nothing
    assert ex.state["fully_masked_rows"] == [0, 1]
    assert "fully masked rows [0, 1]" in ex.figure.axes[0].get_title()
    ex.set(S=8, padding=True, length=7)
    ex.controls["S"].value = 3  # fewer keys: the padding length follows, one short of S
    assert ex.controls["length"].max == 2 and ex.controls["length"].value == 2
    assert ex.state["mask"].shape == (6, 3)


@pytest.mark.parametrize("S", range(1, 13))
def test_mask_explorer_padding_at_any_slider_position_hides_a_key(S):
    # Ticking padding is never a dead control: at every length the slider offers, some key is hidden,
    # and where no key can be hidden (a single key) the title says so.
    ex = widgets.mask_explorer(4, S)
    length = ex.controls["length"]
    assert length.value == length.max, "the slider starts at its largest length"
    for n in range(length.min, length.max + 1):
        ex.set(causal=False, padding=True, length=n)
        hidden = ~ex.state["mask"].any(dim=0)  # (S,): keys no query sees
        if S > 1:
            assert hidden.any() and hidden.tolist() == [s >= n for s in range(S)], (S, n)
        else:
            assert not hidden.any() and "none hidden" in ex.figure.axes[0].get_title()
    ex.set(S=min(S + 3, 12))  # more keys: the slider's range follows
    assert length.max == min(S + 3, 12) - 1


def test_mask_explorer_rejects_bad_sizes():
    with pytest.raises(ValueError, match=r"T, S: expected at most max_len=12"):
        widgets.mask_explorer(13)
    with pytest.raises(ValueError, match=r"T: expected a positive int"):
        widgets.mask_explorer(0)


# ---------------------------------------------------------------------------------------------------
# head_explorer
# ---------------------------------------------------------------------------------------------------


def test_head_explorer_shows_the_selected_head():
    layers = [torch.softmax(seeded(3, 4, 4, seed=n), dim=-1) for n in range(2)]
    ex = widgets.head_explorer(layers, tokens=list("abcd"))
    ex.set(layer=1, head=2)
    torch.testing.assert_close(ex.state["weights"], layers[1][2])
    heatmap = ex.figure.axes[0]
    np.testing.assert_allclose(np.asarray(heatmap.images[0].get_array()), layers[1][2].numpy(), rtol=1e-6)
    assert heatmap.get_title() == "layer 1, head 2"
    assert [t.get_text() for t in heatmap.get_xticklabels()] == list("abcd")
    ex.controls["head"].value = 0
    torch.testing.assert_close(ex.state["weights"], layers[1][0])


def test_head_explorer_follows_layers_with_fewer_heads():
    layers = [torch.softmax(seeded(4, 3, 5), -1), torch.softmax(seeded(2, 3, 5, seed=1), -1)]
    ex = widgets.head_explorer(layers, tokens=list("vwxyz"))  # 5 tokens = S: keys only
    ex.set(head=3)
    ex.controls["layer"].value = 1
    assert [value for _, value in ex.controls["head"].options] == [0, 1]
    assert ex.state["head"] == 0
    torch.testing.assert_close(ex.state["weights"], layers[1][0])
    ex.controls["layer"].value = 0
    assert len(ex.controls["head"].options) == 4


@pytest.mark.parametrize(
    ("layers", "tokens", "match"),
    [
        ([], None, r"weights_by_layer: expected a non-empty list"),
        (torch.rand(2, 3, 3), None, r"weights_by_layer: expected a non-empty list"),
        ([torch.rand(3, 3)], None, r"weights_by_layer\[0\]: expected shape \(H, T, S\)"),
        ([torch.rand(2, 3, 3), torch.rand(2, 4, 3)], None, r"weights_by_layer\[1\]: expected shape .*T=3"),
        ([torch.rand(2, 3, 4)], ["a", "b"], r"tokens: expected T=3 or S=4"),
        ([torch.rand(2, 3, 3) - 2], None, r"weights_by_layer\[0\]: expected attention weights >= 0"),
    ],
)
def test_head_explorer_rejects_bad_input(layers, tokens, match):
    with pytest.raises(ValueError, match=match):
        widgets.head_explorer(layers, tokens)


# ---------------------------------------------------------------------------------------------------
# positional_explorer
# ---------------------------------------------------------------------------------------------------


def test_positional_explorer_curve_and_wavelength_follow_the_dimension():
    ex = widgets.positional_explorer(40, 16, base=100.0)
    for dimension in (0, 5, 15):
        ex.controls["dimension"].value = dimension
        i = dimension // 2
        omega = 100.0 ** (-2 * i / 16)
        pos = torch.arange(40, dtype=torch.float64)
        curve = (pos * omega).sin() if dimension % 2 == 0 else (pos * omega).cos()
        torch.testing.assert_close(ex.state["curve"].double(), curve, atol=1e-6, rtol=0)
        assert ex.state["wavelength"] == pytest.approx(2 * math.pi / omega)
        table, curves, _ = ex.figure.axes  # the table, the curves, the table's colour bar
        assert table.get_lines()[0].get_xdata()[0] == dimension  # the marker on the table
        drawn = {line.get_label(): line.get_ydata() for line in curves.get_lines()}
        np.testing.assert_allclose(drawn[f"dim {dimension}"], curve.numpy(), atol=1e-6)
        assert f"{2 * math.pi / omega:.1f} positions" in curves.get_title()


def test_positional_explorer_rejects_odd_dim():
    with pytest.raises(ValueError, match=r"dim: expected an even number"):
        widgets.positional_explorer(8, 7)


# ---------------------------------------------------------------------------------------------------
# rope_explorer
# ---------------------------------------------------------------------------------------------------


def test_rope_explorer_turns_the_pair_by_position_times_frequency():
    ex = widgets.rope_explorer(16, base=10000.0, vector=(0.6, 0.8))
    for position, pair in [(0, 0), (3, 0), (5, 2), (20, 7)]:
        ex.set(position=position, pair=pair)
        angle = position * 10000.0 ** (-2 * pair / 16)
        assert ex.state["angle"] == pytest.approx(angle, rel=1e-6)
        start = complex(0.6, 0.8) * complex(
            math.cos(angle), math.sin(angle)
        )  # a turn is a unit complex product
        torch.testing.assert_close(
            ex.state["rotated"], torch.tensor([start.real, start.imag]), atol=1e-5, rtol=0
        )
        arcs = [p for p in ex.figure.axes[0].patches if isinstance(p, Arc)]
        if position == 0:
            assert arcs == []
        else:
            assert arcs[0].theta2 - arcs[0].theta1 == pytest.approx(math.degrees(angle), abs=1e-3)


def test_rope_explorer_rejects_bad_input():
    with pytest.raises(ValueError, match=r"head_dim"):
        widgets.rope_explorer(7)
    with pytest.raises(ValueError, match=r"vector: expected shape \(2\)"):
        widgets.rope_explorer(8, vector=(1.0, 0.0, 0.0))


# ---------------------------------------------------------------------------------------------------
# sampling_explorer
# ---------------------------------------------------------------------------------------------------


def filtered_by_hand(logits, temperature, top_k, top_p):
    """Brute force: rank the tokens, keep a prefix of the ranking, renormalise."""
    if temperature == 0:
        out = torch.zeros_like(logits)
        out[logits.argmax()] = 1.0
        return out
    probs = torch.softmax(logits / temperature, dim=-1)
    ranked = sorted(range(len(logits)), key=lambda i: -float(probs[i]))
    keep = ranked[:top_k] if top_k > 0 else ranked
    if top_p < 1:  # smallest prefix (of what top-k kept, renormalised) whose mass reaches top_p
        kept_mass = sum(float(probs[i]) for i in keep)
        total, prefix = 0.0, []
        for i in keep:
            prefix.append(i)
            total += float(probs[i]) / kept_mass
            if total >= top_p:
                break
        keep = prefix
    out = torch.zeros_like(probs)
    out[keep] = probs[keep] / probs[keep].sum()
    return out


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"),
    [(1.0, 0, 1.0), (0.5, 0, 1.0), (2.0, 3, 1.0), (1.0, 0, 0.6), (0.7, 5, 0.8), (0.0, 0, 1.0), (1.5, 1, 0.5)],
)
def test_sampling_explorer_matches_brute_force_filtering(temperature, top_k, top_p):
    logits = seeded(10, seed=3) * 2
    ex = widgets.sampling_explorer(logits, tokens=[f"t{i}" for i in range(10)])
    ex.set(temperature=temperature, top_k=top_k, top_p=top_p)
    want = filtered_by_hand(logits, temperature, top_k, top_p)
    torch.testing.assert_close(ex.state["probs"], want)
    assert ex.state["support"] == int((want > 0).sum())
    bars = ex.figure.axes[0].patches[:10]
    np.testing.assert_allclose([b.get_height() for b in bars], want.numpy(), rtol=1e-5, atol=1e-7)


def test_sampling_explorer_reference_is_the_plain_softmax():
    logits = torch.tensor([2.0, 1.0, 0.5, -1.0])
    ex = widgets.sampling_explorer(logits)
    ex.set(temperature=0.3)
    outline = [b.get_height() for b in ex.figure.axes[0].patches[4:]]
    np.testing.assert_allclose(outline, torch.softmax(logits, 0).numpy(), rtol=1e-6)
    assert ex.state["entropy"] < float(torch.special.entr(torch.softmax(logits, 0)).sum())


@pytest.mark.parametrize(
    ("logits", "tokens", "match"),
    [
        (torch.rand(2, 5), None, r"logits: expected shape \(V\)"),
        (torch.tensor([1.0, float("nan")]), None, r"logits: expected finite values"),
        (torch.rand(3), ["a"], r"tokens: expected V=3 labels"),
    ],
)
def test_sampling_explorer_rejects_bad_input(logits, tokens, match):
    with pytest.raises(ValueError, match=match):
        widgets.sampling_explorer(logits, tokens=tokens)


NO_ARGUMENTS = ["shape_explorer", "scaling_explorer", "mask_explorer", "positional_explorer", "norm_explorer",
                "span_corruption_explorer", "sparse_pattern_explorer", "online_softmax_explorer", "kv_cache_explorer",
                "flash_tile_explorer", "cache_explorer"]  # fmt: skip


@pytest.mark.parametrize("name", NO_ARGUMENTS)
def test_a_long_control_label_shows_whole(name: str) -> None:
    # JupyterLab gives a label about 80 px and cuts what is longer: "D (head dim)" showed as "D (head d…".
    import ipywidgets

    ex = getattr(widgets, name)()
    cut = [
        control.description
        for control in ex.controls.values()
        if not isinstance(control, ipywidgets.Checkbox)  # a checkbox's label sits beside it, uncut
        and len(control.description) > 8
        and getattr(control.style, "description_width", "") != "initial"
    ]
    assert not cut, f"{name}: labels cut short without style={{'description_width': 'initial'}}: {cut}"


def test_shape_explorer_tracks_shapes_and_causal_rows() -> None:
    from attn_edu.masks import causal_mask
    from attn_edu.widgets import shape_explorer

    ex = shape_explorer()
    ex.set(T=3, S=7, D=16)
    shapes = ex.state["shapes"]
    assert shapes["q"] == (2, 4, 3, 16) and shapes["k"] == (2, 4, 7, 16) and shapes["weights"] == (2, 4, 3, 7)
    assert ex.figure.axes[0].images[0].get_array().shape == (3, 7)
    ex.set(causal=True)
    w = ex.state["weights"]
    assert torch.equal(w[0, 0] > 0, causal_mask(3, 7))  # bottom-right: the last query sees every key


# ---------------------------------------------------------------------------------------------------
# token_attention_explorer
# ---------------------------------------------------------------------------------------------------


def test_token_attention_explorer_shows_the_selected_row():
    weights = torch.softmax(seeded(4, 4), dim=-1)  # (T, S)
    tokens = ["the", "cat", "sat", "down"]
    ex = widgets.token_attention_explorer(weights, tokens)
    assert [label for label, _ in ex.controls["query"].options] == ["0: the", "1: cat", "2: sat", "3: down"]
    for t in range(4):
        ex.set(query=t)
        row = weights[t]
        assert torch.equal(ex.state["weights"], row)
        assert ex.state["top_key"] == max(range(4), key=lambda s: row[s].item())
        by_hand = -sum(p * math.log(p) for p in row.tolist())
        assert math.isclose(ex.state["entropy"], by_hand, rel_tol=1e-6)
        bars = [bar.get_height() for bar in ex.figure.axes[0].patches]
        np.testing.assert_allclose(bars, row.numpy(), rtol=1e-6)
        assert repr(tokens[t]) in ex.figure.axes[0].get_title()
    assert [tick.get_text() for tick in ex.figure.axes[0].get_xticklabels()] == tokens


def test_token_attention_explorer_cross_attention_labels_keys():
    weights = torch.softmax(seeded(2, 3, seed=1), dim=-1)  # (T, S) with T != S
    ex = widgets.token_attention_explorer(weights, ["le", "chat"], key_tokens=["the", "cat", "sleeps"])
    ex.set(query=1)
    assert ex.state["weights"].shape == (3,)
    assert [tick.get_text() for tick in ex.figure.axes[0].get_xticklabels()] == ["the", "cat", "sleeps"]


@pytest.mark.parametrize(
    ("weights", "tokens", "key_tokens", "match"),
    [
        (torch.rand(3), ["a", "b", "c"], None, r"weights: expected shape \(T, S\)"),
        (torch.rand(2, 3), ["a", "b"], None, r"key_tokens: expected S=3 labels"),
        (torch.rand(2, 2), ["a"], None, r"query_tokens: expected T=2 labels"),
        (torch.rand(2, 3), ["a", "b"], ["x"], r"key_tokens: expected S=3 labels"),
        (torch.tensor([[1.0, float("nan")]]), ["a"], ["x", "y"], r"weights: expected finite values"),
    ],
)
def test_token_attention_explorer_rejects_bad_input(weights, tokens, key_tokens, match):
    with pytest.raises(ValueError, match=match):
        widgets.token_attention_explorer(weights, tokens, key_tokens)


# ---------------------------------------------------------------------------------------------------
# 11: sparse attention patterns
# ---------------------------------------------------------------------------------------------------


def _pattern_by_loops(T, window, dilation, global_tokens):
    mask = torch.zeros(T, T, dtype=torch.bool)
    for t in range(T):
        for s in range(T):
            d = abs(t - s)
            local = d < window * dilation and d % dilation == 0
            mask[t, s] = local or t < global_tokens or s < global_tokens
    return mask


@pytest.mark.parametrize(
    ("window", "dilation", "global_tokens"), [(1, 1, 0), (3, 1, 2), (2, 3, 1), (5, 2, 0)]
)
def test_sparse_pattern_explorer_matches_loops_without_random_keys(window, dilation, global_tokens):
    ex = widgets.sparse_pattern_explorer(12)
    ex.set(window=window, dilation=dilation, global_tokens=global_tokens, random_keys=0)
    expected = _pattern_by_loops(12, window, dilation, global_tokens)
    assert torch.equal(ex.state["mask"], expected)
    assert ex.state["pairs"] == int(expected.sum())
    assert math.isclose(ex.state["density"], int(expected.sum()) / 144, rel_tol=1e-6)
    assert torch.equal(ex.state["keys_per_query"], expected.sum(dim=-1))
    assert f"{int(expected.sum())} of 144 pairs" in ex.figure.axes[0].get_title()


def test_sparse_pattern_explorer_random_keys_add_at_most_that_many_per_query():
    ex = widgets.sparse_pattern_explorer(16, seed=3)
    ex.set(window=2, dilation=1, global_tokens=1, random_keys=0)
    base = ex.state["mask"].clone()
    ex.set(random_keys=3)
    extra = ex.state["mask"] & ~base  # (T, T) keys added by the random part
    assert (ex.state["mask"] | base).equal(ex.state["mask"])  # random keys only add
    assert (extra.sum(dim=-1) <= 3).all() and extra.any()
    again = widgets.sparse_pattern_explorer(16, seed=3)
    again.set(window=2, dilation=1, global_tokens=1, random_keys=3)
    assert torch.equal(again.state["mask"], ex.state["mask"])  # the seed fixes the pattern


def test_sparse_pattern_explorer_first_slider_changes_the_figure():
    ex = widgets.sparse_pattern_explorer(10)
    first = next(iter(ex.controls.values()))
    before = ex.state["pairs"]
    first.value = 6
    assert ex.state["pairs"] > before


@pytest.mark.parametrize(("T", "seed", "match"), [(0, 0, "T"), (8, -1, "seed"), (8, 1.5, "seed")])
def test_sparse_pattern_explorer_rejects_bad_input(T, seed, match):
    with pytest.raises(ValueError, match=match):
        widgets.sparse_pattern_explorer(T, seed=seed)


# ---------------------------------------------------------------------------------------------------
# 12: online softmax explorer
# ---------------------------------------------------------------------------------------------------


def test_online_softmax_explorer_running_max_and_sum_match_the_definition():
    x = torch.tensor(widgets.ONLINE_SOFTMAX_SCORES)
    ex = widgets.online_softmax_explorer()
    for block_size in (1, 3, 5, 12):
        ex.set(block_size=block_size)
        num_blocks = math.ceil(len(x) / block_size)
        assert ex.controls["step"].max == num_blocks == ex.state["num_blocks"]
        previous_max = -math.inf
        for step in range(1, num_blocks + 1):
            ex.set(step=step)
            seen = x[: min(step * block_size, len(x))].double()
            running_max = float(seen.max())
            assert ex.state["m_i"] == pytest.approx(running_max)
            assert ex.state["l_i"] == pytest.approx(float(torch.exp(seen - running_max).sum()), rel=1e-6)
            assert ex.state["alpha"] == pytest.approx(math.exp(previous_max - running_max))
            assert ex.state["rescaled"] == (step > 1 and running_max > previous_max)
            torch.testing.assert_close(ex.state["estimate"].sum(), torch.tensor(1.0))
            previous_max = running_max
        # After the last block the estimate is the softmax, whatever the block size.
        torch.testing.assert_close(ex.state["estimate"], torch.softmax(x, dim=-1))


def test_online_softmax_explorer_step_slider_follows_the_block_size_and_redraws():
    ex = widgets.online_softmax_explorer([0.0, 2.0, 1.0, 5.0, -1.0], block_size=1)
    ex.set(step=5)
    first = ex.figure
    ex.controls["block_size"].value = 2  # 3 blocks: the step slider shrinks and clamps
    assert ex.controls["step"].max == 3 and ex.state["step"] == ex.controls["step"].value <= 3
    assert ex.figure is not first
    left, right = ex.figure.axes
    assert len(left.patches) == 5  # one bar per score
    assert f"of {ex.state['num_blocks']}" in left.get_title()


@pytest.mark.parametrize(
    ("scores", "block_size", "match"),
    [
        ([[1.0, 2.0]], 1, r"scores: expected shape \(N\)"),
        ([1.0, float("inf")], 1, "scores: expected finite values"),
        ([1.0, 2.0], 3, "block_size: expected at most N=2"),
        ([1.0, 2.0], 0, "block_size"),
    ],
)
def test_online_softmax_explorer_rejects_bad_input(scores, block_size, match):
    with pytest.raises(ValueError, match=match):
        widgets.online_softmax_explorer(scores, block_size=block_size)


def test_span_corruption_explorer_follows_the_sliders_and_round_trips():
    from attn_edu.objectives import span_noise_mask

    ex = widgets.span_corruption_explorer()
    words = widgets.SPAN_SENTENCE.split()
    n = len(words)
    # T5's defaults: round(0.15 n) hidden words in round(noise / 3) spans, counted independently here
    assert ex.state["num_noise"] == round(0.15 * n) and ex.state["num_spans"] == round(round(0.15 * n) / 3)
    first = ex.figure
    ex.controls["noise_density"].value = 0.5  # the first control redraws
    assert ex.figure is not first and ex.state["num_noise"] == round(0.5 * n)
    ex.set(mean_span_length=1.0, seed=4)
    noise = span_noise_mask(
        n, noise_density=0.5, mean_span_length=1.0, generator=torch.Generator().manual_seed(4)
    )
    assert torch.equal(ex.state["noise"], noise)  # the same draw as the objective's own mask
    spans = ex.state["num_spans"]
    assert ex.state["input_length"] == n - int(noise.sum()) + spans
    assert ex.state["target_length"] == int(noise.sum()) + spans
    kept = [w for w, hidden in zip(words, noise.tolist()) if not hidden]
    assert [t for t in ex.state["inputs"] if not t.startswith("<X")] == kept
    assert ex.state["inputs"].count("<X0>") == 1 and ex.state["targets"][0] == "<X0>"
    assert ex.state["round_trip"]
    assert len(ex.figure.axes[0].patches) == n + ex.state["input_length"] + ex.state["target_length"]


@pytest.mark.parametrize(("words", "seed"), [("one", 0), (["a", "b"], -1), (torch.zeros(3), 0)])
def test_span_corruption_explorer_rejects_bad_input(words, seed):
    with pytest.raises(ValueError, match="words|seed"):
        widgets.span_corruption_explorer(words, seed=seed)


# ---------------------------------------------------------------------------------------------------
# ablation_explorer
# ---------------------------------------------------------------------------------------------------


def _tiny_attention_only():
    from attn_edu.models.attention_only import AttentionOnlyConfig, AttentionOnlyTransformer

    torch.manual_seed(0)
    model = AttentionOnlyTransformer(AttentionOnlyConfig(vocab_size=12, embed_dim=12, num_heads=3))
    ids = torch.randint(12, (2, 7), generator=torch.Generator().manual_seed(0))  # (B, T)
    return model.eval(), ids


def test_ablation_explorer_loss_and_patterns_follow_the_checkboxes():
    import torch.nn.functional as F

    from attn_edu.interp import head_ablation

    model, ids = _tiny_attention_only()
    labels = ids.clone()
    labels[:, :3] = -100  # score the last tokens only

    def loss_of(m):  # next-token cross-entropy written out here, not the library's
        logits = m(ids)[:, :-1]  # (B, T-1, V)
        targets = labels[:, 1:]
        keep = targets != -100
        return F.cross_entropy(logits[keep], targets[keep]).item()

    ex = widgets.ablation_explorer(model, ids, labels, example=1)
    assert list(ex.controls)[:2] == ["layer0_head0", "layer0_head1"] and len(ex.controls) == 6
    assert ex.state["ablated"] == [] and math.isclose(ex.state["loss"], loss_of(model), rel_tol=1e-5)
    before = ex.state["weights"]
    ex.controls["layer0_head1"].value = True  # the first layer's head 1 off
    with torch.no_grad(), head_ablation(model, [(0, 1)]):
        expected = loss_of(model)
    assert ex.state["ablated"] == [(0, 1)] and math.isclose(ex.state["loss"], expected, rel_tol=1e-5)
    assert ex.state["full_loss"] == pytest.approx(loss_of(model), rel=1e-5)
    # Layer 0's patterns do not depend on its own outputs; layer 1 reads what head 0.1 wrote.
    torch.testing.assert_close(ex.state["weights"][0], before[0])
    assert (ex.state["weights"][1] - before[1]).abs().max() > 1e-4
    _, weights = model(ids[1:], need_weights=True, head_mask=ex.state["head_mask"])
    torch.testing.assert_close(ex.state["weights"][1], weights[1][0])
    assert "heads off: 0.1" in ex.figure._suptitle.get_text()


def test_ablation_explorer_with_every_head_off_is_the_direct_path():
    model, ids = _tiny_attention_only()
    ex = widgets.ablation_explorer(model, ids, ids)
    ex.set(**dict.fromkeys(ex.controls, True))
    positions = torch.arange(ids.shape[1])
    with torch.no_grad():
        stream = model.token_embedding(ids) + model.position_embedding.embedding(positions)  # (B, T, C)
        stream = stream + sum(attn.out_proj.bias for attn in model.layers)  # W^O's bias survives ablation
        direct = model.unembed(stream)  # (B, T, V)
    expected = torch.nn.functional.cross_entropy(direct[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
    assert ex.state["loss"] == pytest.approx(expected.item(), rel=1e-5)


def test_ablation_explorer_rejects_bad_input():
    model, ids = _tiny_attention_only()
    with pytest.raises(ValueError, match=r"labels: expected shape \(B, T\)"):
        widgets.ablation_explorer(model, ids, ids[:, :3])
    with pytest.raises(ValueError, match="example: expected an int in 0 .. 1"):
        widgets.ablation_explorer(model, ids, ids, example=2)
    with pytest.raises(ValueError, match="model: Linear has no MultiHeadAttention"):
        widgets.ablation_explorer(torch.nn.Linear(2, 2), ids, ids)


# ---------------------------------------------------------------------------------------------------
# norm_explorer
# ---------------------------------------------------------------------------------------------------


def test_norm_explorer_moves_batchnorm_only():
    F = torch.nn.functional
    ex = widgets.norm_explorer(B=3, T=5, C=7, seed=1)
    assert ex.state["change"] == {"BatchNorm": 0.0, "LayerNorm": 0.0, "RMSNorm": 0.0}
    ex.controls["shift"].value = 2.0  # the first control moves the other sequences
    batch = ex.state["batch"]
    assert batch.shape == (3, 5, 7)
    bn = F.batch_norm(batch.transpose(1, 2), None, None, training=True, eps=1e-5)[0, :, 0]  # (C,)
    torch.testing.assert_close(ex.state["after"]["BatchNorm"], bn)
    torch.testing.assert_close(ex.state["after"]["LayerNorm"], F.layer_norm(batch, (7,), eps=1e-5)[0, 0])
    torch.testing.assert_close(ex.state["after"]["RMSNorm"], F.rms_norm(batch, (7,), eps=1e-5)[0, 0])
    assert ex.state["change"]["BatchNorm"] > 0.1
    assert ex.state["change"]["LayerNorm"] == 0.0 and ex.state["change"]["RMSNorm"] == 0.0
    assert len(ex.figure.axes) == 3 and "BatchNorm: moved by" in ex.figure.axes[0].get_title()


def test_norm_explorer_padding_alone_moves_batchnorm():
    ex = widgets.norm_explorer(seed=0)
    ex.set(padding=6)
    assert ex.state["batch"].shape == (4, 12, 12) and (ex.state["batch"][:, 6:] == 0).all()
    assert ex.state["change"]["BatchNorm"] > 0.1 and ex.state["change"]["LayerNorm"] == 0.0


def test_norm_explorer_rejects_bad_input():
    with pytest.raises(ValueError, match="B: expected an int >= 2"):
        widgets.norm_explorer(B=1)
    with pytest.raises(ValueError, match="C"):
        widgets.norm_explorer(C=0)


def test_soft_lookup_explorer_on_unit_keys_is_the_dot_product_lookup_at_half_the_temperature():
    """-‖q - k‖²/τ = (2 q·k - ‖q‖² - 1)/τ for unit keys: the terms shared by every key cancel in the softmax
    (notebook 01, section 9)."""
    from attn_edu import retrieval

    angles = torch.tensor([0.0, 0.5, 1.0, 1.5]) * math.pi  # four unit keys: east, north, west, south
    keys = torch.stack([angles.cos(), angles.sin()], dim=-1)  # (S, 2)
    values = torch.tensor([9.0, 4.0, 16.0, 20.0])
    ex = widgets.soft_lookup_explorer(keys, values)
    for tau in (0.01, 0.5, 10.0):
        ex.set(query=0.3, query_y=0.8, temperature=tau)
        q = ex.state["query"][None]  # (T, D) = (1, 2)
        torch.testing.assert_close(
            ex.state["weights"], retrieval.soft_lookup_weights(q, keys, temperature=tau / 2)[0]
        )
        torch.testing.assert_close(
            ex.state["output"].reshape(1),
            retrieval.nadaraya_watson(q, keys, values, bandwidth=math.sqrt(tau / 2)),
        )
