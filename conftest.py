"""Repository-wide pytest configuration: skip modules whose optional dependency is absent; restart dying kernels;
run the longest notebooks first."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from attn_edu.kernels import triton_available

# `--doctest-modules` imports every module under attn_edu/; without Triton (macOS, NO_TRITON=1) the kernel
# module refuses to import with an install hint, which would be reported as a collection error.
collect_ignore = (
    []
    if triton_available()
    else [
        "attn_edu/kernels/triton_flash.py",
        "attn_edu/kernels/triton_flash_fast.py",
        "attn_edu/kernels/compile_report.py",
    ]
)


def retry_kernel_start(start: Callable[..., Any], attempts: int = 3) -> Callable[..., Any]:
    """Wrap nbval's kernel start so that a kernel that dies while starting is started again.

    With notebooks run side by side (pytest-xdist), a kernel now and then dies before it answers its first
    message ("Kernel died before replying to kernel_info"), and nbval then fails every cell of that notebook.
    nbval's ``start_new_kernel`` shuts such a kernel down before it raises, so a second try starts clean.
    Any other error is raised at once.
    """

    def start_with_retry(*args: Any, **kwargs: Any) -> Any:
        for attempt in range(1, attempts + 1):
            try:
                return start(*args, **kwargs)
            except RuntimeError as err:
                if "Kernel died" not in str(err) or attempt == attempts:
                    raise
        raise AssertionError("unreachable")

    return start_with_retry


def pytest_configure(config: pytest.Config) -> None:
    if getattr(config.option, "nbval", False) or getattr(config.option, "nbval_lax", False):
        from nbval import kernel

        kernel.start_new_kernel = retry_kernel_start(kernel.start_new_kernel)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under nbval, the longest notebooks run first (``tests/notebook_order.py``): two workers then finish
    together instead of one running the last long notebook alone. Cells keep their order in each notebook."""
    if not (getattr(config.option, "nbval", False) or getattr(config.option, "nbval_lax", False)):
        return
    from tests.notebook_order import longest_first

    cells: dict[Path, list[pytest.Item]] = {}
    others = []
    for item in items:
        if item.path.suffix == ".ipynb":
            cells.setdefault(item.path, []).append(item)
        else:
            others.append(item)
    items[:] = others + [item for path in longest_first(list(cells)) for item in cells[path]]
