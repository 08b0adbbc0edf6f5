"""Notebook 08 (norms): move the rest of a batch; only BatchNorm changes the watched token's output."""

from __future__ import annotations

from functools import partial

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from attn_edu import viz
from attn_edu._validate import check_positive_int
from attn_edu.blocks import RMSNorm, batch_norm_stats, layer_norm_stats
from attn_edu.widgets.explorer import WIDE_LABELS, Explorer

_NORM_EPS = 1e-5  # the same eps for the three norms, so only *which* numbers they average differs


def _normalised_token(batch: torch.Tensor) -> dict[str, torch.Tensor]:
    """Token 0 of sequence 0 after BatchNorm, LayerNorm and RMSNorm (no gain, no bias), each ``(C,)``."""
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
    options = {"continuous_update": False, "style": WIDE_LABELS}
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
