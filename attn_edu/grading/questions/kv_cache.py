"""Notebook 10's concept questions (10.q1 to 10.q3) and its prediction (10.p1): each with its answer, the reason it
is right, what each wrong answer misses, and hints.

Course prose kept as data beside the checks of :mod:`attn_edu.grading.checks.kv_cache`; :mod:`attn_edu.grading.registry` collects ``QUESTIONS``.
"""

from __future__ import annotations

from attn_edu.grading.exercise import Question

CACHE_OF_LLAMA_3 = Question(
    exercise_id="10.q1",
    title="the KV cache of Llama-3-8B for one sequence of 8,192 tokens in bfloat16, in GiB",
    answer=1.0,
    explanation=(
        "32 layers × 8 kv heads × 8,192 tokens × 128 dims × 2 (K and V) × 2 bytes = 2^30 bytes, exactly "
        "1 GiB: 128 KiB per token. The 32 query heads do not enter the formula; only the 8 kv heads are stored."
    ),
    wrong=(
        (0.5, "that is only the keys (or only the values): each layer stores both, a factor 2."),
        (
            4.0,
            "4 GiB counts the 32 query heads; under GQA the cache holds only the 8 key/value heads.",
        ),
        (
            2.0,
            "twice too much: bfloat16 takes 2 bytes per number, not 4 (or the 32 query heads were used "
            "and the factor 2 for K and V was left out).",
        ),
    ),
    tolerance=0.01,
    hints=(
        "Llama-3-8B: 32 layers, 32 query heads, 8 key/value heads, head dim 128. Which of the two head "
        "counts does the cache store?",
        "bytes = layers × H_kv × S × D × 2 × bytes per number × B; one GiB is 2^30 bytes.",
    ),
    difficulty=2,
    minutes=4,
)

NUCLEUS = Question(
    exercise_id="10.q2",
    title="which tokens top-p sampling with p = 0.9 keeps from the probabilities 0.5, 0.3, 0.15, 0.05",
    choices=(
        "only the first two: their mass, 0.8, is the largest that stays below 0.9",
        "all four: p = 0.9 keeps 90 % of the tokens",
        "the first three, renormalised to about 0.53, 0.32 and 0.16",
        "only the first: it alone holds more than any other token",
    ),
    answer="c",
    explanation=(
        "the running total is 0.5, 0.8, 0.95: the third token is the one that takes it past 0.9, and it "
        "stays in. The kept mass 0.95 is renormalised to 1, so the weights become 0.5/0.95, 0.3/0.95 and 0.15/0.95."
    ),
    wrong=(
        (
            "a",
            "the nucleus is the smallest set whose mass *reaches* p, so the token that crosses 0.9 stays; "
            "0.8 is still short of it.",
        ),
        ("b", "p is a share of the probability mass, not of the number of tokens."),
        ("d", "keeping only the most likely token is greedy decoding (or top-k with k = 1), not top-p."),
    ),
    hints=(
        "add up the probabilities from the most likely token down, and stop at the first running total "
        "that reaches p: is that token in or out?",
    ),
    minutes=3,
)

BATCHING = Question(
    exercise_id="10.q3",
    title="what a batch of 4 does to the decoding throughput of Llama-2-7B at a 1k context (the roofline)",
    choices=(
        "the total rises almost fourfold: the weights are read once per step for all four sequences",
        "nothing changes: the HBM bandwidth is fixed, so the tokens per second are fixed too",
        "the total falls: four caches must be read at every step",
        "the total rises exactly fourfold: the GPU is compute-bound, and four sequences keep it four times busier",
    ),
    answer="a",
    explanation=(
        "at batch 1 a step reads about 13.5 GB of weights and 0.5 GiB of cache; at batch 4 the weights are "
        "the same, and the cache reads grow to 2 GiB. The step takes about 11 % longer but makes four "
        "tokens, so the roofline goes from about 239 to 858 tokens/s."
    ),
    wrong=(
        (
            "b",
            "the bandwidth is fixed, but the bytes per step barely grow: the weights are shared by every "
            "sequence of the batch.",
        ),
        (
            "c",
            "the four caches are read, but at 1k tokens each is 0.5 GiB beside 13.5 GB of weights: the step "
            "grows a little and makes four tokens.",
        ),
        (
            "d",
            "at batch 4 a step still does under 4 FLOPs per byte, far below the 295 an H100 can do per byte "
            "read: memory, not arithmetic, sets the time, and the cache reads add a little to it.",
        ),
    ),
    hints=(
        "what does a decoding step read from memory, and which part of it is shared by all the sequences "
        "of a batch?",
        "t_step ≥ (weight bytes + B · S · cache bytes per token) / bandwidth, and a step makes B tokens.",
    ),
    difficulty=2,
    minutes=5,
)

QUESTIONS = (CACHE_OF_LLAMA_3, NUCLEUS, BATCHING)

# Asked in course/10_kv_cache.ipynb before the cell that computes it (section 6).
CACHE_OUTWEIGHS_WEIGHTS = Question(
    exercise_id="10.p1",
    title="from how many tokens the KV cache of one Llama-2-7B sequence outweighs the model's weights",
    choices=(
        "never: a few vectors per token stay small beside 6.7 billion weights",
        "about a million tokens",
        "about 26 thousand tokens",
        "about 2 thousand tokens",
    ),
    answer="c",
    explanation=(
        "a token stores a key and a value of 32 heads × 128 dims in each of the 32 layers: "
        "32 × 32 × 128 × 2 × 2 bytes = 512 KiB per token. The weights take 2 × 6.74e9 bytes = 12.6 GiB, "
        "and 12.6 GiB / 512 KiB ≈ 25,700 tokens."
    ),
    wrong=(
        (
            "a",
            "the cache grows with every token and never stops: it only has to be long enough. Count the "
            "numbers one token stores, in every layer.",
        ),
        (
            "b",
            "one token stores more than one vector: a key and a value per head, in every one of the 32 layers, "
            "262,144 numbers in all.",
        ),
        (
            "d",
            "2,000 tokens take about 1 GiB of cache: large, but still well below the 12.6 GiB of weights.",
        ),
    ),
    hints=(
        "bytes per token = layers × H_kv × D × 2 (K and V) × 2 bytes; divide the weights' bytes by that.",
    ),
    points=0,
    difficulty=1,
    minutes=1,
)

PREDICTIONS = (CACHE_OUTWEIGHS_WEIGHTS,)
