"""Notebook 06's concept questions (06.q1 to 06.q3): each with its answer, the reason it
is right, what each wrong answer misses, and hints.

Course prose kept as data beside the checks of :mod:`attn_edu.grading.checks.positional`; :mod:`attn_edu.grading.registry` collects ``QUESTIONS``.
"""

from __future__ import annotations

from attn_edu.grading.exercise import Question

SELF_SIMILARITY = Question(
    exercise_id="06.q1",
    title="the dot product PE(p)·PE(p) of a sinusoidal encoding with dim = 128",
    answer=64,
    explanation=(
        "each of the 64 column pairs holds sin(p ω_i) and cos(p ω_i), and sin² + cos² = 1, so every pair adds "
        "exactly 1 whatever p is: PE(p)·PE(p) = dim / 2 = 64. It is the k = 0 value of Σ_i cos(k ω_i)."
    ),
    wrong=(
        (
            128,
            "the 128 columns do not contribute 1 each: a sine and a cosine of the same angle contribute "
            "sin² + cos² = 1 together.",
        ),
        (1, "the table is not normalised to unit length: add up what each sine-cosine pair contributes."),
    ),
    hints=(
        "write the dot product pair by pair: pair i contributes sin²(p ω_i) + cos²(p ω_i). What is that?",
    ),
    minutes=2,
)

OFFSET_SYMMETRY = Question(
    exercise_id="06.q2",
    title="what the dot product PE(p)·PE(p+k) of two sinusoidal encodings can tell",
    choices=(
        "it grows with p: the encodings of late positions are more alike than those of early ones",
        "it is 0 for every k ≠ 0: different positions get orthogonal vectors",
        "it is the same for k and -k, so on its own it cannot tell a key 3 tokens before the query from "
        "one 3 tokens after",
        "it changes sign with k, which is how attention tells the past from the future",
    ),
    answer="c",
    explanation=(
        "pair by pair, sin a sin(a+b) + cos a cos(a+b) = cos b, so PE(p)·PE(p+k) = Σ_i cos(k ω_i): a function "
        "of the offset alone, and cos is even, so k and -k give the same value. Telling before from after is "
        "left to the learned projections W^Q and W^K."
    ),
    wrong=(
        ("a", "work out one pair with the angle-addition formula: the position p drops out."),
        (
            "b",
            "nearby positions are very similar (the sum of cosines is close to its maximum for small k); "
            "the value falls off with distance but is not 0.",
        ),
        ("d", "each term is cos(k ω_i), and cos(-x) = cos(x): the sign of k does not show."),
    ),
    hints=(
        "multiply out one pair: sin(a) sin(a + b) + cos(a) cos(a + b) with a = p ω_i and b = k ω_i.",
        "which of p and k is left in the result, and what does the cosine do to the sign of k?",
    ),
    difficulty=2,
    minutes=3,
)

FAR_BUCKET = Question(
    exercise_id="06.q3",
    title="T5's bidirectional bucket of relative_position = +20 (32 buckets, max_distance 128)",
    answer=26,
    explanation=(
        "the key is after the query, so it uses the upper half: offset 16. Within that half n = 16, exact = 8, "
        "and d = 20 is past the exact region: 8 + floor(log(20/8) / log(128/8) · 8) = 8 + floor(2.64) = 10. "
        "So bucket 16 + 10 = 26, which keys 16 to 22 tokens after the query share."
    ),
    wrong=(
        (
            10,
            "that is the bucket of a key 20 tokens *before* the query; a key after it (relative_position > 0) "
            "goes to the upper half, num_buckets // 2 further on.",
        ),
        (36, "20 is beyond the exact region (d < n // 2 = 8): it falls in a log-spaced bucket."),
        (20, "20 is beyond the exact region (d < n // 2 = 8), and a key after the query adds an offset."),
        (
            33,
            "each direction has num_buckets // 2 = 16 buckets, so the exact region ends at 8 and the log "
            "formula uses n = 16, not 32.",
        ),
    ),
    hints=(
        "first the direction: relative_position = key - query = +20 > 0. Which half of the 32 buckets is that?",
        "then, within one direction, n = 16 buckets and exact = 8: a distance d >= 8 goes to "
        "exact + floor(log(d / exact) / log(max_distance / exact) · (n - exact)). A calculator helps.",
    ),
    difficulty=2,
    minutes=5,
)

QUESTIONS = (SELF_SIMILARITY, OFFSET_SYMMETRY, FAR_BUCKET)

# Asked in course/06_positional_encodings.ipynb before the length test runs (section 6).
SINUSOIDAL_BEYOND = Question(
    exercise_id="06.p1",
    title="the sinusoidal model's accuracy at positions 16 to 63, after training on 16 tokens",
    choices=(
        "close to 1, as inside the training length: a shift is the same rotation M_k at every position",
        "far lower than inside: the model was never trained on the encodings of those positions",
        "no answer at all: the sinusoidal table stops at the training length, like a learned one",
    ),
    answer="b",
    explanation=(
        "the table has a row for every position, and M_k is the same everywhere, but the layer learned its "
        "weights on the vectors of positions 0 to 15 only. Positions 16 to 63 add vectors it never saw to the "
        "token embeddings, and nothing forces what it learned to carry over to them."
    ),
    wrong=(
        (
            "a",
            "M_k makes a shift *expressible* at every position; it does not make the trained weights "
            "read the new position vectors the way they read the trained ones.",
        ),
        ("c", "sinusoidal_encoding computes a row for any position: the formula has no last row."),
    ),
    hints=("which vectors did the layer see while it was trained, and which does it meet at position 40?",),
    points=0,
    difficulty=1,
    minutes=1,
)

PREDICTIONS = (SINUSOIDAL_BEYOND,)
