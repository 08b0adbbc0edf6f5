"""Notebook 01's concept questions (01.q1 to 01.q3): each with its answer, the reason it
is right, what each wrong answer misses, and hints.

Course prose kept as data beside the checks of :mod:`attn_edu.grading.checks.retrieval`; :mod:`attn_edu.grading.registry` collects ``QUESTIONS``.
"""

from __future__ import annotations

from attn_edu.grading.exercise import Question

SOFT_ANSWER = Question(
    exercise_id="01.q1",
    title="the soft lookup's answer for two keys at temperature 0.5",
    answer=11.19,
    explanation=(
        "the scores are q · k = 1 and 0; divided by τ = 0.5 they are 2 and 0, so the first key gets "
        "e² / (e² + 1) ≈ 0.881 of the weight and the second 0.119. The answer is 0.881 · 10 + 0.119 · 20 ≈ "
        "11.19: near the hard lookup's 10, pulled a little towards the other value."
    ),
    wrong=(
        (
            10,
            "10 is the hard lookup (argmax); a softmax gives the second key some weight too, e⁰ = 1 against e².",
        ),
        (
            15,
            "15 is the plain average, the limit of a very large temperature; at τ = 0.5 the better key wins most.",
        ),
        (
            12.69,
            "that is softmax of the scores 1 and 0 as they are: the temperature is missing (divide them by 0.5).",
        ),
        (13.78, "the scores were multiplied by the temperature; divide by it: 1 / 0.5 = 2."),
    ),
    tolerance=0.05,
    hints=(
        "score each key with q · k, divide by τ, then softmax: w₁ = e^(s₁/τ) / (e^(s₁/τ) + e^(s₂/τ)).",
        "the answer is w₁ · 10 + w₂ · 20, with w₁ + w₂ = 1.",
    ),
    difficulty=1,
    minutes=3,
)

DUPLICATED_ENTRY = Question(
    exercise_id="01.q2",
    title="what storing one entry twice does to a soft lookup",
    choices=(
        "nothing: the softmax renormalises over the keys, so storing an entry twice never matters",
        "the answer gains a second copy of north's value and can grow past the largest value",
        "the answer moves towards north's value, as if north's score had gained τ·log 2",
        "the weights now sum to more than 1, so the answer leaves the range of the values",
    ),
    answer="c",
    explanation=(
        "the softmax runs over all five keys, and the two copies of north share exp(s/τ) each: north's "
        "total weight is 2·exp(s/τ) / Z, the same as one key with score s + τ·log 2. The five weights still "
        "sum to 1, so the answer stays an average of the values, shifted towards 4 °C."
    ),
    wrong=(
        (
            "a",
            "duplicating every entry changes nothing, because all the weights halve together; duplicating "
            "one entry gives only that entry a second share, so the balance between the keys moves.",
        ),
        (
            "b",
            "the weights are normalised over all five keys, copy included, so nothing is counted on top of "
            "the others: north's share grows and every other key's shrinks.",
        ),
        (
            "d",
            "the softmax divides by the sum over all five keys, copy included: the five weights sum to 1, "
            "and the answer is still a weighted average of the values.",
        ),
    ),
    hints=(
        "write the softmax over the five keys: what does the denominator become, and what is the total "
        "weight of the two north copies?",
        "compare 2·exp(s/τ) with exp(s'/τ): which single score s' would give one key the same weight?",
    ),
    difficulty=2,
    minutes=4,
)

ADDITIVE_MEMORY = Question(
    exercise_id="01.q3",
    title="the size of the additive score's largest intermediate at T = S = 512, h = 64",
    answer=64,
    explanation=(
        "the additive score broadcasts W_q q_t + W_k k_s over every (query, key) pair before the tanh: a "
        "(T, S, h) tensor of 512 · 512 · 64 = 16,777,216 floats, 4 bytes each, 64 MiB. The dot product's "
        "largest intermediate is the (T, S) score matrix, 1 MiB: h times smaller."
    ),
    wrong=(
        (16, "16 Mi is the number of floats; each float32 takes 4 bytes."),
        (1, "1 MiB is the dot product's (T, S) score matrix; the additive score builds a (T, S, h) tensor."),
        (
            0.125,
            "that is the (T, h) or (S, h) projection; the tanh needs the sum for every (query, key) pair.",
        ),
    ),
    tolerance=0.5,
    hints=(
        "which tensor does the additive score build before reducing its hidden axis with v? Write its shape.",
        "multiply its entries by 4 bytes (float32) and divide by 2²⁰ bytes per MiB.",
    ),
    minutes=3,
)

QUESTIONS = (SOFT_ANSWER, DUPLICATED_ENTRY, ADDITIVE_MEMORY)

# Asked in course/01_soft_retrieval.ipynb before the temperature sweep (section 3).
HOT_LOOKUP = Question(
    exercise_id="01.p1",
    title="the soft lookup's answer as the temperature grows very large",
    choices=(
        "the value of the best-matching key, as the hard lookup gives",
        "the average of the values",
        "0 °C: every weight shrinks towards 0",
        "it blows up: the scores are divided by a huge number",
    ),
    answer="b",
    explanation=(
        "dividing by a huge temperature shrinks every score towards 0, and exp(0) = 1 for every key: after the "
        "softmax each of the S keys gets weight 1/S, so the answer is the plain average of the values."
    ),
    wrong=(
        (
            "a",
            "that is the other end: a small temperature blows the gaps up and the best key takes the weight.",
        ),
        ("c", "the weights always sum to 1, whatever the temperature: they cannot all shrink to 0."),
        ("d", "the scores get smaller, not larger, and the softmax of small numbers is well behaved."),
    ),
    hints=("what is exp(score / temperature) for every key when the temperature is enormous?",),
    points=0,
    difficulty=1,
    minutes=1,
)

PREDICTIONS = (HOT_LOOKUP,)
