"""Notebook 07's concept questions (07.q1 to 07.q3) and the prediction its course notebook asks
(07.p1): each with its answer, the reason it is right, what each wrong answer misses, and hints.

Course prose kept as data beside the checks of :mod:`attn_edu.grading.checks.rope`; :mod:`attn_edu.grading.registry`
collects ``QUESTIONS`` and ``PREDICTIONS``.
"""

from __future__ import annotations

from attn_edu.grading.exercise import Question

WRAPPED_PAIRS = Question(
    exercise_id="07.q1",
    title="how many of the 64 pairs of a D = 128 head make a full turn within 1024 training tokens",
    answer=36,
    explanation=(
        "pair i turns through 1024 · θ_i radians, with θ_i = 10000^(-2i/128). That reaches 2π while "
        "θ_i >= 2π/1024 ≈ 0.0061, i.e. 2i/128 · ln 10000 <= 5.09, so i <= 35.4: pairs 0 to 35, 36 of them. "
        "The other 28 only ever saw a slice of their circle; past 1024 tokens they meet angles training never "
        "showed."
    ),
    wrong=(
        (49, "a full turn is 2π radians, not 1: count the pairs with 1024 · θ_i >= 2π."),
        (64, "not every pair wraps: the slowest pairs turn by far less than 2π/1024 per token."),
        (28, "that counts the pairs that never complete a turn; the question asks for those that do."),
        (35, "check where the count starts: the pairs are numbered from i = 0."),
    ),
    hints=(
        "pair i makes a full turn when 1024 · θ_i >= 2π. Take logs of θ_i = 10000^(-2i/D) and solve for i.",
        "ln 10000 ≈ 9.21 and ln(2π/1024) ≈ -5.09; then count the whole numbers i from 0 up to the bound.",
    ),
    difficulty=2,
    minutes=5,
)

SAME_OFFSET = Question(
    exercise_id="07.q2",
    title="which placement of the same q and k keeps their RoPE score",
    choices=(
        "query at position 1003, key at position 1000",
        "query at position 7, key at position 10",
        "query at position 20, key at position 14",
        "any placement: rotations keep lengths, so the score never changes",
    ),
    answer="a",
    explanation=(
        "(R(mθ)q)·(R(nθ)k) = qᵀR((n - m)θ)k depends on n - m only; 1000 - 1003 = 7 - 10 = -3, so the score is "
        "the same. Positions are never seen on their own, only their difference."
    ),
    wrong=(
        (
            "b",
            "swapping the positions changes the sign of the offset: R(3θ) and R(-3θ) are different rotations, "
            "so the score changes (unlike the symmetric sinusoidal dot product of notebook 06).",
        ),
        (
            "c",
            "the ratio of the positions is the same, but RoPE sees their difference, and 20 - 14 = 6, not 3.",
        ),
        (
            "d",
            "lengths are kept, but the angle between the rotated q and k changes with the offset, and the "
            "score follows the angle.",
        ),
    ),
    hints=("write the score as qᵀ R(-mθ) R(nθ) k: what is left of m and n once the two rotations combine?",),
    minutes=2,
)

WRONG_LAYOUT = Question(
    exercise_id="07.q3",
    title="what happens when interleaved-layout weights run under half-split RoPE without the row permutation",
    choices=(
        "nothing: (Pq)·(Pk) = q·k, so the scores are the same",
        "every score is wrong, even for a query and a key at the same position",
        "only the outputs change, because half-split RoPE also rotates the values",
        "scores between tokens at different positions are wrong; a query and a key at the same position "
        "still get the right score",
    ),
    answer="d",
    explanation=(
        "without the permutation the wrong coordinates are turned together, so the rotation between a query "
        "at m and a key at n is not the one training used. At m = n, though, the two rotations cancel "
        "whatever the pairing, and the score is the plain q·k, which both layouts agree on."
    ),
    wrong=(
        (
            "a",
            "(Pq)·(Pk) = q·k holds when the permutation *is* applied; here it is left out, so the model's "
            "learned pairs are split across different rotation planes.",
        ),
        (
            "b",
            "look at m = n: the score is (R(mθ)q)·(R(mθ)k), and a rotation applied to both vectors keeps "
            "their dot product, whichever coordinates it pairs.",
        ),
        ("c", "RoPE rotates only queries and keys; the values are never turned, in either layout."),
    ),
    hints=(
        "the layouts pair different coordinates. What does rotating both q and k by the same angle do to q·k?",
        "compare a query and a key at the same position with a query and a key at different positions.",
    ),
    difficulty=2,
    minutes=4,
)

QUESTIONS = (WRAPPED_PAIRS, SAME_OFFSET, WRONG_LAYOUT)

# Asked in course/07_rope.ipynb before the cell that draws the trained model's loss by position (section 8).
PI_INSIDE_L = Question(
    exercise_id="07.p1",
    title="what position interpolation does to a trained model's loss inside its training length",
    choices=(
        "about the same as with no scaling: the first L positions need no stretching",
        "a little worse, a tenth of a nat or so: neighbouring characters are slightly blurred",
        "worse than a bigram model, which reads only the character before",
    ),
    answer="c",
    explanation=(
        "PI divides every frequency by s = 4 at every distance, not only past L: pair 0 turns a quarter radian "
        "per character instead of one, so even the angle between neighbours is one the weights never met. The "
        "model loses track of which character came where: just before L its loss rises from about 1.35 nats per "
        "character to over 3, worse than the bigram model's 2.32."
    ),
    wrong=(
        (
            "a",
            "PI changes the frequencies, and so the angle of every distance, not only of those past L: a "
            "neighbour one character back now sits at a quarter of the angle the model learned.",
        ),
        (
            "b",
            "a character model reads order through its fast pairs, and PI slows every one of them four times: "
            "no relative angle inside L is the one training showed. The cost is more than a nat.",
        ),
    ),
    hints=(
        "PI turns position m by θ_i / s. What angle separates two neighbouring characters in pair 0, before and "
        "after?",
    ),
    points=0,
    difficulty=1,
    minutes=1,
)

PREDICTIONS = (PI_INSIDE_L,)
