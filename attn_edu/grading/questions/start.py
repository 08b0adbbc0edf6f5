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

# Asked in course/00_start_here.ipynb before the picture of one MiniLM head (section 2).
RESTING_PLACE = Question(
    exercise_id="00.p1",
    title="where a typical word puts most of its attention in one head of a pretrained BERT",
    choices=(
        "on itself",
        "on the word just before it",
        "on [CLS], the marker token at the start of the sentence",
        "spread about evenly over the sentence",
    ),
    answer="c",
    explanation=(
        "most rows give [CLS] their largest weight. Many heads of BERT-like models park attention on a special "
        "token ([CLS], [SEP]) or on punctuation when they have nothing to look up (Clark et al., 2019, 'What does "
        "BERT look at?'): a row's weights must sum to 1, so they have to go somewhere."
    ),
    wrong=(
        ("a", "a head that attends to each word itself lights up the diagonal: look for it in the picture."),
        (
            "b",
            "a previous-token head lights up the cells just left of the diagonal; notebook 05 finds such heads, "
            "but look where this one's bright cells are.",
        ),
        ("d", "an evenly spread row would be one flat colour; this head's rows have a few bright cells."),
    ),
    hints=(
        "the weights of a row must add up to 1: where can a word put them when no other word matters to it?",
    ),
    points=0,
    minutes=1,
)

PREDICTIONS = (RESTING_PLACE,)
