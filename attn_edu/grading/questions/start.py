"""Notebook 00's concept questions (00.q1): each with its answer, the reason it
is right, what each wrong answer misses, and hints.

Course prose kept as data beside the checks of :mod:`attn_edu.grading.checks.start`; :mod:`attn_edu.grading.registry` collects ``QUESTIONS``.
"""

from __future__ import annotations

from attn_edu.grading.exercise import Question

OUTPUT_SHAPE = Question(
    exercise_id="00.q1",
    title="the shape of the scores for 4 queries and 6 keys of dimension 8",
    choices=("(4, 8)", "(4, 6)", "(6, 4)", "(8, 8)"),
    answer="b",
    explanation=(
        "one score per (query, key) pair: 4 rows, one per query, and 6 columns, one per key. The dimension D = 8 "
        "is summed away by each dot product."
    ),
    wrong=(
        ("a", "(4, 8) is the shape of the queries themselves; each score sums over the 8 dimensions."),
        ("c", "(6, 4) puts the keys in the rows: that is keys @ queryᵀ."),
        ("d", "(8, 8) pairs dimensions with dimensions; a score pairs a query with a key."),
    ),
    hints=(
        "each score is one number for one (query, key) pair: how many pairs are there, and how are they laid out?",
    ),
    minutes=1,
)

QUESTIONS = (OUTPUT_SHAPE,)
