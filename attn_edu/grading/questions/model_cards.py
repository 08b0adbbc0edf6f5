"""Notebook 14's concept questions (14.q1, 14.q2) and its prediction (14.p1): each with its answer, the reason it is
right, what each wrong answer misses, and hints. The numbers come from :data:`attn_edu.model_cards.PUBLISHED`
(``tests/test_model_cards.py`` recomputes them).

Course prose kept as data beside the checks of :mod:`attn_edu.grading.checks.model_cards`;
:mod:`attn_edu.grading.registry` collects ``QUESTIONS``.
"""

from __future__ import annotations

from attn_edu.grading.exercise import Question

GEMMA_SLIDING_SHARE = Question(
    exercise_id="14.q1",
    title="the share of Gemma 3 27B's cache, in percent, that its 52 sliding layers hold at 128k tokens",
    answer=3.9,
    explanation=(
        "52 sliding layers keep 1,024 tokens each, 52 × 1,024 = 53,248 token-layers; the 10 global layers keep "
        "all 131,072, 1,310,720 token-layers. Every layer stores the same 2 × 16 × 128 numbers a token, so the "
        "share is 53,248 / 1,363,968 = 3.9 %: 416 MiB of 10.4 GiB. Five sixths of the layers hold a twenty-fifth "
        "of the memory."
    ),
    wrong=(
        (
            83.9,
            "that is the share of the layers (52 of 62); a sliding layer keeps 1,024 tokens, a global one 131,072.",
        ),
        (96.1, "that is the global layers' share: the question asks for the sliding layers'."),
    ),
    tolerance=0.15,
    hints=(
        "every layer of Gemma 3 stores the same numbers per token (16 key/value heads of 128); only how many tokens "
        "it keeps differs.",
        "count token-layers: 52 × min(131,072, 1,024) for the sliding layers, 10 × 131,072 for the global ones.",
    ),
    difficulty=1,
    minutes=3,
)

WHAT_A_HYBRID_SAVES = Question(
    exercise_id="14.q2",
    title="what grows with the context in Qwen3-Next's 36 Gated DeltaNet layers",
    choices=(
        "nothing: each keeps a state of 32 × 128 × 128 numbers and its convolution's last 3 inputs, at any length",
        "a KV cache of 2 key/value heads, like its attention layers",
        "a state that doubles each time the context doubles",
        "a window of the last 2,048 tokens",
    ),
    answer="a",
    explanation=(
        "a linear layer folds each token into a fixed state (notebook 11's delta rule): 32 value heads × 128 × 128 "
        "numbers, 1 MiB in bfloat16, plus the short convolution's last K - 1 = 3 inputs. Only the 12 attention "
        "layers grow, which is why Qwen3-Next's 48 layers keep about as much as gpt-oss-20b's 12 full layers."
    ),
    wrong=(
        (
            "b",
            "only the gated attention layers (every fourth) cache keys and values; the others keep a state.",
        ),
        ("c", "the state's size is set by the heads and their dims, not by how many tokens it has read."),
        ("d", "no window: a linear layer has read every token, but folded them into its state."),
    ),
    hints=("which of notebook 11's layers reads a token by adding it into a matrix of fixed size?",),
    difficulty=1,
    minutes=2,
)

QUESTIONS = (GEMMA_SLIDING_SHARE, WHAT_A_HYBRID_SAVES)

# Asked in course/14_reading_a_model.ipynb before the cell that counts it (section 2).
HYBRID_AGAINST_WINDOWS = Question(
    exercise_id="14.p1",
    title="Qwen3-Next-80B-A3B (48 layers) against gpt-oss-20b (24 layers): their caches at 128k tokens",
    choices=(
        "Qwen3-Next's is about twice gpt-oss's: twice the layers",
        "about the same",
        "Qwen3-Next's is about a quarter of gpt-oss's: three of its four layers keep no cache",
    ),
    answer="b",
    explanation=(
        "3.04 GiB against 3.00 GiB. Each model has 12 layers that keep every token, with the same 2 × 2 × 256 = "
        "2 × 8 × 64 = 1,024 numbers a token (Qwen3-Next: 2 KV heads of 256; gpt-oss: 8 of 64). gpt-oss's other 12 "
        "layers keep 128 tokens, Qwen3-Next's other 36 a fixed state: both next to nothing at 128k."
    ),
    wrong=(
        ("a", "count the layers that keep every token, not all the layers: 12 in each model."),
        (
            "c",
            "gpt-oss's sliding layers keep only 128 tokens each, so at 128k both caches are almost all full "
            "layers: 12 in each.",
        ),
    ),
    hints=(
        "at 128k tokens, which layers of each model hold almost all of its cache, and how many numbers a token?",
    ),
    points=0,
    difficulty=1,
    minutes=1,
)

PREDICTIONS = (HYBRID_AGAINST_WINDOWS,)
