"""The notebook face of grading: ``check(id, fn)`` shows one coloured line, ``hint(id, n)`` the n-th hint.

A concept question is checked the same way with its answer in place of the function:
``check("03.q1", answer_q1)``, a letter or a number.

``ATTN_EDU_STRICT=1`` turns every result other than PASS into an ``AssertionError`` (the solutions'
nbval run uses it, so a solution that stops passing fails the test suite); ``check(..., strict=True)`` does
the same for one call (the test cells of the nbgrader release, :mod:`attn_edu.grading.nbgrader`, whose
points nbgrader gives when the cell runs without an error). Inside the grading command's
worker process, ``check`` only records the function (:func:`submitted`): the command calls it itself, on
its own inputs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from attn_edu.grading.algorithms import watched
from attn_edu.grading.answers import in_notebook, keep_first, record
from attn_edu.grading.exercise import Exercise, Question, case_seed, make_cases
from attn_edu.grading.harness import KERNELS, kernel_of
from attn_edu.grading.judge import judge, judge_answer, result_for
from attn_edu.grading.protocol import SchemaError, decode_answer, encode_answer
from attn_edu.grading.result import CheckResult, Hint, Status
from attn_edu.grading.run import in_grader_child, kernel_device, one_thread, run_cases

DEFAULT_TIMEOUT = 10.0  # seconds per exercise inside check(); the grading command sets its own

_submitted: dict[str, Any] = {}  # functions (and answers) passed to check() inside the grading process


def submitted(exercise_id: str, default: Any = None) -> Any:
    """The function (or a question's answer) a notebook passed to ``check(exercise_id, ...)`` in the
    grader's worker, else ``default``.

    The worker looks a learner's function up by name; a renamed function is still found this way.
    """
    return _submitted.get(exercise_id, default)


def _find(exercise_id: str) -> Exercise | Question:
    """The exercise or question with this id (``KeyError`` otherwise).

    The registry (the references, the cases, the answers) is imported here, on the first check, not with
    this module: the grading command's worker imports this module, and the answer key must stay out of it.
    """
    from attn_edu.grading.registry import get_exercise, get_prediction, get_question

    if isinstance(exercise_id, str) and ".q" in exercise_id:
        return get_question(exercise_id)
    if isinstance(exercise_id, str) and ".p" in exercise_id:
        return get_prediction(exercise_id)
    return get_exercise(exercise_id)


def check(
    exercise_id: str,
    fn: Callable[..., Any],
    *,
    timeout: float | None = DEFAULT_TIMEOUT,
    strict: bool | None = None,
    seed: int = 0,
) -> CheckResult:
    """Check ``fn`` against exercise ``exercise_id`` and return the result (shown as one coloured line).

    For a concept question (an id like ``"03.q1"``) or a course notebook's prediction (``"03.p1"``) ``fn`` is
    the answer: a choice's letter or a number.
    Never raises, whatever ``fn`` does, unless ``strict=True`` (or, with ``strict`` left at ``None``, the
    environment sets ``ATTN_EDU_STRICT=1``): then any status other than PASS raises ``AssertionError``
    with the result's text. ``timeout`` (seconds) bounds the whole check.

    Example:
        >>> import torch
        >>> check("04.1", lambda T, S: torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)).status
        <Status.PASS: 'PASS'>
        >>> check("04.1", lambda T, S: torch.ones(T, S, dtype=torch.bool).tril()).hint[:31]  # a known mistake
        'the mask is aligned top-left (q'
        >>> from attn_edu.masks import causal_mask
        >>> check("04.1", causal_mask).message  # the package's own answer does not count
        'calls attn_edu.masks.causal_mask from the attn_edu package for T=5, S=5'
        >>> check("04.1", lambda T, S: torch.ones(T, S, dtype=torch.bool), strict=True)
        Traceback (most recent call last):
        AssertionError: ✘ Exercise 04.1 failed: ...
    """
    if in_grader_child():  # the grading command calls the function itself, on its own inputs
        _submitted[str(exercise_id)] = fn
        return CheckResult(str(exercise_id), Status.NOT_ATTEMPTED, "recorded for the grading command")
    try:
        exercise = _find(exercise_id)
    except KeyError as err:
        result = CheckResult(
            str(exercise_id), Status.ERROR, str(err.args[0]), "copy the id from the exercise."
        )
        return _strict(result, strict)
    if isinstance(exercise, Question):
        result = judge_answer(exercise, decode_answer(encode_answer(fn)))
        answered = result.status in (Status.PASS, Status.FAIL)
        if ".q" in exercise.exercise_id and answered and in_notebook():  # graded, answered, in a notebook
            result = _graded_on_first(exercise, encode_answer(fn), result)
        return _strict(result, strict)
    if not callable(fn):
        result = result_for(exercise, Status.ERROR, f"expected a function, got {type(fn).__name__}")
        return _strict(result, strict)
    if (
        exercise_id in KERNELS
    ):  # the kernel (or update) beside fn, run by the grader's given code, not fn itself
        fn = kernel_of(exercise_id, fn)
    call = watched(exercise_id, fn)  # the algorithm it asks for, where it asks for one
    with one_thread():
        cases = make_cases(exercise, seed=seed)
        device = kernel_device() if exercise.kind == "triton" else "cpu"  # a GPU runs a kernel compiled
        outcomes = run_cases(call, cases, timeout, device)
        result = judge(exercise, cases[: len(outcomes)], outcomes, total=len(cases), algorithm=call.broken)
    return _strict(result, strict)


def _graded_on_first(question: Question, encoded: dict[str, Any], result: CheckResult) -> CheckResult:
    """``result`` with the question's first answer attached (kept beside the notebook, :mod:`.answers`), and a
    note when the answer checked now is not that one: the grading command scores the first."""
    first = keep_first(question.exercise_id, encoded)
    if first != encoded:
        try:
            graded = judge_answer(question, decode_answer(first))
        except (
            SchemaError
        ):  # the kept answer was edited into something else: this one is kept no more than it
            return replace(result, record=record(question.exercise_id, encoded))
        shown = first.get("value")
        verdict = "right" if graded.passed else "not right"
        note = f" Your first answer, {shown!r}, is the one graded ({verdict}): answer before you check."
        result = replace(result, message=result.message + note)
    return replace(result, record=record(question.exercise_id, first))


def check_hidden(
    exercise_id: str, fn: Callable[..., Any], secret: str, learner: str | None = None
) -> CheckResult:
    """``check(exercise_id, fn, strict=True)`` on this learner's own inputs, from the instructor's ``secret``
    (:func:`~attn_edu.grading.exercise.case_seed`): the hidden test of the nbgrader release, which nbgrader
    strips from the student's copy and puts back to autograde. ``learner``: by default the folder above the
    notebook's, nbgrader's ``autograded/<student>/<assignment>/``.
    """
    learner = learner or Path.cwd().parent.name
    return check(exercise_id, fn, strict=True, seed=case_seed(secret, learner, exercise_id))


def _strict(result: CheckResult, strict: bool | None) -> CheckResult:
    if strict is None:
        strict = os.environ.get("ATTN_EDU_STRICT") == "1"
    if strict and not result.passed:
        raise AssertionError(repr(result))
    return result


def hint(exercise_id: str, n: int = 1) -> Hint:
    """The ``n``-th hint for an exercise (1 = gentle, the last one nearly gives the answer away).

    Example:
        >>> hint("02.1").text.startswith("1/")
        True
    """
    if in_grader_child():
        return Hint(exercise_id, "hints are not available while the grading command runs")
    exercise = _find(exercise_id)
    tiers = exercise.hints or ("no hints for this exercise",)
    n = min(max(int(n), 1), len(tiers))
    more = f" (more: hint({exercise_id!r}, {n + 1}))" if n < len(tiers) else ""
    return Hint(exercise_id, f"{n}/{len(tiers)} {tiers[n - 1]}{more}")
