"""GPU kernels written in Triton: optional, and never imported unless you ask for one.

Triton (https://triton-lang.org) compiles Python-like kernels for NVIDIA and AMD GPUs. It ships
wheels for Linux only, so it is an optional extra: ``pip install "attn-edu[triton]"``. Without a GPU
the kernels still run, slowly, in Triton's interpreter: set ``TRITON_INTERPRET=1`` *before*
importing :mod:`attn_edu.kernels.triton_flash` and pass CPU tensors. On macOS (no Triton) read the
kernel's PyTorch twin, :func:`attn_edu.flash.tiled_attention`: same loops, same variable names.

Two modules, each imported only when asked for: :mod:`attn_edu.kernels.triton_flash` (the teaching
kernels, forward and backward) and :mod:`attn_edu.kernels.triton_flash_fast` (an autotuned forward that
reuses the teaching backward). This package itself imports neither Triton nor torch.

Example:
    >>> import attn_edu.kernels
    >>> isinstance(attn_edu.kernels.triton_available(), bool)
    True
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

INSTALL_HINT = (
    "Triton is not installed. The FlashAttention kernel in attn_edu.kernels needs it:\n"
    '    pip install "attn-edu[triton]"      (or pip install -e ".[triton]" in a clone of the course)\n'
    "Linux only; it runs on a GPU, or on the CPU in Triton's interpreter (TRITON_INTERPRET=1).\n"
    "On macOS or Windows Triton is not available: read and run attn_edu.flash.tiled_attention,\n"
    "the PyTorch twin of the kernel (same loops, same variable names)."
)


class TritonNotInstalledError(ImportError):
    """Raised when a kernel is imported without Triton; the message says what to install."""


def triton_available() -> bool:
    """Whether the ``triton`` package can be found (checked without importing it).

    Example:
        >>> triton_available() in (True, False)
        True
    """
    if "triton" in sys.modules:
        return sys.modules["triton"] is not None  # None: an import blocked on purpose (tests do this)
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):
        return False


def require_triton() -> ModuleType:
    """Import and return ``triton``, or raise :class:`TritonNotInstalledError` explaining what to install."""
    try:
        import triton
    except ImportError as err:
        raise TritonNotInstalledError(f"{INSTALL_HINT}\n(import failed with: {err})") from err
    return triton


__all__ = ["INSTALL_HINT", "TritonNotInstalledError", "require_triton", "triton_available"]
