"""Graded exercises: run a learner's function, compare it with the ``attn_edu`` reference, say what went wrong.

In an exercise notebook::

    from attn_edu.grading import check, hint
    check("02.1", attention_weights)      # a green or red line; never raises in a notebook
    hint("02.1")                           # first hint; hint("02.1", 2) gives the next one

A check calls the learner's function on several random cases (``T != S``, sizes that are not powers of
two, odd head counts) and stops at the first stage that fails, in this order: the call itself (not
attempted, error, timeout), type (a plain ``torch.Tensor``), shape, dtype, NaN/inf, values against the
reference, then the exercise's properties (each tested on its own cases, e.g. a fully masked query row).
When values differ, the output is compared with known-wrong versions (missing ``1/sqrt(D)``, softmax over
the wrong dim, off-by-one causal mask, ...) so the message can name the likely mistake.

Each exercise is an :class:`Exercise` registered by a module of :mod:`attn_edu.checks` (one per concept).
The comparison, :func:`judge`, works on plain tensors only, so ``python -m attn_edu.grade`` reuses it on
numbers sent back from a separate process, where the learner's code cannot reach it.

An exercise is to be written with torch operations. A learner's function that calls into ``attn_edu``
itself (the reference it is compared with, or any other of the package's functions and classes) fails
with a message naming what it called (:func:`watch_shortcuts`); functions and models that a case
hands to the learner may be used as intended. This catches copying the answer by import, not a learner
determined to cheat (who could paste the reference's source): grading is for feedback first.

``ATTN_EDU_STRICT=1`` turns every result other than PASS into an ``AssertionError`` (the solutions'
nbval run uses it, so a solution that stops passing fails the test suite).
"""

from __future__ import annotations

import html
import importlib
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import torch

DEFAULT_TIMEOUT = 10.0  # seconds per exercise inside check(); the grading command sets its own


class Status(str, Enum):
    """How an exercise went; the grader's JSON and CSV use these names."""

    PASS = "PASS"
    FAIL = "FAIL"
    NOT_ATTEMPTED = "NOT_ATTEMPTED"
    ERROR = "ERROR"
    TIMEOUT = "TIMEOUT"


_MARKS = {
    Status.PASS: ("✔", "passed", "#1a7f37", "#dafbe1"),
    Status.FAIL: ("✘", "failed", "#cf222e", "#ffebe9"),
    Status.ERROR: ("✘", "raised an error", "#cf222e", "#ffebe9"),
    Status.TIMEOUT: ("✘", "timed out", "#cf222e", "#ffebe9"),
    Status.NOT_ATTEMPTED: ("○", "not attempted", "#57606a", "#f6f8fa"),
}


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check: a status, a message for the learner, and a hint for what to try next."""

    exercise_id: str  # e.g. "02.1"
    status: Status  # PASS, FAIL, NOT_ATTEMPTED, ERROR or TIMEOUT
    message: str  # what was expected and what came back (shapes, numbers)
    hint: str = ""  # the likely mistake or the next step; empty when passed
    points: int = 0  # points earned
    max_points: int = 1  # points available

    @property
    def passed(self) -> bool:
        return self.status is Status.PASS

    def __repr__(self) -> str:
        mark, verb = _MARKS[self.status][:2]
        text = f"{mark} Exercise {self.exercise_id} {verb}: {self.message}"
        return text + (f"\n  Hint: {self.hint}" if self.hint else "")

    __str__ = __repr__

    def _repr_html_(self) -> str:
        mark, verb, colour, background = _MARKS[self.status]
        hint = f"<br><b>Hint:</b> {html.escape(self.hint)}" if self.hint else ""
        return (
            f'<div style="border-left:4px solid {colour};background:{background};padding:4px 8px">'
            f'<b style="color:{colour}">{mark} Exercise {html.escape(self.exercise_id)} {verb}</b>: '
            f"{html.escape(self.message)}{hint}</div>"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.exercise_id,
            "status": self.status.value,
            "points": self.points,
            "max_points": self.max_points,
            "message": self.message,
            "hint": self.hint,
        }


@dataclass(frozen=True)
class Hint:
    """One tier of an exercise's hints; displays as plain text."""

    exercise_id: str
    text: str

    def __repr__(self) -> str:
        return f"Hint for {self.exercise_id}: {self.text}"

    __str__ = __repr__


