"""Notebook 01 (attention as a soft lookup): move a query among the keys, watch the weights follow."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import ipywidgets as widgets
import torch
from matplotlib.figure import Figure

from attn_edu import viz
from attn_edu._validate import check_shape
from attn_edu.widgets.explorer import Explorer, as_float_tensor


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
    Nadaraya–Watson kernel regression (1964), the "attention" of notebook 01, whose bandwidth ``σ`` is
    ``temperature = 2σ²`` (notebook 01's one convention). Small temperatures approach a hard nearest-key
    lookup; large ones average every value.

    Shapes:
        keys ``(S,)`` or ``(S, 2)`` (then two query sliders); values ``(S,)`` or ``(S, Dv)``.

    Example:
        >>> ex = soft_lookup_explorer(torch.tensor([0.0, 1.0, 2.0]), torch.tensor([0.0, 10.0, 0.0]))
        >>> ex.controls["query"].value = 1.0
        >>> round(float(ex.state["weights"].argmax()))      # the key under the query wins
        1
    """
    k = as_float_tensor("keys", keys)
    if k.ndim == 2 and k.shape[1] == 1:
        k = k[:, 0]  # (S,)
    if k.ndim not in (1, 2) or (k.ndim == 2 and k.shape[1] != 2):
        raise ValueError(f"keys: expected shape (S,) or (S, 2), got {tuple(k.shape)}")
    S = k.shape[0]
    v = as_float_tensor("values", values)
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
