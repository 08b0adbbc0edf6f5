"""Notebook 03's concept questions (03.q1 to 03.q2): each with its answer, the reason it
is right, what each wrong answer misses, and hints.

Course prose kept as data beside the checks of :mod:`attn_edu.grading.checks.scaling`; :mod:`attn_edu.grading.registry` collects ``QUESTIONS``.
"""

from __future__ import annotations

from attn_edu.grading.exercise import Question

VARIANCE_OF_A_SCORE = Question(
    exercise_id="03.q1",
    title="the variance of one unscaled score q·k for D = 256",
    answer=256,
    explanation=(
        "q·k is a sum of D = 256 products q_i k_i; each has mean 0 and variance E[q_i²] E[k_i²] = 1, and "
        "the products are independent, so their variances add: 256. Dividing by sqrt(256) = 16 brings it to 1."
    ),
    wrong=(
        (16, "16 is the standard deviation, sqrt(256); the question asks for the variance."),
        (
            1,
            "1 is the variance after dividing the score by sqrt(D); before, the D products' variances add up.",
        ),
    ),
    hints=(
        "write q·k as a sum of D products q_i k_i. What are the mean and the variance of one product?",
        "variances of independent terms add: Var(q·k) = D · Var(q_i k_i), and Var(q_i k_i) = E[q_i²] E[k_i²].",
    ),
    minutes=3,
)

SATURATION = Question(
    exercise_id="03.q2",
    title="what happens to softmax(q·k) without the 1/sqrt(D) as D grows",
    choices=(
        "the weights become uniform: large scores cancel in the normalisation",
        "each row approaches one-hot, and the gradients through the softmax shrink towards 0",
        "nothing: softmax is unchanged when a constant is added to every score",
        "the weights turn into NaN once D passes 64",
    ),
    answer="b",
    explanation=(
        "the scores' standard deviation grows as sqrt(D), so the gaps between them grow too and exp() "
        "magnifies them: the largest score takes nearly all the weight. The softmax's Jacobian, "
        "diag(p) - p pᵀ, goes to 0 as p becomes one-hot, so almost no gradient reaches q and k."
    ),
    wrong=(
        ("a", "uniform weights need equal scores; here the scores spread further apart as D grows."),
        (
            "c",
            "adding one constant to every score changes nothing, but a larger D multiplies the gaps between "
            "scores, and softmax does depend on those.",
        ),
        (
            "d",
            "torch.softmax subtracts each row's maximum before exp(), so it does not overflow; the problem is "
            "the shape of the weights, not NaN.",
        ),
    ),
    hints=("how does the spread of the scores change with D, and what does exp() do to large gaps?",),
    difficulty=2,
    minutes=3,
)

QUESTIONS = (VARIANCE_OF_A_SCORE, SATURATION)

# Asked in course/03_scaling_variance.ipynb before the sweep over d_k (section 2).
ONE_HOT_AT_1024 = Question(
    exercise_id="03.p1",
    title="the mean largest weight of a row of 16 unscaled softmax weights at d_k = 1024",
    choices=(
        "about 1/16 = 0.06, as for equal scores",
        "about 0.25, as for the scaled scores",
        "above 0.9: the row is nearly one-hot",
    ),
    answer="c",
    explanation=(
        "unscaled scores have standard deviation sqrt(1024) = 32, so the best key's score is typically tens of "
        "units above the runner-up's, and e^(tens) leaves the others almost nothing: the softmax acts as an "
        "argmax before the model has learnt anything."
    ),
    wrong=(
        (
            "a",
            "equal weights need equal scores; with d_k = 1024 the unscaled scores are spread over tens of units.",
        ),
        (
            "b",
            "that is what the scaled scores give at every d_k: their variance is 1. Without the scale the variance "
            "is d_k = 1024.",
        ),
    ),
    hints=(
        "how large is a typical unscaled score when Var(q · k) = d_k = 1024, and what does exp do to gaps that size?",
    ),
    points=0,
    difficulty=1,
    minutes=1,
)

PREDICTIONS = (ONE_HOT_AT_1024,)