# ---------------------------------------------------------------------------------------------------------
# What an exercise is made of


@dataclass(frozen=True)
class Case:
    """One call of the learner's function: ``fn(*args, **kwargs)``."""

    args: tuple[Any, ...]  # positional arguments, named by Exercise.arg_names
    kwargs: dict[str, Any] = field(default_factory=dict)  # keyword arguments (tensors, bools, ints, None)
    group: str = "values"  # "values", or the name of the Property these inputs test


@dataclass(frozen=True)
class Mistake:
    """A known-wrong version of the function and what to tell a learner whose output matches it."""

    fn: Callable[..., Any]  # same signature as the reference
    message: str  # names the mistake and the fix


@dataclass(frozen=True)
class Property:
    """A requirement tested on its own cases (``Case.group == name``) after the values agree."""

    name: str  # e.g. "fully masked rows"
    message: str  # what the property demands, shown when it fails


@dataclass(frozen=True)
class Exercise:
    """Everything a check needs: the reference, the cases, the known mistakes and the hints."""

    exercise_id: str  # "NN.k": notebook number, then the exercise number in that notebook
    title: str  # one line: what the learner writes
    function_name: str  # the learner's function in the notebook; the grading command looks it up by name
    arg_names: tuple[str, ...]  # names of the positional arguments, used in messages
    reference: Callable[..., torch.Tensor]  # the attn_edu answer, same signature as the learner's function
    make_cases: Callable[[torch.Generator], list[Case]]  # random cases (value cases and property cases)
    mistakes: tuple[Mistake, ...] = ()  # known-wrong variants, tried in order
    properties: tuple[Property, ...] = ()  # checked last, each on its own cases
    diagnoses: tuple[Callable[[Case, torch.Tensor], str | None], ...] = ()  # explain a value mismatch
    hints: tuple[str, ...] = ()  # tiered: general first, nearly the answer last
    points: int = 1  # points for a PASS
    atol: float = 1e-5  # float outputs match when |got - expected| <= atol + rtol * |expected|
    rtol: float = 1e-4


_REGISTRY: dict[str, Exercise] = {}


def register(exercise: Exercise) -> Exercise:
    """Add an exercise to the registry (each id once)."""
    if exercise.exercise_id in _REGISTRY and _REGISTRY[exercise.exercise_id] is not exercise:
        raise ValueError(f"exercise_id: {exercise.exercise_id!r} is already registered")
    _REGISTRY[exercise.exercise_id] = exercise
    return exercise


def exercises() -> dict[str, Exercise]:
    """Every registered exercise, by id (importing :mod:`attn_edu.checks` registers them)."""
    importlib.import_module("attn_edu.checks")
    return dict(sorted(_REGISTRY.items()))


def get_exercise(exercise_id: str) -> Exercise:
    """The exercise with this id; ``KeyError`` naming the known ids otherwise."""
    known = exercises()
    if exercise_id not in known:
        raise KeyError(f"exercise_id: no exercise {exercise_id!r}; known: {', '.join(known) or 'none'}")
    return known[exercise_id]


