"""nbgrader itself, end to end, on the release ``python -m attn_edu.grading.nbgrader`` writes for one notebook.

In a temporary course folder: ``nbgrader generate_assignment`` makes the student version, three students
hand in (the solution notebook, the student version untouched, and the solution with one exercise's answer
made wrong), ``nbgrader autograde`` grades them in real kernels, and ``nbgrader generate_feedback`` writes
their feedback. nbgrader's own gradebook then says: full points for the solution, zero for the untouched
student version, and for the planted mistake exactly that exercise's points lost. The release is made with a
secret: each test cell also checks the learner's own inputs in a hidden test, so the same third student, whose
03.1 answers only the notebook's own inputs (a table made with the answer key), loses that exercise's points too. The notebook is 03
(four exercises and two questions: the quickest to run). Needs nbgrader (``pip install -e ".[nbgrader]"``,
which ``make test`` installs); skipped without it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from helpers import once_per_run

from attn_edu.grading import nbgrader as release
from attn_edu.grading.registry import exercises, questions

pytest.importorskip("nbgrader", reason='nbgrader is not installed: pip install -e ".[nbgrader]"')
from nbgrader.api import Gradebook  # noqa: E402

# nbgrader generates, autogrades and writes feedback in real kernels: about 20 s.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENT = "03_scaling_variance"
# Exercise 03.3 with the classic slip: 0 · log 0 computed as 0 · -inf = NaN.
PLANTED_ID = "03.3"
RIGHT_LINE = "logs = torch.where(weights > 0, weights.log(), 0.0)"
WRONG_LINE = "logs = weights.log()"
STUDENTS = ("solution", "untouched", "planted")  # planted: both 03.3's slip and 03.1's lookup
SECRET = "nbgrader-test"
LOOKUP_ID = (
    "03.1"  # answered by a table of the notebook's own inputs: right there, wrong on the learner's own
)
LOOKUP = (
    "from attn_edu.grading.exercise import make_cases\n"
    "from attn_edu.grading.registry import get_exercise\n"
    "_key = get_exercise('03.1')\n"
    "_table = [(c.args, _key.reference(*c.args)) for c in make_cases(_key, 0)]\n\n\n"
    "def {name}(*args):\n"
    "    same = lambda a, b: a.equal(b) if hasattr(a, 'equal') else a == b\n"
    "    return next(out for given, out in _table if all(same(a, b) for a, b in zip(given, args)))\n"
)


def _nbgrader(course: Path, *args: str) -> None:
    # nbgrader runs `alembic` (its database migrations) from PATH: this interpreter's bin/ first.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "PATH": path, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env.pop("ATTN_EDU_STRICT", None)  # the test cells ask for strict checks themselves
    done = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args, "--log-level=WARN"],
        cwd=course,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"


def _hand_in(course: Path, student: str, nb: nbformat.NotebookNode) -> None:
    folder = course / "submitted" / student / ASSIGNMENT
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / f"{ASSIGNMENT}.ipynb")


def _planted(source: nbformat.NotebookNode) -> nbformat.NotebookNode:
    nb = nbformat.from_dict(json.loads(json.dumps(source)))
    cells = [c for c in nb.cells if c.source.startswith(f"# Exercise {PLANTED_ID}:")]
    assert len(cells) == 1 and RIGHT_LINE in cells[0].source, "the planted line is not in the solution"
    cells[0].source = cells[0].source.replace(RIGHT_LINE, WRONG_LINE)
    return nb


def _lookup(source: nbformat.NotebookNode) -> nbformat.NotebookNode:
    nb = nbformat.from_dict(json.loads(json.dumps(source)))
    (cell,) = [c for c in nb.cells if c.source.startswith(f"# Exercise {LOOKUP_ID}:")]
    name = exercises()[LOOKUP_ID].function_name
    cell.source = cell.source.split("\n", 1)[0] + "\n" + LOOKUP.format(name=name)
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Every student's scores per test cell, nbgrader run once for the whole run (pytest-xdist workers share
    them), and the student version."""
    done = once_per_run(tmp_path_factory, "nbgrader-release", lambda: _run_nbgrader(tmp_path_factory))
    scores = {s: {name: tuple(pair) for name, pair in grades.items()} for s, grades in done["scores"].items()}
    version = nbformat.from_dict(done["student_version"])
    return {"course": Path(done["course"]), "scores": scores, "student_version": version}


