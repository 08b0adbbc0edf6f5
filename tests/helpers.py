"""Helpers several test files share (their fixtures are in ``tests/conftest.py``)."""

from __future__ import annotations

import torch
from torch import nn


def randomize_(module: nn.Module, seed: int = 0, scale: float = 0.1) -> nn.Module:
    """Add ``scale`` times Gaussian noise to every parameter, in place, and return the module in eval mode.

    Models and blocks initialise biases to 0 and norm gains to 1; a weight copied to the wrong place (or not at
    all) would then go unnoticed. Perturbed, every tensor matters to the output.
    """
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn_like(p))
    return module.eval()
