"""Grade learner notebooks: ``python -m attn_edu.grade PATH... [--json FILE] [--csv FILE] [--format F]``.

PATH is a notebook or a folder of notebooks (one per learner: a learner's id is the first folder below the
one named, ``submissions/ada/04_masks_exercises.ipynb`` is ``ada``, else the file's name; ``--learner`` sets
it). For each notebook the grader

1. picks the exercises from the notebook number (``--notebook NN``, else the notebook's
   ``metadata.attn_edu.notebook`` written by :mod:`attn_edu.grading.generate`, else a ``NN_`` file name);
   a learner's second notebook of the same number is not graded (uploading a notebook twice does not
   count it twice);
2. chooses the inputs itself: from the instructor's secret and the learner's id (``--secret`` or
   ``$ATTN_EDU_GRADER_SECRET``, :func:`case_seed`), so they differ from the notebook's own ``check()`` inputs,
   from learner to learner, and cannot be computed without the secret;
3. runs the notebook's cells in a process of its own, in a sandbox (:mod:`attn_edu.grading.sandbox`: no
   network, no other files, no answer key) with a time limit per cell, per exercise and per notebook and a
   memory limit, its printing thrown away (:mod:`attn_edu.grading.launch`, :mod:`attn_edu.grading.worker`);
4. only then sends that process each exercise's inputs, one exercise at a time, and reads back only plain
   JSON numbers and shapes, checked against a strict schema (the reply to the request just sent, known
   keys and dtypes, sizes bounded by the expected output, finite floats or ``"nan"``/``"inf"``), and judges
   them against the reference with :func:`attn_edu.grading.judge.judge` in this process (the format and its
   schema: :mod:`attn_edu.grading.protocol`).

Why a plain Python process rather than a Jupyter kernel: the grader controls everything the learner's
code can reach before it runs (resource limits, file descriptors, stdin, working folder), no kernel
messages can flood the grader, and nothing but replies to its own requests comes back. Learner code
never runs in the grader's process, so monkeypatching ``torch.allclose``, returning an object whose
``__eq__`` is always true, or returning a tensor subclass changes nothing here: only exact
``torch.Tensor`` results are sent, as numbers. The report records the grader's version and a SHA-256 of
its checks (:func:`checks_digest`). Unix only (``resource``, ``fork``). The README's "Grading: what a grade
guarantees" is the threat model.

Prints a table per learner and always writes the JSON (``grades.json`` unless ``--json``), and for a
folder a CSV with one row per learner (``grades.csv`` unless ``--csv``). ``--format gradescope`` writes
the JSON as Gradescope's ``results.json`` instead (``results.json`` unless ``--json``; no CSV unless
``--csv``): one test per exercise (:mod:`attn_edu.grading.gradescope`). Exit code: 0 every exercise
passed, 1 some did not, 2 the grader itself failed.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import re
import signal
import sys
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

import attn_edu
from attn_edu.grading import gradescope, protocol, similarity
from attn_edu.grading.answers import recorded_first_answers
from attn_edu.grading.exercise import GRADER_SEED, Exercise, Question, case_seed, make_cases
from attn_edu.grading.judge import judge, judge_answer, reference_outputs, result_for
from attn_edu.grading.launch import Limits, no_replies, run_notebook
from attn_edu.grading.registry import exercises, questions
from attn_edu.grading.result import CheckResult, Status
from attn_edu.grading.run import one_thread

UNREADABLE = "the file is not a readable notebook (.ipynb JSON with a list of cells)"


# ---------------------------------------------------------------------------------------------------------
# Which notebooks, which exercises


def find_notebooks(paths: list[Path]) -> list[tuple[Path, str]]:
    """The notebooks named on the command line, folders expanded (sorted, checkpoints skipped), each with its
    learner's id: the first folder below the folder named (``submissions/ada/04_masks_exercises.ipynb``: ``ada``;
    nbgrader's ``submitted/ada/ps1/04_masks.ipynb``: ``ada``), else the file's name without ``.ipynb``."""
    found: list[tuple[Path, str]] = []
    for path in paths:
        if path.is_dir():
            for nb in sorted(p for p in path.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts):
                below = nb.relative_to(path).parts
                found.append((nb, below[0] if len(below) > 1 else nb.stem))
        elif path.is_file():
            found.append((path, path.stem))
        else:
            raise FileNotFoundError(f"PATH: no notebook or folder at {path}")
    return found


def one_per_notebook(
    found: list[tuple[Path, str]], forced: str | None = None
) -> tuple[list[tuple[Path, str]], list[dict[str, Any]]]:
    """Keep one file per learner and notebook number (the first, by path); the others become reports that
    say they were not graded, so that uploading a notebook twice does not count it twice."""
    kept: dict[tuple[str, str | None], Path] = {}
    graded: list[tuple[Path, str]] = []
    skipped: list[dict[str, Any]] = []
    for path, learner in found:
        key = (learner, notebook_number(path, forced))
        if key[1] is not None and key in kept:
            error = f"not graded: {kept[key].name} is this learner's notebook {key[1]} already"
            skipped.append(_empty_report(path, learner, key[1], error))
            continue
        kept[key] = path
        graded.append((path, learner))
    return graded, skipped


def _empty_report(path: Path, learner: str, number: str | None, error: str) -> dict[str, Any]:
    return {
        "learner": learner,
        "path": str(path),
        "notebook": number,
        "exercises": [],
        "points": 0,
        "max_points": 0,
        "passed": False,
        "seconds": 0.0,
        "process": None,
        "error": error,
    }


def checks_digest() -> str:
    """A SHA-256 of the grading code and the answer key (every ``.py`` under ``grading/``): two reports with
    the same digest were judged by the same checks."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def notebook_number(path: Path, forced: str | None = None) -> str | None:
    """``"02"`` for a notebook of exercises 02.*: from ``--notebook``, the metadata, or the file name."""
    if forced:
        return forced
    try:
        meta = json.loads(path.read_bytes()[: 50 * 2**20])["metadata"]["attn_edu"]["notebook"]
        if isinstance(meta, str) and re.fullmatch(r"\d\d", meta):
            return meta
    except Exception:  # noqa: BLE001 - an unreadable notebook is reported by the worker
        pass
    found = re.match(r"(\d\d)_", path.name)
    return found.group(1) if found else None


