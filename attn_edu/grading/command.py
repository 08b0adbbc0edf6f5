"""Grade learner notebooks: ``python -m attn_edu.grade PATH... [--json FILE] [--csv FILE] [--format F]``.

PATH is a notebook or a folder of notebooks (one per learner). For each notebook the grader

1. picks the exercises from the notebook number (``--notebook NN``, else the notebook's
   ``metadata.attn_edu.notebook`` written by :mod:`attn_edu.grading.generate`, else a ``NN_`` file name);
2. chooses the inputs itself (seeded, different from the ones ``check()`` uses in the notebook);
3. runs the notebook in a process of its own (:func:`attn_edu.grading.worker.run`) with a time limit
   per cell, per exercise and per notebook and a memory limit, its printing thrown away;
4. reads back only plain JSON numbers and shapes, checked against a strict schema (known keys, known
   dtypes, sizes bounded by the expected output, finite floats or the strings ``"nan"``/``"inf"``),
   and judges them against the reference with :func:`attn_edu.grading.judge.judge` in this process
   (the format and its schema: :mod:`attn_edu.grading.protocol`).

Why a plain Python process rather than a Jupyter kernel: the grader controls everything the learner's
code can reach before it runs (resource limits, file descriptors, stdin, working folder), no kernel
messages can flood the grader, and nothing but a results file comes back. The processes are forked
from a ``multiprocessing`` forkserver that imported torch once, so a notebook costs its own cells,
not a fresh torch import (~2 s of CPU each); every notebook still gets a new process. Learner code
never runs in the grader's process, so monkeypatching ``torch.allclose``, returning an object whose
``__eq__`` is always true, or returning a tensor subclass changes nothing here: only exact
``torch.Tensor`` results are sent, as numbers. Unix only (``resource``, ``fork``).

Prints a table per learner and always writes the JSON (``grades.json`` unless ``--json``), and for a
folder a CSV with one row per learner (``grades.csv`` unless ``--csv``). ``--format gradescope`` writes
the JSON as Gradescope's ``results.json`` instead (``results.json`` unless ``--json``; no CSV unless
``--csv``): one test per exercise (:mod:`attn_edu.grading.gradescope`). Exit code: 0 every exercise
passed, 1 some did not, 2 the grader itself failed.
"""

from __future__ import annotations

import argparse
import csv
import json
import multiprocessing
import os
import re
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import attn_edu
from attn_edu.grading import gradescope, protocol, worker
from attn_edu.grading.exercise import Exercise, Question, make_cases
from attn_edu.grading.judge import judge, judge_answer, reference_outputs, result_for
from attn_edu.grading.registry import exercises, questions
from attn_edu.grading.result import CheckResult, Status
from attn_edu.grading.run import one_thread

UNREADABLE = "the file is not a readable notebook (.ipynb JSON with a list of cells)"
GRADER_SEED = 20240611  # the grader's inputs differ from the ones check() uses inside the notebook


@dataclass(frozen=True)
class Limits:
    exercise_timeout: float = 10.0  # seconds for all the cases of one exercise
    cell_timeout: float = 60.0  # seconds for one code cell of the notebook
    notebook_timeout: float = 300.0  # seconds for the whole notebook process, start-up included
    memory_mb: int = 4096  # address-space limit of the notebook process (torch alone maps ~0.8 GB)


# ---------------------------------------------------------------------------------------------------------
# Which notebooks, which exercises


def find_notebooks(paths: list[Path]) -> list[Path]:
    """The notebooks named on the command line, folders expanded (sorted, checkpoints skipped)."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
        elif path.is_file():
            found.append(path)
        else:
            raise FileNotFoundError(f"PATH: no notebook or folder at {path}")
    return found


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


_FORKSERVER = multiprocessing.get_context("forkserver")
# Imported once by the server; every notebook process is forked from it with torch already loaded.
_FORKSERVER.set_forkserver_preload(["torch", "attn_edu.grading", "attn_edu.grading.worker"])
_START_LOCK = threading.Lock()


def _run_worker(
    notebook: Path, request: dict[str, Any], limits: Limits
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run the worker on one notebook; return the parsed results and what happened to the process."""
    with tempfile.TemporaryDirectory(prefix="attn_edu_grade_") as tmp:
        tmp_path = Path(tmp)
        request_path, results_path, work = (
            tmp_path / "request.json",
            tmp_path / "results.jsonl",
            tmp_path / "work",
        )
        work.mkdir()
        results_path.touch()
        request_path.write_text(json.dumps(request), encoding="utf-8")  # inputs only, never the answers
        proc = _FORKSERVER.Process(target=worker.run, args=(str(request_path), str(results_path), str(work)))
        with _START_LOCK:
            proc.start()
        proc.join(timeout=limits.notebook_timeout)
        timed_out = proc.exitcode is None
        try:
            os.killpg(
                proc.pid, signal.SIGKILL
            )  # the worker leads its own session: this also ends what it started
        except (ProcessLookupError, PermissionError):
            pass
        proc.join()
        sizes = {e["id"]: [c["max_elements"] for c in e["cases"]] for e in request["exercises"]}
        asked = frozenset(q["id"] for q in request.get("questions", []))
        parsed = protocol.read_events(results_path, sizes, asked)
    return parsed, {"exit_code": proc.exitcode, "timed_out": timed_out}


