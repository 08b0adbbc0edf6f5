"""Concept questions (`attn_edu.grading.exercise.Question`): every registered question is well formed, its answer
passes with the explanation, each wrong answer fails with its own message and never with the answer, answers in
every spelling a learner types are read, the solution and exercise notebooks hold each question, and the grading
command grades the answers in a separate process (hostile answers included)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from attn_edu.grading import Status, check, command, hint, protocol
from attn_edu.grading.exercise import LETTERS, Question, badge
from attn_edu.grading.judge import judge_answer
from attn_edu.grading.registry import exercises, get_question, predictions, questions

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = questions()
# The per-question tests also cover the course notebooks' predictions ("04.p1"), which check() judges alike.
ASKED = {**QUESTIONS, **predictions()}
IDS = sorted(ASKED)
WRONG = [(qid, i) for qid in IDS for i in range(len(ASKED[qid].wrong))]


def _solution(question_id: str) -> Path:
    return next((ROOT / "solutions").glob(f"{question_id[:2]}_*.ipynb"))


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _right(question: Question) -> str | float:
    return question.answer


def _wrong_answers(question: Question) -> list[str | float]:
    """Every wrong choice, or for a number the known slips and two values just outside the tolerance."""
    if question.choices:
        return [letter for letter in LETTERS[: len(question.choices)] if letter != question.answer]
    step = max(question.tolerance, abs(float(question.answer)) * 1e-3, 1e-3) * 2
    return [value for value, _ in question.wrong] + [
        float(question.answer) + step,
        float(question.answer) - step,
    ]


# ---------------------------------------------------------------------------------------------------------
# Every registered question


@pytest.mark.parametrize("question_id", IDS)
def test_question_is_well_formed(question_id: str) -> None:
    question = ASKED[question_id]
    assert re.fullmatch(r"\d\d\.[qp]\d+", question_id), "ids look like 03.q1 (a prediction: 03.p1)"
    assert question.explanation.strip() and question.title.strip()
    assert question.hints, "each question has at least one hint"
    assert question.difficulty in (1, 2, 3) and 1 <= question.minutes <= 30
    if question.choices:
        letters = LETTERS[: len(question.choices)]
        assert len(question.choices) >= 3, "a choice question offers at least three options"
        assert question.answer in letters
        assert {w for w, _ in question.wrong} <= set(letters) - {question.answer}
        assert len(set(question.choices)) == len(question.choices)
    else:
        assert isinstance(question.answer, (int, float)) and math.isfinite(question.answer)
        for value, _ in question.wrong:
            assert abs(value - question.answer) > question.tolerance, "a known slip must not pass"
    if question.choices:  # a hint or a wrong choice's message never names the right letter
        for text in question.hints + tuple(message for _, message in question.wrong):
            assert f"({question.answer})" not in text, f"gives the answer away: {text}"


@pytest.mark.parametrize("question_id", IDS)
def test_the_answer_passes_with_its_explanation(question_id: str) -> None:
    question = ASKED[question_id]
    result = check(question_id, _right(question))
    assert result.status is Status.PASS and result.points == question.points, result
    assert question.explanation in result.message
    assert check(question_id, ...).status is Status.NOT_ATTEMPTED
    assert hint(question_id).text.startswith("1/")


@pytest.mark.parametrize("question_id", IDS)
def test_every_wrong_answer_fails_without_the_explanation(question_id: str) -> None:
    question = ASKED[question_id]
    for answer in _wrong_answers(question):
        result = check(question_id, answer)
        assert result.status is Status.FAIL and result.points == 0, (answer, result)
        assert question.explanation not in result.message + result.hint
        assert result.hint, "a wrong answer gets a hint"


@pytest.mark.parametrize(("question_id", "index"), WRONG)
def test_each_known_slip_gets_its_message(question_id: str, index: int) -> None:
    question = ASKED[question_id]
    value, message = question.wrong[index]
    assert check(question_id, value).hint == message


def test_every_solution_and_exercise_notebook_holds_its_questions() -> None:
    for question_id, question in QUESTIONS.items():
        if question_id.startswith("00."):  # notebook 00's practice question: course/00 shows it
            continue
        solution = _cells(_solution(question_id))
        exercise = _cells(ROOT / "exercises" / f"{_solution(question_id).stem}_exercises.ipynb")
        heading = f"## Question {question_id} · {badge(question)}"
        assert any(_source(c).startswith(heading) for c in solution if c["cell_type"] == "markdown"), heading
        text = "\n".join(_source(c) for c in solution if c["cell_type"] == "markdown")
        for letter, choice in zip(LETTERS, question.choices):
            assert f"**({letter})** {choice}" in text, (
                f"{question_id}: choice ({letter}) is not in the notebook"
            )
        code = [
            _source(c)
            for c in exercise
            if c["cell_type"] == "code" and f"# Question {question_id}:" in _source(c)
        ]
        assert len(code) == 1, f"{question_id}: expected one question cell in the exercise notebook"
        assert f"{question.variable_name} = ...  # your answer: {question.form()}" in code[0]
        assert f'check("{question_id}", {question.variable_name})' in code[0]


# ---------------------------------------------------------------------------------------------------------
# Reading answers


QUESTION = get_question("03.q2")  # a choice question, answer "b"
NUMBER = get_question("03.q1")  # a number question, answer 256


@pytest.mark.parametrize("typed", ["b", "B", " b ", "(b)", "b.", "(B)."])
def test_a_letter_is_read_however_it_is_typed(typed: str) -> None:
    assert check("03.q2", typed).passed


@pytest.mark.parametrize(
    ("answer", "words"),
    [("e", "expected"), ("bc", "expected"), ("", "expected"), (2, "got the number 2"), (None, "NoneType")],
)
def test_a_choice_question_refuses_what_is_not_one_of_its_letters(answer: object, words: str) -> None:
    result = check("03.q2", answer)
    assert result.status is Status.FAIL and words in result.message, result
    assert '"a", "b", "c" or "d"' in result.message


@pytest.mark.parametrize(
    "typed", [256, 256.0, torch.tensor(256), torch.tensor([256.0]), np.float32(256), np.int64(256)]
)
def test_a_number_is_read_from_python_torch_and_numpy(typed: object) -> None:
    assert check("03.q1", typed).passed


@pytest.mark.parametrize(
    ("answer", "words"),
    [("256 keys", "a number, got the text '256 keys'"), (True, "bool"), (torch.ones(2), "shape (2,)"),
     (float("nan"), "finite"), ("nan", "finite")],
)  # fmt: skip
def test_a_number_question_refuses_what_is_not_one_number(answer: object, words: str) -> None:
    result = check("03.q1", answer)
    assert result.status is Status.FAIL and words in result.message, result


NUMBER_IDS = [qid for qid in IDS if not ASKED[qid].choices]


def _as_text(value: float) -> list[str]:
    """The ways a learner types a number inside quotes: exactly, padded with spaces, as an int when whole."""
    typed = [repr(float(value)), f"  {float(value)!r} "]
    return typed + ([str(int(value)), f" {int(value)}"] if float(value).is_integer() else [])


@pytest.mark.parametrize("question_id", NUMBER_IDS)
def test_a_number_typed_as_text_is_judged_as_that_number(question_id: str) -> None:
    # Peer agreement: "18" gets what 18 gets (the pass and its explanation, or the fail and its hint).
    question = ASKED[question_id]
    for value in [float(question.answer), *_wrong_answers(question)]:
        as_number = check(question_id, value)
        for typed in _as_text(float(value)):
            as_text = check(question_id, typed)
            assert (as_text.status, as_text.message, as_text.hint) == (
                as_number.status,
                as_number.message,
                as_number.hint,
            ), (typed, as_text, as_number)


@pytest.mark.parametrize("question_id", NUMBER_IDS)
@pytest.mark.parametrize("typed", ["eighteen", "", "1/8", "18 keys", "(b)"])
def test_text_that_is_no_number_is_refused_naming_the_variable(question_id: str, typed: str) -> None:
    question = ASKED[question_id]
    result = check(question_id, typed)
    assert result.status is Status.FAIL and result.points == 0, result
    for words in (question.variable_name, question.form(), repr(typed)):
        assert words in result.message, (words, result.message)


def test_strict_mode_raises_for_a_wrong_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTN_EDU_STRICT", "1")
    assert check("03.q1", 256).passed
    with pytest.raises(AssertionError, match="03.q1"):
        check("03.q1", 16)


def test_a_question_shows_as_a_question() -> None:
    result = check("03.q2", "b")
    assert repr(result).startswith("✔ Question 03.q2 passed") and "Question 03.q2" in result._repr_html_()


@pytest.mark.parametrize(
    "raw",
    [
        {"kind": "text"},
        {"kind": "text", "value": 3},
        {"kind": "number", "value": "256"},
        {"kind": "number", "value": True},
        {"kind": "number", "value": 1.0, "extra": 1},
        {"kind": "tensor", "value": 1.0},
        ["text", "b"],
    ],
)
def test_decode_answer_rejects_malformed_answers(raw: object) -> None:
    with pytest.raises(protocol.SchemaError):
        protocol.decode_answer(raw)


def test_judge_answer_works_on_what_comes_back_from_a_process() -> None:
    outcome = protocol.decode_answer(json.loads(json.dumps(protocol.encode_answer(np.float64(256)))))
    assert judge_answer(NUMBER, outcome).passed


# ---------------------------------------------------------------------------------------------------------
# The grading command


def _notebook_with(tmp_path: Path, name: str, sources: list[str]) -> Path:
    cells = [
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": s}
        for s in sources
    ]
    path = tmp_path / name
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def _graded(path: Path) -> dict[str, dict]:
    limits = command.Limits(
        exercise_timeout=2.0, cell_timeout=5.0, notebook_timeout=30.0, memory_mb=2048, sandbox="none"
    )
    report = command.grade_notebook(path, limits=limits, notebook="03")
    return {r["id"]: r for r in report["exercises"]}


def test_the_grader_grades_answers_in_the_solution_and_the_exercise_notebook() -> None:
    solution = _graded(ROOT / "solutions" / "03_scaling_variance.ipynb")
    assert {i: r["status"] for i, r in solution.items()} == {i: "PASS" for i in solution}
    assert {"03.q1", "03.q2"} <= set(solution) and set(exercises()) >= {i for i in solution if ".q" not in i}
    untouched = _graded(ROOT / "exercises" / "03_scaling_variance_exercises.ipynb")
    assert untouched["03.q1"]["status"] == "NOT_ATTEMPTED" and untouched["03.q2"]["status"] == "NOT_ATTEMPTED"


def test_the_grader_reads_wrong_renamed_missing_and_hostile_answers(tmp_path: Path) -> None:
    hostile = (
        "class Slow(float):\n"
        "    def __float__(self):\n"
        "        while True:\n"
        "            pass\n"
        "answer_q1 = Slow(256)"
    )
    graded = _graded(
        _notebook_with(
            tmp_path,
            "learner.ipynb",
            [hostile, 'from attn_edu.grading import check\nmine = "c"\ncheck("03.q2", mine)'],
        )
    )
    assert graded["03.q1"]["status"] == "TIMEOUT", graded["03.q1"]
    assert graded["03.q2"]["status"] == "FAIL" and graded["03.q2"]["hint"] == dict(QUESTION.wrong)["c"]
    graded = _graded(_notebook_with(tmp_path, "other.ipynb", ["answer_q1 = 16"]))
    assert graded["03.q1"]["status"] == "FAIL" and graded["03.q1"]["hint"] == dict(NUMBER.wrong)[16]
    assert graded["03.q2"]["status"] == "NOT_ATTEMPTED" and "answer_q2" in graded["03.q2"]["message"]


# ---------------------------------------------------------------------------------------------------------
# The track as a whole


def test_every_notebook_asks_a_number_and_a_choice_question() -> None:
    for number in [f"{n:02d}" for n in range(1, 14)]:
        asked = [q for i, q in QUESTIONS.items() if i.startswith(f"{number}.")]
        assert len(asked) >= 2, f"notebook {number} asks {len(asked)} concept questions"
        assert {q.kind for q in asked} == {"choice", "number"}, (
            f"notebook {number}: {[q.kind for q in asked]}"
        )


def test_every_exercise_heading_shows_its_difficulty_and_time() -> None:
    for exercise_id, exercise in exercises().items():
        if exercise_id.startswith("00."):  # the practice exercise lives in course/00
            continue
        headings = [
            _source(c).split("\n", 1)[0]
            for c in _cells(_solution(exercise_id))
            if c["cell_type"] == "markdown" and _source(c).startswith(f"## Exercise {exercise_id}:")
        ]
        assert len(headings) == 1, f"{exercise_id}: expected one heading, found {headings}"
        assert headings[0].endswith(f" · {badge(exercise)}"), f"{exercise_id}: {headings[0]}"


def test_every_notebook_has_a_build_and_a_measure_exercise() -> None:
    graded = {i: e for i, e in exercises().items() if not i.startswith("00.")}
    assert len(graded) >= 70, f"{len(graded)} graded exercises"
    for number in [f"{n:02d}" for n in range(1, 14)]:
        kinds = {e.kind for i, e in graded.items() if i.startswith(f"{number}.")}
        assert {"build", "measure"} <= kinds, f"notebook {number} has exercises of kinds {sorted(kinds)}"
    for exercise_id, exercise in graded.items():
        if exercise.kind == "measure":  # checked by what the answer must satisfy, not by a second formula
            assert any(p.holds is not None for p in exercise.properties), exercise_id
