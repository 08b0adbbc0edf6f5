"""Feedback teaches instead of answering: what a failing check says names the mistake and where to look, and
the hints climb from the idea in words to code, which only the last one may show.

For every registered exercise:

- no failure text (a :class:`~attn_edu.grading.exercise.Mistake`'s message, a
  :class:`~attn_edu.grading.exercise.Property`'s message, what a diagnosis says about a known mistake's output)
  and no hint but the last holds *code*: a line of the exercise's solution (``solutions/NN_*.ipynb``, normalised
  as :mod:`test_answer_leak` does, so renaming a variable hides nothing), or a code-like token of
  :data:`CODE_LIKE`;
- each hint says more than the one before it: hint k + 1 is not contained in hint k, and uses at least
  :data:`NEW_WORDS` words that hint k does not.

:data:`CODE_LIKE` is tuned to plain English and maths (``softmax(QKᵀ/√D)``, ``s ≤ S - T + t``, ``0 .. L - 1``,
``e^0 = 1``, ``True means may attend``) matching nothing; the planted texts at the end show each kind of code it
catches and each kind of prose it lets through.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from pathlib import Path

import pytest
import torch
from test_answer_leak import content_lines, normalised_lines, solution_bodies

from attn_edu.grading.exercise import Case, Exercise, make_cases
from attn_edu.grading.registry import CHECK_MODULES, exercises

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"

# What code looks like in a sentence: each pattern names the kind of code it finds.
CODE_LIKE: dict[str, re.Pattern[str]] = {
    "a backticked expression": re.compile(r"`[^`\n]+`"),
    "a library call or attribute": re.compile(r"\b(?:torch|tl|F|nn|np|math|triton|attn_edu)\.[A-Za-z_]"),
    "a method call": re.compile(r"\b[A-Za-z_]\w*\.[A-Za-z_]\w*\s*\("),
    "a tensor attribute": re.compile(r"\b[a-z_]\w*\.(?:shape|dtype|device|ndim|T|mT|grad|data)\b"),
    "a keyword argument": re.compile(r"\b[a-z_]\w*=(?!=)[^\s=]"),
    "a call with a string or a keyword": re.compile(r"\b\w+\(\s*(?:['\"]|[a-z_]\w*\s*=[^=])"),
    "a snake_case call": re.compile(r"\b[a-z]\w*_[a-z]\w+\("),  # masked_fill(, not the maths p_i( or z_(
    "an empty call": re.compile(r"\b\w+\(\)"),
    "a slice": re.compile(r"\w\[[^\]\n]*(?::|\.\.\.|None)[^\]\n]*\]"),
    "a code operator": re.compile(r"[\w)\]]\s*(?:==|!=|\+=|-=|\*=|/=|//|\*\*|@)\s*[\w(\[-]"),
    "an inverted name": re.compile(r"(?<![\w)\]])~[a-z_]"),
    "a snake_case assignment": re.compile(
        r"\b[a-z]\w*_[a-z]{3,}\w*\s*=\s*[^=\s]"
    ),  # head_dim = ..., not z_t = ...
    "a Python keyword statement": re.compile(
        r"\blambda\b[^:\n]*:|\bdef \w+\(|^\s*(?:import|from) \w|\bfor \w+(?:, \w+)* in \w+[.(\[]"
    ),
    "a float literal call": re.compile(r"\bfloat\("),
}


POINTER = re.compile(
    r"hint\('\d\d\.\d+', \d\)"
)  # "hint('04.3', 2) for the next step" points, it shows nothing


def code_like(text: str) -> list[str]:
    """``kind: matched text`` for each code-like token of ``text`` (a pointer to a hint aside)."""
    text = POINTER.sub("a hint", text)
    return [f"{kind}: {m.group(0)!r}" for kind, pattern in CODE_LIKE.items() for m in pattern.finditer(text)]


def _normalised(text: str) -> str:
    """``text``'s tokens normalised as a solution's lines are, joined by spaces (apostrophes inside words, as in
    "row's", dropped first, so that a sentence tokenises as Python)."""
    prose = re.sub(r"(?<=\w)['’](?=\w)", "", text)
    return " " + " ".join(normalised_lines(prose)) + " "


def _expression(line: str) -> str:
    """A normalised solution line without its assignment target (``_ = x`` and ``_ , _ = x`` give ``x``)."""
    return re.sub(r"^(?:_ (?:, _ )*)?(?:[+\-*/]?=) ", "", line)


def _solution_expressions() -> dict[str, list[str]]:
    """Exercise id -> the non-trivial normalised expressions of its solution body, those with a call, an
    attribute, an index or an operator between names."""
    found: dict[str, list[str]] = {}
    for path in sorted(SOLUTIONS.glob("[0-9][0-9]_*.ipynb")):
        for exercise_id, body in solution_bodies(path).items():
            for line in content_lines(body):
                expression = _expression(line)
                if re.search(r"[(.\[@*/+~-]", expression) and len(expression.split()) >= 4:
                    found.setdefault(exercise_id, []).append(expression)
    return found


SOLUTION_EXPRESSIONS = _solution_expressions()


def solution_code(exercise_id: str, text: str) -> list[str]:
    """The solution's normalised expressions that ``text`` holds."""
    shown = _normalised(text)
    return [f"solution line: {e!r}" for e in SOLUTION_EXPRESSIONS.get(exercise_id, []) if f" {e} " in shown]