def _process_failure(exercise: Exercise | Question, process: dict[str, Any], limits: Limits) -> CheckResult:
    if process["timed_out"]:
        message = f"the notebook did not finish within {limits.notebook_timeout:g} s, before this exercise was graded"
        return result_for(exercise, Status.TIMEOUT, message)
    code = process["exit_code"]
    how = f"killed by {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
    message = f"the notebook's process ended before this exercise was graded ({how})"
    hint = "os._exit, sys.exit outside a function, a crash or running out of memory?"
    return result_for(exercise, Status.ERROR, message, hint)


def grade_notebook(
    path: Path, *, limits: Limits, seed: int = GRADER_SEED, notebook: str | None = None
) -> dict:
    """Grade one learner notebook; returns the JSON-ready report (never raises for a bad submission).

    The steps, in order: pick the exercises and questions; choose the inputs and run each reference once;
    run the notebook in its own process; judge what came back; total the points.
    """
    started = time.monotonic()
    number = notebook_number(path, notebook)
    report: dict[str, Any] = {"learner": path.stem, "path": str(path), "notebook": number, "exercises": []}
    chosen, asked = _graded_in(number)
    if not chosen and not asked:
        report.update(points=0, max_points=0, passed=False, seconds=0.0, process=None)
        report["error"] = f"cannot tell which exercises {path.name} holds (use --notebook NN)"
        return report
    cases = {e.exercise_id: make_cases(e, seed) for e in chosen}
    # each reference runs once: its outputs size the worker's replies and then judge them
    expected = {e.exercise_id: reference_outputs(e, cases[e.exercise_id]) for e in chosen}
    parsed, process = _run_worker(path, _request(path, chosen, asked, cases, expected, limits), limits)

    def judged(item: Exercise | Question) -> dict[str, Any]:
        if isinstance(item, Question):
            answer = parsed["answers"].get(item.exercise_id)
            return _result(item, parsed, process, limits, answer, lambda: judge_answer(item, answer))
        outcomes = parsed["outcomes"].get(item.exercise_id)
        n = 0 if outcomes is None else len(outcomes)
        ran = cases[item.exercise_id][:n], outcomes, expected[item.exercise_id][:n]
        return _result(item, parsed, process, limits, outcomes, lambda: judge(item, *ran))

    results = [judged(item) for item in (*chosen, *asked)]
    process["notes"] = parsed["notes"]
    report.update(
        exercises=results,
        points=sum(r["points"] for r in results),
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
    path: Path,
    chosen: list[Exercise],
    asked: list[Question],
    cases: dict[str, list],
    expected: dict[str, list],
    limits: Limits,
) -> dict[str, Any]:
    """What the worker is told: the notebook, the limits, and each exercise's inputs (never its answers)."""
    return {
        "notebook": str(path.resolve()),
        "memory_bytes": limits.memory_mb * 2**20,
        "cell_timeout": limits.cell_timeout,
        "exercise_timeout": limits.exercise_timeout,
        "exercises": [
            {
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
    elif parsed["unreadable"]:
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
    head = f"{report['learner']}  ({report['path']})  {report['points']}/{report['max_points']} points"
    lines = [head + (f"  {report['seconds']:.1f} s" if report.get("seconds") else "")]
    if report.get("error"):
        lines.append(f"  error: {report['error']}")
    for r in report["exercises"]:
        text = r["message"] if len(r["message"]) <= 70 else r["message"][:67] + "..."
        lines.append(f"  {r['id']:<6} {r['status']:<14} {r['points']}/{r['max_points']}  {text}")
    return "\n".join(lines)


def write_csv(reports: list[dict[str, Any]], path: Path) -> None:
    """One row per learner: points and the status of every exercise."""
    ids = sorted({r["id"] for report in reports for r in report["exercises"]})
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["learner", "path", "points", "max_points", *ids, "error"])
        for report in reports:
            status = {r["id"]: r["status"] for r in report["exercises"]}
            row = [report["learner"], report["path"], report["points"], report["max_points"]]
            writer.writerow(row + [status.get(i, "") for i in ids] + [report.get("error") or ""])


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
    parser.add_argument("--seed", type=int, default=GRADER_SEED, help="seed of the grader's inputs")
    args = parser.parse_args(argv)
    limits = Limits(args.timeout, args.cell_timeout, args.notebook_timeout, args.memory_mb)
    document: dict[str, Any] = {
        "grader": {"version": attn_edu.__version__, "seed": args.seed, "limits": asdict(limits)},
        "submissions": [],
        "error": None,
    }
    for_gradescope = args.format == "gradescope"
    json_path = args.json or Path("results.json" if for_gradescope else "grades.json")
    folder = any(p.is_dir() for p in args.paths)
    csv_path = args.csv or (Path("grades.csv") if folder and not for_gradescope else None)
    try:
        notebooks = find_notebooks(args.paths)
        if not notebooks:
            raise FileNotFoundError(f"PATH: no .ipynb files under {', '.join(map(str, args.paths))}")

        def one(path: Path) -> dict[str, Any]:
            return grade_notebook(path, limits=limits, seed=args.seed, notebook=args.notebook)

        with one_thread(), ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            reports = list(pool.map(one, notebooks))  # the references are tiny: --jobs uses the cores
        document["submissions"] = reports
        for report in reports:
            print(format_table(report))
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
