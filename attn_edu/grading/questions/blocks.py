"""Notebook 08's concept questions (08.q1 to 08.q3): each with its answer, the reason it
is right, what each wrong answer misses, and hints.

Course prose kept as data beside the checks of :mod:`attn_edu.grading.checks.blocks`; :mod:`attn_edu.grading.registry` collects ``QUESTIONS``.
"""

from __future__ import annotations

from attn_edu.grading.exercise import Question

SWIGLU_WIDTH = Question(
    exercise_id="08.q1",
    title="the SwiGLU hidden width with the weights of a 4C FFN, for C = 768 and no biases",
    answer=2048,
    explanation=(
        "the two-matrix FFN holds 2 · C · 4C = 8C² weights; SwiGLU's three C × h matrices hold 3Ch. Equal "
        "counts give h = 8C/3 = 2048 for C = 768: the gate is paid for with a narrower hidden layer."
    ),
    wrong=(
        (
            3072,
            "3072 = 4C is the width of the two-matrix FFN; SwiGLU has three C × hidden matrices, so the same "
            "budget buys a narrower hidden layer.",
        ),
        (
            1536,
            "set the counts equal: 3 · C · h for SwiGLU against 2 · C · 4C for the ReLU FFN, then solve for h.",
        ),
    ),
    hints=(
        "count the weights of each FFN as a function of C and its hidden width (up, down; gate, up, down), "
        "then set the two counts equal.",
    ),
    minutes=3,
)

ZERO_SUBLAYERS = Question(
    exercise_id="08.q2",
    title="what a stack of blocks computes when every sub-layer's last projection is zero",
    choices=(
        "both stacks, pre-norm and post-norm, return their input unchanged",
        "the pre-norm stack returns its input unchanged; the post-norm stack returns it normalised",
        "the post-norm stack returns its input unchanged; the pre-norm stack returns it normalised",
        "both stacks return zeros, since every sub-layer outputs zeros",
    ),
    answer="b",
    explanation=(
        "with out_proj and down_proj at zero (weights and biases) each sub-layer outputs 0. Pre-norm then "
        "computes x + 0 = x in every step, so the whole stack is the identity; post-norm computes norm(x + 0), "
        "so the stack still applies LayerNorm after LayerNorm. Only the pre-norm skip path is a clean identity."
    ),
    wrong=(
        (
            "a",
            "write out one post-norm step with a zero sub-layer: attn_norm(x + 0) is a LayerNorm of x, "
            "not x.",
        ),
        (
            "c",
            "in pre-norm the norm only feeds the sub-layer, whose output is 0 here; the skip path carries x "
            "itself. Which arrangement puts the norm on the skip path?",
        ),
        ("d", "the sub-layers output zeros, but each is added to the residual stream x, which is not zero."),
    ),
    hints=(
        "set attn(...) = ffn(...) = 0 in the two formulas, x + attn(attn_norm(x)) and attn_norm(x + attn(x)).",
    ),
    difficulty=2,
    minutes=3,
)

MIXING_FLOPS = Question(
    exercise_id="08.q3",
    title="attention's token-mixing FLOPs divided by an RNN's, at n = 1024 and d = 128",
    answer=8,
    explanation=(
        "attention mixes tokens in 4n²d FLOPs, an RNN in 4nd²: the ratio is n/d = 1024/128 = 8. More "
        "arithmetic once n > d, but in a few large matrix products that run in parallel, where the RNN's n "
        "steps must run one after another."
    ),
    wrong=(
        (64, "that squares the ratio: 4n²d and 4nd² differ by a single factor of n/d."),
        (
            0.125,
            "that is the RNN's count over attention's; the question asks how many times more attention does.",
        ),
    ),
    hints=("take the two counts from the notebook, 4n²d for attention and 4nd² for the RNN, and divide.",),
    minutes=2,
)

QUESTIONS = (SWIGLU_WIDTH, ZERO_SUBLAYERS, MIXING_FLOPS)

# Asked in course/08_transformer_blocks.ipynb before the cell that measures it (section 2).
NORM_WITHOUT_SKIPS = Question(
    exercise_id="08.p1",
    title="the first block's gradient in a 16-block stack with LayerNorm but no residual connections",
    choices=(
        "it vanishes, like the plain stack's: a tiny fraction of what a single block gets",
        "it stays within a factor of 10 of what a single block gets",
        "it explodes: thousands of times what a single block gets",
    ),
    answer="b",
    explanation=(
        "a LayerNorm in front of every sub-layer rescales whatever reaches it to variance 1, and its backward "
        "pass divides by the same scale: a factor that shrank the signal gives the gradient back what it took. "
        "So the gradient stays in range without skips (the measured values move between about 100 and 400). "
        "A gradient of the right size is not yet a stack that learns: trained on section 6's task, these "
        "stacks stay at chance from 4 blocks on."
    ),
    wrong=(
        (
            "a",
            "the plain stack vanishes because nothing restores the scale of its signal; here a LayerNorm in "
            "front of every sub-layer sets the scale back to 1, block after block.",
        ),
        (
            "c",
            "an explosion needs each block to stretch the signal, block after block; with the default "
            "weights the blocks shrink it, and each LayerNorm sets its scale back to 1.",
        ),
    ),
    hints=(
        "the plain stack loses its scale block by block. What does a LayerNorm do to the scale of whatever "
        "reaches it?",
    ),
    points=0,
    difficulty=1,
    minutes=1,
)

PREDICTIONS = (NORM_WITHOUT_SKIPS,)
