"""Notebook 11's concept questions (11.q1 to 11.q3) and the prediction its course notebook asks (11.p1): each
with its answer, the reason it is right, what each wrong answer misses, and hints.

Course prose kept as data beside the checks of :mod:`attn_edu.grading.checks.efficient`; :mod:`attn_edu.grading.registry` collects ``QUESTIONS``
and ``PREDICTIONS``.
"""

from __future__ import annotations

from attn_edu.grading.exercise import Question

RECEPTIVE_FIELD = Question(
    exercise_id="11.q1",
    title="how many tokens back the last token can see after 12 layers of causal windows of w = 64",
    answer=756,
    explanation=(
        "one layer lets position t read t - 63 .. t: 63 = w - 1 positions back. Each further layer starts "
        "from positions that already reached 63 back and adds another 63, so 12 layers reach 12 · 63 = 756."
    ),
    wrong=(
        (
            768,
            "12 · 64 counts the query's own token as a step back in every layer; a window of w keys "
            "reaches w - 1 positions back.",
        ),
        (63, "63 is one layer's reach; stacked layers pass information along, and the reaches add up."),
        (64, "64 is the width of one window, itself included; and stacked layers reach further."),
    ),
    hints=(
        "how far back does one causal window of w keys reach, counting the query's own position as 0?",
        "after L layers, who depends on whom is the boolean matrix power M^L: each layer adds one "
        "window's reach.",
    ),
    minutes=3,
)

LINEAR_STATE = Question(
    exercise_id="11.q2",
    title="what causal linear attention must keep per head to generate token 10,001 (D = Dv = 64)",
    choices=(
        "the keys and values of all 10,000 earlier tokens, like a KV cache",
        "a 64 × 64 state S and a 64-number normaliser z, whatever the length",
        "the 10,000 × 10,000 matrix φ(Q) φ(K)ᵀ of earlier scores",
        "nothing: each token is computed from its own query, key and value alone",
    ),
    answer="b",
    explanation=(
        "φ(q)ᵀ Σ φ(k_s) v_sᵀ only needs the running sum S = Σ φ(k_s) v_sᵀ, of shape (D, Dv), and the "
        "normaliser z = Σ φ(k_s): the sums absorb every earlier token, so the state never grows. That is "
        "the RNN form of notebook 11, and why linear attention is cheap to generate with."
    ),
    wrong=(
        (
            "a",
            "softmax attention needs every key, because exp(q·k) does not factorise; φ(q)·φ(k) does, so the "
            "keys and values can be summed once and forgotten.",
        ),
        ("c", "the regrouping φ(Q)(φ(K)ᵀ V) exists precisely so that the (n, n) matrix is never formed."),
        (
            "d",
            "causal attention still mixes every earlier token into the output; the question is only how "
            "much must be stored to do it.",
        ),
    ),
    hints=(
        "regroup φ(q_t)ᵀ Σ_s φ(k_s) v_sᵀ: which part depends on the earlier tokens, and what is its shape?",
    ),
    minutes=3,
)

CAPACITY = Question(
    exercise_id="11.q3",
    title="the capacity of each expert for 1,000 tokens, top-2 routing, 8 experts, capacity factor 1.25",
    answer=313,
    explanation=(
        "1,000 tokens with k = 2 make 2,000 assignments; shared evenly by 8 experts that is 250 each, and "
        "the capacity factor 1.25 leaves room for some imbalance: ⌈1.25 · 250⌉ = ⌈312.5⌉ = 313."
    ),
    wrong=(
        (157, "that counts one assignment per token; with top-2 routing each token goes to 2 experts."),
        (250, "250 is the even share; the capacity factor 1.25 adds a margin on top of it."),
        (312, "round up: a buffer holds a whole number of assignments, and 312 is one short of 312.5."),
    ),
    hints=(
        "count the assignments first: how many experts does each token go to?",
        "capacity = ⌈c · N · k / E⌉.",
    ),
    minutes=3,
)

QUESTIONS = (RECEPTIVE_FIELD, LINEAR_STATE, CAPACITY)

# Asked in course/11_efficient_attention.ipynb before the cell that writes two values under one key (section 7).
DELTA_OVERWRITE = Question(
    exercise_id="11.p1",
    title="reading a state after two values were written under one unit key: linear attention and the delta rule",
    choices=(
        "both read [0, 1]: the later write wins",
        "linear attention reads [1, 1], the delta rule [0, 1]",
        "linear attention reads [0.5, 0.5], their mean, the delta rule [0, 1]",
        "both read [1, 1]: every write adds",
    ),
    answer="b",
    explanation=(
        "linear attention adds k vᵀ at every write, so reading with the unit key k returns the sum of every value "
        "stored under it, [1, 1]. The delta rule first reads what the state holds for k, [1, 0], and writes only "
        "the difference v − [1, 0] = [−1, 1]: the new value replaces the old one."
    ),
    wrong=(
        (
            "a",
            "that is the delta rule; but what does linear attention's update S ← S + k vᵀ do with the value "
            "already stored under k?",
        ),
        (
            "c",
            "nothing divides by the number of writes: reading the state with a unit key k returns kᵀS, the sum "
            "of (k · k) v over the writes.",
        ),
        (
            "d",
            "that is linear attention; the delta rule subtracts what the state already returns for k before it "
            "writes.",
        ),
    ),
    hints=("write out Sᵀk after each write, for S ← S + k vᵀ and for S ← S + k (v − Sᵀk)ᵀ, with k · k = 1.",),
    points=0,
    difficulty=1,
    minutes=1,
)

PREDICTIONS = (DELTA_OVERWRITE,)
