"""The exercise generator: committed exercises/ is what solutions/ builds, nothing leaks, bad markers stop it."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager

from attn_edu.grading import generate as exercises
from attn_edu.grading.generate import BEGIN, END, MarkerError

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS, EXERCISES = ROOT / "solutions", ROOT / "exercises"
PAIRS = [(p, EXERCISES / exercises.exercise_name(p)) for p in sorted(SOLUTIONS.glob("[0-9][0-9]_*.ipynb"))]


def test_committed_exercises_are_what_the_generator_writes() -> None:
    assert PAIRS, "no solution notebooks found"
    stale = exercises.build(SOLUTIONS, EXERCISES, check=True)
    assert stale == [], f"run `python -m attn_edu.exercises build`: {stale} differ"


def test_build_twice_gives_identical_bytes(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    exercises.build(SOLUTIONS, first)
    exercises.build(SOLUTIONS, second)
    for _, exercise in PAIRS:
        assert (first / exercise.name).read_bytes() == (second / exercise.name).read_bytes()
    assert exercises.build(SOLUTIONS, first, check=True) == []


def _solution_lines(nb: nbformat.NotebookNode) -> list[str]:
    inside, found = False, []
    for cell in nb.cells:
        for line in cell.source.split("\n"):
            if line.strip() in (BEGIN, END):
                inside = line.strip() == BEGIN
            elif inside and len(line.strip()) > 12:  # skip lines too short to tell apart, e.g. `return out`
                found.append(line.strip())
    return found


@pytest.mark.parametrize("solution, exercise", PAIRS, ids=[p.name for p, _ in PAIRS])
def test_no_solution_text_or_output_leaks(solution: Path, exercise: Path) -> None:
    sol = nbformat.read(solution, as_version=4)
    text = exercise.read_text(encoding="utf-8")
    ex = nbformat.reads(text, as_version=4)
    secret = _solution_lines(sol)
    assert secret, "the solution notebook has no solution lines"
    code = "\n".join(c.source for c in ex.cells)
    assert not [line for line in secret if line in code]
    assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text
    for cell in ex.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
        assert "execution" not in cell.metadata
    assert any(c.cell_type == "code" and c.outputs for c in sol.cells), (
        "the solutions are committed with outputs"
    )


@pytest.mark.parametrize("solution, exercise", PAIRS, ids=[p.name for p, _ in PAIRS])
def test_regions_become_not_implemented(solution: Path, exercise: Path) -> None:
    ex = nbformat.read(exercise, as_version=4)
    ids = ex.metadata["attn_edu"]["exercises"]
    assert ids and ex.metadata["attn_edu"]["notebook"] == solution.name[:2]
    for cell in ex.cells:
        if cell.cell_type == "code":
            ast.parse(TransformerManager().transform_cell(cell.source))  # still valid (IPython) Python
    code = "\n".join(c.source for c in ex.cells if c.cell_type == "code")
    for exercise_id in [i for i in ids if ".q" not in i]:  # questions: tests/test_questions.py
        assert re.search(rf"# Exercise {re.escape(exercise_id)}: \S", code), "the task stays in the cell"
        assert f'raise NotImplementedError("Exercise {exercise_id}: {exercises.STUB_TASK}")' in code
    first = next(c for c in ex.cells if c.cell_type == "code")
    assert "google.colab" in first.source and "%pip install" in first.source


WIDTH = 100  # the longest code line that shows whole in JupyterLab at a common window width, no scrolling


def _written_by_the_build(solution: nbformat.NotebookNode, exercise: nbformat.NotebookNode) -> list[str]:
    """The code lines of ``exercise`` that its solution does not hold: the stubs and placeholders the build wrote."""
    assert len(solution.cells) == len(exercise.cells), "the build keeps every cell"
    written = []
    for sol, ex in zip(solution.cells, exercise.cells):
        if ex.cell_type == "code":
            kept = set(sol.source.split("\n"))
            written += [line for line in ex.source.split("\n") if line not in kept]
    return written


@pytest.mark.parametrize("solution, exercise", PAIRS, ids=[p.name for p, _ in PAIRS])
def test_every_code_line_fits_the_notebook_width(solution: Path, exercise: Path) -> None:
    """Every line of every code cell the learner gets: the stubs the build writes and all it copies from the
    solution (the Colab install line, the task lines, docstrings, comments, the given code)."""
    sol, ex = nbformat.read(solution, as_version=4), nbformat.read(exercise, as_version=4)
    lines = [
        (index, line)
        for index, cell in enumerate(ex.cells, 1)
        if cell.cell_type == "code"
        for line in cell.source.split("\n")
    ]
    assert _written_by_the_build(sol, ex), "the build replaced no region"  # so its stubs are among the lines
    too_long = [
        f"cell {i}, {len(line)} characters: {line.strip()[:60]}" for i, line in lines if len(line) > WIDTH
    ]
    assert not too_long, f"lines over {WIDTH} characters scroll sideways in JupyterLab: {too_long}"


def test_a_stub_runs_its_scaffold_to_the_last_part_before_it_raises() -> None:
    """Several regions in one cell: the earlier ones become ``pass``, so the given code between them still runs and
    the stub raises at its last part, not before its own scaffold (12.6 computes D = rowsum(dO ∘ O), then loops)."""
    from attn_edu.grading.generate import _strip_cell

    source = (
        "# Exercise 12.6: the task\ndef f(log):\n    ### BEGIN SOLUTION\n    total = 0\n    ### END SOLUTION\n"
        "    log.append('scaffold')\n    for i in range(2):\n        ### BEGIN SOLUTION\n        total += i\n"
        "        ### END SOLUTION\n    return total"
    )
    stub, exercise_id, _, regions = _strip_cell(source, lambda line: f"line {line}")
    assert (exercise_id, regions) == ("12.6", 2)
    assert "    pass  # Exercise 12.6, part 1 of 2: your code here" in stub
    namespace: dict = {}
    exec(stub, namespace)
    log: list[str] = []
    with pytest.raises(NotImplementedError, match=r"Exercise 12\.6: replace this line"):
        namespace["f"](log)
    assert log == ["scaffold"]  # the given code after the first part ran before the stub raised


# ---------------------------------------------------------------------------------------------------------
# Marker errors name the file, the cell and the line


def _notebook(tmp_path: Path, *cells: nbformat.NotebookNode, name: str = "02_tiny.ipynb") -> Path:
    folder = tmp_path / "solutions"
    folder.mkdir(exist_ok=True)
    nb = nbformat.v4.new_notebook(cells=list(cells))
    for i, cell in enumerate(nb.cells):
        cell.id = f"c{i}"
    path = folder / name
    nbformat.write(nb, path)
    return path


GOOD = "# Exercise 02.1: the task\ndef f(q, k, mask=None):\n    ### BEGIN SOLUTION\n    return q\n    ### END SOLUTION"
CHECK = 'check("02.1", f)\ncheck("02.2", g)'


def _code(source: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_code_cell(source)


@pytest.mark.parametrize(
    "source, words",
    [
        ("# Exercise 02.1: t\n### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION", "line 3: nested"),
        ("# Exercise 02.1: t\nx = 1\n### BEGIN SOLUTION\nx = 2", "line 3: unclosed"),
        ("# Exercise 02.1: t\n### BEGIN SOLUTION\n### END SOLUTION\n### END SOLUTION", "line 4: stray"),
        ("### BEGIN SOLUTION\nx = 1\n### END SOLUTION", "line 1: '### BEGIN SOLUTION' before any"),
        ("# Exercise 02.1: t\n## BEGIN SOLUTION\n### END SOLUTION", "line 2: malformed"),
        ("# Exercise 02.1: t\n### BEGIN SOLUTION\n### END SOLUTION\n# Exercise 02.2: u", "line 4: a second"),
        ("# Exercise 02.1: t\nx = 1", "has no '### BEGIN SOLUTION' region"),
        (
            "# Exercise 02.9: t\n### BEGIN SOLUTION\n### END SOLUTION",
            "02.9 has no check in attn_edu.grading.checks",
        ),
        ("# Exercise 03.1: t\n### BEGIN SOLUTION\n### END SOLUTION", "03.1 in notebook 02"),
    ],
)
def test_marker_errors(tmp_path: Path, source: str, words: str) -> None:
    path = _notebook(tmp_path, nbformat.v4.new_markdown_cell("# Title"), _code(source), _code(CHECK))
    with pytest.raises(MarkerError, match=re.escape(words)) as err:
        exercises.render(path)
    assert f"{path}: cell 2 (id c1)" in str(err.value)


def test_markers_in_markdown_are_refused(tmp_path: Path) -> None:
    path = _notebook(tmp_path, nbformat.v4.new_markdown_cell(f"{BEGIN}\nsecret\n{END}"), _code(GOOD))
    with pytest.raises(MarkerError, match=r"cell 1 \(id c0\): solution markers belong in code cells"):
        exercises.render(path)


def test_an_exercise_twice_and_an_exercise_without_check_are_refused(tmp_path: Path) -> None:
    with pytest.raises(MarkerError, match="cell 2 .*02.1 appears twice"):
        exercises.render(_notebook(tmp_path, _code(GOOD), _code(GOOD), _code(CHECK)))
    with pytest.raises(MarkerError, match=r"02.1 has no check\('02.1', ...\) call"):
        exercises.render(_notebook(tmp_path, _code(GOOD)))


def test_region_keeps_indentation_and_task(tmp_path: Path) -> None:
    path = _notebook(tmp_path, _code(GOOD), _code(CHECK))
    cell = json.loads(exercises.render(path))["cells"][0]
    assert "".join(cell["source"]).endswith(
        'def f(q, k, mask=None):\n    raise NotImplementedError("Exercise 02.1: replace this line with your code")'
    )
    assert "".join(cell["source"]).startswith("# Exercise 02.1: the task\n")


def test_command_line_check_and_build(tmp_path: Path) -> None:
    _notebook(tmp_path, _code(GOOD), _code(CHECK))
    args = ["build", "--solutions", str(tmp_path / "solutions"), "--exercises", str(tmp_path / "exercises")]
    assert exercises.main([*args, "--check"]) == 1  # nothing built yet
    assert exercises.main(args) == 0
    assert exercises.main([*args, "--check"]) == 0
    (tmp_path / "exercises" / "05_orphan.ipynb").write_text("{}")
    assert exercises.main([*args, "--check"]) == 1  # a file no solution builds is stale
    _notebook(tmp_path, _code(GOOD.replace(END, "")), _code(CHECK))
    assert exercises.main(args) == 2
