"""Notebooks 02, 05 and 13 (attention heads): one query's row of the weights, and any head's pattern."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import ipywidgets as widgets
import torch
from matplotlib.figure import Figure

from attn_edu import viz
from attn_edu._validate import check_floating, check_shape, check_tensor
from attn_edu.attention import attention_entropy
from attn_edu.widgets.explorer import Explorer


def _token_attention_view(
    weights: torch.Tensor, query_labels: list[str], key_labels: list[str], *, query: int
) -> tuple[dict, Figure]:
    row = weights[query]  # (S,)
    top = int(row.argmax())
    title = f"query {query_labels[query]!r} reads most from {key_labels[top]!r} ({float(row[top]):.2f})"
    figure = viz.plot_distribution(row, labels=key_labels, title=title)
    figure.axes[0].set_xlabel("key token")
    figure.axes[0].set_ylabel("attention weight")
    return {
        "query": query,
        "weights": row,
        "top_key": top,
        "entropy": float(attention_entropy(row.double())),
    }, figure


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
        "entropy": float(attention_entropy(weights.double()).mean()),
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
        if not bool((w >= 0).all()):  # the view reports each head's entropy: weights, not scores
            lowest = float(w.min())
            raise ValueError(
                f"weights_by_layer[{n}]: expected attention weights >= 0, got minimum {lowest:.3g}"
            )
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