# ---------------------------------------------------------------------------------------------------------
# Running one notebook


def _process_failure(exercise: Exercise | Question, process: dict[str, Any], limits: Limits) -> CheckResult:
    if process["timed_out"]:
        message = f"the notebook did not finish within {limits.notebook_timeout:g} s, before this exercise was graded"
        return result_for(exercise, Status.TIMEOUT, message)
    code = process["exit_code"]
    if code is None:  # alive, but it answered what was not asked, or nothing readable
        message = "the notebook's process stopped answering the grader before this exercise was graded"
        return result_for(exercise, Status.ERROR, message, "the report's notes say what it sent instead.")
    how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
    message = f"the notebook's process ended before this exercise was graded ({how})"
    hint = "os._exit, sys.exit outside a function, a crash or running out of memory?"
    return result_for(exercise, Status.ERROR, message, hint)


def read_cells(path: Path) -> list[list[Any]] | None:
    """The notebook's code cells as ``[number, source]`` (numbered from 1 among all cells); ``None`` when the
    file is not a readable notebook."""
    try:
        notebook = json.loads(path.read_bytes()[: 50 * 2**20])
        return [
            [i, "".join(c["source"]) if isinstance(c["source"], list) else str(c["source"])]
            for i, c in enumerate(notebook["cells"], 1)
            if c.get("cell_type") == "code"
        ]
    except Exception:  # noqa: BLE001 - not JSON, no cells, ...: the report says so
        return None


def read_first_answers(path: Path) -> dict[str, protocol.Outcome]:
    """The first answer to each concept question recorded in the notebook's saved outputs
    (:mod:`attn_edu.grading.answers`), decoded; a malformed record counts as none."""
    try:
        notebook = json.loads(path.read_bytes()[: 50 * 2**20])
    except Exception:  # noqa: BLE001 - the cells' reading says what is wrong with the file
        return {}
    firsts = {}
    for question_id, raw in recorded_first_answers(notebook).items():
        try:
            firsts[question_id] = protocol.decode_answer(raw)
        except protocol.SchemaError:
            continue
    return firsts