def code_in(exercise_id: str, text: str) -> list[str]:
    return solution_code(exercise_id, text) + code_like(text)


def _diagnosis_texts(exercise: Exercise) -> set[str]:
    """What the exercise's diagnoses say about its known mistakes' outputs on the notebook's cases."""
    if not exercise.diagnoses or exercise.kind == "triton":
        return set()
    said: set[str] = set()
    cases: list[Case] = [c for c in make_cases(exercise, 0) if c.group == "values"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for mistake in exercise.mistakes:
            for case in cases:
                try:
                    got = mistake.fn(*case.args, **case.kwargs)
                except Exception:  # a mistake that cannot run on a case says nothing there
                    continue
                if not isinstance(got, torch.Tensor):
                    continue
                for diagnose in exercise.diagnoses:
                    text = diagnose(case, got)
                    if text:
                        said.add(text)
    return said


def failure_texts(exercise: Exercise) -> list[tuple[str, str]]:
    """``(where, text)`` of everything a failing check of ``exercise`` can say beyond shapes and numbers."""
    texts = [(f"mistake {n}", m.message) for n, m in enumerate(exercise.mistakes, 1)]
    texts += [(f"property {p.name!r}", p.message) for p in exercise.properties]
    texts += [("a diagnosis", text) for text in sorted(_diagnosis_texts(exercise))]
    return texts


NEW_WORDS = 5  # a hint says more than the one before it: at least this many words that one does not use


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]\w+", text.lower()))


def ladder_problems(exercise: Exercise) -> list[str]:
    """Every way ``exercise``'s feedback hands over code too early or its hints fail to climb."""
    eid, problems = exercise.exercise_id, []
    for where, text in failure_texts(exercise):
        problems += [f"{eid} {where}: {found}" for found in code_in(eid, text)]
    for n, text in enumerate(exercise.hints[:-1], 1):
        problems += [f"{eid} hint {n}: {found}" for found in code_in(eid, text)]
    for n, (before, after) in enumerate(zip(exercise.hints, exercise.hints[1:]), 1):
        if after.strip() in before or len(_words(after) - _words(before)) < NEW_WORDS:
            problems.append(f"{eid} hint {n + 1} says no more than hint {n}")
    return problems


def _module(exercise_id: str) -> str:
    for module in CHECK_MODULES:
        if any(e.exercise_id == exercise_id for e in module.EXERCISES):
            return module.__name__.rsplit(".", 1)[-1]
    return "?"


