"""Every exercise and concept question, by id: collected from explicit lists of modules, one per notebook.

Each module of :mod:`attn_edu.grading.checks` lists its exercises in a tuple ``EXERCISES``; the module of the
same name in :mod:`attn_edu.grading.questions` lists the notebook's concept questions in ``QUESTIONS`` and the
predictions its course notebook asks before a cell that answers them in ``PREDICTIONS`` (worth no points).
Nothing is registered as a side effect of importing. A new notebook's exercises go into a new check module
and its questions into a new questions module, added to :data:`CHECK_MODULES` and :data:`QUESTION_MODULES`.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from attn_edu.grading.checks import (
    architectures,
    attention,
    blocks,
    decoding,
    efficient,
    flash,
    interp,
    kv_cache,
    masks,
    model_cards,
    multihead,
    positional,
    recurrent,
    retrieval,
    rope,
    scaling,
    start,
    training,
    triton_kernels,
)
from attn_edu.grading.exercise import Exercise, Question
from attn_edu.grading.questions import architectures as architectures_questions
from attn_edu.grading.questions import attention as attention_questions
from attn_edu.grading.questions import blocks as blocks_questions
from attn_edu.grading.questions import efficient as efficient_questions
from attn_edu.grading.questions import flash as flash_questions
from attn_edu.grading.questions import interp as interp_questions
from attn_edu.grading.questions import kv_cache as kv_cache_questions
from attn_edu.grading.questions import masks as masks_questions
from attn_edu.grading.questions import model_cards as model_cards_questions
from attn_edu.grading.questions import multihead as multihead_questions
from attn_edu.grading.questions import positional as positional_questions
from attn_edu.grading.questions import retrieval as retrieval_questions
from attn_edu.grading.questions import rope as rope_questions
from attn_edu.grading.questions import scaling as scaling_questions
from attn_edu.grading.questions import start as start_questions

CHECK_MODULES: tuple[ModuleType, ...] = (  # in course order: exercises 00.* (the demonstration) ... 14.*
    start,
    retrieval,
    attention,
    scaling,
    masks,
    multihead,
    positional,
    rope,
    blocks,
    architectures,
    training,
    kv_cache,
    decoding,
    efficient,
    recurrent,
    flash,
    triton_kernels,
    interp,
    model_cards,
)

QUESTION_MODULES: tuple[ModuleType, ...] = (  # in course order: 00.q1 (the demonstration) ... 14.q*
    start_questions,
    retrieval_questions,
    attention_questions,
    scaling_questions,
    masks_questions,
    multihead_questions,
    positional_questions,
    rope_questions,
    blocks_questions,
    architectures_questions,
    kv_cache_questions,
    efficient_questions,
    flash_questions,
    interp_questions,
    model_cards_questions,
)


def collect(modules: tuple[ModuleType, ...], kind: str = "EXERCISES") -> dict[str, Any]:
    """The exercises (``kind="QUESTIONS"``: the questions) of these modules by id, sorted; ``ValueError``
    when an id appears twice."""
    found: dict[str, Any] = {}
    for module in modules:
        for exercise in getattr(module, kind, ()):
            if exercise.exercise_id in found:
                raise ValueError(f"exercise_id: {exercise.exercise_id!r} appears twice ({module.__name__})")
            found[exercise.exercise_id] = exercise
    return dict(sorted(found.items()))


_EXERCISES: dict[str, Exercise] = collect(CHECK_MODULES)
_QUESTIONS: dict[str, Question] = collect(QUESTION_MODULES, "QUESTIONS")
_PREDICTIONS: dict[str, Question] = collect(QUESTION_MODULES, "PREDICTIONS")


def exercises() -> dict[str, Exercise]:
    """Every exercise, by id, sorted ("01.1", "01.2", ...).

    Example:
        >>> list(exercises())[:3]
        ['00.1', '01.1', '01.2']
    """
    return dict(_EXERCISES)


def get_exercise(exercise_id: str) -> Exercise:
    """The exercise with this id; ``KeyError`` naming the known ids otherwise."""
    if exercise_id not in _EXERCISES:
        raise KeyError(f"exercise_id: no exercise {exercise_id!r}; known: {', '.join(_EXERCISES) or 'none'}")
    return _EXERCISES[exercise_id]


def questions() -> dict[str, Question]:
    """Every concept question, by id, sorted ("01.q1", "01.q2", ...)."""
    return dict(_QUESTIONS)


def get_question(question_id: str) -> Question:
    """The question with this id; ``KeyError`` naming the known ids otherwise."""
    if question_id not in _QUESTIONS:
        raise KeyError(f"exercise_id: no question {question_id!r}; known: {', '.join(_QUESTIONS) or 'none'}")
    return _QUESTIONS[question_id]


def predictions() -> dict[str, Question]:
    """Every prediction a course notebook asks before the cell that answers it, by id ("04.p1", ...)."""
    return dict(_PREDICTIONS)


def get_prediction(prediction_id: str) -> Question:
    """The prediction with this id; ``KeyError`` naming the known ids otherwise."""
    if prediction_id not in _PREDICTIONS:
        known = ", ".join(_PREDICTIONS) or "none"
        raise KeyError(f"exercise_id: no prediction {prediction_id!r}; known: {known}")
    return _PREDICTIONS[prediction_id]
