"""Notebook 07 (RoPE): move a token along the sequence and watch one of its 2-D pairs turn."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import ipywidgets as widgets
import torch
from matplotlib.figure import Figure

from attn_edu import viz
from attn_edu._validate import check_floating, check_positive_int, check_shape
from attn_edu.rope import rope_frequencies, rotate_2d
from attn_edu.widgets.explorer import WIDE_LABELS, Explorer, as_float_tensor


def _rope_view(
    vector: torch.Tensor, frequencies: torch.Tensor, *, position: int, pair: int
) -> tuple[dict, Figure]:
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
    check_positive_int("max_position", max_position)
    frequencies = rope_frequencies(head_dim, base=base)  # (D/2,); checks head_dim and base
    start = as_float_tensor("vector", vector)
    check_floating("vector", start)
    check_shape("vector", start, "2")
    controls = {
        "position": widgets.IntSlider(
            value=1,
            min=0,
            max=max_position,
            description="position m",
            continuous_update=False,
            style=WIDE_LABELS,
        ),
        "pair": widgets.IntSlider(
            value=0, min=0, max=head_dim // 2 - 1, description="pair i", continuous_update=False
        ),  # fmt: skip
    }
    return Explorer(
        controls, partial(_rope_view, start, frequencies), title="RoPE: each pair is a rotating hand"
    )