def make_cases(exercise: Exercise, seed: int) -> list[Case]:
    """The exercise's cases for one seed: the same seed always gives the same inputs."""
    return exercise.make_cases(torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------------------------------------------------
# Running the learner's function


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


@dataclass(frozen=True)
class Outcome:
    """What one call produced, as plain data: a tensor, or why there is none."""

    kind: str  # "tensor", "wrong_type", "not_implemented", "error", "timeout", "shortcut"
    tensor: torch.Tensor | None = None  # a plain CPU tensor when kind == "tensor"
    detail: str = ""  # the type that came back, or the exception text


def outcome_of(value: object) -> Outcome:
    """Turn a returned value into an :class:`Outcome`; only an exact ``torch.Tensor`` counts as a tensor."""
    if type(value) is torch.Tensor:
        return Outcome("tensor", tensor=value.detach().cpu().clone())
    if isinstance(value, torch.Tensor):
        return Outcome("wrong_type", detail=f"a subclass of torch.Tensor ({type(value).__name__})")
    return Outcome("wrong_type", detail=type(value).__name__)


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_CHECKS_DIR = os.path.join(_PACKAGE_DIR, "checks") + os.sep
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_STDLIB_DIR = os.path.dirname(os.path.abspath(os.__file__)) + os.sep
_GRADING_FILES = {os.path.join(_PACKAGE_DIR, name) for name in ("grading.py", "_grade_worker.py")}


def _package_code(filename: str) -> bool:
    """Code of the package proper: what a learner's function must not call."""
    return (
        filename.startswith(_PACKAGE_DIR)
        and filename not in _GRADING_FILES
        and not filename.startswith(_CHECKS_DIR)
    )


def _trusted_caller(filename: str) -> bool:
    """Calls from here are the package at work: its own modules, the checks' references, PyTorch."""
    return _package_code(filename) or filename.startswith((_CHECKS_DIR, _TORCH_DIR))


@contextmanager
def watch_shortcuts() -> Iterator[list[str]]:
    """Record every ``attn_edu`` function, method or class that the code in the block calls *directly*.

    A profile hook (:func:`sys.setprofile`, this thread only) sees each Python call. A call counts when
    its code lives in the ``attn_edu`` package (not in the grading machinery or :mod:`attn_edu.checks`)
    and its caller is the learner's: neither the package's own code nor PyTorch's (``module(x)`` on a
    model that a case hands over enters ``forward`` from PyTorch's ``Module.__call__``: that is using the
    model, not copying it). ``check(id, attn_edu.masks.causal_mask)`` counts too: the grading code
    calls the function under test. The yielded list fills with qualified names, e.g.
    ``"attn_edu.masks.causal_mask"``; it holds ``"sys.setprofile"`` if the block removed the hook.

    Example:
        >>> from attn_edu import masks
        >>> with watch_shortcuts() as called:
        ...     _ = masks.causal_mask(3, 3)
        >>> called
        ['attn_edu.masks.causal_mask']
    """
    called: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call" or not _package_code(frame.f_code.co_filename):
            return
        caller = frame.f_back
        # Look through the standard library (contextlib, functools) and generated code (a dataclass's
        # __init__) to the code that made the call.
        while caller is not None and (
            caller.f_code.co_filename.startswith(_STDLIB_DIR) or caller.f_code.co_filename == "<string>"
        ):
            caller = caller.f_back
        if caller is not None and _trusted_caller(caller.f_code.co_filename):
            return  # not the learner's call (the grading code calling fn itself is: fn is what is checked)
        module = frame.f_globals.get("__name__", "attn_edu")
        name = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)  # co_qualname: Python 3.11+
        called.append(f"{module}.{name}")

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield called
    except BaseException:
        # Python drops a profile hook that raises, and a time limit's exception can land inside it:
        # so a block that raised is not suspected of removing the hook (it returned nothing anyway).
        sys.setprofile(previous)
        raise
    if sys.getprofile() is not profile:
        called.append("sys.setprofile")
    sys.setprofile(previous)


def shortcut_outcome(called: Sequence[str]) -> Outcome | None:
    """A ``"shortcut"`` outcome naming what was called, or ``None`` when nothing was."""
    if not called:
        return None
    names = sorted({name.replace(".<locals>", "") for name in called})
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return Outcome("shortcut", detail=shown)


def _fresh(value: Any) -> Any:
    # Each call gets its own copies, so a function that edits its inputs in place cannot spoil the reference.
    return value.clone() if isinstance(value, torch.Tensor) else value


