"""Notebook 10 (sampling the next token): turn the temperature, top-k and top-p knobs, see what remains."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import ipywidgets as widgets
import torch
from matplotlib.figure import Figure

from attn_edu import viz
from attn_edu._validate import check_shape
from attn_edu.attention import attention_entropy
from attn_edu.generation import next_token_probs
from attn_edu.widgets.explorer import Explorer, as_float_tensor


def _sampling_view(
    logits: torch.Tensor, tokens: list[str] | None, *, temperature: float, top_k: int, top_p: float
) -> tuple[dict, Figure]:
    # The sliders' "off" positions, top-k 0 and top-p 1, are next_token_probs' None.
    probs = next_token_probs(
        logits, temperature=temperature, top_k=top_k or None, top_p=top_p if top_p < 1 else None
    )  # (V,), exactly 0 on filtered tokens
    support = int((probs > 0).sum())
    title = f"temperature {temperature:.2f}, top-k = {top_k or 'off'}, top-p = {top_p:.2f}: {support} tokens can be drawn"
    figure = viz.plot_distribution(
        probs, labels=tokens, reference=torch.softmax(logits.float(), dim=-1), title=title
    )
    return {"probs": probs, "support": support, "entropy": float(attention_entropy(probs.double()))}, figure


def sampling_explorer(
    logits: torch.Tensor | Sequence[float], *, tokens: Sequence[Any] | None = None
) -> Explorer:
    """Turn the temperature, top-k and top-p knobs and see which next tokens remain, and how likely.

    Temperature 0 is greedy; top-k 0 and top-p 1 switch those filters off. The dashed outline is the
    plain softmax of the logits. The bars are :func:`attn_edu.generation.next_token_probs`, the distribution
    :func:`~attn_edu.generation.sample_next_token` draws from (Fan et al., 2018; Holtzman et al., 2020).

    Shapes:
        logits ``(V,)``; tokens ``V`` labels.

    Example:
        >>> ex = sampling_explorer(torch.tensor([3.0, 2.0, 1.0, 0.0]))
        >>> ex.set(top_k=2)
        >>> ex.state["support"]
        2
    """
    z = as_float_tensor("logits", logits)
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
