"""Repository-wide pytest configuration: skip collecting modules whose optional dependency is absent."""

from __future__ import annotations

from attn_edu.kernels import triton_available

# `--doctest-modules` imports every module under attn_edu/; without Triton (macOS, NO_TRITON=1) the kernel
# module refuses to import with an install hint, which would be reported as a collection error.
collect_ignore = [] if triton_available() else ["attn_edu/kernels/triton_flash.py"]
