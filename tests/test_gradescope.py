"""``python -m attn_edu.grade --format gradescope`` writes a ``results.json`` that follows Gradescope's format.

:data:`SCHEMA` is Gradescope's "Autograder Specifications", section "Output format", written out as a JSON
Schema: the top-level keys and each test's keys with their types, the four visibility settings, the two
test statuses and the output formats; no other key. Every file the grader writes is checked against it with
``jsonschema``: one made from every kind of result, and one from the README's own ``run_autograder`` script
run on a solution notebook in a stand-in for Gradescope's ``/autograder`` folder. (``tests/test_grade_command.py``
checks the results of its misbehaving submissions against it too.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from attn_edu.grading import gradescope
from attn_edu.grading.registry import exercises, questions

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "03_scaling_variance.ipynb"

VISIBILITY = {"enum": ["hidden", "after_due_date", "after_published", "visible"]}
FORMAT = {"enum": ["text", "html", "simple_format", "md", "ansi"]}
SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Gradescope autograder results.json",
    "type": "object",
    "properties": {
        "score": {"type": "number"},
        "execution_time": {"type": "number", "minimum": 0},
        "output": {"type": "string"},
        "output_format": FORMAT,
        "test_output_format": FORMAT,
        "test_name_format": FORMAT,
        "visibility": VISIBILITY,
        "stdout_visibility": VISIBILITY,
        "extra_data": {"type": "object"},
        "tests": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "score": {"type": "number"},
                    "max_score": {"type": "number"},
                    "status": {"enum": ["passed", "failed"]},
                    "name": {"type": "string"},
                    "name_format": FORMAT,
                    "number": {"type": "string"},
                    "output": {"type": "string"},
                    "output_format": FORMAT,
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "visibility": VISIBILITY,
                    "extra_data": {"type": "object"},
                },
                "additionalProperties": False,
            },
        },
        "leaderboard": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "value": {"type": ["number", "string"]},
                    "order": {"enum": ["asc", "desc"]},
                },
                "required": ["name", "value"],
            },
        },
    },
    # "score" is optional if every test has one, "tests" optional if there is a top-level score.
    "anyOf": [{"required": ["score"]}, {"required": ["tests"]}],
    "additionalProperties": False,
}


def validate(results: dict) -> None:
    """Raise unless ``results`` follows Gradescope's format, and its tests' scores add up to ``score``."""
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    jsonschema.validate(results, SCHEMA)
    if "score" not in results:
        assert all("score" in t for t in results["tests"]), "no top-level score and a test without one"
    else:
        assert results["score"] == sum(t.get("score", 0) for t in results["tests"])
    for test in results["tests"]:
        assert 0 <= test["score"] <= test["max_score"], test
        assert (test["status"] == "passed") == (test["score"] == test["max_score"] > 0), test


def _result(exercise_id: str, status: str, points: int) -> dict:
    return {
        "id": exercise_id,
        "title": f"the task of {exercise_id}",
        "status": status,
        "points": points,
        "max_points": 1,
        "message": f"{status.lower()} on 5 cases",
        "hint": "" if status == "PASS" else "softmax over the wrong dim?",
    }


def _report(learner: str, results: list[dict], error: str | None = None) -> dict:
    return {
        "learner": learner,
        "path": f"{learner}.ipynb",
        "notebook": "02",
        "exercises": results,
        "error": error,
    }


def test_every_kind_of_result_follows_the_format() -> None:
    statuses = ["PASS", "FAIL", "ERROR", "TIMEOUT", "NOT_ATTEMPTED"]
    results = [_result(f"02.{i}", s, int(s == "PASS")) for i, s in enumerate(statuses, 1)]
    document = {
        "grader": {"version": "0.1.0"},
        "error": None,
        "submissions": [
            _report("ada", results + [_result("02.q1", "PASS", 1)]),
            _report("bob", [], error="cannot tell which exercises bob.ipynb holds (use --notebook NN)"),
        ],
    }
    for visibility in gradescope.VISIBILITY:
        out = gradescope.results(document, visibility=visibility)
        validate(out)
        assert {t["visibility"] for t in out["tests"]} == {visibility}
    assert out["score"] == 2 and out["extra_data"]["max_score"] == 6
    by_number = {t.get("number"): t for t in out["tests"]}
    assert by_number["02.1"]["status"] == "passed" and by_number["02.2"]["status"] == "failed"
    assert "Hint: softmax over the wrong dim?" in by_number["02.2"]["output"]
    assert by_number["02.q1"]["name"] == "Question 02.q1: the task of 02.q1"
    unreadable = by_number[None]
    assert unreadable["score"] == unreadable["max_score"] == 0 and "use --notebook" in unreadable["output"]
    with pytest.raises(ValueError, match="visibility"):
        gradescope.results(document, visibility="later")


def test_a_grader_failure_still_gives_a_results_file() -> None:
    out = gradescope.results({"grader": {}, "submissions": [], "error": "FileNotFoundError: no notebook"})
    validate(out)
    assert out["score"] == 0 and out["tests"] == [] and "no notebook" in out["output"]


def _readme_script(name: str) -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.S)
    (script,) = [b for b in blocks if f"# {name}:" in b]
    return script


def test_the_readmes_run_autograder_writes_valid_results(tmp_path: Path) -> None:
    """The README's script as Gradescope runs it, with /autograder and its Python pointed at stand-ins."""
    autograder = tmp_path / "autograder"
    (autograder / "submission").mkdir(parents=True)
    (autograder / "results").mkdir()
    # A learner's exercise notebook with every answer right, renamed: its metadata says which notebook it is.
    answered = json.loads(SOLUTION.read_text(encoding="utf-8"))
    answered["metadata"] = json.loads(
        (ROOT / "exercises" / f"{SOLUTION.stem}_exercises.ipynb").read_text(encoding="utf-8")
    )["metadata"]
    (autograder / "submission" / "my_answers.ipynb").write_text(json.dumps(answered), encoding="utf-8")
    metadata = {
        "users": [{"email": "ada@example.edu", "id": 1, "name": "Ada"}],
        "id": 7,
    }  # Gradescope's, abridged
    (autograder / "submission_metadata.json").write_text(json.dumps(metadata), encoding="utf-8")
    script = _readme_script("run_autograder")
    assert "/opt/attn-edu/bin/python" in script and "/autograder/submission" in script
    script = script.replace("/opt/attn-edu/bin/python", sys.executable).replace(
        "/autograder", str(autograder)
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    results = json.loads((autograder / "results" / "results.json").read_text(encoding="utf-8"))
    validate(results)
    graded = sorted(i for i in [*exercises(), *questions()] if i.startswith("03."))
    assert sorted(t["number"] for t in results["tests"]) == graded
    assert all(t["status"] == "passed" for t in results["tests"]), results["tests"]
    weights = {**exercises(), **questions()}
    assert results["score"] == results["extra_data"]["max_score"] == sum(weights[i].points for i in graded)
    assert {t["extra_data"]["learner"] for t in results["tests"]} == {"ada@example.edu"}
    assert results["extra_data"]["grader"]["inputs"] == "per learner, from the secret"
