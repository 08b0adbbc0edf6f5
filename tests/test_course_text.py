"""What a learner reads in a course notebook is the lesson, not the machinery that tests it.

* nbval's markers are cell tags (``nbval-ignore-output``), never ``# NBVAL_...`` comments in the code, and no cell
  carries a ``# fmt: skip``: the formatter's layout is the layout;
* no markdown cell, printed output or code comment speaks of the tests: nbval, pytest, CI, files under
  ``tests/``, "another CPU" or CPU configurations (those notes belong in the README's maintainer section and in
  docstrings);
* a claim prints its measured value, its bound and its verdict through :func:`attn_edu.report.claim`: no cell
  calls ``below()`` (which prints the bound alone) and no output line is a bare ``True`` or ``False``;
* every core asks at least one prediction (``check("NN.pK", prediction)``, :mod:`attn_edu.grading.questions`),
  left unanswered in the stored notebook, before the cell that answers it.

Notebooks still being reshaped are listed in ``PENDING``; each must still break a rule (strict xfail), so the
list shrinks as they are done.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from attn_edu.grading.registry import predictions

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "course").glob("*.ipynb"))

# Notebooks whose core has not been reshaped yet (claims, predictions, mentions of the tests).
PENDING: set[str] = set()

MENTION = re.compile(
    r"nbval|\bpytest\b|\btests?/|test suite|\bmake test\b|another CPU|other CPUs|CPU configurations?"
    r"|when the notebook is tested|notebook tests?\b",
    re.IGNORECASE,
)
CI = re.compile(r"\bCI\b")  # the acronym only: "ci" is in too many words
PREDICTION_CALL = re.compile(r"""check\(\s*["'](\d\d\.p\d+)["']""")


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _outputs(cell: dict) -> list[str]:
    texts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            texts.append("".join(output["text"]))
        for kind in ("text/plain", "text/markdown", "text/html"):
            value = output.get("data", {}).get(kind)
            if value:
                texts.append("".join(value))
    return texts


def _is_colab_install(cell: dict) -> bool:
    return cell["cell_type"] == "code" and "google.colab" in _source(cell)


def _core(cells: list[dict]) -> list[dict]:
    """The cells before the first optional section."""
    for index, cell in enumerate(cells):
        if cell["cell_type"] == "markdown" and _source(cell).startswith("## Going deeper"):
            return cells[:index]
    return cells


def mentions_of_the_tests(cells: list[dict]) -> list[str]:
    """Where a learner would read about the tests: ``"cell 5, markdown: <line>"`` for each line."""
    found = []
    for index, cell in enumerate(cells):
        if _is_colab_install(cell):
            continue
        texts = [("markdown", _source(cell))] if cell["cell_type"] == "markdown" else []
        if cell["cell_type"] == "code":
            comments = [line.split("#", 1)[1] for line in _source(cell).splitlines() if "#" in line]
            texts += [("comment", "\n".join(comments))] + [("output", text) for text in _outputs(cell)]
        for kind, text in texts:
            for line in text.splitlines():
                if MENTION.search(line) or CI.search(line):
                    found.append(f"cell {index}, {kind}: {line.strip()[:120]}")
    return found


def problems(path: Path) -> list[str]:
    """What in this notebook breaks the rules of this file's docstring."""
    cells = _cells(path)
    found = [f"mentions the tests: {where}" for where in mentions_of_the_tests(cells)]
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        lines = _source(cell).splitlines()
        if any(line.strip().startswith("# NBVAL") for line in lines):
            found.append(f"cell {index}: a '# NBVAL' comment (use the nbval-ignore-output cell tag)")
        if any("fmt: skip" in line or "fmt: off" in line for line in lines):
            found.append(f"cell {index}: a formatter exemption ('# fmt: skip')")
        if re.search(r"\bbelow\(", _source(cell)):
            found.append(f"cell {index}: below() prints the bound alone (use attn_edu.report.claim)")
        for text in _outputs(cell):
            if any(line.strip() in ("True", "False") for line in text.splitlines()):
                found.append(f"cell {index}: prints a bare True/False where a number belongs")
    number = path.name[:2]
    core = _core(cells)
    asked = [
        (index, PREDICTION_CALL.search(_source(cell)).group(1))
        for index, cell in enumerate(core)
        if cell["cell_type"] == "code" and PREDICTION_CALL.search(_source(cell))
    ]
    if not asked:
        found.append(
            "the core asks no prediction (check('NN.pK', prediction) before the cell that answers it)"
        )
    known = predictions()
    for index, prediction_id in asked:
        if not prediction_id.startswith(f"{number}.") or prediction_id not in known:
            found.append(f"cell {index}: {prediction_id} is not one of notebook {number}'s predictions")
        elif not any("not attempted" in text for text in _outputs(core[index])):
            found.append(
                f"cell {index}: {prediction_id} must be stored unanswered, so that the learner predicts"
            )
    return found


@pytest.mark.parametrize(
    "notebook",
    [
        pytest.param(path, marks=pytest.mark.xfail(strict=True, reason="core not reshaped yet"))
        if path.name[:2] in PENDING
        else path
        for path in NOTEBOOKS
    ],
    ids=[path.stem for path in NOTEBOOKS],
)
def test_the_notebook_shows_the_lesson_not_the_test_machinery(notebook: Path) -> None:
    found = problems(notebook)
    assert not found, f"{notebook.name}:\n" + "\n".join(found)


def test_no_course_cell_carries_an_nbval_comment() -> None:
    """Every notebook, pending or not: the markers are cell tags."""
    for path in NOTEBOOKS:
        for index, cell in enumerate(_cells(path)):
            if cell["cell_type"] == "code":
                assert "NBVAL" not in _source(cell), (
                    f"{path.name} cell {index}: use the nbval-ignore-output tag"
                )


def test_every_prediction_is_asked_in_its_course_notebook() -> None:
    for prediction_id, prediction in predictions().items():
        assert prediction.points == 0, f"{prediction_id}: a prediction is for the learner, worth no points"
        path = next((REPO / "course").glob(f"{prediction_id[:2]}_*.ipynb"))
        asked = [
            cell
            for cell in _core(_cells(path))
            if cell["cell_type"] == "code" and f'check("{prediction_id}", prediction)' in _source(cell)
        ]
        assert len(asked) == 1, f"{prediction_id}: asked {len(asked)} times in the core of {path.name}"


@pytest.mark.parametrize(
    ("planted", "kind"),
    [
        ("Outputs are compared by nbval on every run.", "markdown"),
        ("See tests/test_masks.py for the proof.", "markdown"),
        ("the digits move on another CPU", "output"),
        ("# the CI compares this", "comment"),
    ],
)
def test_the_mention_check_finds_a_planted_mention(planted: str, kind: str) -> None:
    cells = _cells(REPO / "course" / "04_masks.ipynb")
    assert mentions_of_the_tests(cells) == []
    if kind == "markdown":
        cells[3]["source"] = _source(cells[3]) + "\n\n" + planted
    elif kind == "output":
        cells[4]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": planted + "\n"}]
    else:
        cells[4]["source"] = planted + "\n" + _source(cells[4])
    found = mentions_of_the_tests(cells)
    assert len(found) == 1 and f", {kind}: " in found[0] and planted.lstrip("# ")[:20] in found[0], found


def test_the_rules_catch_below_and_a_bare_boolean(tmp_path: Path) -> None:
    path = tmp_path / "04_masks.ipynb"
    notebook = json.loads((REPO / "course" / "04_masks.ipynb").read_text(encoding="utf-8"))
    assert problems(REPO / "course" / "04_masks.ipynb") == []
    notebook["cells"][4]["source"] = "print(below(err, 1e-5))\n" + _source(notebook["cells"][4])
    notebook["cells"][4]["outputs"].append({"output_type": "stream", "name": "stdout", "text": "True\n"})
    path.write_text(json.dumps(notebook), encoding="utf-8")
    found = problems(path)
    assert any("below()" in p for p in found) and any("bare True/False" in p for p in found), found
