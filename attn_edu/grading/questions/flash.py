"""Notebook 12's concept questions (12.q1 to 12.q3) and its prediction (12.p1): each with its answer, the reason it
is right, what each wrong answer misses, and hints.

Course prose kept as data beside the checks of :mod:`attn_edu.grading.checks.flash`; :mod:`attn_edu.grading.registry` collects ``QUESTIONS``.
"""

from __future__ import annotations

from attn_edu.grading.exercise import Question

CAUSAL_TILES = Question(
    exercise_id="12.q1",
    title="how many 64 × 64 tiles a causal 1024 × 1024 attention computes (T == S)",
    answer=136,
    explanation=(
        "1024 / 64 = 16 query blocks and 16 key blocks. Query block i sees key blocks 0 .. i, so it computes "
        "i + 1 tiles: 1 + 2 + ... + 16 = 16 · 17 / 2 = 136 of the 256, the 16 on the diagonal with a mask."
    ),
    wrong=(
        (
            256,
            "that is every tile: a key block that lies entirely in the future of a query block is skipped.",
        ),
        (
            128,
            "half of 256 leaves out half of the diagonal: each diagonal tile holds visible keys, so it is "
            "computed (with a mask).",
        ),
        (120, "the 16 diagonal tiles are computed too: each holds some visible (query, key) pairs."),
    ),
    hints=(
        "how many query blocks and key blocks are there? Which key blocks does query block i need?",
        "count the tiles on and below the diagonal of a 16 × 16 grid of tiles.",
    ),
    minutes=3,
)

RESCALE = Question(
    exercise_id="12.q2",
    title="what the tiled forward does to l_i and acc when a new key tile raises a row's maximum",
    choices=(
        "nothing: the final division acc / l_i cancels any error",
        "it rescales l_i only; acc holds values, not exponentials, so it needs no fix",
        "it recomputes the earlier tiles with the new maximum",
        "it multiplies both by exp(m_old - m_new), a factor at most 1, before adding the new tile",
    ),
    answer="d",
    explanation=(
        "every earlier term of l_i and of acc was weighted exp(s - m_old); exp(s - m_new) is that times "
        "exp(m_old - m_new). One multiplication per row fixes the whole sum, so no earlier tile is read "
        "again, and the output is normalised once at the end."
    ),
    wrong=(
        (
            "a",
            "l_i and acc are sums of terms with different factors when the maximum moved mid-row; the "
            "division only cancels a factor that every term of both shares.",
        ),
        (
            "b",
            "acc is a sum of values weighted by exp(s - m_i), the same weights as l_i, so it needs the same "
            "rescale.",
        ),
        ("c", "recomputing would read earlier K and V tiles again from HBM, the traffic tiling avoids."),
    ),
    hints=("write one earlier term exp(s - m_old) with the new maximum instead: what factor appears?",),
    difficulty=2,
    minutes=3,
)

PADDING = Question(
    exercise_id="12.q3",
    title="why the kernel must mask the padded key rows of the last key tile (columns >= S)",
    choices=(
        "the padded keys read as 0, so their score is 0, not -inf, and the softmax would give them weight",
        "their scores would be NaN, and one NaN spoils the whole row",
        "they cost time: the mask lets the kernel skip their multiply-adds",
        "they need no mask: a key of zeros has a score of 0, which softmax ignores",
    ),
    answer="a",
    explanation=(
        "tl.load fills the rows past S with 0, and q · 0 = 0 is a perfectly ordinary score: exp(0 - m_i) "
        "is positive, so these phantom keys would take weight (and add zero values to acc). Setting their "
        "scores to -inf gives them exactly 0."
    ),
    wrong=(
        ("b", "padding rows are loaded with other=0.0, a finite number; nothing there is NaN."),
        (
            "c",
            "the tile is multiplied whole either way; the mask changes what the scores mean, not how many "
            "operations run.",
        ),
        ("d", "softmax ignores only -inf; a score of 0 can be larger than the real scores of the row."),
    ),
    hints=(
        "what value does a masked tl.load put in the padded rows, and what weight does softmax give to that score?",
    ),
    difficulty=2,
    minutes=3,
)

QUESTIONS = (CAUSAL_TILES, RESCALE, PADDING)

# Asked in course/12_flash_attention.ipynb before the cell that computes it (section 3).
FORGOTTEN_RESCALE = Question(
    exercise_id="12.p1",
    title="what the weights of an online softmax that forgets the rescale sum to",
    choices=(
        "exactly 1, since they are divided by a sum",
        "more than 1",
        "less than 1",
        "NaN",
    ),
    answer="c",
    explanation=(
        "a term added before the maximum grew was measured against a maximum that was too small, so it is too big "
        "by exp(m_new - m_old) > 1, and so is the running sum l_i. The numerators exp(x - m_i) use the final "
        "maximum, so they add up to the true sum; divided by a sum that is too big, the weights add up to less "
        "than 1 (0.62 on the notebook's ten scores)."
    ),
    wrong=(
        (
            "a",
            "they are divided by l_i, but l_i is no longer the sum of the numerators exp(x - m_i): its early "
            "terms were computed with an older, smaller maximum.",
        ),
        (
            "b",
            "the early terms of l_i are too big, not too small: a smaller maximum makes exp(x - m) larger. What "
            "does a denominator that is too big do to the weights?",
        ),
        ("d", "every maximum here is finite, so no exp(-inf - (-inf)) appears: nothing is 0/0."),
    ),
    hints=(
        "compare one early term of l_i, exp(x - m_old), with what it should be at the end, exp(x - m_final).",
    ),
    points=0,
    difficulty=1,
    minutes=1,
)

PREDICTIONS = (FORGOTTEN_RESCALE,)
