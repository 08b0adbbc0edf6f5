"""Running a learner's function: a time limit, one CPU thread, and a watch for calls into the package.

:func:`run_case` calls the function on one :class:`~attn_edu.grading.exercise.Case` and turns whatever
happens (a tensor, an exception, a timeout, a call into ``attn_edu``) into an
:class:`~attn_edu.grading.protocol.Outcome`; :func:`run_cases` runs an exercise's cases under one time budget.
The notebook's :func:`~attn_edu.grading.check` and the grading command's worker process both run learner
code through :func:`run_cases`, and only through it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from attn_edu.grading.bounds import bounds_checked
from attn_edu.grading.exercise import Case
from attn_edu.grading.protocol import Outcome, outcome_of


class ExerciseTimeout(BaseException):
    """Raised inside the learner's code when its time is up (a BaseException, so `except Exception` misses it)."""


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Interrupt the block after ``seconds`` with :class:`ExerciseTimeout`.

    Uses ``SIGALRM``, so it only works on the main thread of a Unix process (a Jupyter kernel runs
    cells there); elsewhere the block simply runs without a limit. An outer limit that is shorter wins.
    """
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if seconds is None or not usable:
        yield
        return

    def on_alarm(signum: int, frame: Any) -> None:
        raise ExerciseTimeout(seconds)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    if outer and outer < seconds:
        signal.setitimer(signal.ITIMER_REAL, outer)
    started = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:  # give the enclosing limit back what is left of it
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - started), 1e-3))


@contextmanager
def one_thread() -> Iterator[None]:
    """Run a block on one CPU thread: the cases are tiny, and a busy thread pool only slows them down."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def in_grader_child() -> bool:
    """True inside the grading command's worker process, where ``check()`` only records the function."""
    return os.environ.get("ATTN_EDU_GRADER_CHILD") == "1"


# Where code lives decides whose call it is. The grading machinery (this folder) runs the learner's function;
# the package proper and the parts an exercise hands out (given.py) are trusted callers. The checks are not:
# the references run outside the watch, and in the grader's worker they cannot even be imported. PyTorch and the standard library are looked through, to the code that made
# the call: a library function behind torch.no_grad() or an nn.Module is still the learner's call.
_GRADING_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_PACKAGE_DIR = os.path.dirname(_GRADING_DIR.rstrip(os.sep)) + os.sep
_GIVEN_FILE = os.path.join(_GRADING_DIR, "given.py")
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_STDLIB_DIR = os.path.dirname(os.path.abspath(os.__file__)) + os.sep


def _package_code(filename: str) -> bool:
    """Code of the package proper (everything outside ``grading/``): what a learner's function must not call."""
    return filename.startswith(_PACKAGE_DIR) and not filename.startswith(_GRADING_DIR)


def _trusted_caller(code: Any) -> bool:
    """Calls from here are the package at work: its own modules and the parts an exercise hands out (the very
    code objects of given.py: code compiled from a copy, under its file name, is the learner's)."""
    from attn_edu.grading.given import GIVEN_CODE

    return _package_code(code.co_filename) or (code.co_filename == _GIVEN_FILE and code in GIVEN_CODE)


def _looked_through(filename: str) -> bool:
    """Frames between a call and the code that made it: PyTorch, the standard library, generated code."""
    return filename.startswith((_TORCH_DIR, _STDLIB_DIR)) or filename == "<string>"


# The lists of the watches open now, innermost last: an audit hook (which no code can remove once added)
# notes there any change of the profiler or tracer made while a watch is open.
_OPEN_WATCHES: list[list[str]] = []
_AUDITED = {"sys.setprofile", "sys.settrace"}


_THREADING_FILE = os.path.abspath(threading.__file__)


def _audit(event: str, args: tuple[Any, ...]) -> None:
    # A thread that the block starts puts the watch's own hook in place (threading.setprofile): not a change.
    if _OPEN_WATCHES and event in _AUDITED and sys._getframe(1).f_code.co_filename != _THREADING_FILE:
        _OPEN_WATCHES[-1].append(event)


_audit_hook_added: list[bool] = []


