"""The grader's report as Gradescope's ``results.json``: ``python -m attn_edu.grade PATH --format gradescope``.

Gradescope runs an instructor's ``run_autograder`` script on every submission and shows learners what the
script writes to ``/autograder/results/results.json`` (the format: Gradescope's "Autograder Specifications",
"Output format"). Here every exercise and concept question becomes one test::

    {"name": "Exercise 04.1: ...", "number": "04.1", "score": 1, "max_score": 1, "status": "passed",
     "output": "✔ Exercise 04.1 passed: matches the reference on 5 random cases\n(notebook ...)",
     "visibility": "visible", ...}

with the line the check shows in the notebook (its message and hint) as its output, the notebook's number
as a tag, and the total as the top-level ``score``. A submission the grader could not place (no notebook number) or read becomes a
failed test worth nothing that says why; if the grader itself fails, ``score`` is 0 and ``output`` says so,
so that Gradescope always has a file to show. The README's "Gradescope" section has the ``setup.sh`` and
``run_autograder`` an instructor uploads.
"""

from __future__ import annotations

from typing import Any

from attn_edu.grading.result import CheckResult, Status

# When learners see a test: Gradescope's four settings ("Controlling Test Case Visibility").
VISIBILITY = ("visible", "after_due_date", "after_published", "hidden")


def _output(result: dict[str, Any], report: dict[str, Any]) -> str:
    """The line a check shows in the notebook (its message and hint), and the notebook it came from."""
    line = CheckResult(result["id"], Status(result["status"]), result["message"], result.get("hint", ""))
    return f"{line!r}\n(notebook {report['path']})"


def _test(result: dict[str, Any], report: dict[str, Any], visibility: str) -> dict[str, Any]:
    noun = "Question" if ".q" in result["id"] else "Exercise"
    return {
        "name": f"{noun} {result['id']}: {result['title']}",
        "number": result["id"],
        "score": result["points"],
        "max_score": result["max_points"],
        "status": "passed" if result["status"] == Status.PASS.value else "failed",
        "output": _output(result, report),
        "output_format": "text",
        "tags": [f"notebook {report['notebook']}"],
        "visibility": visibility,
        # for the instructor (Gradescope shows learners the output, not extra_data): a copied function's flag
        "extra_data": {"status": result["status"], "learner": report["learner"]}
        | ({"flag": result["flag"]} if result.get("flag") else {}),
    }


def results(document: dict[str, Any], *, visibility: str = "visible") -> dict[str, Any]:
    """Gradescope's ``results.json`` (a dict) from the document :func:`attn_edu.grading.command.main` writes.

    Example:
        >>> report = {"learner": "ada", "path": "04_masks.ipynb", "notebook": "04", "seconds": 2.5,
        ...           "error": None, "exercises": [{"id": "04.1", "title": "a causal mask", "status": "PASS",
        ...           "points": 1, "max_points": 1, "message": "matches the reference", "hint": ""}]}
        >>> out = results({"grader": {}, "submissions": [report], "error": None})
        >>> out["score"], out["tests"][0]["name"], out["tests"][0]["status"]
        (1, 'Exercise 04.1: a causal mask', 'passed')
    """
    if visibility not in VISIBILITY:
        raise ValueError(f"visibility: expected one of {', '.join(VISIBILITY)}, got {visibility!r}")
    tests: list[dict[str, Any]] = []
    for report in document["submissions"]:
        if report.get("error"):
            tests.append(
                {
                    "name": f"Notebook {report['path']}",
                    "score": 0,
                    "max_score": 0,
                    "status": "failed",
                    "output": report["error"],
                    "output_format": "text",
                    "visibility": visibility,
                }
            )
        tests += [_test(result, report, visibility) for result in report["exercises"]]
    score = round(sum(t["score"] for t in tests), 2)
    max_score = sum(t["max_score"] for t in tests)
    if document.get("error"):
        summary = f"The grader could not grade this submission: {document['error']}"
    else:
        notebooks = len(document["submissions"])
        summary = f"{score}/{max_score} points from {notebooks} notebook{'s' if notebooks != 1 else ''}."
    return {
        "score": score,
        "execution_time": round(sum(r.get("seconds") or 0 for r in document["submissions"])),
        "output": summary,
        "output_format": "text",
        "stdout_visibility": "hidden",  # the grader's table names file paths; learners see the tests
        "tests": tests,
        "extra_data": {"grader": document.get("grader", {}), "max_score": max_score},
    }
