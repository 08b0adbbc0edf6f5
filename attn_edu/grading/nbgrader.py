"""Write an nbgrader course folder from ``solutions/``: ``python -m attn_edu.grading.nbgrader OUTDIR``.

`nbgrader <https://nbgrader.readthedocs.io>`_ is how JupyterHub courses hand out and grade notebooks. This
turns each solution notebook into an nbgrader *source* assignment, with nbgrader's cell metadata set the
way an instructor would set it in its "Create Assignment" toolbar:

================================ ==============================================================================
solution notebook cell           nbgrader cell
================================ ==============================================================================
``# Exercise NN.k: ...`` code    **autograded answer** (``solution``): nbgrader's own ``### BEGIN SOLUTION``
                                 markers are this course's, so ``generate_assignment`` strips the same regions
``# Question NN.qk: ...`` code   split in two: the answer (``answer_qk = ...``, with a line saying what to
                                 write) as an autograded answer, and its ``check(...)`` as a test cell
``check("NN.k", fn)`` code       **autograder tests** (``grade``, locked), worth the exercise's points, as
                                 ``display(check("NN.k", fn, strict=True))``: a check that does not pass
                                 raises ``AssertionError`` with its message and hint, and nbgrader gives a
                                 test cell's points only when it runs without an error. (``display``, not the
                                 cell's value: nbgrader would read a value as partial credit.)
(with ``--secret``)              and, in nbgrader's ``### BEGIN HIDDEN TESTS`` block, the same check on the
                                 learner's own inputs (:func:`~attn_edu.grading.notebook.check_hidden`, from
                                 the secret and the student's folder): stripped from the student's copy, put
                                 back to autograde, so answers made for the notebook's inputs fail
any other cell                   **read-only** (``locked``): the instructions, imports and verify cells
================================ ==============================================================================

nbgrader also gives no points to a test cell that writes to stderr (a warning the learner's code raises, say).

Outputs are cleared. The folder, ready for nbgrader's commands run inside it::

    OUTDIR/nbgrader_config.py                  the course id and the one setting nbgrader needs
    OUTDIR/source/NN_topic/NN_topic.ipynb      one assignment per notebook, named like the notebook

then ``nbgrader generate_assignment NN_topic`` writes the student version to ``release/``, and
``nbgrader autograde NN_topic`` and ``nbgrader generate_feedback NN_topic`` grade what is collected into
``submitted/<student>/NN_topic/``. The checks run in the kernel nbgrader starts, so ``attn_edu`` must be
installed where nbgrader runs (as for the notebooks themselves). ``tests/test_nbgrader_release.py`` runs
nbgrader itself end to end on one notebook.

Usage::

    python -m attn_edu.grading.nbgrader OUTDIR                # every notebook of solutions/
    python -m attn_edu.grading.nbgrader OUTDIR --notebook 04  # one of them
    python -m attn_edu.grading.nbgrader OUTDIR --secret S     # hidden tests on each learner's own inputs

The checks run in the learner's kernel, as every nbgrader test does: a notebook that redefines ``check`` or
patches the package can fool them (the README's threat model); ``python -m attn_edu.grade`` on the
``submitted/`` folder grades the same notebooks where the learner's code cannot reach the verdict.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

import nbformat

from attn_edu.grading.generate import EXERCISE_LINE, MarkerError, strip_solutions
from attn_edu.grading.registry import exercises, questions

COURSE_ID = "attn-edu"
CHECK_LINE = re.compile(r"^check\(\s*(['\"])(\d\d\.q?\d+)\1\s*,\s*(.+?)\s*\)\s*$")
CONFIG = f'''"""nbgrader's configuration for the attn-edu course (written by python -m attn_edu.grading.nbgrader)."""