@contextmanager
def watch_shortcuts() -> Iterator[list[str]]:
    """Record every ``attn_edu`` function, method or class that the code in the block reaches.

    A profile hook (:func:`sys.setprofile`, and :func:`threading.setprofile` for threads the block starts)
    sees each Python call. A call counts when its code lives in the ``attn_edu`` package (outside
    :mod:`attn_edu.grading`) and the code that made it, looking through PyTorch and the standard library,
    is the learner's: ``torch.no_grad()(library_fn)``, ``functools.partial``, a library ``nn.Module``
    called as ``module(x)`` all count, as does ``check(id, attn_edu.masks.causal_mask)`` itself. Calls
    made by the package's own code and the parts an exercise hands out
    (:mod:`attn_edu.grading.given`, which a learner's function may call as intended) do not. The yielded
    list fills with qualified names, e.g. ``"attn_edu.masks.causal_mask"``; it holds ``"sys.setprofile"``
    (or ``"sys.settrace"``) if the block changed the profiler or tracer, even if it put the hook back.

    Example:
        >>> import torch
        >>> from attn_edu import masks
        >>> with watch_shortcuts() as called:
        ...     _ = torch.no_grad()(masks.causal_mask)(3, 3)
        >>> called
        ['attn_edu.masks.causal_mask']
    """
    from attn_edu.grading.given import is_given

    called: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call" or not _package_code(frame.f_code.co_filename):
            return
        caller = frame.f_back
        while caller is not None and _looked_through(caller.f_code.co_filename):
            caller = caller.f_back
        if caller is None or _trusted_caller(caller.f_code):
            return  # not the learner's call (the grading code calling fn itself is: fn is what is checked)
        if is_given(frame.f_locals.get("self")):
            return  # a module the exercise handed out, used as intended
        module = frame.f_globals.get("__name__", "attn_edu")
        name = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)  # co_qualname: Python 3.11+
        called.append(f"{module}.{name}")

    if not _audit_hook_added:
        sys.addaudithook(_audit)
        _audit_hook_added.append(True)
    previous, previous_threads = sys.getprofile(), threading.getprofile()
    sys.setprofile(profile)
    threading.setprofile(profile)
    _OPEN_WATCHES.append(called)

    def close() -> None:
        _OPEN_WATCHES.remove(called)
        threading.setprofile(previous_threads)
        sys.setprofile(previous)

    try:
        yield called
    except BaseException:
        # Python drops a profile hook that raises (and says so to the audit hook), and a time limit's
        # exception can land inside it: so a block that raised is not suspected of removing the hook (it
        # returned nothing anyway).
        called[:] = [name for name in called if name not in _AUDITED]
        close()
        raise
    if sys.getprofile() is not profile and "sys.setprofile" not in called:
        called.append("sys.setprofile")
    close()


def shortcut_outcome(called: Sequence[str]) -> Outcome | None:
    """A ``"shortcut"`` outcome naming what was called, or ``None`` when nothing was."""
    if not called:
        return None
    names = sorted({name.replace(".<locals>", "") for name in called})
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return Outcome("shortcut", detail=shown)


def _fresh(value: Any, device: str) -> Any:
    # Each call gets its own copies, so a function that edits its inputs in place cannot spoil the reference.
    return value.to(device, copy=True) if isinstance(value, torch.Tensor) else value


def kernel_device() -> str:
    """Where a Triton exercise's inputs go in the notebook: ``"cuda"`` when Triton compiles kernels for a GPU
    here (a GPU is present and ``TRITON_INTERPRET`` is not ``1``), else ``"cpu"``, for the interpreter.

    The grading command always uses the interpreter, so that its memory limit holds for kernels too.
    """
    if os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available():
        return "cpu"
    return "cuda"


def learner_error(err: BaseException) -> BaseException:
    """The exception the learner's code raised. Triton's interpreter re-raises anything a kernel raises as
    ``InterpreterError(...) from`` it, so a kernel's ``NotImplementedError`` is found again under it."""
    while type(err).__name__ == "InterpreterError" and err.__cause__ is not None:
        err = err.__cause__
    return err


