"""Notebook 02's concept questions (02.q1 to 02.q2) and its prediction (02.p1): each with its answer, the reason it
is right, what each wrong answer misses, and hints.

Course prose kept as data beside the checks of :mod:`attn_edu.grading.checks.attention`; :mod:`attn_edu.grading.registry` collects ``QUESTIONS``.
"""

from __future__ import annotations

from attn_edu.grading.exercise import Question

WEIGHTS_MEMORY = Question(
    exercise_id="02.q1",
    title="the memory of one layer's attention weights for B = 2, H = 12, n = 2048 in float32",
    answer=384,
    explanation=(
        "every sequence and every head has its own n × n matrix: 2 · 12 · 2048² = 100,663,296 weights, 4 bytes "
        "each, 402,653,184 bytes = 384 MiB. Doubling n would make it 1.5 GiB: the n² of section 8."
    ),
    wrong=(
        (32, "that is one head's matrices; each of the 12 heads has its own n × n weights."),
        (192, "that is one sequence; each of the B = 2 sequences in the batch has its own weights."),
        (96, "96 Mi is the number of weights; each float32 takes 4 bytes."),
        (0.1875, "the weight matrix has one entry per (query, key) pair: n², not n."),
    ),
    tolerance=0.5,
    hints=(
        "how many (query, key) pairs does one head of one sequence score? Then count the heads and sequences.",
        "multiply the number of weights by 4 bytes and divide by 2²⁰ bytes per MiB.",
    ),
    minutes=3,
)

REPEATED_TOKEN = Question(
    exercise_id="02.q2",
    title="the self-attention outputs of two copies of one word, without positions",
    choices=(
        "they are identical: equal inputs give equal queries, scores, weights and outputs",
        "they differ, because the second copy comes later in the sentence",
        "they differ, because each token puts the most weight on itself",
        "they are identical only when W_Q = W_K",
    ),
    answer="a",
    explanation=(
        "attention sees the sentence as a set: the two copies have the same row of X, hence the same query, "
        "the same scores against every key, the same weights and the same weighted sum of the values. Only "
        "the positional encodings of notebook 06 make them differ."
    ),
    wrong=(
        (
            "b",
            "where a token sits appears nowhere in Q K^T / sqrt(D): X holds the word's embedding and nothing "
            "about its position.",
        ),
        (
            "c",
            "nothing makes a query favour its own key, and even if it did, the two copies' keys are equal "
            "too: each copy's row of scores is the same.",
        ),
        (
            "d",
            "the two copies share their query whatever W_Q and W_K are; tying the maps makes the score matrix "
            "symmetric, a different property.",
        ),
    ),
    hints=(
        "follow one row of X through the formula: query, scores against all keys, softmax, weighted sum. "
        "Where could the position of the token come in?",
    ),
    difficulty=1,
    minutes=2,
)

QUESTIONS = (WEIGHTS_MEMORY, REPEATED_TOKEN)

TIED_PREVIOUS_TOKEN = Question(
    exercise_id="02.p1",
    title="how tied query and key maps (W_Q = W_K) spread a token's weight after training towards its predecessor",
    choices=(
        "almost all of it on the previous token, as separate maps do",
        "as much on the next token as on the previous one, and at least as much on itself",
        "about half on the previous token and half on the next, almost none on itself",
        "evenly over all six tokens: training gets nowhere",
    ),
    answer="b",
    explanation=(
        "tied maps make the score matrix a Gram matrix, S = (XW)(XW)^T: symmetric and positive semidefinite. "
        "The best tied map for the whole cycle is a symmetric circulant one (average any tied map over the six "
        "cyclic relabellings: the loss is convex, so it does not get worse): there every token scores its "
        "previous and its next token alike, and itself at least as high, since |S_ts| <= sqrt(S_tt S_ss). "
        "Training reaches it: 0.22 on each neighbour, 0.39 on the token itself."
    ),
    wrong=(
        (
            "a",
            "a tied map can send a few tokens to their predecessor, but not all six: summed over the cycle, "
            "S_tt + S_(t-1)(t-1) >= 2 S_t(t-1) for a Gram matrix, so the tokens score themselves at least as "
            "high as their predecessors, and the best tied loss is at least log 3.",
        ),
        (
            "c",
            "a token's score with itself is |q_t|^2, and by Cauchy-Schwarz q_t . q_s <= |q_t| |q_s|: in the "
            "best tied map, whose queries all have one length, no other token outscores the token itself.",
        ),
        (
            "d",
            "the loss still falls: tied maps can raise the scores of both neighbours together, away from the "
            "three tokens that are neither.",
        ),
    ),
    hints=(
        "with W_Q = W_K the score of t with s is q_t . q_s. What does that make of score(t, t - 1) and "
        "score(t - 1, t), and of a token's score with itself?",
    ),
    points=0,
    difficulty=1,
    minutes=1,
)

PREDICTIONS = (TIED_PREVIOUS_TOKEN,)
