"""A concept question is graded on its first answer: kept beside the notebook, shown in the check's output, read
back by the grading command (``tests/test_grade_command.py`` grades a notebook whose record holds a wrong first
answer)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attn_edu.grading import notebook
from attn_edu.grading.answers import RECORD_MIME, keep_first, record, recorded_first_answers
from attn_edu.grading.command import read_first_answers
from attn_edu.grading.protocol import encode_answer


@pytest.fixture
def in_a_notebook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """check() as a Jupyter kernel runs it, keeping first answers in a file of the test's own."""
    path = tmp_path / "answers.json"
    monkeypatch.setattr(notebook, "in_notebook", lambda: True)
    monkeypatch.setenv("ATTN_EDU_ANSWERS", str(path))
    monkeypatch.delenv("ATTN_EDU_STRICT", raising=False)
    return path


def test_the_first_answer_is_kept_and_named_when_a_later_one_differs(in_a_notebook: Path) -> None:
    wrong = notebook.check("04.q1", 21)  # causal_mask(3, 7) holds 18 True entries
    assert not wrong.passed and wrong.record == record("04.q1", encode_answer(21))
    right = notebook.check("04.q1", 18)
    assert right.passed  # the feedback is on the answer checked now...
    assert (
        "Your first answer, 21.0, is the one graded (not right)" in right.message
    )  # ...the grade on the first
    assert right.record == record("04.q1", encode_answer(21))
    assert right._repr_mimebundle_()[RECORD_MIME] == right.record
    assert json.loads(in_a_notebook.read_text()) == {"04.q1": encode_answer(21)}


def test_predictions_unanswered_questions_and_plain_python_keep_nothing(
    in_a_notebook: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert notebook.check("04.p1", "a").record is None  # a prediction earns no points
    assert notebook.check("04.q2", ...).record is None  # the placeholder is not an answer
    monkeypatch.setattr(notebook, "in_notebook", lambda: False)
    assert notebook.check("04.q1", 18).record is None  # a script or a test: nothing kept
    assert not in_a_notebook.exists()
    assert RECORD_MIME not in notebook.check("04.q1", 18)._repr_mimebundle_()


def test_an_unreadable_answers_file_starts_over_and_a_read_only_one_still_answers(tmp_path: Path) -> None:
    path = tmp_path / "answers.json"
    path.write_text("{ not json")
    assert keep_first("04.q1", "b", path) == "b" and json.loads(path.read_text()) == {"04.q1": "b"}
    folder = (
        tmp_path / "nowhere" / "answers.json"
    )  # a folder that does not exist: not written, still answered
    assert keep_first("04.q1", "c", folder) == "c" and not folder.exists()


def test_the_grader_reads_the_first_record_of_each_question_and_skips_malformed_ones(tmp_path: Path) -> None:
    def output(data: dict) -> dict:
        return {"output_type": "display_data", "metadata": {}, "data": data}

    cells = [
        {"cell_type": "markdown", "source": "x"},
        {"cell_type": "code", "outputs": [output({RECORD_MIME: record("04.q1", encode_answer("a"))})]},
        {"cell_type": "code", "outputs": [output({RECORD_MIME: record("04.q1", encode_answer("b"))})]},
        {"cell_type": "code", "outputs": [output({RECORD_MIME: {"id": "04.q2", "first": {"kind": "oops"}}})]},
        {"cell_type": "code", "outputs": [output({"text/plain": "04.q3"}), {"output_type": "stream"}]},
    ]
    assert recorded_first_answers({"cells": cells}) == {
        "04.q1": encode_answer("a"),
        "04.q2": {"kind": "oops"},
    }
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({"cells": cells}))
    firsts = read_first_answers(path)
    assert list(firsts) == ["04.q1"] and firsts["04.q1"].detail == "a"  # the malformed record counts as none
    path.write_text("{ not a notebook")
    assert read_first_answers(path) == {}