c = get_config()  # noqa: F821 - nbgrader provides it
c.CourseDirectory.course_id = "{COURSE_ID}"
# A check can take a few seconds (it runs the answer on several cases); nbgrader's default is 30 s a cell.
c.Execute.timeout = 120
'''


def _meta(grade_id: str, *, solution: bool = False, grade: bool = False, points: int = 0) -> dict:
    """nbgrader's cell metadata (schema 3): a solution cell is editable, every other one is locked."""
    meta = {"grade": grade, "grade_id": grade_id, "locked": not solution, "schema_version": 3}
    meta.update(solution=solution, task=False)
    if grade:
        meta["points"] = points
    return meta


def _cell(cell_type: str, source: str, grade_id: str, **meta: bool | int) -> nbformat.NotebookNode:
    """A fresh cell with nbgrader's metadata; its id is its grade id, so that writing twice gives the same file."""
    cell = nbformat.v4.new_code_cell(source) if cell_type == "code" else nbformat.v4.new_markdown_cell(source)
    cell.id = grade_id
    cell.metadata["nbgrader"] = _meta(grade_id, **meta)
    return cell


def _test_cell(exercise_id: str, argument: str, secret: str | None = None) -> nbformat.NotebookNode:
    item = exercises().get(exercise_id) or questions()[exercise_id]
    source = f'display(check("{exercise_id}", {argument}, strict=True))'
    if secret and ".q" not in exercise_id:  # the learner's own inputs, in a block only autograding sees
        source += (
            "\n### BEGIN HIDDEN TESTS\nfrom attn_edu.grading.notebook import check_hidden\n\n"
            f'display(check_hidden("{exercise_id}", {argument}, secret={secret!r}))\n### END HIDDEN TESTS'
        )
    return _cell("code", source, "check-" + exercise_id.replace(".", "-"), grade=True, points=item.points)


def _check_call(source: str) -> tuple[str, str] | None:
    """``("04.1", "causal_mask")`` for a cell that is one ``check("04.1", causal_mask)`` line."""
    found = CHECK_LINE.match(source.strip())
    return (found.group(2), found.group(3)) if found and "\n" not in source.strip() else None


def source_assignment(path: Path, secret: str | None = None) -> nbformat.NotebookNode:
    """The nbgrader source notebook made from the solution notebook at ``path``.

    Example:
        >>> from pathlib import Path
        >>> nb = source_assignment(Path("solutions/04_masks.ipynb"))
        >>> [c.source for c in nb.cells if c.metadata["nbgrader"]["grade"]][0]
        'display(check("04.1", causal_mask, strict=True))'
        >>> sum(c.metadata["nbgrader"].get("points", 0) for c in nb.cells)  # 5 exercises (18 points), 3 questions
        21
    """
    solution = nbformat.read(path, as_version=4)
    _, ids = strip_solutions(solution, str(path))  # the same marker rules as the exercise generator
    cells = []
    for index, cell in enumerate(solution.cells, 1):
        where = f"{path}: cell {index}"
        marker = EXERCISE_LINE.match(cell.source.lstrip().split("\n", 1)[0].strip())
        call = _check_call(cell.source) if cell.cell_type == "code" else None
        if cell.cell_type == "code" and marker:
            exercise_id = marker.group(1)
            answer_id = "answer-" + exercise_id.replace(".", "-")
            if ".q" not in exercise_id:
                cells.append(_cell("code", cell.source, answer_id, solution=True))
                continue
            lines = cell.source.rstrip().split("\n")  # a question: its answer and its check, a cell each
            found = _check_call(lines[-1])
            if found is None or found[0] != exercise_id:
                raise MarkerError(f"{where}: question {exercise_id} does not end in its check(...) line")
            question = questions()[exercise_id]
            form = f"# Write {question.variable_name} = ... (your answer: {question.form()})"
            answer = "\n".join([lines[0], form, *lines[1:-1]]).rstrip()
            cells += [_cell("code", answer, answer_id, solution=True), _test_cell(*found)]
        elif call is not None:
            if call[0] not in ids:
                raise MarkerError(f"{where}: check({call[0]!r}) of an exercise this notebook does not hold")
            cells.append(_test_cell(*call, secret=secret))
        else:
            cells.append(_cell(cell.cell_type, cell.source, f"{cell.cell_type}-{index}"))
    out = nbformat.v4.new_notebook(cells=cells)
    out.metadata = {
        "kernelspec": solution.metadata.get(
            "kernelspec", {"name": "python3", "display_name": "Python 3", "language": "python"}
        ),
        "language_info": {"name": "python"},
        "attn_edu": {"notebook": path.name[:2], "exercises": ids},  # `python -m attn_edu.grade` reads it
    }
    return out


def write_course(
    solutions: Path, outdir: Path, notebooks: list[str] | None = None, secret: str | None = None
) -> list[Path]:
    """Write ``nbgrader_config.py`` and one source assignment per solution notebook; return the notebooks.

    ``notebooks``: numbers such as ``["04"]`` (default: all of them). ``secret``: the instructor's; each
    exercise's test cell then also checks the learner's own inputs in a hidden test (the source folder holds
    the secret: keep the course folder private).
    """
    paths = sorted(solutions.glob("[0-9][0-9]_*.ipynb"))
    if notebooks:
        paths = [p for p in paths if p.name[:2] in notebooks]
        missing = sorted(set(notebooks) - {p.name[:2] for p in paths})
        if missing:
            raise FileNotFoundError(f"--notebook: no solution notebook {', '.join(missing)} in {solutions}")
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "nbgrader_config.py").write_text(CONFIG, encoding="utf-8")
    written = []
    for path in paths:
        target = outdir / "source" / path.stem / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(nbformat.writes(source_assignment(path, secret)) + "\n", encoding="utf-8")
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m attn_edu.grading.nbgrader", description=__doc__.split("\n")[0]
    )
    parser.add_argument("outdir", type=Path, metavar="OUTDIR", help="the nbgrader course folder to write")
    parser.add_argument("--solutions", type=Path, default=Path("solutions"), help="default: solutions/")
    parser.add_argument("--notebook", action="append", help="only notebook NN (repeatable)")
    parser.add_argument(
        "--secret",
        default=os.environ.get("ATTN_EDU_GRADER_SECRET"),
        help="hidden tests on each learner's own inputs, from this secret (default: $ATTN_EDU_GRADER_SECRET)",
    )
    args = parser.parse_args(argv)
    try:
        written = write_course(args.solutions, args.outdir, args.notebook, args.secret)
    except (MarkerError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for path in written:
        print(f"written: {path}")
    print(f"then, in {args.outdir}: nbgrader generate_assignment {written[0].parent.name}" if written else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
