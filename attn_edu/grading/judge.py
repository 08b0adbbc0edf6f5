"""Judging: turn the outcomes of a learner's function into a :class:`~attn_edu.grading.result.CheckResult`.

Everything here works on plain tensors (:class:`~attn_edu.grading.protocol.Outcome`), never on the learner's
objects, so the grading command runs it in its own process on numbers sent back from the worker.
:func:`judge` reads top to bottom in the order a learner meets failures: not attempted, timeout, error,
shortcut, wrong type, then shape, dtype, NaN/inf and values, then each property. :func:`judge_answer` does
the same for a concept question's answer (a letter or a number).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import torch

from attn_edu.grading.exercise import LETTERS, Case, Exercise, Property, Question
from attn_edu.grading.harness import DRAWN_KERNELS
from attn_edu.grading.protocol import Outcome
from attn_edu.grading.result import CheckResult, Status


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


def result_for(exercise: Exercise | Question, status: Status, message: str, hint: str = "") -> CheckResult:
    points = exercise.points if status is Status.PASS else 0
    return CheckResult(exercise.exercise_id, status, message, hint, points, exercise.points)


def first_hint(exercise: Exercise | Question) -> str:
    return exercise.hints[0] if exercise.hints else ""


def reference_outputs(exercise: Exercise, cases: Sequence[Case]) -> list[torch.Tensor]:
    """What the exercise's reference returns on each case (the grading command computes these once, to size
    the worker's replies and to judge them)."""
    return [exercise.reference(*c.args, **c.kwargs) for c in cases]


class _ReferenceOnDemand(Sequence):
    """The reference's output on each case, computed the first time it is asked for and kept: a failing
    function's judgement reads the value cases' outputs twice (to compare, then to count the cases it got
    right), and a reference may be a whole training run (09.7)."""

    def __init__(self, exercise: Exercise, cases: Sequence[Case]) -> None:
        self._exercise, self._cases = exercise, cases
        self._known: dict[int, torch.Tensor] = {}

    def __len__(self) -> int:
        return len(self._cases)

    def __getitem__(self, i):  # noqa: ANN001, ANN204 - an index (a slice is not needed here)
        if i not in self._known:
            case = self._cases[i]
            self._known[i] = self._exercise.reference(*case.args, **case.kwargs)
        return self._known[i]


def _compare(
    exercise: Exercise,
    cases: Sequence[Case],
    outs: Sequence[torch.Tensor],
    group: str,
    expected: Sequence[torch.Tensor] | None = None,
) -> tuple[str, str] | None:
    """Shape, dtype, NaN/inf and values of one group of cases: ``(message, hint)`` at the first failure."""
    if expected is None:
        expected = reference_outputs(exercise, cases)

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
            return message, mistake() or _diagnose(exercise, case, got) or first_hint(exercise)
    return None


def _violation(
    exercise: Exercise, prop: Property, chosen: Sequence[tuple[Case, torch.Tensor]]
) -> tuple[str, str] | None:
    """The first of ``chosen`` on which ``prop.holds`` says the property fails: ``(message, hint)``."""
    for case, got in chosen:
        try:
            wrong = prop.holds(case, got)
        except Exception as err:  # an output the predicate cannot even read: wrong shape or type
            wrong = f"the output (shape {tuple(got.shape)}, {got.dtype}) cannot be checked: {err}"
        if wrong:
            return f"{wrong}, for {describe_case(exercise, case)}", prop.message
    return None


def _share(
    exercise: Exercise,
    cases: Sequence[Case],
    outcomes: Sequence[Outcome],
    expected: Sequence[torch.Tensor] | None,
) -> int:
    """How many of ``cases`` the function got right: a value case that matches the reference, a property's
    case where it holds; one that raised or timed out did not."""
    right = 0
    for i, (case, outcome) in enumerate(zip(cases, outcomes)):
        if outcome.kind != "tensor" or outcome.tensor is None:
            continue
        got = outcome.tensor
        prop = next((p for p in exercise.properties if p.name == case.group), None)
        try:
            if prop is not None and prop.holds is not None:
                right += prop.holds(case, got) is None
                continue
            exp = expected[i] if expected is not None else exercise.reference(*case.args, **case.kwargs)
            right += got.dtype == exp.dtype and _close(got, exp, exercise.atol, exercise.rtol)
        except Exception:  # noqa: BLE001 - an output the predicate cannot read is not right
            continue
    return right


