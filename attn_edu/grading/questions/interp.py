"""Notebook 13's concept questions (13.q1 to 13.q3): each with its answer, the reason it
is right, what each wrong answer misses, and hints.

Course prose kept as data beside the checks of :mod:`attn_edu.grading.checks.interp`; :mod:`attn_edu.grading.registry` collects ``QUESTIONS``.
"""

from __future__ import annotations

from attn_edu.grading.exercise import Question

INDUCTION_TARGET = Question(
    exercise_id="13.q1",
    title="which key an induction head attends to from query 30 of 24 distinct tokens repeated once",
    answer=7,
    explanation=(
        "query 30 holds the same token as position 30 - 24 = 6, its earlier occurrence; the token that "
        "followed it, and so the token to predict next, sits at 6 + 1 = 7. That is the stripe P - 1 = 23 "
        "keys left of the diagonal."
    ),
    wrong=(
        (
            6,
            "6 is the earlier occurrence of the current token; the induction head looks at the token after it.",
        ),
        (29, "29 is the previous token: that is what a previous-token head attends to, in layer 0."),
        (
            5,
            "one step too far back: the earlier copy of the current token is at 30 - 24 = 6, and the head "
            "reads what came next.",
        ),
    ),
    hints=(
        "where did the current token (at position 30) appear in the first copy?",
        "an induction head predicts by copying the token that followed that earlier occurrence.",
    ),
    minutes=3,
)

REDUNDANT_HEADS = Question(
    exercise_id="13.q2",
    title="what the ablations of the four layer-1 induction heads show",
    choices=(
        "the induction heads are unimportant: each one can be removed at almost no cost",
        "the sharpest attention maps mark the heads the model needs most",
        "the heads are redundant: each one alone is dispensable, all four together are indispensable",
        "ablation is unreliable: removing a head should never change the loss by more than its own share",
    ),
    answer="c",
    explanation=(
        "each layer-1 head, removed alone, costs under 0.2 nats, because the other three do the same job; "
        "removing all four brings the loss back to about log V, guessing. Single-head ablations therefore "
        "understate what a group of heads does together."
    ),
    wrong=(
        (
            "a",
            "one at a time they are dispensable, but remove all four and the model falls back to guessing: "
            "the job is shared, not absent.",
        ),
        (
            "b",
            "the sharpest heads are the layer-1 heads, and each alone costs little; the most important single "
            "head is a less striking one in layer 0.",
        ),
        (
            "d",
            "effects need not add up: heads that do the same job cover for each other, so the joint "
            "effect can far exceed the sum of the single ones.",
        ),
    ),
    hints=("compare the loss without one layer-1 head with the loss without all four of them.",),
    difficulty=2,
    minutes=3,
)

UNIFORM_NOT_ABLATED = Question(
    exercise_id="13.q3",
    title="what a causal head outputs when all its scores are set to 0 before the softmax",
    choices=(
        "the mean of the value vectors of the keys each query may see",
        "zeros, exactly as when its output is ablated",
        "NaN: the softmax of an all-zero row divides by zero",
        "the value vector of the query's own token",
    ),
    answer="a",
    explanation=(
        "equal scores give equal weights: softmax(0, ..., 0) is 1/(t + 1) on each of the t + 1 visible "
        "keys, so the head returns their average value. That is uniform attention, a change of behaviour, "
        "not the removal of the head."
    ),
    wrong=(
        (
            "b",
            "zeroing the head's output (or its weights after the softmax) gives zeros; zero scores go "
            "through the softmax first.",
        ),
        ("c", "exp(0) = 1 for every visible key, so the row sums to t + 1, not 0: nothing divides by zero."),
        ("d", "that needs all the weight on one key; equal scores spread it evenly."),
    ),
    hints=("what is softmax(0, 0, ..., 0) over t + 1 keys?",),
    minutes=2,
)

QUESTIONS = (INDUCTION_TARGET, REDUNDANT_HEADS, UNIFORM_NOT_ABLATED)

# Asked in course/13_interpretability.ipynb before the cell that measures it (section 4).
EDGE_OF_TRAINING = Question(
    exercise_id="13.p1",
    title="the loss at the last three positions of 24 random tokens repeated once, for a model trained on n = 8 to 24",
    choices=(
        "as low as on the rest of the second copy: n = 24 is one of the training lengths",
        "about log V = 4.16: where copying fails, the model guesses",
        "well above log V",
    ),
    answer="c",
    explanation=(
        "about 7 nats, worse than a uniform guess. The layer-0 heads find position t - 1 through the learned position "
        "table, and they stop doing so from about query 21 on: only the lengths n = 22 to 24, 3 of the 17 that "
        "training drew from, put position 21 or later in a first copy. Predicting positions 45 to 47 needs keys 21 "
        "to 23 marked; nothing marks them, so the induction heads attend elsewhere and copy a wrong token with "
        "confidence."
    ),
    wrong=(
        (
            "a",
            "a learned position table knows each position only in the roles training gave it: how often was "
            "position 23 inside a first copy, where the induction heads look for their keys?",
        ),
        (
            "b",
            "a model that fails need not be unsure: its induction heads still attend sharply somewhere, and copy "
            "whatever token they find there.",
        ),
    ),
    hints=(
        "n = 24 was drawn in training, but think of positions rather than lengths: to predict positions 45 to 47 the "
        "induction heads must find keys 21 to 23. What marks those keys, and where did training ask for it?",
    ),
    points=0,
    difficulty=1,
    minutes=1,
)

PREDICTIONS = (EDGE_OF_TRAINING,)
