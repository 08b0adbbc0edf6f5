"""Notebook 09's concept questions (09.q1 to 09.q3): each with its answer, the reason it
is right, what each wrong answer misses, and hints.

Course prose kept as data beside the checks of :mod:`attn_edu.grading.checks.architectures`; :mod:`attn_edu.grading.registry` collects ``QUESTIONS``.
"""

from __future__ import annotations

from attn_edu.grading.exercise import Question

MASKED_COUNT = Question(
    exercise_id="09.q1",
    title="the expected number of [MASK] tokens BERT's rule puts into 1,000 plain tokens",
    answer=120,
    explanation=(
        "a plain token is picked with probability 0.15, and a picked token becomes [MASK] with probability "
        "0.8: 1000 · 0.15 · 0.8 = 120. About 15 more become random tokens and 15 stay as they were, and all "
        "150 picked positions are scored."
    ),
    wrong=(
        (150, "150 is the expected number of picked tokens; only 80% of the picked ones become [MASK]."),
        (800, "the 80% applies to the picked tokens, not to every token: first pick 15%."),
    ),
    hints=("two probabilities in a row: a token is picked, then a picked token is masked.",),
    minutes=2,
)

SPAN_LENGTH = Question(
    exercise_id="09.q2",
    title="the length of T5's encoder input when 30 of 200 tokens are hidden in 10 spans",
    answer=180,
    explanation=(
        "the 170 clean tokens stay and each of the 10 spans is replaced by one sentinel: 200 - 30 + 10 = 180. "
        "The decoder's target holds the 30 hidden tokens, each span behind its sentinel: 40 tokens, far "
        "fewer predictions than one per position."
    ),
    wrong=(
        (170, "the hidden tokens go, but each span leaves one sentinel in its place."),
        (200, "one sentinel per hidden token would keep the length; T5 puts one sentinel per span."),
        (40, "40 is the length of the decoder's target; the question asks for the encoder's input."),
    ),
    hints=("which tokens stay in the encoder input, and how many sentinels are added to them?",),
    minutes=3,
)

CROSS_ATTENTION_READS = Question(
    exercise_id="09.q3",
    title="which decoder positions of a T5 change when only the last source token changes",
    choices=(
        "none: the decoder is causal, so it cannot see the end of the source",
        "only the last decoder position",
        "every decoder position: cross-attention lets each output position read every real source token",
        "only the decoder positions at or after the index of the changed source token",
    ),
    answer="c",
    explanation=(
        "the causal mask sits on the decoder's *self*-attention, over output tokens; cross-attention has "
        "only the source's padding mask, and the encoder is bidirectional, so a changed source token reaches "
        "every decoder position."
    ),
    wrong=(
        (
            "a",
            "the causal mask hides later *output* tokens; the source is read through cross-attention, "
            "which has no causal mask.",
        ),
        ("b", "which mask would hide the source from the first decoder position? Cross-attention has none."),
        (
            "d",
            "source and output positions are not aligned: every decoder query attends over the whole "
            "encoder output.",
        ),
    ),
    hints=("list the three kinds of attention layer in a T5 and the mask each one uses.",),
    difficulty=2,
    minutes=3,
)

QUESTIONS = (MASKED_COUNT, SPAN_LENGTH, CROSS_ATTENTION_READS)

# Asked in course/09_architectures.ipynb before the cell that counts it (section 6).
HEADS_AND_PARAMETERS = Question(
    exercise_id="09.p1",
    title="the parameter count of GPT-2 small rebuilt with 24 heads of 32 instead of 12 heads of 64",
    choices=(
        "it grows: every head has its own W^Q, W^K and W^V",
        "it stays exactly the same",
        "it shrinks: each head is half as wide",
    ),
    answer="b",
    explanation=(
        "W^Q, W^K, W^V and W^O are each C × C (plus a bias of C) however C is split into heads: the heads cut "
        "the columns of one projection into groups, they add no matrix. With C fixed, 12 × 64 and 24 × 32 give "
        "the same 124,439,808 parameters."
    ),
    wrong=(
        (
            "a",
            "each head's W^Q is a slice of one C × C matrix: twice the heads means slices half as wide, not "
            "more matrices.",
        ),
        (
            "c",
            "each head is half as wide, but there are twice as many of them: together they still fill the "
            "same C columns.",
        ),
    ),
    hints=(
        "write the shape of W^Q for the whole layer, then the shape of one head's slice of it.",
        "which of C, L, V and the number of heads appear in the block's 12C² + 13C?",
    ),
    points=0,
    difficulty=1,
    minutes=1,
)

PREDICTIONS = (HEADS_AND_PARAMETERS,)