def judge(
    exercise: Exercise,
    cases: Sequence[Case],
    outcomes: Sequence[Outcome],
    expected: Sequence[torch.Tensor] | None = None,
    *,
    total: int | None = None,
    algorithm: str | None = None,
) -> CheckResult:
    """Turn the outcomes of the learner's function on ``cases`` into a :class:`CheckResult`.

    ``expected``: the reference's outputs on ``cases`` (:func:`reference_outputs`), when they are already
    known; else each is computed where it is needed. ``total``: how many cases the exercise has (``cases`` may
    stop early, at the first that gave no tensor). ``algorithm``: what the calls did against the way of
    computing the exercise asks for (:mod:`attn_edu.grading.algorithms`): once every case is right, it fails. A function that fails on some cases, by a wrong value or
    an error, earns the points of the cases it got right (partial credit); one that called the library,
    returned no tensor or was not attempted earns none.
    """
    if expected is not None and len(expected) != len(cases):
        raise ValueError(f"expected: one reference output per case ({len(cases)}), got {len(expected)}")
    if expected is None:
        expected = _ReferenceOnDemand(exercise, cases)
    result = _judge(exercise, cases, outcomes, expected)
    if result.passed and algorithm:  # the right numbers, the wrong way: no points
        message = f"right on every case, but it {algorithm}"
        hint = "the exercise asks for a way of computing, not only a result: reread what it asks for."
        return result_for(exercise, Status.FAIL, message, hint)
    partial = result.status in (Status.FAIL, Status.ERROR, Status.TIMEOUT) and all(
        o.kind in ("tensor", "error", "timeout") for o in outcomes
    )
    if not partial:
        return result
    share = _share(exercise, cases, outcomes, expected) / max(total or len(cases), 1)
    return replace(result, points=round(exercise.points * share, 2))


def _judge(
    exercise: Exercise,
    cases: Sequence[Case],
    outcomes: Sequence[Outcome],
    expected: Sequence[torch.Tensor] | None,
) -> CheckResult:
    for case, outcome in zip(cases, outcomes, strict=True):
        where = describe_case(exercise, case)
        if outcome.kind == "not_implemented":
            message = (
                "replace the `raise NotImplementedError(...)` line with your code, then run this check again"
            )
            return result_for(exercise, Status.NOT_ATTEMPTED, message, first_hint(exercise))
        if outcome.kind == "timeout":
            message = f"no answer within {outcome.detail} for {where}"
            return result_for(exercise, Status.TIMEOUT, message, "an endless loop, or a very large tensor?")
        if outcome.kind == "error":
            name, _, rest = outcome.detail.partition(": ")
            message = f"{name} for {where}: {rest}" if rest else f"{name} for {where}"
            hint = "call your function on these inputs in a new cell to see the whole traceback."
            if name == "OutOfBounds":
                hint = (
                    "call your launcher on the same shapes in a new cell: with watch_kernels() on (the exercise "
                    "notebook's setup turns it on) the call stops at the same load or store, at the kernel's line."
                )
            elif outcome.detail.startswith("KernelAlgorithmError"):
                hint = "the exercise asks for a way of computing, not only a result: reread what it asks for."
            elif outcome.detail.startswith("LookupError: no "):
                hint = "keep the name the exercise gives your kernel or function."
            if name in ("OutOfBounds", "KernelAlgorithmError") and exercise.exercise_id in DRAWN_KERNELS:
                hint += (
                    f" show_traffic('{exercise.exercise_id}', your launcher) draws each program's loads and "
                    "stores, the wrong ones in red."
                )
            return result_for(exercise, Status.ERROR, message, hint)
        if outcome.kind == "shortcut":
            message = f"calls {outcome.detail} from the attn_edu package for {where}"
            tampered = [name for name in ("sys.setprofile", "sys.settrace") if name in outcome.detail]
            if tampered:
                message = f"switched off the watch for calls into attn_edu ({tampered[0]}) for {where}"
            hint = (
                "the exercise is to write this yourself with torch operations; the package's own "
                "version is what your answer is compared with."
            )
            return result_for(exercise, Status.FAIL, message, hint)
        if outcome.kind != "tensor":
            message = f"expected a plain torch.Tensor, got {outcome.detail}"
            return result_for(exercise, Status.FAIL, message, "return the tensor itself, not a wrapper.")
    groups = ["values"] + [p.name for p in exercise.properties]
    for group in groups:
        members = [i for i, c in enumerate(cases) if c.group == group]
        chosen = [(cases[i], outcomes[i].tensor) for i in members]
        prop = next((p for p in exercise.properties if p.name == group), None)
        if prop is not None and prop.holds is not None:
            failure = _violation(exercise, prop, chosen)
        else:
            known = None if expected is None else [expected[i] for i in members]
            failure = _compare(exercise, [c for c, _ in chosen], [t for _, t in chosen], group, known)
        if failure is None:
            continue
        message, hint = failure
        if prop is not None:
            message, hint = f"{prop.name}: {message}", prop.message
        return result_for(exercise, Status.FAIL, message, hint)
    n_values = sum(c.group == "values" for c in cases)
    names = ", ".join(p.name for p in exercise.properties)
    count = len(exercise.properties)
    held = f", and {count} propert{'y holds' if count == 1 else 'ies hold'} ({names})"
    message = f"matches the reference on {n_values} random cases{held if exercise.properties else ''}"
    return result_for(exercise, Status.PASS, message)


