"""Interactive explorers for the course notebooks: move a slider, watch attention change.

Each explorer is a thin layer: a pure *view* function computes the numbers with :mod:`attn_edu` and
draws them with :mod:`attn_edu.viz`; an :class:`Explorer` holds the ipywidgets controls, calls the view
whenever a control moves, and shows the new figure in an :class:`ipywidgets.Output`. Nothing here needs a
browser: tests (and curious learners) set ``explorer.controls["d_k"].value = 256`` and read
``explorer.state`` and ``explorer.figure``.

Every figure is closed right after it is shown (it stays readable as ``explorer.figure``), so moving
a slider a thousand times does not pile up open figures.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
from IPython import get_ipython
from matplotlib.figure import Figure

from attn_edu import viz
from attn_edu._validate import check_floating, check_positive_int, check_shape, check_tensor
from attn_edu.attention import attention_weights
from attn_edu.masks import causal_mask, combine_masks, key_mask, padding_mask

View = Callable[..., tuple[dict[str, Any], Figure]]

_WIDE = {"description_width": "initial"}  # show whole control names


class Explorer:
    """Controls + a view function + the latest figure and numbers.

    Attributes:
        controls: the ipywidgets, by name; each name is a keyword argument of the view.
        output: the :class:`ipywidgets.Output` the figure is drawn into.
        state: the numbers behind the current figure (what the view computed), for tests and asserts.
        figure: the current :class:`matplotlib.figure.Figure` (already closed in pyplot, still readable).
        widget: the assembled box (title, controls, output) that Jupyter displays.

    ``sync``, if given, runs before each redraw to keep dependent controls consistent (e.g. a slider's
    maximum that follows another slider); control changes it makes do not trigger extra redraws.
    """

    def __init__(
        self,
        controls: dict[str, widgets.ValueWidget],
        view: View,
        *,
        title: str = "",
        sync: Callable[[dict[str, widgets.ValueWidget]], None] | None = None,
    ) -> None:
        self.controls = controls
        self.output = widgets.Output()
        self.state: dict[str, Any] = {}
        self.figure: Figure | None = None
        self._view = view
        self._sync = sync
        self._busy = False
        header = [widgets.HTML(f"<b>{title}</b>")] if title else []
        row = widgets.HBox(list(controls.values()), layout=widgets.Layout(flex_flow="row wrap"))
        self.widget = widgets.VBox([*header, row, self.output])
        for control in controls.values():
            control.observe(self._on_change, names="value")
        self.update()

    def values(self) -> dict[str, Any]:
        """The current value of every control, by name."""
        return {name: control.value for name, control in self.controls.items()}

    @contextmanager
    def _quiet(self):
        # Control changes made inside this block do not redraw (update() redraws once at the end).
        busy, self._busy = self._busy, True
        try:
            yield
        finally:
            self._busy = busy

    def _on_change(self, change: dict[str, Any]) -> None:
        if not self._busy:
            self.update()

    def set(self, **values: Any) -> None:
        """Move several controls at once and redraw once: ``explorer.set(T=4, S=7)``."""
        unknown = set(values) - set(self.controls)
        if unknown:
            raise ValueError(
                f"values: unknown controls {sorted(unknown)}; expected some of {list(self.controls)}"
            )
        with self._quiet():
            # Two passes: a value set before the control it depends on (a length before the number
            # of keys) may be clamped by bounds that ``sync`` only widens afterwards.
            for _ in range(2):
                for name, value in values.items():
                    self.controls[name].value = value
                if self._sync is not None:
                    self._sync(self.controls)
        for name, value in values.items():
            if self.controls[name].value != value:
                raise ValueError(
                    f"{name}: {value!r} is outside the control's range, got {self.controls[name].value!r}"
                )
        self.update()

    def update(self) -> None:
        """Recompute the view from the controls, replace the figure and show it in ``output``."""
        with self._quiet():
            if self._sync is not None:
                self._sync(self.controls)
            state, figure = self._view(**self.values())
        old, self.figure, self.state = self.figure, figure, state
        if old is not None:
            plt.close(old)
        if get_ipython() is not None:  # without a kernel there is no Output to draw into
            # Replace the Output's contents through its synced state rather than `with output:
            # display(...)`: the state update reaches every front end, never leaks into the cell's own
            # outputs, and avoids nbclient stalling on output-widget messages (jupyter/nbclient#312).
            self.output.outputs = ()
            self.output.append_display_data(figure)
        plt.close(figure)  # shown once in the Output; no second copy at the end of the cell

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def __repr__(self) -> str:
        return f"Explorer(controls={list(self.controls)})"


def _float_tensor(name: str, x: Any) -> torch.Tensor:
    """A detached float CPU tensor from a tensor, array or list."""
    if isinstance(x, torch.Tensor):
        t = x.detach().cpu()
    else:
        try:
            t = torch.as_tensor(x)
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(
                f"{name}: expected a tensor or a list of numbers, got {type(x).__name__}"
            ) from None
    if t.dtype == torch.bool or t.is_complex():
        raise ValueError(f"{name}: expected real numbers, got dtype {t.dtype}")
    return t if t.is_floating_point() else t.float()


def _entropy(weights: torch.Tensor) -> torch.Tensor:
    """Shannon entropy (nats) of each row; 0·log 0 counts as 0."""
    return torch.special.entr(weights.double()).sum(dim=-1)  # (...,)


# ---------------------------------------------------------------------------------------------------
# 01: attention as a soft lookup
# ---------------------------------------------------------------------------------------------------


def _soft_lookup_view(keys: torch.Tensor, values: torch.Tensor, **controls: float) -> tuple[dict, Figure]:
    temperature = controls.pop("temperature")
    query = torch.tensor([controls[name] for name in ("query", "query_y") if name in controls])  # (key dim,)
    points = keys.reshape(keys.shape[0], -1)  # (S, key dim): 1-D keys become (S, 1)
    distance = ((points - query) ** 2).sum(dim=-1)  # (S,) squared distance to each key
    weights = torch.softmax(-distance / temperature, dim=-1)  # (S,)
    output = weights @ values  # (Dv,) or a number
    figure = viz.plot_soft_lookup(
        keys, values, query, weights, output, title=f"temperature {temperature:.3g}"
    )
    return {"query": query, "temperature": temperature, "weights": weights, "output": output}, figure


def soft_lookup_explorer(
    keys: torch.Tensor | Sequence[float], values: torch.Tensor | Sequence[float], *, temperature: float = 1.0
) -> Explorer:
    """Move a query among the keys and watch the weights and the blended output follow.

    The weights are ``softmax(−‖q − k_s‖² / temperature)`` over the keys: a Gaussian kernel, i.e.
    Nadaraya–Watson kernel regression (1964), the "attention" of notebook 01. Small temperatures
    approach a hard nearest-key lookup; large ones average every value.

    Shapes:
        keys ``(S,)`` or ``(S, 2)`` (then two query sliders); values ``(S,)`` or ``(S, Dv)``.

    Example:
        >>> ex = soft_lookup_explorer(torch.tensor([0.0, 1.0, 2.0]), torch.tensor([0.0, 10.0, 0.0]))
        >>> ex.controls["query"].value = 1.0
        >>> round(float(ex.state["weights"].argmax()))      # the key under the query wins
        1
    """
    k = _float_tensor("keys", keys)
    if k.ndim == 2 and k.shape[1] == 1:
        k = k[:, 0]  # (S,)
    if k.ndim not in (1, 2) or (k.ndim == 2 and k.shape[1] != 2):
        raise ValueError(f"keys: expected shape (S,) or (S, 2), got {tuple(k.shape)}")
    S = k.shape[0]
    v = _float_tensor("values", values)
    check_shape("values", v, "S" if v.ndim <= 1 else "S Dv", S=S)  # viz.plot_soft_lookup checks Dv
    if not isinstance(temperature, (int, float)) or isinstance(temperature, bool) or not temperature > 0:
        raise ValueError(f"temperature: expected a number > 0, got {temperature!r}")
    low, high = k.min(dim=0).values, k.max(dim=0).values  # per coordinate
    pad = 0.1 * (high - low).clamp(min=1.0)
    names = ["query"] if k.ndim == 1 else ["query", "query_y"]
    controls: dict[str, widgets.ValueWidget] = {}
    for n, name in enumerate(names):
        lo, hi = float((low - pad).reshape(-1)[n]), float((high + pad).reshape(-1)[n])
        controls[name] = widgets.FloatSlider(
            value=(lo + hi) / 2,
            min=lo,
            max=hi,
            step=(hi - lo) / 200,
            description=name,
            continuous_update=False,
        )
    controls["temperature"] = widgets.FloatLogSlider(
        value=temperature,
        base=10,
        min=-2,
        max=1,
        step=0.05,
        description="temperature",
        continuous_update=False,
    )
    return Explorer(controls, partial(_soft_lookup_view, k, v), title="Soft lookup: softmax(−‖q − k‖² / τ)")


# ---------------------------------------------------------------------------------------------------
# 03: why scale by 1/√d_k
# ---------------------------------------------------------------------------------------------------


def _scaling_view(
    num_queries: int, num_keys: int, seed: int, *, d_k: int, temperature: float
) -> tuple[dict, Figure]:
    generator = torch.Generator().manual_seed(seed)  # same draws for a given d_k: reproducible pictures
    q = torch.randn(num_queries, 1, d_k, generator=generator)  # (B, T=1, D) unit-variance entries
    k = torch.randn(num_queries, num_keys, d_k, generator=generator)  # (B, S, D)
    scaled = attention_weights(q, k, scale=1.0 / (math.sqrt(d_k) * temperature))[:, 0]  # (B, S)
    unscaled = attention_weights(q, k, scale=1.0 / temperature)[:, 0]  # (B, S)
    entropy_scaled, entropy_unscaled = _entropy(scaled), _entropy(unscaled)  # (B,), (B,)
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5), layout="constrained")
    viz.plot_histograms({"q·k / √d_k": scaled, "q·k (unscaled)": unscaled}, xlabel="softmax weight", logy=True,
                        title=f"d_k = {d_k}, temperature {temperature:.3g}", ax=left)  # fmt: skip
    viz.plot_histograms({"q·k / √d_k": entropy_scaled, "q·k (unscaled)": entropy_unscaled},
                        xlabel="entropy of a row (nats)", title="spread of each query's attention", ax=right)  # fmt: skip
    right.axvline(math.log(num_keys), color="black", linestyle=":", label=f"uniform: log {num_keys}")
    right.legend(fontsize=8)
    state = {
        "d_k": d_k,
        "temperature": temperature,
        "weights_scaled": scaled,
        "weights_unscaled": unscaled,
        "entropy_scaled": float(entropy_scaled.mean()),
        "entropy_unscaled": float(entropy_unscaled.mean()),
        "max_weight_scaled": float(scaled.max(dim=-1).values.mean()),
        "max_weight_unscaled": float(unscaled.max(dim=-1).values.mean()),
    }
    return state, figure


def scaling_explorer(*, num_queries: int = 200, num_keys: int = 16, seed: int = 0) -> Explorer:
    """Grow ``d_k`` and watch unscaled softmax weights collapse onto one key while scaled ones do not.

    For random ``q, k`` with unit-variance entries, ``Var(q·k) = d_k``: without the ``1/√d_k`` of
    Vaswani et al. (2017, §3.2.1, footnote 4) the scores spread out and the softmax saturates
    (weights near 0 or 1, entropy near 0, vanishing gradients). The weights come from
    :func:`attn_edu.attention.attention_weights` with ``scale = 1/(√d_k·τ)`` or ``1/τ``.

    Example:
        >>> ex = scaling_explorer(num_queries=32)
        >>> ex.set(d_k=512)
        >>> ex.state["entropy_unscaled"] < ex.state["entropy_scaled"]
        True
    """
    check_positive_int("num_queries", num_queries)
    check_positive_int("num_keys", num_keys)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed: expected an int, got {seed!r}")
    controls = {
        "d_k": widgets.SelectionSlider(
            options=[2**n for n in range(11)], value=16, description="d_k", continuous_update=False
        ),  # fmt: skip
        "temperature": widgets.FloatLogSlider(
            value=1.0, base=10, min=-1, max=1, step=0.05, description="temperature", continuous_update=False
        ),  # fmt: skip
    }
    view = partial(_scaling_view, num_queries, num_keys, seed)
    return Explorer(controls, view, title="Softmax saturation with and without 1/√d_k")


# ---------------------------------------------------------------------------------------------------
# 04: masks
# ---------------------------------------------------------------------------------------------------


def _mask_view(
    *, T: int, S: int, causal: bool, padding: bool, length: int, sliding_window: bool, window: int
) -> tuple[dict, Figure]:
    parts, names = [], []
    if causal:
        parts.append(causal_mask(T, S))  # (T, S)
        names.append("causal")
    if padding:
        parts.append(key_mask(padding_mask([length], S))[0, 0])  # (1, S): hides keys length .. S-1
        names.append(f"padding (length {length})")
    if sliding_window:
        from attn_edu.efficient import sliding_window_mask  # imported on use: notebook 11's module

        parts.append(sliding_window_mask(T, S, window=window, causal=causal))  # (T, S)
        names.append(f"window {window}")
    combined = combine_masks(*parts)
    mask = torch.ones(T, S, dtype=torch.bool) if combined is None else combined.expand(T, S).clone()  # (T, S)
    fully_masked = [t for t in range(T) if not bool(mask[t].any())]
    title = " ∧ ".join(names) if names else "no mask"
    if fully_masked:
        title += f"\nfully masked rows {fully_masked}: attention returns zeros there"
    figure = viz.plot_mask(mask, title=title)
    return {"mask": mask, "fully_masked_rows": fully_masked, "density": float(mask.float().mean())}, figure


def _sync_mask_bounds(controls: dict[str, widgets.ValueWidget]) -> None:
    # Lengths and windows cannot exceed the number of keys.
    controls["length"].max = controls["S"].value
    controls["window"].max = max(controls["S"].value, controls["T"].value)


def mask_explorer(T: int = 6, S: int | None = None, *, max_len: int = 12) -> Explorer:
    """Switch causal, padding and sliding-window masks on and off and see their combination.

    Masks come from :mod:`attn_edu.masks` (``causal_mask``, ``padding_mask`` → ``key_mask``,
    ``combine_masks``) and :func:`attn_edu.efficient.sliding_window_mask`; they combine by logical AND.
    Try ``T > S`` with causal on: the top rows see no key at all.

    Example:
        >>> ex = mask_explorer(4)
        >>> ex.set(padding=True, length=2)
        >>> ex.state["mask"].int()
        tensor([[1, 0, 0, 0],
                [1, 1, 0, 0],
                [1, 1, 0, 0],
                [1, 1, 0, 0]], dtype=torch.int32)
    """
    check_positive_int("max_len", max_len)
    check_positive_int("T", T)
    S = T if S is None else check_positive_int("S", S)
    if max(T, S) > max_len:
        raise ValueError(f"T, S: expected at most max_len={max_len}, got T={T}, S={S}")
    slider = partial(widgets.IntSlider, min=1, max=max_len, continuous_update=False, style=_WIDE)
    controls = {
        "T": slider(value=T, description="T (queries)"),
        "S": slider(value=S, description="S (keys)"),
        "causal": widgets.Checkbox(value=True, description="causal"),
        "padding": widgets.Checkbox(value=False, description="padding"),
        "length": slider(value=S, max=S, description="real keys"),
        "sliding_window": widgets.Checkbox(value=False, description="sliding window"),
        "window": slider(value=min(2, S), max=max(T, S), description="window"),
    }
    return Explorer(controls, _mask_view, title="Masks (True = may attend)", sync=_sync_mask_bounds)


# ---------------------------------------------------------------------------------------------------
# 05 / 13: heads
# ---------------------------------------------------------------------------------------------------


def _head_view(
    weights_by_layer: list[torch.Tensor], tokens: list[str] | None, *, layer: int, head: int
) -> tuple[dict, Figure]:
    weights = weights_by_layer[layer][head]  # (T, S)
    T, S = weights.shape
    query_labels = tokens if tokens is not None and len(tokens) == T else None
    key_labels = tokens if tokens is not None and len(tokens) == S else None
    figure = viz.plot_attention(
        weights, query_labels=query_labels, key_labels=key_labels, title=f"layer {layer}, head {head}"
    )
    return {
        "layer": layer,
        "head": head,
        "weights": weights,
        "entropy": float(_entropy(weights).mean()),
    }, figure


def head_explorer(weights_by_layer: Sequence[torch.Tensor], tokens: Sequence[Any] | None = None) -> Explorer:
    """Pick a layer and a head and see its attention pattern.

    Pass the weights a model returned (models keep no attention maps themselves), one tensor per layer.
    ``tokens`` label the key axis (length ``S``) and the query axis (length ``T``).

    Shapes:
        weights_by_layer: a list of ``(H, T, S)`` tensors (``H`` may differ between layers).

    Example:
        >>> ex = head_explorer([torch.softmax(torch.randn(2, 3, 3), -1)] * 2, tokens=["a", "b", "c"])
        >>> ex.set(layer=1, head=1)
        >>> ex.state["weights"].shape
        torch.Size([3, 3])
    """
    if (
        isinstance(weights_by_layer, torch.Tensor)
        or not isinstance(weights_by_layer, Sequence)
        or not weights_by_layer
    ):
        raise ValueError(
            f"weights_by_layer: expected a non-empty list of (H, T, S) tensors, got {type(weights_by_layer).__name__}"
        )
    layers = []
    sizes: dict[str, int] = {}
    for n, w in enumerate(weights_by_layer):
        check_tensor(f"weights_by_layer[{n}]", w)
        got = check_shape(
            f"weights_by_layer[{n}]", w, "H T S", **{k: v for k, v in sizes.items() if k != "H"}
        )
        sizes = got
        layers.append(w.detach().cpu().float())
    T, S = sizes["T"], sizes["S"]
    if tokens is not None:
        if isinstance(tokens, str) or len(tokens) not in (T, S):
            got = repr(tokens) if isinstance(tokens, str) else f"{len(tokens)} tokens"
            raise ValueError(f"tokens: expected T={T} or S={S} token labels, got {got}")
        tokens = [str(token) for token in tokens]

    def head_options(layer: int) -> list[tuple[str, int]]:
        return [(f"head {h}", h) for h in range(layers[layer].shape[0])]

    def sync(controls: dict[str, widgets.ValueWidget]) -> None:
        # A layer with fewer heads than the selected one: keep the head if it exists, else head 0.
        options = head_options(controls["layer"].value)
        if list(controls["head"].options) != options:
            keep = controls["head"].value
            controls["head"].options = options
            controls["head"].value = keep if keep < len(options) else 0

    controls = {
        "layer": widgets.Dropdown(
            options=[(f"layer {n}", n) for n in range(len(layers))], value=0, description="layer"
        ),  # fmt: skip
        "head": widgets.Dropdown(options=head_options(0), value=0, description="head"),
    }
    return Explorer(controls, partial(_head_view, layers, tokens), title="Attention heads", sync=sync)


# ---------------------------------------------------------------------------------------------------
# 06: sinusoidal positions
# ---------------------------------------------------------------------------------------------------


def _positional_view(pe: torch.Tensor, lengths: torch.Tensor, *, dimension: int) -> tuple[dict, Figure]:
    pair = dimension // 2  # columns 2i (sin) and 2i+1 (cos) share ω_i
    wavelength = float(lengths[pair])
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
    viz.plot_positional_encoding(pe, ax=left, title="sinusoidal table")
    left.axvline(dimension, color="black", linewidth=2)
    viz.plot_encoding_curves(pe, [2 * pair, 2 * pair + 1], ax=right)
    kind = "sin" if dimension % 2 == 0 else "cos"
    right.set_title(
        f"dim {dimension} = {kind}(pos·ω_{pair})\nwavelength 2π/ω_{pair} = {wavelength:.1f} positions"
    )
    state = {"dimension": dimension, "pair": pair, "wavelength": wavelength, "curve": pe[:, dimension]}
    return state, figure


def positional_explorer(num_positions: int = 64, dim: int = 32, *, base: float = 10000.0) -> Explorer:
    """Slide through the columns of the sinusoidal table and read each clock hand's wavelength.

    The table is :func:`attn_edu.positional.sinusoidal_encoding`; the wavelengths
    :func:`attn_edu.positional.wavelengths` (Vaswani et al., 2017, §3.5: from 2π to ~2π·base).

    Example:
        >>> ex = positional_explorer(16, 8)
        >>> ex.controls["dimension"].value = 1
        >>> round(ex.state["wavelength"], 2)                # pair 0 turns once every 2π positions
        6.28
    """
    from attn_edu.positional import sinusoidal_encoding, wavelengths

    pe = sinusoidal_encoding(num_positions, dim, base=base)  # (N, dim); checks the arguments
    lengths = wavelengths(dim, base=base)  # (dim/2,)
    controls = {
        "dimension": widgets.IntSlider(
            value=0, min=0, max=dim - 1, description="dimension", continuous_update=False
        ),  # fmt: skip
    }
    return Explorer(
        controls, partial(_positional_view, pe, lengths), title="Sinusoidal positions: clock hands"
    )


# ---------------------------------------------------------------------------------------------------
# 07: RoPE
# ---------------------------------------------------------------------------------------------------


def _rope_view(
    vector: torch.Tensor, frequencies: torch.Tensor, *, position: int, pair: int
) -> tuple[dict, Figure]:
    from attn_edu.rope import rotate_2d

    theta = float(frequencies[pair])
    angle = position * theta  # RoPE turns pair i of the token at position m by m·θ_i
    rotated = rotate_2d(vector, angle)  # (2,)
    figure = viz.plot_rotation(
        torch.stack([vector, rotated]),  # (2, 2)
        [0.0, angle],
        labels=["position 0", f"position {position}: m·θ_{pair} = {angle:.2f} rad"],
        title=f"pair {pair}: θ_{pair} = {theta:.4g} rad per position",
    )
    return {"position": position, "pair": pair, "theta": theta, "angle": angle, "rotated": rotated}, figure


def rope_explorer(
    head_dim: int = 16, *, base: float = 10000.0, max_position: int = 32, vector: Sequence[float] = (1.0, 0.0)
) -> Explorer:
    """Move a token along the sequence and watch RoPE turn one of its 2-D pairs.

    Pair ``i`` turns by ``m·θ_i`` at position ``m``, with ``θ_i`` from
    :func:`attn_edu.rope.rope_frequencies` and the turn done by :func:`attn_edu.rope.rotate_2d`
    (Su et al., 2021, §3.2). Pair 0 spins one radian per token; the last pairs barely move.

    Example:
        >>> ex = rope_explorer(8)
        >>> ex.set(position=3, pair=0)
        >>> round(ex.state["angle"], 4)                     # θ_0 = 1 rad per position
        3.0
    """
    from attn_edu.rope import rope_frequencies

    check_positive_int("max_position", max_position)
    frequencies = rope_frequencies(head_dim, base=base)  # (D/2,); checks head_dim and base
    start = _float_tensor("vector", vector)
    check_floating("vector", start)
    check_shape("vector", start, "2")
    controls = {
        "position": widgets.IntSlider(
            value=1, min=0, max=max_position, description="position m", continuous_update=False, style=_WIDE
        ),  # fmt: skip
        "pair": widgets.IntSlider(
            value=0, min=0, max=head_dim // 2 - 1, description="pair i", continuous_update=False
        ),  # fmt: skip
    }
    return Explorer(
        controls, partial(_rope_view, start, frequencies), title="RoPE: each pair is a rotating hand"
    )


# ---------------------------------------------------------------------------------------------------
# 10: sampling
# ---------------------------------------------------------------------------------------------------


def _filtered_distribution(
    logits: torch.Tensor, temperature: float, top_k: int, top_p: float
) -> torch.Tensor:
    """Next-token probabilities after temperature, top-k (0 = off) and top-p (1 = off), in that order.

    ``temperature == 0`` means greedy: all the mass on the argmax (as in
    :func:`attn_edu.generation.sample_next_token`). The filters are those of :mod:`attn_edu.generation`.
    """
    from attn_edu.generation import apply_temperature, top_k_filter, top_p_filter

    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(), logits.shape[-1]).float()  # (V,)
    z = apply_temperature(logits.float(), temperature)  # (V,)
    if top_k > 0:
        z = top_k_filter(z, top_k)
    if top_p < 1:
        z = top_p_filter(z, top_p)
    return torch.softmax(z, dim=-1)  # (V,), exactly 0 on filtered tokens


def _sampling_view(
    logits: torch.Tensor, tokens: list[str] | None, *, temperature: float, top_k: int, top_p: float
) -> tuple[dict, Figure]:
    probs = _filtered_distribution(logits, temperature, top_k, top_p)  # (V,)
    support = int((probs > 0).sum())
    title = (
        f"T = {temperature:.2f}, top-k = {top_k or 'off'}, top-p = {top_p:.2f}: {support} tokens can be drawn"
    )
    figure = viz.plot_distribution(
        probs, labels=tokens, reference=torch.softmax(logits.float(), dim=-1), title=title
    )
    return {"probs": probs, "support": support, "entropy": float(_entropy(probs))}, figure


def sampling_explorer(
    logits: torch.Tensor | Sequence[float], *, tokens: Sequence[Any] | None = None
) -> Explorer:
    """Turn the temperature, top-k and top-p knobs and see which next tokens remain, and how likely.

    Temperature 0 is greedy; top-k 0 and top-p 1 switch those filters off. The dashed outline is the
    plain softmax of the logits. Filters: :mod:`attn_edu.generation` (Fan et al., 2018; Holtzman et al., 2020).

    Shapes:
        logits ``(V,)``; tokens ``V`` labels.

    Example:
        >>> ex = sampling_explorer(torch.tensor([3.0, 2.0, 1.0, 0.0]))
        >>> ex.set(top_k=2)
        >>> ex.state["support"]
        2
    """
    z = _float_tensor("logits", logits)
    V = check_shape("logits", z, "V")["V"]
    if not torch.isfinite(z).all():
        raise ValueError("logits: expected finite values, got NaN or inf")
    labels = None
    if tokens is not None:
        if isinstance(tokens, str) or len(tokens) != V:
            got = repr(tokens) if isinstance(tokens, str) else f"{len(tokens)} tokens"
            raise ValueError(f"tokens: expected V={V} labels, got {got}")
        labels = [str(token) for token in tokens]
    controls = {
        "temperature": widgets.FloatSlider(
            value=1.0, min=0.0, max=3.0, step=0.05, description="temperature", continuous_update=False
        ),  # fmt: skip
        "top_k": widgets.IntSlider(value=0, min=0, max=V, description="top-k", continuous_update=False),
        "top_p": widgets.FloatSlider(
            value=1.0, min=0.05, max=1.0, step=0.05, description="top-p", continuous_update=False
        ),  # fmt: skip
    }
    return Explorer(controls, partial(_sampling_view, z, labels), title="Sampling the next token")


# ---------------------------------------------------------------------------------------------------
# 00: shapes
# ---------------------------------------------------------------------------------------------------


def _shape_view(*, T: int, S: int, D: int, causal: bool) -> tuple[dict, Figure]:
    generator = torch.Generator().manual_seed(0)
    B, H = 2, 4
    q = torch.randn(B, H, T, D, generator=generator)  # (B, H, T, D)
    k = torch.randn(B, H, S, D, generator=generator)  # (B, H, S, D)
    weights = attention_weights(q, k, is_causal=causal)  # (B, H, T, S)
    shapes = {"q": (B, H, T, D), "k": (B, H, S, D), "v": (B, H, S, D), "weights": tuple(weights.shape),
              "output": (B, H, T, D)}  # fmt: skip
    figure, ax = plt.subplots(figsize=(4.5, 3.5), layout="constrained")
    title = f"weights of batch 0, head 0: (T, S) = ({T}, {S})"
    viz.plot_attention(weights[0, 0], title=title, ax=ax)
    ax.set_xlabel("key position s (S)")
    ax.set_ylabel("query position t (T)")
    return {"shapes": shapes, "weights": weights}, figure


def shape_explorer() -> Explorer:
    """Change ``T``, ``S`` and ``D`` and watch which shapes move: the weights are always ``(B, H, T, S)``.

    Batch ``B = 2`` and heads ``H = 4`` stay fixed; ``D`` changes q and k but never the weight matrix.

    Example:
        >>> ex = shape_explorer()
        >>> ex.set(T=3, S=5)
        >>> ex.state["shapes"]["weights"]
        (2, 4, 3, 5)
    """
    slider = partial(widgets.IntSlider, min=1, max=12, continuous_update=False, style=_WIDE)
    controls = {
        "T": slider(value=4, description="T (queries)"),
        "S": slider(value=6, description="S (keys)"),
        "D": widgets.SelectionSlider(options=[2, 4, 8, 16, 32, 64], value=8, description="D (head dim)"),
        "causal": widgets.Checkbox(value=False, description="causal"),
    }
    return Explorer(controls, _shape_view, title="Shapes in one attention call (B = 2, H = 4)")


# ---------------------------------------------------------------------------------------------------
# 02: one query's row of the attention matrix
# ---------------------------------------------------------------------------------------------------


def _token_attention_view(
    weights: torch.Tensor, query_labels: list[str], key_labels: list[str], *, query: int
) -> tuple[dict, Figure]:
    row = weights[query]  # (S,)
    top = int(row.argmax())
    title = f"query {query_labels[query]!r} reads most from {key_labels[top]!r} ({float(row[top]):.2f})"
    figure = viz.plot_distribution(row, labels=key_labels, title=title)
    figure.axes[0].set_xlabel("key token")
    figure.axes[0].set_ylabel("attention weight")
    return {"query": query, "weights": row, "top_key": top, "entropy": float(_entropy(row))}, figure


def token_attention_explorer(
    weights: torch.Tensor, query_tokens: Sequence[Any], key_tokens: Sequence[Any] | None = None
) -> Explorer:
    """Pick a query token from a dropdown and see its row of the attention matrix: what it reads from each key.

    Row ``t`` of ``softmax(Q Kᵀ / √D)`` (Vaswani et al., 2017, eq. 1) is query ``t``'s budget of 1 spread
    over the keys. ``key_tokens`` defaults to ``query_tokens`` (self-attention, ``T == S``); pass it for
    cross-attention.

    Shapes:
        weights ``(T, S)``; query_tokens ``T`` labels; key_tokens ``S`` labels.

    Example:
        >>> w = torch.tensor([[0.9, 0.1], [0.3, 0.7]])
        >>> ex = token_attention_explorer(w, ["the", "cat"])
        >>> ex.set(query=1)
        >>> ex.state["top_key"]
        1
    """
    check_tensor("weights", weights)
    check_floating("weights", weights)
    T, S = check_shape("weights", weights, "T S").values()
    if not torch.isfinite(weights).all():
        raise ValueError("weights: expected finite values, got NaN or inf")
    if key_tokens is None:
        if T != S:
            raise ValueError(f"key_tokens: expected S={S} labels for cross-attention (T={T} != S), got None")
        key_tokens = query_tokens
    labels = {}
    for name, tokens, size, letter in (
        ("query_tokens", query_tokens, T, "T"),
        ("key_tokens", key_tokens, S, "S"),
    ):
        if isinstance(tokens, str) or not isinstance(tokens, Sequence) or len(tokens) != size:
            sized = isinstance(tokens, Sequence) and not isinstance(tokens, str)
            got = f"{len(tokens)} labels" if sized else repr(tokens)
            raise ValueError(f"{name}: expected {letter}={size} labels, got {got}")
        labels[name] = [str(token) for token in tokens]
    controls = {
        "query": widgets.Dropdown(
            options=[(f"{t}: {token}", t) for t, token in enumerate(labels["query_tokens"])],
            value=0,
            description="query",
        )
    }
    view = partial(
        _token_attention_view, weights.detach().cpu().float(), labels["query_tokens"], labels["key_tokens"]
    )
    return Explorer(controls, view, title="One query's attention over the keys")


# ---------------------------------------------------------------------------------------------------
# 11: sparse attention patterns
# ---------------------------------------------------------------------------------------------------


def _sparse_pattern_view(
    *, T: int, seed: int, window: int, dilation: int, global_tokens: int, random_keys: int
) -> tuple[dict, Figure]:
    from attn_edu.efficient import (  # imported on use, like the sliding window of mask_explorer
        dilated_window_mask,
        global_tokens_mask,
        mask_density,
        random_blocks_mask,
    )

    mask = dilated_window_mask(T, window=window, dilation=dilation, causal=False)  # (T, T)
    names = [f"window {window}" + (f", dilation {dilation}" if dilation > 1 else "")]
    if global_tokens:
        mask = mask | global_tokens_mask(T, global_positions=list(range(global_tokens)))  # (T, T)
        names.append(f"{global_tokens} global")
    if random_keys:
        generator = torch.Generator().manual_seed(seed)
        mask = mask | random_blocks_mask(T, num_random=random_keys, generator=generator)  # (T, T)
        names.append(f"{random_keys} random")
    pairs = int(mask.sum())
    density = mask_density(mask)
    title = " | ".join(names) + f"\n{pairs} of {T * T} pairs (density {density:.2f})"
    figure = viz.plot_mask(mask, title=title)
    state = {"mask": mask, "pairs": pairs, "density": density, "keys_per_query": mask.sum(dim=-1)}
    return state, figure


def sparse_pattern_explorer(T: int = 32, *, seed: int = 0) -> Explorer:
    """Build a Longformer / BigBird pattern from sliders: a (dilated) window, global tokens, random keys.

    The mask is ``window | global | random`` (Beltagy et al. 2020, §3.1; Zaheer et al. 2020, §2), made by
    :mod:`attn_edu.efficient` (bidirectional window; global tokens at positions ``0 .. g - 1``; random
    keys drawn with ``seed``). The title counts the (query, key) pairs computed: the cost relative to full
    attention is the density.

    Example:
        >>> ex = sparse_pattern_explorer(8)
        >>> ex.set(window=2, global_tokens=0, random_keys=0)
        >>> ex.state["pairs"]                      # 8 diagonal + 2·7 neighbours
        22
    """
    check_positive_int("T", T)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed: expected an int >= 0, got {seed!r}")
    slider = partial(widgets.IntSlider, min=1, continuous_update=False, style=_WIDE)
    controls = {
        "window": slider(value=min(3, T), max=T, description="window"),
        "dilation": slider(value=1, max=max(1, min(4, T)), description="dilation"),
        "global_tokens": slider(value=min(1, T), min=0, max=min(4, T), description="global tokens"),
        "random_keys": slider(value=min(2, T), min=0, max=min(4, T), description="random keys"),
    }
    return Explorer(
        controls, partial(_sparse_pattern_view, T=T, seed=seed), title=f"Sparse attention patterns (T = {T})"
    )


# ---------------------------------------------------------------------------------------------------
# 12: online softmax (FlashAttention)
# ---------------------------------------------------------------------------------------------------

# Scores whose maximum grows several times from left to right, so most block sizes show a rescale.
ONLINE_SOFTMAX_SCORES = (0.5, 1.2, -0.3, 2.0, 0.1, 3.1, -1.0, 1.7, 4.0, 0.2, 2.5, -0.6)


def _online_softmax_view(x: torch.Tensor, *, block_size: int, step: int) -> tuple[dict, Figure]:
    from attn_edu.flash import online_softmax_steps  # imported on use: notebook 12's module

    stats = list(online_softmax_steps(x, block_size))  # [(m_i, l_i) after each block]
    m_values = torch.stack([m_i for m_i, _ in stats])  # (n_blocks,)
    l_values = torch.stack([l_i for _, l_i in stats])  # (n_blocks,)
    step = min(step, len(stats))
    m_i, l_i = float(m_values[step - 1]), float(l_values[step - 1])
    m_old = float(m_values[step - 2]) if step > 1 else -math.inf
    # The factor that rescales the sum of the blocks already read: exp(m_old - m_new). It is 1 when the
    # maximum did not move, below 1 when this block raised it (0 before the first block: nothing to rescale).
    alpha = math.exp(m_old - m_i)
    seen = min(step * block_size, x.shape[-1])
    estimate = torch.exp(x[:seen] - m_i) / l_i  # (seen,)
    figure = viz.plot_online_softmax(x, m_values, l_values, block_size=block_size, step=step)
    state = {
        "block_size": block_size,
        "step": step,
        "num_blocks": len(stats),
        "m_values": m_values,
        "l_values": l_values,
        "m_i": m_i,
        "l_i": l_i,
        "alpha": alpha,
        "rescaled": step > 1 and m_i > m_old,
        "estimate": estimate,
    }
    return state, figure


def _sync_online_softmax_steps(x: torch.Tensor, controls: dict[str, widgets.ValueWidget]) -> None:
    # One step per block: the number of blocks follows the block size.
    controls["step"].max = math.ceil(x.shape[-1] / controls["block_size"].value)


def online_softmax_explorer(
    scores: Sequence[float] | torch.Tensor | None = None, *, block_size: int = 3
) -> Explorer:
    """Step through the online softmax one block at a time: the running max ``m_i``, the running sum
    ``l_i``, and the rescaling ``l_i ← l_i · exp(m_old − m_new) + Σ exp(x_block − m_new)``.

    The block size slider re-cuts the scores into blocks; the step slider reads them one by one. The
    numbers come from :func:`attn_edu.flash.online_softmax_steps` (Milakov & Gimelshein 2018), the
    streaming softmax inside FlashAttention. After the last block the estimate equals ``torch.softmax``
    whatever the block size.

    Shapes:
        scores ``(N,)`` (default: :data:`ONLINE_SOFTMAX_SCORES`, N = 12).

    Example:
        >>> ex = online_softmax_explorer([1.0, 3.0, 2.0], block_size=2)
        >>> ex.set(step=2)
        >>> round(ex.state["m_i"], 3), round(ex.state["l_i"], 3), ex.state["alpha"]
        (3.0, 1.503, 1.0)
    """
    x = torch.tensor(ONLINE_SOFTMAX_SCORES) if scores is None else _float_tensor("scores", scores)
    check_shape("scores", x, "N")
    if not torch.isfinite(x).all():
        raise ValueError("scores: expected finite values, got NaN or inf")
    N = x.shape[0]
    check_positive_int("block_size", block_size)
    if block_size > N:
        raise ValueError(f"block_size: expected at most N={N}, got {block_size}")
    slider = partial(widgets.IntSlider, min=1, continuous_update=False, style=_WIDE)
    controls = {
        "block_size": slider(value=block_size, max=N, description="block size"),
        "step": slider(value=1, max=math.ceil(N / block_size), description="blocks read"),
    }
    return Explorer(
        controls,
        partial(_online_softmax_view, x),
        title="Online softmax: one block at a time",
        sync=partial(_sync_online_softmax_steps, x),
    )


# ---------------------------------------------------------------------------------------------------
# 09: T5 span corruption
# ---------------------------------------------------------------------------------------------------

SPAN_SENTENCE = (
    "a small model learns to fill the gaps in a sentence by reading the words on both sides of each gap "
    "and then writing out only the missing words after a sentinel that marks where each gap was"
)  # 38 words: at T5's settings round(0.15 · 38) = 6 hidden words in round(6 / 3) = 2 spans


def _span_view(
    words: list[str], *, noise_density: float, mean_span_length: float, seed: int
) -> tuple[dict, Figure]:
    from attn_edu.objectives import span_corruption, span_uncorrupt

    n = len(words)
    sentinel_start_id = n + 99  # 100 sentinels after the words, counting down: <X0> = n + 99
    names = words + [f"<X{sentinel_start_id - i}>" for i in range(n, n + 100)]
    ids = torch.arange(n)  # (T,) every word its own id, so a word's position is its id
    inputs, targets = span_corruption(
        ids,
        noise_density=noise_density,
        mean_span_length=mean_span_length,
        sentinel_start_id=sentinel_start_id,
        generator=torch.Generator().manual_seed(seed),
    )
    noise = torch.isin(ids, targets)  # (T,) the hidden words are exactly the targets' plain tokens
    is_sentinel_in, is_sentinel_out = inputs >= n, targets >= n
    round_trip = torch.equal(span_uncorrupt(inputs, targets, sentinel_start_id=sentinel_start_id), ids)
    state = {
        "inputs": [names[i] for i in inputs.tolist()],
        "targets": [names[i] for i in targets.tolist()],
        "noise": noise,
        "num_noise": int(noise.sum()),
        "num_spans": int(is_sentinel_in.sum()),
        "input_length": len(inputs),
        "target_length": len(targets),
        "round_trip": round_trip,
    }
    figure = viz.plot_token_rows(
        {"original": words, "encoder input": state["inputs"], "decoder target": state["targets"]},
        highlight={"original": noise, "encoder input": is_sentinel_in, "decoder target": ~is_sentinel_out},
        title=(
            f"{state['num_noise']} of {n} words hidden in {state['num_spans']} spans: "
            f"{n} tokens become {len(inputs)} in + {len(targets)} out"
        ),
    )
    return state, figure


def span_corruption_explorer(words: Sequence[str] | str = SPAN_SENTENCE, *, seed: int = 0) -> Explorer:
    """T5's span corruption on a sentence: choose how much to hide and how long the spans are.

    The sliders set ``noise_density`` (fraction of words hidden), ``mean_span_length`` and the random
    ``seed`` of :func:`attn_edu.objectives.span_corruption`. The picture shows the sentence with the
    hidden words in orange, the encoder input (each span replaced by one sentinel ``<Xk>``, T5's
    ``<extra_id_k>``) and the decoder target (each sentinel followed by the words it hides).
    ``state["round_trip"]`` says whether :func:`~attn_edu.objectives.span_uncorrupt` rebuilds the sentence.

    Example:
        >>> ex = span_corruption_explorer("one two three four five six seven eight nine ten")
        >>> ex.set(noise_density=0.3, mean_span_length=1.0)
        >>> ex.state["num_noise"], ex.state["num_spans"], ex.state["round_trip"]
        (3, 3, True)
    """
    if isinstance(words, str):
        words = words.split()
    if isinstance(words, torch.Tensor) or not isinstance(words, Sequence) or len(words) < 2:
        raise ValueError(f"words: expected a sentence or a list of at least 2 words, got {words!r}")
    words = [str(w) for w in words]
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed: expected an int >= 0, got {seed!r}")
    float_slider = partial(widgets.FloatSlider, continuous_update=False, style=_WIDE)
    controls = {
        "noise_density": float_slider(value=0.15, min=0.05, max=0.5, step=0.05, description="noise density"),
        "mean_span_length": float_slider(
            value=3.0, min=1.0, max=5.0, step=0.5, description="mean span length"
        ),
        "seed": widgets.IntSlider(
            value=seed, min=0, max=max(20, seed), continuous_update=False, description="seed"
        ),
    }
    return Explorer(controls, partial(_span_view, words), title="T5 span corruption")


# ---------------------------------------------------------------------------------------------------
# 13: head ablation
# ---------------------------------------------------------------------------------------------------


def _ablation_view(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    heads: dict[str, tuple[int, int]],
    example: int,
    full_loss: float,
    **switched_off: bool,
) -> tuple[dict, Figure]:
    from attn_edu.objectives import causal_lm_loss

    num_layers = 1 + max(layer for layer, _ in heads.values())
    num_heads = 1 + max(head for _, head in heads.values())
    head_mask = torch.ones(num_layers, num_heads)  # (L, H): 1 keeps a head, 0 zeroes its output
    ablated = [heads[name] for name, off in switched_off.items() if off]
    for layer, head in ablated:
        head_mask[layer, head] = 0.0
    with torch.no_grad():
        # logits (B, T, V); weights: one (B, H, T, S) tensor per layer
        logits, weights = model(input_ids, need_weights=True, head_mask=head_mask)
        loss = float(causal_lm_loss(logits, labels))
    shown = torch.stack([w[example] for w in weights]).float()  # (L, H, T, S)
    names = ", ".join(f"{layer}.{head}" for layer, head in ablated) or "none"
    title = f"heads off: {names}  ·  loss {loss:.3f} (all heads on: {full_loss:.3f})"
    state = {"ablated": ablated, "head_mask": head_mask, "loss": loss, "full_loss": full_loss}
    state["weights"] = shown
    return state, viz.plot_heads(shown, title=title)


def ablation_explorer(
    model: torch.nn.Module, input_ids: torch.Tensor, labels: torch.Tensor, *, example: int = 0
) -> Explorer:
    """Switch attention heads off with checkboxes; see the loss and every head's attention pattern.

    Each checkbox ``layer{l}_head{h}`` ablates one head (its output is zeroed before ``W^O``, as in
    :func:`attn_edu.interp.head_ablation`). The view runs ``model(input_ids, need_weights=True,
    head_mask=...)``, reports the next-token loss on ``labels`` (``-100`` = not scored, see
    :func:`attn_edu.objectives.causal_lm_loss`) and draws all heads of sequence ``example``. Heads that
    stay on can change their pattern too: a later layer reads what an ablated earlier head wrote.
    ``model`` must accept ``need_weights=`` and ``head_mask=`` (e.g.
    :class:`attn_edu.models.attention_only.AttentionOnlyTransformer`).

    Shapes:
        input_ids and labels ``(B, T)``; ``state["weights"]`` ``(L, H, T, S)``, ``state["head_mask"]`` ``(L, H)``.

    Example:
        >>> from attn_edu.models.attention_only import AttentionOnlyConfig, AttentionOnlyTransformer
        >>> model = AttentionOnlyTransformer(AttentionOnlyConfig(vocab_size=10, embed_dim=8, num_heads=2))
        >>> ids = torch.tensor([[1, 2, 3, 1, 2, 3]])
        >>> ex = ablation_explorer(model, ids, ids)
        >>> ex.set(layer1_head0=True)
        >>> ex.state["ablated"], ex.state["weights"].shape
        ([(1, 0)], torch.Size([2, 2, 6, 6]))
    """
    from attn_edu.interp import attention_layers
    from attn_edu.objectives import causal_lm_loss

    layers = attention_layers(model)
    check_tensor("input_ids", input_ids)
    sizes = check_shape("input_ids", input_ids, "B T")
    check_tensor("labels", labels)
    check_shape("labels", labels, "B T", **sizes)
    if isinstance(example, bool) or not isinstance(example, int) or not 0 <= example < sizes["B"]:
        raise ValueError(f"example: expected an int in 0 .. {sizes['B'] - 1}, got {example!r}")
    heads = {
        f"layer{layer}_head{head}": (layer, head)
        for layer, attn in enumerate(layers)
        for head in range(attn.num_heads)
    }
    controls = {
        name: widgets.Checkbox(value=False, description=f"ablate {layer}.{head}", indent=False)
        for name, (layer, head) in heads.items()
    }
    with torch.no_grad():
        full_loss = float(causal_lm_loss(model(input_ids), labels))  # the reference: every head on
    view = partial(_ablation_view, model, input_ids, labels, heads, example, full_loss)
    return Explorer(controls, view, title="Head ablation: tick a head to switch it off")


# ---------------------------------------------------------------------------------------------------
# 08: which numbers a norm averages over
# ---------------------------------------------------------------------------------------------------

_NORM_EPS = 1e-5  # the same eps for the three norms, so only *which* numbers they average differs


def _normalised_token(batch: torch.Tensor) -> dict[str, torch.Tensor]:
    """Token 0 of sequence 0 after BatchNorm, LayerNorm and RMSNorm (no gain, no bias), each ``(C,)``."""
    from attn_edu.blocks import RMSNorm, batch_norm_stats, layer_norm_stats

    bn_mean, bn_var = batch_norm_stats(batch)  # (C,) each: over every token of every sequence
    ln_mean, ln_var = layer_norm_stats(batch)  # (B, T, 1) each: over one token's channels
    token = batch[0, 0]  # (C,)
    with torch.no_grad():
        rms = RMSNorm(batch.shape[-1], eps=_NORM_EPS)(token)  # (C,)
    return {
        "BatchNorm": (token - bn_mean) / torch.sqrt(bn_var + _NORM_EPS),
        "LayerNorm": (token - ln_mean[0, 0]) / torch.sqrt(ln_var[0, 0] + _NORM_EPS),
        "RMSNorm": rms,
    }


def _norm_view(x: torch.Tensor, *, shift: float, scale: float, padding: int) -> tuple[dict, Figure]:
    B, T, C = x.shape
    others = x[1:] * scale + shift  # (B - 1, T, C): every sequence but the watched one
    batch = torch.cat([x[:1], others])  # (B, T, C)
    if padding:
        batch = torch.cat([batch, batch.new_zeros(B, padding, C)], dim=1)  # (B, T + padding, C) zero pads
    before, after = _normalised_token(x), _normalised_token(batch)
    change = {name: float((after[name] - before[name]).abs().max()) for name in after}
    figure, axes = plt.subplots(1, 3, figsize=(9.5, 2.8), layout="constrained", sharey=True)
    for ax, name in zip(axes, after):
        viz.plot_curves(range(C), {"batch as it was": before[name], "batch now": after[name]},
                        xlabel="channel", ylabel="token (0, 0), normalised", title=f"{name}: moved by {change[name]:.2f}",
                        ax=ax)  # fmt: skip
    for ax in axes[1:]:
        ax.get_legend().remove()  # one legend and one y label are enough (a smaller picture redraws faster)
        ax.set_ylabel("")
    return {"batch": batch, "before": before, "after": after, "change": change}, figure


def norm_explorer(B: int = 4, T: int = 6, C: int = 12, *, seed: int = 0) -> Explorer:
    """Move the *other* sequences of a batch and watch one token's normalised values: BatchNorm's move.

    BatchNorm (Ioffe & Szegedy, 2015) normalises each channel with a mean and variance taken over every
    token of every sequence in the batch, so a token's output depends on its neighbours in the batch,
    padding included. LayerNorm (Ba et al., 2016) and RMSNorm (Zhang & Sennrich, 2019) use only the
    token's own ``C`` channels: their curves never move. The statistics come from
    :func:`attn_edu.blocks.batch_norm_stats`, :func:`attn_edu.blocks.layer_norm_stats` and
    :class:`attn_edu.blocks.RMSNorm`; no gain or bias, ``eps = 1e-5`` for all three.

    Controls: ``shift`` and ``scale`` move sequences ``1 .. B-1`` (``x * scale + shift``); ``padding``
    appends that many zero tokens to every sequence, as padding to a longer batch would.

    Shapes:
        the batch is ``(B, T, C)``; the watched token is ``[0, 0]``.

    Example:
        >>> ex = norm_explorer()
        >>> ex.set(shift=2.0)
        >>> ex.state["change"]["BatchNorm"] > 0.1, ex.state["change"]["LayerNorm"]
        (True, 0.0)
    """
    for name, value in (("T", T), ("C", C)):
        check_positive_int(name, value)
    if isinstance(B, bool) or not isinstance(B, int) or B < 2:
        raise ValueError(f"B: expected an int >= 2 (the watched sequence and at least one other), got {B!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed: expected an int, got {seed!r}")
    generator = torch.Generator().manual_seed(seed)
    channel_offsets = 0.5 * torch.randn(C, generator=generator)  # (C,) channels differ, as real features do
    x = torch.randn(B, T, C, generator=generator) + channel_offsets  # (B, T, C)
    options = {"continuous_update": False, "style": _WIDE}
    controls = {
        "shift": widgets.FloatSlider(
            value=0.0, min=-3.0, max=3.0, step=0.25, description="shift others", **options
        ),
        "scale": widgets.FloatLogSlider(
            value=1.0, base=10, min=-1, max=1, step=0.1, description="scale others", **options
        ),
        "padding": widgets.IntSlider(value=0, min=0, max=12, description="padding tokens", **options),
    }
    return Explorer(controls, partial(_norm_view, x), title="Per-batch vs per-token statistics")
