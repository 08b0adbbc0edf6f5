"""Notebook 05's concept questions (05.q1 to 05.q3): each with its answer, the reason it
is right, what each wrong answer misses, and hints.

Course prose kept as data beside the checks of :mod:`attn_edu.grading.checks.multihead`; :mod:`attn_edu.grading.registry` collects ``QUESTIONS``.
"""

from __future__ import annotations

from attn_edu.grading.exercise import Question

GQA_CACHE = Question(
    exercise_id="05.q1",
    title="the KV cache in MiB: 24 layers, H_kv = 4 heads of D = 64, 4096 tokens, float16",
    answer=96,
    explanation=(
        "the cache keeps a key and a value for every layer, kv head and token: 24 · 4 · 4096 · 64 · 2 (K and "
        "V) · 2 bytes = 100,663,296 bytes = 96 MiB. The 16 query heads do not count: with full MHA "
        "(H_kv = 16) it would be 4 times as much, 384 MiB."
    ),
    wrong=(
        (
            384,
            "384 MiB is the cache of full MHA: only the H_kv = 4 key/value heads are cached, not the 16 query heads.",
        ),
        (48, "half the answer: the factor 2 for K and V, or the 2 bytes of a float16, is missing."),
        (192, "192 MiB is float32; float16 takes 2 bytes per number."),
        (24, "both factors 2 are missing: one for K and V, and the 2 bytes of a float16."),
        (4, "that is one layer; each of the 24 layers keeps its own cache."),
    ),
    tolerance=0.5,
    hints=(
        "what does the cache store for one token in one layer? Count the kv heads, not the query heads.",
        "layers × H_kv × tokens × D × 2 (K and V) × bytes per number, then divide by 2²⁰.",
    ),
    difficulty=2,
    minutes=4,
)

HEADS_AND_PARAMETERS = Question(
    exercise_id="05.q2",
    title="how the parameter count of a C = 512 attention layer changes from 8 to 16 heads",
    choices=(
        "it doubles: every head brings its own query, key, value and output projections",
        "it stays the same: the four projections are C × C whatever H is",
        "it halves: each head is half as wide as before",
        "it grows a little: W^O needs one more row block for every extra head",
    ),
    answer="b",
    explanation=(
        "q_proj, k_proj, v_proj and out_proj are 512 × 512 matrices (plus biases) for any H that divides C: "
        "4 · 512² + 4 · 512 = 1,050,624 parameters. With 16 heads each head's W^Q_h is 512 × 32 instead of "
        "512 × 64, and there are twice as many of them."
    ),
    wrong=(
        (
            "a",
            "the heads' projections are slices of one C × C matrix, not extra matrices: twice as many heads "
            "means slices half as wide.",
        ),
        (
            "c",
            "each head is half as wide, but there are twice as many heads; together they still fill the C "
            "channels of every projection.",
        ),
        (
            "d",
            "W^O's row blocks get thinner as H grows (D × C with D = C / H): twice as many blocks of half the "
            "height, still C × C.",
        ),
    ),
    hints=("what are the shapes of q_proj.weight and out_proj.weight, and does H appear in them?",),
    difficulty=1,
    minutes=2,
)

GQA_HEAD = Question(
    exercise_id="05.q3",
    title="which kv head query head 6 reads when H = 12 and H_kv = 3",
    answer=1,
    explanation=(
        "each kv head serves n_rep = H / H_kv = 4 consecutive query heads: kv head 0 serves query heads 0-3, "
        "kv head 1 serves 4-7, kv head 2 serves 8-11. Query head 6 reads kv head 6 // 4 = 1."
    ),
    wrong=(
        (
            0,
            "that is the tiled layout (0, 1, 2, 0, 1, 2, ...), where query head h reads kv head h % H_kv; the "
            "grouped layout puts each kv head's copies next to each other.",
        ),
        (2, "6 // 3 divides by H_kv; divide by the size of a group, n_rep = H / H_kv."),
    ),
    hints=(
        "how many query heads share one kv head? Write out which query heads belong to kv head 0, 1 and 2.",
    ),
    difficulty=1,
    minutes=2,
)

QUESTIONS = (GQA_CACHE, HEADS_AND_PARAMETERS, GQA_HEAD)

# Asked in course/05_multi_head.ipynb before the cell that measures it (section 1).
WIDE_HEAD_READOUT = Question(
    exercise_id="05.p1",
    title="the read-out errors of one head twice as wide, with half its weight on each of two tokens",
    choices=(
        "about 0 on both: its 2C value channels have room for both vectors",
        "about 0.5 on each, as for the head of width C",
        "0 on one and 1 on the other: the head keeps one vector only",
    ),
    answer="b",
    explanation=(
        "the head returns (0.5 x_(t-1) + 0.5 x_0) W^V: however wide W^V is, it maps one average, the sum of "
        "the two vectors, and a sum does not say which part came from which token. Width adds channels, not "
        "patterns: two heads, one pattern each, recover both exactly."
    ),
    wrong=(
        (
            "a",
            "the value map is applied to each token before the weighted sum, so the output is W^V applied to "
            "one average of the two vectors; more channels give more copies of that average, never its parts.",
        ),
        (
            "c",
            "the weights are half and half, so neither token is dropped: both vectors are in the output, "
            "added together, and each is recovered only halfway.",
        ),
    ),
    hints=(
        "write the head's output as (sum over s of w_s x_s) W^V. Which x's survive, and can any map after it "
        "separate them?",
    ),
    points=0,
    difficulty=1,
    minutes=1,
)

PREDICTIONS = (WIDE_HEAD_READOUT,)