def run_case(fn: Callable[..., Any], case: Case, timeout: float | None) -> Outcome:
    """Call ``fn`` on one case under a time limit; every exception becomes an :class:`Outcome`.

    A call into the ``attn_edu`` package (:func:`watch_shortcuts`) makes it a ``"shortcut"`` outcome,
    whatever the call then returned or raised.
    """
    args = [_fresh(a) for a in case.args]
    kwargs = {name: _fresh(v) for name, v in case.kwargs.items()}
    called: list[str] = []
    try:
        with time_limit(timeout), torch.no_grad(), watch_shortcuts() as called:
            value = fn(*args, **kwargs)
        outcome = outcome_of(value)
    except NotImplementedError as err:
        outcome = Outcome("not_implemented", detail=str(err))
    except ExerciseTimeout:
        outcome = Outcome("timeout", detail=f"{timeout:g} s")
    except BaseException as err:  # noqa: BLE001 - the learner's code may raise anything, even SystemExit
        if isinstance(err, KeyboardInterrupt) and not _in_grader_child():
            raise  # a learner stopping the kernel means it
        outcome = Outcome("error", detail=f"{type(err).__name__}: {err}"[:500])
    return shortcut_outcome(called) or outcome


# ---------------------------------------------------------------------------------------------------------
# Judging outcomes (plain data only: this part also runs in the grading command's own process)


def describe_case(exercise: Exercise, case: Case) -> str:
    """A case in words: ``q (2, 3, 5, 6), k (2, 3, 7, 6), is_causal=True``."""
    parts = []
    named = list(zip(exercise.arg_names, case.args)) + list(case.kwargs.items())
    for name, value in named:
        if isinstance(value, torch.Tensor):
            shown = value.tolist() if value.ndim == 1 and value.numel() <= 8 else tuple(value.shape)
            parts.append(f"{name} {shown}")
        elif value is not None and value is not False:
            parts.append(f"{name}={value}")
    return ", ".join(parts)


def _num(x: float) -> str:
    return f"{x:.4g}"


