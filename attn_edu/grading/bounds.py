"""Out-of-bounds loads and stores in Triton's interpreter, caught before they touch memory.

On a GPU a ``tl.store`` without its mask corrupts memory silently; in Triton's interpreter it writes through a
raw CPU address, which may overwrite another tensor or crash the Jupyter kernel. :func:`bounds_checked`
watches every masked load and store while a kernel runs in the interpreter: each address a live lane touches
must lie inside one of the tensors the kernel was launched with, or the lane is reported, by its index and
by how far it is from the nearest tensor, as :class:`OutOfBounds`, before anything is read or written. A
masked lane loaded without ``other=`` reads NaN (a GPU leaves it undefined; the interpreter would say 0), and
:func:`recorded_loads` lets a check see which elements each program loaded.

It works by wrapping three methods of ``triton.runtime.interpreter`` (the launch's argument copy, the masked
load and the masked store) for the duration of the block, and reads element sizes with its private
``_get_np_dtype``. Where the installed Triton lacks any of these names, the block runs unwatched (the grading
command's sandbox still survives a crash).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np


class OutOfBounds(IndexError):
    """A kernel's load or store reached an address outside every tensor it was given."""


# The lists that record loads now (innermost last): each load appends (program id, tensor name, elements).
_RECORDERS: list[list[tuple[tuple[int, ...], str, Any]]] = []


@contextmanager
def recorded_loads() -> Iterator[list[tuple[tuple[int, ...], str, Any]]]:
    """Record, inside :func:`bounds_checked`, every load of the kernels launched in the block: the program's id
    ``(x, y, z)``, the name of the kernel argument the live lanes read, and the element indices they read
    (a NumPy array). Outside the watch, or on a GPU, the list stays empty."""
    loads: list[tuple[tuple[int, ...], str, Any]] = []
    _RECORDERS.append(loads)
    try:
        yield loads
    finally:
        _RECORDERS.remove(loads)


def _record(
    ranges: list[tuple[int, int, str]], ptrs: Any, mask: Any, np_dtype: Callable[[Any], Any], where: Any
) -> None:
    addresses = np.asarray(ptrs.data, dtype=np.uint64).ravel()
    live = np.broadcast_to(np.asarray(mask.data, dtype=bool), np.shape(ptrs.data)).ravel()
    size = np.dtype(np_dtype(ptrs.get_element_ty())).itemsize
    for start, end, name in ranges:
        inside = live & (addresses >= start) & (addresses + size <= end)
        if inside.any():
            _RECORDERS[-1].append((tuple(where), name, (addresses[inside] - start) // size))


def _storages(value: Any, found: list[tuple[int, int, str]], name: str) -> None:
    """The byte ranges ``(start, end, name)`` of the tensors in one kernel argument (tensors, tuples)."""
    if isinstance(value, tuple):
        for i, item in enumerate(value):
            _storages(item, found, f"{name}[{i}]")
    elif hasattr(value, "untyped_storage"):
        storage = value.untyped_storage()
        found.append((storage.data_ptr(), storage.data_ptr() + storage.nbytes(), name))


def _check(
    ranges: list[tuple[int, int, str]], ptrs: Any, mask: Any, what: str, np_dtype: Callable[[Any], Any]
) -> None:
    addresses = np.asarray(ptrs.data, dtype=np.uint64)
    live = np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)
    size = np.dtype(np_dtype(ptrs.get_element_ty())).itemsize
    inside = np.zeros(addresses.shape, dtype=bool)
    for start, end, _ in ranges:
        inside |= (addresses >= start) & (addresses + size <= end)
    bad = live & ~inside
    if not bad.any():
        return
    lane = int(np.flatnonzero(bad.ravel())[0])
    address = int(addresses.ravel()[lane])
    start, end, name = min(ranges, key=lambda r: min(abs(address - r[0]), abs(address - r[1])))
    element = (address - start) // size if address >= start else -((start - address + size - 1) // size)
    raise OutOfBounds(
        f"{what} of {int(bad.sum())} lane(s) outside every tensor the kernel was given: lane {lane} of "
        f"{addresses.size} points at element {element} of {name}, which holds {(end - start) // size}. "
        f"Is the {what}'s mask missing, or its offsets too large?"
    )


@contextmanager
def bounds_checked() -> Iterator[bool]:
    """Check every address of every masked load and store of the kernels launched in the block (Triton's
    interpreter only). Yields whether the watch is on: False when triton has not been imported (no kernel
    can have been written) or lacks the methods it wraps, and then the block runs as it would without it.
    """
    if "triton" not in sys.modules:  # no kernel without triton: nothing to watch, and no import to pay for
        yield False
        return
    try:
        from triton.runtime import interpreter as tri
    except ImportError:
        yield False
        return
    executor, builder = getattr(tri, "GridExecutor", None), getattr(tri, "InterpreterBuilder", None)
    np_dtype = getattr(tri, "_get_np_dtype", None)  # a pointer's element type -> its NumPy dtype
    names = ("_init_args_hst", "create_masked_load", "create_masked_store")
    if (
        executor is None
        or builder is None
        or np_dtype is None
        or not all(hasattr(cls, n) for cls, n in zip((executor, builder, builder), names))
    ):
        yield False
        return
    init, load, store = executor._init_args_hst, builder.create_masked_load, builder.create_masked_store
    handle = getattr(tri, "TensorHandle", None)  # the interpreter's value type: for a NaN fill
    ranges: list[tuple[int, int, str]] = []

    def watched_init(self: Any, args_dev: Any, kwargs: Any) -> Any:
        args_hst, kwargs_hst = init(self, args_dev, kwargs)
        ranges.clear()
        names_ = getattr(self, "arg_names", None) or [f"argument {i}" for i in range(len(args_hst))]
        for name, value in zip(names_, args_hst):
            _storages(value, ranges, name)
        for name, value in kwargs_hst.items():
            _storages(value, ranges, name)
        return args_hst, kwargs_hst

    def watched_load(self: Any, ptrs: Any, mask: Any, other: Any = None, *args: Any, **kwargs: Any) -> Any:
        _check(ranges, ptrs, mask, "tl.load", np_dtype)
        if _RECORDERS:
            _record(ranges, ptrs, mask, np_dtype, getattr(self, "grid_idx", None) or ())
        dtype = np.dtype(np_dtype(ptrs.get_element_ty()))
        if other is None and dtype.kind == "f" and handle is not None:
            # a masked lane without other= is undefined on a GPU: here it reads NaN, so the omission shows
            other = handle(np.full(np.shape(ptrs.data), np.nan, dtype=dtype), ptrs.get_element_ty())
        return load(self, ptrs, mask, other, *args, **kwargs)

    def watched_store(self: Any, ptrs: Any, value: Any, mask: Any, *args: Any, **kwargs: Any) -> Any:
        _check(ranges, ptrs, mask, "tl.store", np_dtype)
        return store(self, ptrs, value, mask, *args, **kwargs)

    executor._init_args_hst, builder.create_masked_load = watched_init, watched_load
    builder.create_masked_store = watched_store
    try:
        yield True
    finally:
        executor._init_args_hst, builder.create_masked_load, builder.create_masked_store = init, load, store
