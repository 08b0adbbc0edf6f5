"""Notebook 06 (sinusoidal positions): slide through the table's columns, read each wavelength."""

from __future__ import annotations

from functools import partial

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from attn_edu import viz
from attn_edu.positional import sinusoidal_encoding, wavelengths
from attn_edu.widgets.explorer import WIDE_LABELS, Explorer


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
    pe = sinusoidal_encoding(num_positions, dim, base=base)  # (N, dim); checks the arguments
    lengths = wavelengths(dim, base=base)  # (dim/2,)
    controls = {
        "dimension": widgets.IntSlider(
            value=0, min=0, max=dim - 1, description="dimension", continuous_update=False, style=WIDE_LABELS
        ),  # fmt: skip
    }
    return Explorer(
        controls, partial(_positional_view, pe, lengths), title="Sinusoidal positions: clock hands"
    )