def _run_nbgrader(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Run nbgrader on the course; every student's scores per test cell, as JSON."""
    started = time.monotonic()
    course = tmp_path_factory.mktemp("nbgrader_course")
    (source_path,) = release.write_course(ROOT / "solutions", course, [ASSIGNMENT[:2]], secret=SECRET)
    _nbgrader(course, "generate_assignment", ASSIGNMENT)
    source = nbformat.read(source_path, as_version=4)
    student_version = nbformat.read(course / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    _hand_in(course, "solution", source)
    _hand_in(course, "untouched", student_version)
    _hand_in(course, "planted", _lookup(_planted(source)))
    _nbgrader(course, "autograde", ASSIGNMENT)
    _nbgrader(course, "generate_feedback", ASSIGNMENT)
    scores = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for student in STUDENTS:
            notebook = gradebook.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, student)
            scores[student] = {g.name: (g.score, g.max_score) for g in notebook.grades}
    seconds = time.monotonic() - started
    print(f"\nnbgrader end to end on {ASSIGNMENT}: {seconds:.1f} s; scores {json.dumps(scores)}")
    return {"course": str(course), "scores": scores, "student_version": student_version}


def _expected_ids() -> list[str]:
    ids = [i for i in [*exercises(), *questions()] if i.startswith(ASSIGNMENT[:2] + ".")]
    return sorted("check-" + i.replace(".", "-") for i in ids)


def test_every_exercise_and_question_is_a_test_cell(graded: dict) -> None:
    for student, grades in graded["scores"].items():
        assert sorted(grades) == _expected_ids(), student


def test_the_solution_scores_full_points(graded: dict) -> None:
    grades = graded["scores"]["solution"]
    assert all(score == top > 0 for score, top in grades.values()), grades


def test_the_untouched_student_version_scores_zero(graded: dict) -> None:
    grades = graded["scores"]["untouched"]
    assert all(score == 0 for score, _ in grades.values()), grades
    code = "\n".join(c.source for c in graded["student_version"].cells)
    assert WRONG_LINE not in code and RIGHT_LINE not in code and "BEGIN SOLUTION" not in code


_LOST = ("check-" + PLANTED_ID.replace(".", "-"), "check-" + LOOKUP_ID.replace(".", "-"))


def test_a_planted_mistake_loses_exactly_that_exercises_points(graded: dict) -> None:
    planted, solution = graded["scores"]["planted"], graded["scores"]["solution"]
    wrong = _LOST[0]
    assert planted[wrong] == (0, solution[wrong][1])
    assert {k: v for k, v in planted.items() if k not in _LOST} == {
        k: v for k, v in solution.items() if k not in _LOST
    }
    total = sum(score for score, _ in planted.values())
    lost = exercises()[PLANTED_ID].points + exercises()[LOOKUP_ID].points
    assert total == sum(score for score, _ in solution.values()) - lost


def test_feedback_names_the_mistake(graded: dict) -> None:
    page = graded["course"] / "feedback" / "planted" / ASSIGNMENT / f"{ASSIGNMENT}.html"
    text = page.read_text(encoding="utf-8")
    assert f"Exercise {PLANTED_ID} failed" in text
    solution_page = graded["course"] / "feedback" / "solution" / ASSIGNMENT / f"{ASSIGNMENT}.html"
    assert f"Exercise {PLANTED_ID} passed" in solution_page.read_text(encoding="utf-8")


def test_the_hidden_tests_and_the_secret_stay_out_of_the_student_version(graded: dict) -> None:
    code = "\n".join(c.source for c in graded["student_version"].cells)
    assert "check_hidden" not in code and SECRET not in code and "HIDDEN TESTS" not in code


def test_answers_made_for_the_notebooks_own_inputs_lose_their_points(graded: dict) -> None:
    lookup, solution = graded["scores"]["planted"], graded["scores"]["solution"]
    faked = _LOST[1]
    assert lookup[faked] == (0, solution[faked][1]), lookup  # right on seed 0, wrong on the learner's inputs
