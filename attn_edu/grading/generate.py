"""Write ``exercises/NN_*_exercises.ipynb`` from ``solutions/NN_*.ipynb``, the only copy edited by hand.

A solution notebook marks each exercise in a code cell::

    # Exercise 02.1: compute the attention weights softmax(q kᵀ / sqrt(D)) with a bool mask
    def attention_weights(q, k, mask=None):
        ### BEGIN SOLUTION
        ...
        ### END SOLUTION

The ``# Exercise NN.k: <task>`` line names the exercise and its one-line task (one exercise per cell,
id prefix = the notebook's number). A concept question's cell starts ``# Question NN.qk: <task>`` and its
region holds the answer (``answer_qk = "b"``); the exercise notebook gets ``answer_qk = ...`` in its place. Every region from ``### BEGIN SOLUTION`` to ``### END SOLUTION``,
markers included, becomes ``raise NotImplementedError("Exercise NN.k: replace this line with your code")``
at the indentation of the BEGIN line (one short line: the learner replaces it, and it fits the notebook's
width, where a long task ran off the window's edge); in a cell with several regions every region but the last becomes ``pass  # Exercise NN.k, part
i of n: your code here``, so that the stub runs through its given scaffold to the last part before it raises. Outputs and execution counts are cleared and the JSON is written the way Jupyter writes
it, so building twice gives identical files. Nested, unclosed or stray markers, a region outside an
exercise cell, and an exercise without a check (:mod:`attn_edu.grading.checks`) or without a
``check("NN.k", ...)`` call stop the build with the file, cell and line.

Usage::

    python -m attn_edu.exercises build           # write exercises/
    python -m attn_edu.exercises build --check   # exit 1 if exercises/ is not what build would write
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

import nbformat

from attn_edu.grading.registry import exercises, get_question, questions

STUB_TASK = "replace this line with your code"  # what a stub's NotImplementedError says after the exercise id
BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
EXERCISE_LINE = re.compile(r"#\s*(?:Exercise|Question)\s+(\d+\.q?\d+)\s*:\s*(\S.*?)\s*$")
NOTEBOOK_NAME = re.compile(r"(\d\d)_.+\.ipynb$")


class MarkerError(ValueError):
    """A solution notebook whose markers cannot be turned into an exercise notebook."""


def _where(path: str, index: int, cell: dict, line: int | None = None) -> str:
    cell_id = f" (id {cell['id']})" if cell.get("id") else ""
    return f"{path}: cell {index}{cell_id}" + (f", line {line}" if line is not None else "")


def _strip_cell(source: str, loc: Callable[[int], str]) -> tuple[str, str | None, str | None, int]:
    """One code cell: ``(new source, exercise id, task, number of regions)``."""
    lines = source.split("\n")
    exercise_id = task = None
    out: list[str] = []
    opened: int | None = None
    regions = 0
    total = sum(line.strip() == BEGIN for line in lines)  # regions in this cell
    for lineno, line in enumerate(lines, 1):
        stripped = line.strip()
        found = EXERCISE_LINE.match(stripped)
        if found and opened is None:
            if exercise_id is not None:
                raise MarkerError(
                    f"{loc(lineno)}: a second exercise marker in one cell (one exercise per cell)"
                )
            exercise_id, task = found.group(1), found.group(2)
        if stripped == BEGIN:
            if opened is not None:
                raise MarkerError(
                    f"{loc(lineno)}: nested {BEGIN!r} (the region opened at line {opened} is open)"
                )
            if exercise_id is None:
                raise MarkerError(f"{loc(lineno)}: {BEGIN!r} before any '# Exercise NN.k: <task>' line")
            opened, indent = lineno, line[: len(line) - len(line.lstrip())]
            if ".q" in exercise_id:  # a concept question: the answer's placeholder
                question = get_question(exercise_id) if exercise_id in questions() else None
                name = question.variable_name if question else "answer_" + exercise_id.split(".")[1]
                form = question.form() if question else "your answer"
                out.append(f"{indent}{name} = ...  # your answer: {form}")
            elif regions < total - 1:  # an earlier part: the scaffold after it must still run
                out.append(
                    f"{indent}pass  # Exercise {exercise_id}, part {regions + 1} of {total}: your code here"
                )
            else:  # short, so that it fits the notebook's width: the task is in the cell's first line
                out.append(f'{indent}raise NotImplementedError("Exercise {exercise_id}: {STUB_TASK}")')
            continue
        if stripped == END:
            if opened is None:
                raise MarkerError(f"{loc(lineno)}: stray {END!r} with no open region")
            opened = None
            regions += 1
            continue
        if "BEGIN SOLUTION" in line or "END SOLUTION" in line:
            raise MarkerError(
                f"{loc(lineno)}: malformed marker {stripped!r}; write {BEGIN!r} / {END!r} alone"
            )
        if opened is None:
            out.append(line)
    if opened is not None:
        raise MarkerError(f"{loc(opened)}: unclosed {BEGIN!r} (no {END!r} after it)")
    return "\n".join(out), exercise_id, task, regions


def strip_solutions(nb: nbformat.NotebookNode, path: str) -> tuple[nbformat.NotebookNode, list[str]]:
    """The exercise version of a solution notebook, and the ids of its exercises in order."""
    name = NOTEBOOK_NAME.search(Path(path).name)
    if name is None:
        raise MarkerError(f"{path}: expected a name like 'NN_topic.ipynb'")
    number = name.group(1)
    out = nbformat.from_dict(json.loads(json.dumps(nb)))  # a deep copy
    ids: list[str] = []
    for index, cell in enumerate(out.cells, 1):
        if cell.cell_type != "code":
            if "BEGIN SOLUTION" in cell.source or "END SOLUTION" in cell.source:
                raise MarkerError(f"{_where(path, index, cell)}: solution markers belong in code cells")
            cell.get("metadata", {}).pop("execution", None)
            continue
        source, exercise_id, _, regions = _strip_cell(
            cell.source, lambda n, i=index, c=cell: _where(path, i, c, n)
        )
        if exercise_id is not None:
            where = _where(path, index, cell)
            if regions == 0:
                raise MarkerError(f"{where}: exercise {exercise_id} has no {BEGIN!r} region")
            if not exercise_id.startswith(f"{number}."):
                raise MarkerError(
                    f"{where}: exercise {exercise_id} in notebook {number} (expected {number}.k)"
                )
            if exercise_id in ids:
                raise MarkerError(f"{where}: exercise {exercise_id} appears twice")
            if exercise_id not in exercises() and exercise_id not in questions():
                raise MarkerError(f"{where}: exercise {exercise_id} has no check in attn_edu.grading.checks")
            ids.append(exercise_id)
        cell.source = source
        cell.outputs = []
        cell.execution_count = None
        cell.metadata.pop("execution", None)
    text = "\n".join(c.source for c in out.cells if c.cell_type == "code")
    for exercise_id in ids:
        if not re.search(rf"check\(\s*['\"]{re.escape(exercise_id)}['\"]", text):
            raise MarkerError(f"{path}: exercise {exercise_id} has no check({exercise_id!r}, ...) call")
    out.metadata = {
        "kernelspec": nb.metadata.get(
            "kernelspec", {"name": "python3", "display_name": "Python 3", "language": "python"}
        ),
        # As the solution's run recorded it: the kernel reports the same on open, so the notebook opens unmodified.
        "language_info": nb.metadata.get("language_info", {"name": "python"}),
        # Read by `python -m attn_edu.grade` to know which exercises a submission holds.
        "attn_edu": {"notebook": number, "exercises": ids},
    }
    return out, ids


def render(path: Path) -> str:
    """The text of the exercise notebook built from the solution notebook at ``path``."""
    nb = nbformat.reads(path.read_text(encoding="utf-8"), as_version=4)
    out, _ = strip_solutions(nb, str(path))
    return nbformat.writes(out) + "\n"


def exercise_name(solution: Path) -> str:
    """``04_masks_exercises.ipynb`` for ``solutions/04_masks.ipynb``: named apart from the lecture
    ``course/04_masks.ipynb``, so that the two open side by side as two tabs that say which is which."""
    return f"{Path(solution).stem}_exercises.ipynb"


def build(solutions: Path, exercises: Path, *, check: bool = False) -> list[Path]:
    """Write (or with ``check``, only compare) every exercise notebook; return the files that differ."""
    wanted = {exercises / exercise_name(p): render(p) for p in sorted(solutions.glob("[0-9][0-9]_*.ipynb"))}
    stale = [p for p in sorted(exercises.glob("*.ipynb")) if p not in wanted]
    differ = [p for p, text in wanted.items() if not p.exists() or p.read_text(encoding="utf-8") != text]
    if not check:
        exercises.mkdir(parents=True, exist_ok=True)
        for p in differ:
            p.write_text(wanted[p], encoding="utf-8")
        for p in stale:
            p.unlink()
    return differ + stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attn_edu.exercises", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cmd = sub.add_parser("build", help="write exercises/ from solutions/")
    cmd.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if exercises/ is out of date"
    )
    cmd.add_argument("--solutions", type=Path, default=Path("solutions"))
    cmd.add_argument("--exercises", type=Path, default=Path("exercises"))
    args = parser.parse_args(argv)
    try:
        changed = build(args.solutions, args.exercises, check=args.check)
    except MarkerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    verb = "out of date" if args.check else "written"
    for p in changed:
        print(f"{verb}: {p}")
    if args.check and changed:
        print("run `python -m attn_edu.exercises build` and commit exercises/", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