def learner_line(err: BaseException) -> str:
    """`` (in softmax_kernel, line 7: `x = tl.load(...)`)``: where in the learner's own code ``err`` was raised
    (the last frame of its traceback outside Python, PyTorch, Triton and this package), or ``""``. In a kernel
    that Triton's interpreter ran, that is the kernel's line."""
    import traceback

    ours = (_STDLIB_DIR, _TORCH_DIR, _PACKAGE_DIR)
    frames = [
        f
        for f in traceback.extract_tb(err.__traceback__)
        if not f.filename.startswith(ours) and "site-packages" not in f.filename
    ]
    if not frames:
        return ""
    last = frames[-1]
    cell = f"{last.filename[1:-1]}, " if last.filename.startswith("<cell ") else ""  # the grader's own cells
    line = f": `{last.line.strip()[:60]}`" if last.line else ""
    return f" (in {last.name}, {cell}line {last.lineno}{line})"


def run_case(fn: Callable[..., Any], case: Case, timeout: float | None, device: str = "cpu") -> Outcome:
    """Call ``fn`` on one case under a time limit; every exception becomes an :class:`Outcome`.

    A call into the ``attn_edu`` package (:func:`watch_shortcuts`) makes it a ``"shortcut"`` outcome,
    whatever the call then returned or raised. ``device`` is where the case's tensors are copied to
    (:func:`kernel_device` for a compiled Triton kernel); the result comes back to the CPU to be judged.
    """
    args = [_fresh(a, device) for a in case.args]
    kwargs = {name: _fresh(v, device) for name, v in case.kwargs.items()}
    called: list[str] = []
    try:
        with time_limit(timeout), torch.no_grad(), watch_shortcuts() as called:
            value = fn(*args, **kwargs)
            if isinstance(value, torch.Tensor) and value.device.type != "cpu":
                value = value.cpu()  # waits for the kernel: a fault it made is raised here, as its own
        outcome = outcome_of(value)
    except ExerciseTimeout:
        outcome = Outcome("timeout", detail=f"{timeout:g} s")
    except BaseException as raised:  # noqa: BLE001 - the learner's code may raise anything, even SystemExit
        if isinstance(raised, KeyboardInterrupt) and not in_grader_child():
            raise  # a learner stopping the kernel means it
        err = learner_error(raised)
        if isinstance(err, NotImplementedError):
            outcome = Outcome("not_implemented", detail=str(err))
        else:
            outcome = Outcome("error", detail=error_detail(err, in_kernel=err is not raised))
    return shortcut_outcome(called) or outcome


# A kernel runs in Triton's interpreter as Python on blocks; a math, NumPy or torch call on a block fails there
# with a message about arrays (on a GPU it does not compile). Said in the learner's terms instead:
NOT_TL = "inside a @triton.jit kernel, values are blocks: use tl.* (tl.exp, tl.sum, tl.maximum), not math, NumPy or torch"


def error_detail(err: BaseException, *, in_kernel: bool = False) -> str:
    """``"Name: message (in fn, line N: `...`)"``, at most 500 characters, for an error of the learner's code.
    A ``TypeError`` raised inside a kernel (``in_kernel``: the interpreter wrapped it) leads with :data:`NOT_TL`."""
    where, name = learner_line(err), type(err).__name__
    room = max(300 - len(name) - 2 - len(where), 80)  # the grader keeps 300 characters: the line too
    if in_kernel and isinstance(err, TypeError):
        return f"{name}{where}: {NOT_TL} ({str(err)[:room]})"[:500]
    return f"{name}: {str(err)[:room]}{where}"[:500]


def run_cases(
    fn: Callable[..., Any], cases: Sequence[Case], budget: float | None, device: str = "cpu"
) -> list[Outcome]:
    """Run ``fn`` on ``cases`` in order (:func:`run_case`), all of them within ``budget`` seconds, and stop at
    the first case that gives no tensor: the outcomes so far.

    A Triton kernel's stray load or store is reported, not let loose on memory (:func:`bounds_checked`). A
    timeout says ``budget``, not the part of it that was left for the last case. ``budget=None``: no limit.
    """
    deadline = None if budget is None else time.monotonic() + budget
    outcomes: list[Outcome] = []
    with bounds_checked(), warnings.catch_warnings():
        # an overflow in a kernel is the check's to report (as NaN or inf), not NumPy's from inside Triton
        warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.")
        for case in cases:
            left = None if deadline is None else max(deadline - time.monotonic(), 1e-3)
            outcome = run_case(fn, case, left, device)
            if outcome.kind == "timeout" and budget is not None:
                outcome = Outcome("timeout", detail=f"{budget:g} s")
            outcomes.append(outcome)
            if outcome.kind != "tensor":
                break
    return outcomes
