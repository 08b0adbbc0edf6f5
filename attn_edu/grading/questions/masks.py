"""Notebook 04's concept questions (04.q1 to 04.q3): each with its answer, the reason it
is right, what each wrong answer misses, and hints.

Course prose kept as data beside the checks of :mod:`attn_edu.grading.checks.masks`; :mod:`attn_edu.grading.registry` collects ``QUESTIONS``.
"""

from __future__ import annotations

from attn_edu.grading.exercise import Question

CACHED_CAUSAL_COUNT = Question(
    exercise_id="04.q1",
    title="how many entries of causal_mask(3, 7) are True",
    answer=18,
    explanation=(
        "bottom-right alignment: the 3 queries are positions 4, 5 and 6, and query t sees keys "
        "0 .. S - T + t, so the rows hold 5, 6 and 7 True entries: 18 of the 21."
    ),
    wrong=(
        (
            6,
            "6 is the top-left mask (query t sees keys 0 .. t, like torch's is_causal); the new queries sit "
            "after the 4 cached tokens, at positions 4, 5 and 6.",
        ),
        (
            21,
            "21 is every entry: query 0 (position 4) must not see keys 5 and 6, nor query 1 (position 5) key 6.",
        ),
        (15, "off by one: each query also sees its own token, the key at its own position."),
        (20, "off by one: a query sees keys up to its own position, not one further."),
    ),
    hints=(
        "where do the T = 3 new queries sit among the S = 7 positions? Which keys may each of them see?",
        "count row by row: query t sees keys 0 .. S - T + t.",
    ),
    difficulty=1,
    minutes=3,
)

FORGOTTEN_PADDING = Question(
    exercise_id="04.q2",
    title="a right-padded decoder batch with the causal mask but no padding mask",
    choices=(
        "every real token's output changes: the padded keys are now visible to every query",
        "the real tokens' outputs do not change: the causal mask already hides every padded key from them",
        "only the last real token of each sequence reads padding",
        "the padded keys get NaN weights, and the NaN spreads through the sequence",
    ),
    answer="b",
    explanation=(
        "with right padding a sequence of length L has its padding at positions L .. T - 1, and a real query "
        "t < L sees keys 0 .. t only, all real. Only the padded queries read padding, and the loss ignores "
        "them. The padding mask still matters without the causal mask (an encoder) and for left padding."
    ),
    wrong=(
        (
            "a",
            "look at where the padding sits: after the last real token. Which keys does the causal mask "
            "leave to a real query t?",
        ),
        (
            "c",
            "the last real token sits at position L - 1 and sees keys 0 .. L - 1, all real; the padding "
            "starts at position L.",
        ),
        (
            "d",
            "NaN needs a row with no visible key; here every query sees at least key 0, and a visible "
            "padded key would simply be one more key with garbage in it.",
        ),
    ),
    hints=(
        "draw the causal mask for T = 6 and mark the padded columns of a sequence of length 4. Which rows "
        "reach those columns?",
    ),
    difficulty=2,
    minutes=3,
)

FINITE_FILL_ROW = Question(
    exercise_id="04.q3",
    title="the weights of a fully masked row filled with -1e4 by masked_fill",
    choices=(
        "a row of zeros, as the reference returns",
        "NaN, as with a fill of -inf",
        "the softmax of the original scores: shifting them all by -1e4 keeps their ratios",
        "uniform weights: every one of the S hidden keys gets 1/S",
    ),
    answer="d",
    explanation=(
        "masked_fill replaces every score of the row by the same -1e4, and the softmax of equal scores is "
        "uniform: all the weight lands on keys the query must not see, silently, with no NaN to warn you. "
        "That is why the reference fills with -inf and turns rows with no visible key into zeros."
    ),
    wrong=(
        (
            "a",
            "zeros need a step of their own (torch.where on the rows with no visible key); a softmax on its "
            "own always returns weights that sum to 1.",
        ),
        (
            "b",
            "NaN comes from 0/0 when every score is -inf; with a finite fill, exp(-1e4 - (-1e4)) = 1 for "
            "every key, and nothing is 0/0.",
        ),
        (
            "c",
            "masked_fill replaces the hidden scores, it does not add to them: every entry of the row becomes "
            "-1e4, whatever it was before.",
        ),
    ),
    hints=("after masked_fill, what are the S scores of that row? What is the softmax of S equal numbers?",),
    difficulty=1,
    minutes=2,
)

QUESTIONS = (CACHED_CAUSAL_COUNT, FORGOTTEN_PADDING, FINITE_FILL_ROW)

# Asked in course/04_masks.ipynb before the cell that computes it (section 5).
ALL_MASKED_ROW = Question(
    exercise_id="04.p1",
    title="the softmax of a row whose every score is -inf",
    choices=(
        "[0, 0, 0]: every weight is e^-inf = 0",
        "[1/3, 1/3, 1/3]: three equal scores share the weight equally",
        "[nan, nan, nan]",
        "an error: torch refuses a row with no finite score",
    ),
    answer="c",
    explanation=(
        "each weight is e^-inf / (e^-inf + e^-inf + e^-inf) = 0/0, which is undefined; and softmax code first "
        "subtracts the row's maximum for stability, and -inf - (-inf) is already NaN. torch returns it silently."
    ),
    wrong=(
        ("a", "every numerator is 0, but so is the denominator they are divided by: what is 0/0?"),
        (
            "b",
            "equal finite scores would share the weight equally; but softmax subtracts the row's maximum "
            "first, and -inf - (-inf) is not 0.",
        ),
        ("d", "torch.softmax raises nothing here: it computes a result, and prints no warning."),
    ),
    hints=(
        "write one weight as a fraction, e^(a_s) / sum over s' of e^(a_s'): what are its top and bottom?",
    ),
    points=0,
    difficulty=1,
    minutes=1,
)

PREDICTIONS = (ALL_MASKED_ROW,)