def grade_notebook(
    path: Path,
    *,
    limits: Limits,
    seed: int = GRADER_SEED,
    notebook: str | None = None,
    learner: str | None = None,
    secret: str | None = None,
    hide: tuple[Path, ...] = (),
) -> dict:
    """Grade one learner notebook; returns the JSON-ready report (never raises for a bad submission).

    The steps, in order: pick the exercises and questions; choose the inputs (from ``secret`` and ``learner``,
    :func:`case_seed`) and run each reference once; run the notebook in its own process (in the sandbox,
    with ``hide`` and the notebook's folder out of its sight), sending it each exercise's inputs once its
    cells have run; judge what came back; total the points. ``learner`` defaults to the file's name.
    """
    started = time.monotonic()
    number = notebook_number(path, notebook)
    learner = learner or path.stem
    report: dict[str, Any] = {"learner": learner, "path": str(path), "notebook": number, "exercises": []}
    chosen, asked = _graded_in(number)
    if not chosen and not asked:
        return _empty_report(
            path, learner, number, f"cannot tell which exercises {path.name} holds (use --notebook NN)"
        )
    cases = {e.exercise_id: make_cases(e, case_seed(secret, learner, e.exercise_id, seed)) for e in chosen}
    # each reference runs once: its outputs size the worker's replies and then judge them
    expected = {e.exercise_id: reference_outputs(e, cases[e.exercise_id]) for e in chosen}
    cells = read_cells(path)
    firsts = read_first_answers(
        path
    )  # each question is scored on its first recorded answer, where there is one
    copied = similarity.flags(cells, chosen) if cells else {}  # for the instructor: a copy is not failed
    if cells is None:
        parsed = no_replies() | {"unreadable": True}
        process: dict[str, Any] = {"exit_code": None, "timed_out": False, "sandboxed": False}
    else:
        request = _request(chosen, asked, cases, expected)
        parsed, process = run_notebook(cells, request, limits, [path.resolve().parent, *hide])

    def judged(item: Exercise | Question) -> dict[str, Any]:
        if isinstance(item, Question) and item.exercise_id in firsts:
            first = judge_answer(item, firsts[item.exercise_id])
            note = "the first answer recorded in the notebook: "
            return {
                "title": item.title,
                **first.to_dict(),
                "message": note + first.message,
                "first_answer": True,
            }
        if isinstance(item, Question):
            answer = parsed["answers"].get(item.exercise_id)
            return _result(item, parsed, process, limits, answer, lambda: judge_answer(item, answer))
        outcomes = parsed["outcomes"].get(item.exercise_id)
        n = 0 if outcomes is None else len(outcomes)
        ran = cases[item.exercise_id][:n], outcomes, expected[item.exercise_id][:n]
        total, algorithm = len(cases[item.exercise_id]), parsed["algorithm"].get(item.exercise_id)
        judged_item = _result(
            item,
            parsed,
            process,
            limits,
            outcomes,
            lambda: judge(item, *ran, total=total, algorithm=algorithm),
        )
        return judged_item | ({"flag": copied[item.exercise_id]} if item.exercise_id in copied else {})

    results = [judged(item) for item in (*chosen, *asked)]
    process["notes"] = parsed["notes"]
    report.update(
        exercises=results,
        points=round(sum(r["points"] for r in results), 2),
        max_points=sum(r["max_points"] for r in results),
        passed=all(r["status"] == Status.PASS.value for r in results),
        seconds=round(time.monotonic() - started, 2),
        process=process,
        error=None,
    )
    return report


def _graded_in(number: str | None) -> tuple[list[Exercise], list[Question]]:
    """The exercises and concept questions of notebook ``number`` (none when it is unknown)."""
    if not number:
        return [], []
    ours = f"{number}."
    return (
        [e for i, e in exercises().items() if i.startswith(ours)],
        [q for i, q in questions().items() if i.startswith(ours)],
    )


def _request(
    chosen: list[Exercise], asked: list[Question], cases: dict[str, list], expected: dict[str, list]
) -> dict[str, Any]:
    """What the worker will be asked: each exercise's inputs (never its answers) and each question's name."""
    return {
        "exercises": [
            {
                "ask": "exercise",
                "id": e.exercise_id,
                "function": e.function_name,
                "cases": [
                    # room for a wrong shape to be reported as numbers, not for a memory bomb
                    protocol.encode_case(c.args, c.kwargs, 4 * out.numel() + 1024)
                    for c, out in zip(cases[e.exercise_id], expected[e.exercise_id], strict=True)
                ],
            }
            for e in chosen
        ],
        "questions": [{"id": q.exercise_id, "variable": q.variable_name} for q in asked],
    }