def _number_in(text: str) -> float | None:
    """The number a text answer holds (``"18"``, ``" 0.25 "``, ``"1e3"``), or None when it holds something else."""
    try:
        return float(text.strip())
    except ValueError:
        return None


def judge_answer(question: Question, outcome: Outcome) -> CheckResult:
    """A concept question's answer (:func:`attn_edu.grading.protocol.decode_answer`) as a :class:`CheckResult`.

    A choice is read from its letter (``"b"``, ``"B"``, ``"(b)"`` alike), a number within the
    question's tolerance, typed as a number or as text that holds one (``18``, ``"18"``, ``" 18.0 "`` alike).
    A right answer's message is the explanation; a wrong one's hint says what that answer misses (or gives
    the first hint), never the right answer. An answer of the wrong kind names the variable it belongs in.
    """
    if outcome.kind == "not_implemented":
        message = f"replace the `...` with your answer ({question.form()}), then run this check again"
        return result_for(question, Status.NOT_ATTEMPTED, message, first_hint(question))
    if outcome.kind == "timeout":
        return result_for(question, Status.TIMEOUT, f"reading the answer took over {outcome.detail}")
    if outcome.kind not in ("text", "number", "wrong_type"):
        return result_for(question, Status.ERROR, f"reading the answer raised {outcome.detail}")
    wrong_kind = f"{question.variable_name}: expected {question.form()}, got"
    if not question.choices and outcome.kind == "text":
        number = _number_in(outcome.detail)
        if number is None:
            return result_for(question, Status.FAIL, f"{wrong_kind} the text {outcome.detail!r}")
        outcome = Outcome("number", tensor=torch.tensor(number, dtype=torch.float64))
    if outcome.kind == "wrong_type" or outcome.kind != ("text" if question.choices else "number"):
        got = outcome.detail if outcome.kind != "number" else f"the number {float(outcome.tensor):g}"
        return result_for(question, Status.FAIL, f"{wrong_kind} {got}")
    if question.choices:
        letter = outcome.detail.strip().strip("().").strip().lower()
        letters = LETTERS[: len(question.choices)]
        if len(letter) != 1 or letter not in letters:
            return result_for(question, Status.FAIL, f"{wrong_kind} {outcome.detail!r}")
        if letter == question.answer:
            return result_for(question, Status.PASS, f"({letter}) is right: {question.explanation}")
        why = dict(question.wrong).get(letter) or first_hint(question)
        return result_for(question, Status.FAIL, f"({letter}) is not the answer", why)
    given = float(outcome.tensor)
    if not math.isfinite(given):
        return result_for(question, Status.FAIL, f"expected a finite number, got {given}")
    if abs(given - float(question.answer)) <= question.tolerance:
        return result_for(question, Status.PASS, f"{given:g} is right: {question.explanation}")
    why = next(
        (message for value, message in question.wrong if abs(given - float(value)) <= question.tolerance),
        first_hint(question),
    )
    return result_for(question, Status.FAIL, f"{given:g} is not the answer", why)
