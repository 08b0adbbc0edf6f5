"""Checks for notebook 00's demonstration: how ``check()`` grades, on an exercise outside the graded track.

Exercise 00.1 (every query's dot product with every key) and question 00.q1 exist so that notebook 00 can show
a failing check, a hint, a pass and a concept question without giving away any graded exercise's answer.
There is no ``exercises/00`` notebook, and the grading command never grades them.
"""

from __future__ import annotations

import torch

from attn_edu import retrieval
from attn_edu.grading.exercise import Case, Exercise, Mistake


def _randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=g)


def _score_cases(g: torch.Generator) -> list[Case]:
    return [
        Case((_randn(g, 3, 4), _randn(g, 5, 4))),
        Case((_randn(g, 2, 6, 3), _randn(g, 2, 7, 3))),
        Case((_randn(g, 1, 5), _randn(g, 9, 5))),
    ]


DOT_PRODUCT_SCORES = Exercise(
    exercise_id="00.1",
    title="the dot product of every query with every key",
    function_name="dot_product_scores",
    arg_names=("query", "keys"),
    reference=lambda query, keys: retrieval.dot_product_score(query, keys),
    make_cases=_score_cases,
    mistakes=(
        Mistake(
            lambda query, keys: keys @ query.transpose(-2, -1),
            "rows and columns are swapped: yours has one row per key, shape (..., S, T); the scores have "
            "one row per query, shape (..., T, S). Look at which operand stands on the left of the "
            "product.",
        ),
        Mistake(
            lambda query, keys: (query @ keys.transpose(-2, -1)).softmax(dim=-1),
            "these are softmax weights; the exercise asks for the raw scores, before any softmax.",
        ),
    ),
    hints=(
        "score[t, s] = query[t] · keys[s]: one row per query, one column per key, shape (..., T, S).",
        "a matrix product pairs the rows of its left operand with the columns of its right one, so the keys "
        "must stand as columns: transpose their last two dimensions.",
    ),
    minutes=3,
)


EXERCISES = (DOT_PRODUCT_SCORES,)