def _close(got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> bool:
    if got.shape != expected.shape:
        return False
    if not expected.is_floating_point():
        return bool((got.to(expected.dtype) == expected).all())
    return bool(torch.isclose(got.double(), expected.double(), rtol=rtol, atol=atol, equal_nan=True).all())


def _difference(got: torch.Tensor, expected: torch.Tensor) -> str:
    """Where two same-shape tensors differ most, in numbers."""
    if not expected.is_floating_point():
        wrong = (got.to(expected.dtype) != expected).nonzero()
        where = wrong[0].tolist()
        return (
            f"{len(wrong)} of {expected.numel()} entries differ, first at {where}: "
            f"expected {expected[tuple(where)].item()}, got {got[tuple(where)].item()}"
        )
    diff = (got.double() - expected.double()).abs().nan_to_num(nan=math.inf)
    flat = int(diff.flatten().argmax())
    where = list(torch.unravel_index(torch.tensor(flat), diff.shape)) if diff.ndim else []
    where = [int(i) for i in where]
    at = tuple(where)
    return (
        f"max abs difference {_num(float(diff.max()))} (mean {_num(float(diff.mean()))}) at {where}: "
        f"expected {_num(float(expected[at]))}, got {_num(float(got[at]))}"
    )


def _recognise(
    exercise: Exercise, cases: Sequence[Case], outs: Sequence[torch.Tensor], expected: Sequence[torch.Tensor]
) -> str | None:
    """The message of the first known mistake whose output matches the learner's on every value case."""
    for mistake in exercise.mistakes:
        matched = True
        for case, got in zip(cases, outs):
            try:
                wrong = mistake.fn(*case.args, **case.kwargs)
            except Exception:  # a variant that cannot run on this case is not the learner's mistake
                matched = False
                break
            if not _close(got, wrong, exercise.atol, exercise.rtol):
                matched = False
                break
        if matched and not all(_close(w, e, exercise.atol, exercise.rtol) for w, e in zip(outs, expected)):
            return mistake.message
    return None


def _diagnose(exercise: Exercise, case: Case, got: torch.Tensor) -> str:
    for diagnosis in exercise.diagnoses:
        try:
            found = diagnosis(case, got)
        except Exception:  # a diagnosis is a guess; never let it break the check
            found = None
        if found:
            return found
    return ""


def _result(exercise: Exercise, status: Status, message: str, hint: str = "") -> CheckResult:
    points = exercise.points if status is Status.PASS else 0
    return CheckResult(exercise.exercise_id, status, message, hint, points, exercise.points)


def _first_hint(exercise: Exercise) -> str:
    return exercise.hints[0] if exercise.hints else ""


def _compare(
    exercise: Exercise, cases: Sequence[Case], outs: Sequence[torch.Tensor], group: str
) -> tuple[str, str] | None:
    """Shape, dtype, NaN/inf and values of one group of cases: ``(message, hint)`` at the first failure."""
    expected = [exercise.reference(*c.args, **c.kwargs) for c in cases]

    def mistake() -> str | None:  # only worth the work once something is wrong
        return _recognise(exercise, cases, outs, expected) if group == "values" else None

    for case, got, exp in zip(cases, outs, expected):
        where = f"for {describe_case(exercise, case)}"
        if got.shape != exp.shape:
            message = f"expected shape {tuple(exp.shape)} {where}, got {tuple(got.shape)}"
            return message, mistake() or "check which dimensions you reduce, transpose or broadcast."
        if got.dtype != exp.dtype:
            extra = " (a mask is bool: True = may attend)" if exp.dtype == torch.bool else ""
            return f"expected dtype {exp.dtype}{extra} {where}, got {got.dtype}", mistake() or ""
        if got.is_floating_point():
            bad = ~torch.isfinite(got) & torch.isfinite(exp)
            if bad.any():
                nans = int(torch.isnan(got[bad]).sum())
                first = bad.nonzero()[0].tolist()
                message = f"{nans} NaN and {int(bad.sum()) - nans} inf values {where}, first at {first}"
                return message, mistake() or _diagnose(exercise, case, got)
        if not _close(got, exp, exercise.atol, exercise.rtol):
            message = f"values differ from the reference {where}: {_difference(got, exp)}"
            return message, mistake() or _diagnose(exercise, case, got) or _first_hint(exercise)
    return None


def judge(exercise: Exercise, cases: Sequence[Case], outcomes: Sequence[Outcome]) -> CheckResult:
    """Turn the outcomes of the learner's function on ``cases`` into a :class:`CheckResult`."""
    for case, outcome in zip(cases, outcomes, strict=True):
        where = describe_case(exercise, case)
        if outcome.kind == "not_implemented":
            message = (
                "replace the `raise NotImplementedError(...)` line with your code, then run this check again"
            )
            return _result(exercise, Status.NOT_ATTEMPTED, message, _first_hint(exercise))
        if outcome.kind == "timeout":
            message = f"no answer within {outcome.detail} for {where}"
            return _result(exercise, Status.TIMEOUT, message, "an endless loop, or a very large tensor?")
        if outcome.kind == "error":
            message = f"raised {outcome.detail} for {where}"
            return _result(exercise, Status.ERROR, message, "call your function on these shapes to see why.")
        if outcome.kind == "shortcut":
            message = f"calls {outcome.detail} from the attn_edu package for {where}"
            if outcome.detail == "sys.setprofile":
                message = f"switched off the watch for calls into attn_edu (sys.setprofile) for {where}"
            hint = (
                "the exercise is to write this yourself with torch operations; the package's own "
                "version is what your answer is compared with."
            )
            return _result(exercise, Status.FAIL, message, hint)
        if outcome.kind != "tensor":
            message = f"expected a plain torch.Tensor, got {outcome.detail}"
            return _result(exercise, Status.FAIL, message, "return the tensor itself, not a wrapper.")
    groups = ["values"] + [p.name for p in exercise.properties]
    for group in groups:
        chosen = [(c, o.tensor) for c, o in zip(cases, outcomes) if c.group == group]
        failure = _compare(exercise, [c for c, _ in chosen], [t for _, t in chosen], group)
        if failure is None:
            continue
        message, hint = failure
        if group != "values":
            prop = next(p for p in exercise.properties if p.name == group)
            message, hint = f"{prop.name}: {message}", prop.message
        return _result(exercise, Status.FAIL, message, hint)
    n_values = sum(c.group == "values" for c in cases)
    held = f", and {len(exercise.properties)} propert{'y holds' if len(exercise.properties) == 1 else 'ies hold'}"
    message = f"matches the reference on {n_values} random cases{held if exercise.properties else ''}"
    return _result(exercise, Status.PASS, message)


# ---------------------------------------------------------------------------------------------------------
# The notebook interface

_submitted: dict[str, Callable[..., Any]] = {}  # functions passed to check() inside the grading process


def _in_grader_child() -> bool:
    return os.environ.get("ATTN_EDU_GRADER_CHILD") == "1"


def check(
    exercise_id: str, fn: Callable[..., Any], *, timeout: float | None = DEFAULT_TIMEOUT
) -> CheckResult:
    """Check ``fn`` against exercise ``exercise_id`` and return the result (shown as one coloured line).

    Never raises, whatever ``fn`` does, unless the environment sets ``ATTN_EDU_STRICT=1``: then any
    status other than PASS raises ``AssertionError``. ``timeout`` (seconds) bounds the whole check.

    Example:
        >>> check("04.1", lambda T, S: torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)).status
        <Status.PASS: 'PASS'>
        >>> check("04.1", lambda T, S: torch.ones(T, S, dtype=torch.bool).tril()).hint[:31]  # a known mistake
        'the mask is aligned top-left (q'
        >>> from attn_edu.masks import causal_mask
        >>> check("04.1", causal_mask).message  # the package's own answer does not count
        'calls attn_edu.masks.causal_mask from the attn_edu package for T=5, S=5'
    """
    try:
        exercise = get_exercise(exercise_id)
    except KeyError as err:
        result = CheckResult(
            str(exercise_id), Status.ERROR, str(err.args[0]), "copy the id from the exercise."
        )
        return _strict(result)
    if _in_grader_child():  # the grading command calls the function itself, on its own inputs
        _submitted[exercise_id] = fn
        return _result(exercise, Status.NOT_ATTEMPTED, "recorded for the grading command")
    if not callable(fn):
        result = _result(exercise, Status.ERROR, f"expected a function, got {type(fn).__name__}")
        return _strict(result)
    with one_thread():
        cases = make_cases(exercise, seed=0)
        deadline = None if timeout is None else time.monotonic() + timeout
        outcomes = []
        for case in cases:
            left = None if deadline is None else max(deadline - time.monotonic(), 1e-3)
            outcome = run_case(fn, case, left)
            if outcome.kind == "timeout" and timeout is not None:
                outcome = Outcome("timeout", detail=f"{timeout:g} s")
            outcomes.append(outcome)
            if outcome.kind != "tensor":
                break
        result = judge(exercise, cases[: len(outcomes)], outcomes)
    return _strict(result)


@contextmanager
def one_thread() -> Iterator[None]:
    """Run a block on one CPU thread: the cases are tiny, and a busy thread pool only slows them down."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _strict(result: CheckResult) -> CheckResult:
    if os.environ.get("ATTN_EDU_STRICT") == "1" and not result.passed:
        raise AssertionError(repr(result))
    return result


def hint(exercise_id: str, n: int = 1) -> Hint:
    """The ``n``-th hint for an exercise (1 = gentle, the last one nearly gives the answer away).

    Example:
        >>> hint("02.1").text.startswith("1/")
        True
    """
    exercise = get_exercise(exercise_id)
    tiers = exercise.hints or ("no hints for this exercise",)
    n = min(max(int(n), 1), len(tiers))
    more = f" (more: hint({exercise_id!r}, {n + 1}))" if n < len(tiers) else ""
    return Hint(exercise_id, f"{n}/{len(tiers)} {tiers[n - 1]}{more}")
