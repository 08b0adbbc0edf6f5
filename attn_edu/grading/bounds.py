"""Out-of-bounds loads and stores in Triton's interpreter, caught before they touch memory.

On a GPU a ``tl.store`` without its mask corrupts memory silently; in Triton's interpreter it writes through a
raw CPU address, which may overwrite another tensor or crash the Jupyter kernel. :func:`bounds_checked`
watches every masked load and store while a kernel runs in the interpreter: each address a live lane touches
must lie inside one of the tensors the kernel was launched with, or the lane is reported, by its index and
by how far it is from the nearest tensor, as :class:`OutOfBounds`, before anything is read or written. A
masked lane loaded without ``other=`` reads NaN (a GPU leaves it undefined; the interpreter would say 0), and
:func:`recorded_loads` and :func:`recorded_stores` let a check (or a picture of the kernel's traffic,
:func:`attn_edu.viz.diagrams_traffic.plot_kernel_traffic`) see which elements each program loaded and stored.
``check()`` and the grading command watch every kernel they run; :func:`watch_kernels` watches every cell of a
notebook, so that a learner's direct call of a launcher stops at the same stray store as its check.

It works by wrapping three methods of ``triton.runtime.interpreter`` (the launch's argument copy, the masked
load and the masked store) for the duration of the block, and reads element sizes with its private
``_get_np_dtype``. Where the installed Triton lacks any of these names, the block runs unwatched (the grading
command's sandbox still survives a crash).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
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


# The lists that record stores now (innermost last), entries as for loads: (program id, tensor name, elements).
_STORE_RECORDERS: list[list[tuple[tuple[int, ...], str, Any]]] = []


@contextmanager
def recorded_stores() -> Iterator[list[tuple[tuple[int, ...], str, Any]]]:
    """Record, inside :func:`bounds_checked`, every store of the kernels launched in the block, as
    :func:`recorded_loads` records loads: ``(program id, argument name, element indices written)``."""
    stores: list[tuple[tuple[int, ...], str, Any]] = []
    _STORE_RECORDERS.append(stores)
    try:
        yield stores
    finally:
        _STORE_RECORDERS.remove(stores)


def _record(
    ranges: list[tuple[int, int, str]],
    ptrs: Any,
    mask: Any,
    np_dtype: Callable[[Any], Any],
    where: Any,
    into: list[list[tuple[tuple[int, ...], str, Any]]] = _RECORDERS,
) -> None:
    addresses = np.asarray(ptrs.data, dtype=np.uint64).ravel()
    live = np.broadcast_to(np.asarray(mask.data, dtype=bool), np.shape(ptrs.data)).ravel()
    size = np.dtype(np_dtype(ptrs.get_element_ty())).itemsize
    for start, end, name in ranges:
        inside = live & (addresses >= start) & (addresses + size <= end)
        if inside.any():
            record = (tuple(where), name, (addresses[inside] - start) // size)
            for recorder in into:  # every recording open now, nested ones too
                recorder.append(record)


def _storages(value: Any, found: list[tuple[int, int, str]], name: str) -> None:
    """The byte ranges ``(start, end, name)`` of the tensors in one kernel argument (tensors, tuples)."""
    if isinstance(value, tuple):
        for i, item in enumerate(value):
            _storages(item, found, f"{name}[{i}]")
    elif hasattr(value, "untyped_storage"):
        storage = value.untyped_storage()
        found.append((storage.data_ptr(), storage.data_ptr() + storage.nbytes(), name))


def _program(where: Any) -> str:
    """``"the program with tl.program_id(0) = 2"`` (and the other axes where they are not 0)."""
    ids = tuple(where or ())
    if not ids:
        return "a program"
    shown = [f"tl.program_id({axis}) = {int(i)}" for axis, i in enumerate(ids) if axis == 0 or int(i) != 0]
    return "the program with " + ", ".join(shown)


def _check(
    ranges: list[tuple[int, int, str]],
    ptrs: Any,
    mask: Any,
    what: str,
    np_dtype: Callable[[Any], Any],
    where: Any = (),
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
    count, outside = (end - start) // size, int(bad.sum())
    raise OutOfBounds(
        f"{_program(where)}, lane {lane} of {addresses.size}: {what} at element {element} of {name}, but "
        f"{name} has {count} elements (0 to {count - 1}); {outside} lane(s) of this {what} fall outside. "
        f"Is the {what}'s mask= missing, or are its offsets too large?"
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
        program = getattr(self, "grid_idx", None) or ()
        _check(ranges, ptrs, mask, "tl.load", np_dtype, program)
        if _RECORDERS:
            _record(ranges, ptrs, mask, np_dtype, program)
        dtype = np.dtype(np_dtype(ptrs.get_element_ty()))
        if other is None and dtype.kind == "f" and handle is not None:
            # a masked lane without other= is undefined on a GPU: here it reads NaN, so the omission shows
            other = handle(np.full(np.shape(ptrs.data), np.nan, dtype=dtype), ptrs.get_element_ty())
        return load(self, ptrs, mask, other, *args, **kwargs)

    def watched_store(self: Any, ptrs: Any, value: Any, mask: Any, *args: Any, **kwargs: Any) -> Any:
        program = getattr(self, "grid_idx", None) or ()
        _check(ranges, ptrs, mask, "tl.store", np_dtype, program)
        if _STORE_RECORDERS:
            _record(ranges, ptrs, mask, np_dtype, program, into=_STORE_RECORDERS)
        return store(self, ptrs, value, mask, *args, **kwargs)

    executor._init_args_hst, builder.create_masked_load = watched_init, watched_load
    builder.create_masked_store = watched_store
    try:
        yield True
    finally:
        executor._init_args_hst, builder.create_masked_load, builder.create_masked_store = init, load, store


_CELL_WATCH: list[ExitStack] = []  # the watch of the notebook cell now running (watch_kernels)


def _enter_cell(*_: Any) -> None:
    stack = ExitStack()
    stack.enter_context(bounds_checked())
    stack.enter_context(warnings.catch_warnings())
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.")
    _CELL_WATCH.append(stack)


def _exit_cell(*_: Any) -> None:
    while _CELL_WATCH:
        _CELL_WATCH.pop().close()


def watch_kernels(on: bool = True) -> bool:
    """Watch the kernels of every notebook cell that runs from now on, as ``check()`` watches them: a stray
    ``tl.load`` or ``tl.store`` raises :class:`OutOfBounds` naming the program, the lane and the element, a
    masked lane loaded without ``other=`` reads NaN, and NumPy's overflow warnings from inside the interpreter
    stay quiet. A direct call of a launcher then fails the way its check does. ``watch_kernels(False)`` stops.

    Returns whether cells are watched: False outside IPython (there, use ``with bounds_checked(): ...``).
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    for event, callback in (("pre_run_cell", _enter_cell), ("post_run_cell", _exit_cell)):
        if callback in shell.events.callbacks[event]:
            shell.events.unregister(event, callback)
        if on:
            shell.events.register(event, callback)
    if not on:
        _exit_cell()
    return on