@pytest.mark.parametrize("exercise_id", sorted(exercises()))
def test_feedback_names_the_mistake_and_only_the_last_hint_shows_code(exercise_id: str) -> None:
    problems = ladder_problems(exercises()[exercise_id])
    assert not problems, "\n".join(problems)


def test_every_solution_gives_expressions_to_look_for() -> None:
    """The solution side of the scan is not empty: most exercises have code that a message could copy."""
    assert len(SOLUTION_EXPRESSIONS) >= 0.8 * len(exercises()), sorted(SOLUTION_EXPRESSIONS)


def problem_counts() -> Counter[str]:
    """Problems per check module (for a report: ``python -m pytest`` shows them one exercise at a time)."""
    counts: Counter[str] = Counter()
    for exercise_id, exercise in exercises().items():
        counts[_module(exercise_id)] += len(ladder_problems(exercise))
    return counts


# -- the scanner on planted texts -----------------------------------------------------------------------

CODE = [
    "keep the NaN out: torch.where(mask.any(dim=-1, keepdim=True), weights, 0.0).",
    "use tril(diagonal=S - T).",
    "fill with float('-inf') first",
    "call `softmax_rows(x)` to see it",
    "load with other=float('-inf'), then take tl.max(x, axis=0)",
    "the scores are q @ k.transpose(-2, -1)",
    "hide them with ~mask",
    "lengths.sort(descending=True).values.split(batch_size)",
    "take x[..., ::2] and x[:, None]",
    "ceil division is -(-a // b)",
    "real_count = sum of squares",
    "for batch in lengths.split(batch_size): add it up",
    "check x.shape first",
    "call masked_fill(mask, value)",
    "a lambda x: x + 1 would do",
]

PROSE = [
    "the mask is aligned top-left (query t sees keys 0 .. t); query t sits at position S - T + t.",
    "softmax(QKᵀ/√D) over the keys: each row sums to 1, and e^0 = 1 still gives weight.",
    "a finite fill (-1e9, -1e4, the smallest float) leaks: use -inf, then zero the rows with no visible key.",
    "True means may attend; the row's largest score is subtracted first (the shift cancels, e.g. in the ratio).",
    "for each key in the window, s ≤ S - T + t; the interval [0, 1] and the sum Σ ℓ² over ℓ in 1 .. L.",
    "exp overflows past about 88 in float32, so inf / inf = NaN; see hint('04.3', 2) for the next step.",
    "out_t = φ(q_t)ᵀ S_t / φ(q_t)ᵀ z_t with z_t = z_(t-1) + φ(k_t); the entry p_i(δ_ij - p_j) and e_ij = q_i · k_j.",
    "the weights W_q, W_k and W_v (C, D) and the product x W_q; f(x) = max(0, x) and max(S - T, 0).",
]


@pytest.mark.parametrize("text", CODE)
def test_code_in_a_sentence_is_found(text: str) -> None:
    assert code_like(text), text


@pytest.mark.parametrize("text", PROSE)
def test_plain_words_and_maths_are_not_code(text: str) -> None:
    assert code_like(text) == [], code_like(text)


def test_a_solution_line_renamed_in_a_message_is_found() -> None:
    body = (
        "    weights = torch.softmax(scores.masked_fill(~mask, float('-inf')), dim=-1)\n    return weights\n"
    )
    SOLUTION_EXPRESSIONS["99.1"] = [_expression(line) for line in content_lines(body)]
    try:
        said = (
            "the fix: torch.softmax(s.masked_fill(~m, float(\"-inf\")), dim=-1), as the lesson's row's says"
        )
        assert solution_code("99.1", said), _normalised(said)
        assert solution_code("99.1", "fill the hidden scores with -inf before the softmax") == []
    finally:
        del SOLUTION_EXPRESSIONS["99.1"]