def _result(
    item: Exercise | Question,
    parsed: dict[str, Any],
    process: dict[str, Any],
    limits: Limits,
    reply: object,
    judge_reply: Callable[[], CheckResult],
) -> dict[str, Any]:
    """One exercise's or question's line of the report, from what the worker sent back for it."""
    if item.exercise_id in parsed["missing"]:
        if isinstance(item, Question):
            kind = "question"
            message = (
                f"no `{item.variable_name}` in the notebook and no check({item.exercise_id!r}, ...) call"
            )
        else:
            kind = "exercise"
            message = f"no function named `{item.function_name}` in the notebook (renamed or deleted?)"
        result = result_for(item, Status.NOT_ATTEMPTED, message, f"keep the name used in the {kind}.")
    elif parsed.get("unreadable"):
        result = result_for(item, Status.ERROR, UNREADABLE)
    elif reply is None:
        result = _process_failure(item, process, limits)
    else:
        result = judge_reply()
    return {"title": item.title, **result.to_dict()}


# ---------------------------------------------------------------------------------------------------------
# Reports


def format_table(report: dict[str, Any]) -> str:
    """A learner's results as a small text table."""
    head = f"{report['learner']}  ({report['path']})  {report['points']:g}/{report['max_points']} points"
    lines = [head + (f"  {report['seconds']:.1f} s" if report.get("seconds") else "")]
    if report.get("error"):
        lines.append(f"  error: {report['error']}")
    for r in report["exercises"]:
        text = r["message"] if len(r["message"]) <= 70 else r["message"][:67] + "..."
        lines.append(f"  {r['id']:<6} {r['status']:<14} {r['points']:g}/{r['max_points']}  {text}")
        if r.get("flag"):
            lines.append(f"         flagged: {r['flag']}")
    return "\n".join(lines)


def write_csv(reports: list[dict[str, Any]], path: Path) -> None:
    """One row per learner and notebook: the points, then each item's status, each item's points, and the
    flags for the instructor (a function identical to the solution's or the library's)."""
    ids = sorted({r["id"] for report in reports for r in report["exercises"]})
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        head = [
            "learner",
            "path",
            "points",
            "max_points",
            *ids,
            *(f"{i} points" for i in ids),
            "flags",
            "error",
        ]
        writer.writerow(head)
        for report in reports:
            status = {r["id"]: r["status"] for r in report["exercises"]}
            points = {r["id"]: r["points"] for r in report["exercises"]}
            row = [report["learner"], report["path"], report["points"], report["max_points"]]
            row += [status.get(i, "") for i in ids] + [points.get(i, "") for i in ids]
            flagged = "; ".join(f"{r['id']} {r['flag']}" for r in report["exercises"] if r.get("flag"))
            writer.writerow(row + [flagged, report.get("error") or ""])


def regrade_changes(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """What changed between two reports of the grader (``grades.json``): one entry per learner, notebook and
    item whose status or points moved, or that only one report has.

    Example:
        >>> item = {"id": "04.1", "status": "FAIL", "points": 0, "max_points": 1}
        >>> old = {"submissions": [{"learner": "ada", "notebook": "04", "exercises": [item]}]}
        >>> new = {"submissions": [{"learner": "ada", "notebook": "04", "exercises": [item | {"status": "PASS", "points": 1}]}]}
        >>> regrade_changes(old, new)
        [{'learner': 'ada', 'notebook': '04', 'id': '04.1', 'before': 'FAIL 0', 'after': 'PASS 1'}]
    """

    def items(document: dict[str, Any]) -> dict[tuple[str, str, str], str]:
        return {
            (report["learner"], report["notebook"] or "", r["id"]): f"{r['status']} {r['points']:g}"
            for report in document.get("submissions", [])
            for r in report["exercises"]
        }

    old, new = items(before), items(after)
    return [
        {
            "learner": key[0],
            "notebook": key[1],
            "id": key[2],
            "before": old.get(key, "-"),
            "after": new.get(key, "-"),
        }
        for key in sorted(old.keys() | new.keys())
        if old.get(key) != new.get(key)
    ]


def _write_json(path: Path, document: dict[str, Any]) -> None:
    path.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attn_edu.grade", description=__doc__.split("\n")[0])
    parser.add_argument(
        "paths", nargs="+", type=Path, metavar="PATH", help="a notebook or a folder of notebooks"
    )
    parser.add_argument(
        "--json", type=Path, default=None, help="JSON report (default grades.json, or results.json)"
    )
    parser.add_argument(
        "--csv", type=Path, default=None, help="CSV, one row per learner (default for a folder: grades.csv)"
    )
    parser.add_argument(
        "--format",
        choices=("report", "gradescope"),
        default="report",
        help="the JSON: this grader's report (default), or Gradescope's results.json",
    )
    parser.add_argument(
        "--visibility",
        choices=gradescope.VISIBILITY,
        default="visible",
        help="with --format gradescope: when learners see each exercise's test (default visible)",
    )
    parser.add_argument("--notebook", default=None, help="grade every file as notebook NN (e.g. 02)")
    parser.add_argument("--timeout", type=float, default=Limits.exercise_timeout, help="seconds per exercise")
    parser.add_argument("--cell-timeout", type=float, default=Limits.cell_timeout, help="seconds per cell")
    parser.add_argument(
        "--notebook-timeout", type=float, default=Limits.notebook_timeout, help="seconds per notebook"
    )
    parser.add_argument("--memory-mb", type=int, default=Limits.memory_mb, help="memory limit per notebook")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks graded side by side (one core each)")
    parser.add_argument("--seed", type=int, default=GRADER_SEED, help="seed of the inputs without --secret")
    parser.add_argument(
        "--secret",
        default=os.environ.get("ATTN_EDU_GRADER_SECRET"),
        help="the instructor's secret (default: $ATTN_EDU_GRADER_SECRET): each learner's inputs come from it "
        "and the learner's id, so no two learners, and nobody without it, can know them",
    )
    parser.add_argument(
        "--learner", default=None, help="the learner's id for every notebook (default: from the folders)"
    )
    parser.add_argument(
        "--regrade-of",
        type=Path,
        default=None,
        help="an earlier report (grades.json): print what changed, and keep the list in the new report",
    )
    parser.add_argument(
        "--sandbox",
        choices=("auto", "bwrap", "none"),
        default=Limits.sandbox,
        help="run each notebook in bubblewrap's sandbox: auto (where it works), bwrap (or fail), none",
    )
    args = parser.parse_args(argv)
    limits = Limits(args.timeout, args.cell_timeout, args.notebook_timeout, args.memory_mb, args.sandbox)
    if not args.secret:
        print(
            "grader: no --secret: every learner gets the same inputs, which anyone with the package can compute",
            file=sys.stderr,
        )
    document: dict[str, Any] = {
        "grader": {
            "version": attn_edu.__version__,
            "checks_sha256": checks_digest(),
            "inputs": "per learner, from the secret" if args.secret else f"seed {args.seed}, alike for all",
            "limits": asdict(limits),
        },
        "submissions": [],
        "error": None,
    }
    for_gradescope = args.format == "gradescope"
    json_path = args.json or Path("results.json" if for_gradescope else "grades.json")
    folder = any(p.is_dir() for p in args.paths)
    csv_path = args.csv or (Path("grades.csv") if folder and not for_gradescope else None)
    try:
        found = find_notebooks(args.paths)
        if not found:
            raise FileNotFoundError(f"PATH: no .ipynb files under {', '.join(map(str, args.paths))}")
        if args.learner:
            found = [(path, args.learner) for path, _ in found]
        notebooks, skipped = one_per_notebook(found, args.notebook)
        hide = tuple(p.resolve() for p in args.paths if p.is_dir()) + (json_path.resolve().parent,)

        def one(job: tuple[Path, str]) -> dict[str, Any]:
            path, learner = job
            return grade_notebook(
                path,
                limits=limits,
                seed=args.seed,
                notebook=args.notebook,
                learner=learner,
                secret=args.secret,
                hide=hide,
            )

        with one_thread(), ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            reports = (
                list(pool.map(one, notebooks)) + skipped
            )  # the references are tiny: --jobs uses the cores
        document["grader"]["sandbox"] = (
            "bwrap" if any((r["process"] or {}).get("sandboxed") for r in reports) else "none"
        )
        document["submissions"] = reports
        for report in reports:
            print(format_table(report))
        if args.regrade_of is not None:
            changes = regrade_changes(json.loads(args.regrade_of.read_text(encoding="utf-8")), document)
            document["regrade"] = {"of": str(args.regrade_of), "changes": changes}
            print(f"regrade of {args.regrade_of}: {len(changes)} item(s) changed")
            for c in changes:
                print(f"  {c['learner']:<16} {c['id']:<6} {c['before']} -> {c['after']}")
        passed = all(r["passed"] for r in reports)
        print(f"{sum(r['passed'] for r in reports)}/{len(reports)} notebooks passed every exercise")
        code = 0 if passed else 1
    except Exception as err:  # noqa: BLE001 - the grader failed: say so, still write the JSON
        traceback.print_exc()
        document["error"] = f"{type(err).__name__}: {err}"
        code = 2
    if for_gradescope:
        _write_json(json_path, gradescope.results(document, visibility=args.visibility))
    else:
        _write_json(json_path, document)
    if csv_path is not None:
        write_csv(document["submissions"], csv_path)
    return code


if __name__ == "__main__":
    sys.exit(main())
