"""The browser suite's comparison of fresh outputs with stored ones: nbval's rules, and the record make reads.

These tests need no browser: they feed ``output_differences`` a notebook's cells as JupyterLab would
hold them after a run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
from stored_outputs import REPO, compared_everywhere, key, output_differences, sha256, write_record


def _notebook(tmp_path: Path, cells: list[tuple[str, list[dict]]]) -> Path:
    """A notebook of code cells ``(source, outputs)``, each run once, written to ``tmp_path``."""
    notebook = nbformat.v4.new_notebook()
    for number, (source, outputs) in enumerate(cells, start=1):
        cell = nbformat.v4.new_code_cell(source, execution_count=number)
        cell.outputs = [nbformat.from_dict(output) for output in outputs]
        notebook.cells.append(cell)
    notebook.cells.insert(0, nbformat.v4.new_markdown_cell("# a title"))
    path = tmp_path / "example.ipynb"
    nbformat.write(notebook, path)
    return path


def _stdout(text: str) -> dict:
    return {"output_type": "stream", "name": "stdout", "text": text}


def _as_run(path: Path, replace: dict[int, list[dict]] | None = None) -> list[dict]:
    """The notebook's cells as the browser returns them, with the outputs of some cells replaced."""
    cells = json.loads(path.read_text())["cells"]
    return [
        {"cell_type": cell["cell_type"], "outputs": (replace or {}).get(index, cell.get("outputs", []))}
        for index, cell in enumerate(cells)
    ]


def test_equal_outputs_pass_and_a_changed_digit_is_reported_with_a_diff(tmp_path: Path) -> None:
    path = _notebook(tmp_path, [("print(1 / 3)", [_stdout("0.3333\n")]), ("x = 1", [])])
    assert output_differences(path, _as_run(path)) == []
    problems = output_differences(path, _as_run(path, {1: [_stdout("0.3334\n")]}))
    assert len(problems) == 1
    assert "code cell 0" in problems[0] and "-0.3333" in problems[0] and "+0.3334" in problems[0]


def test_nbval_rules_apply_markers_streams_sanitizers_images(tmp_path: Path) -> None:
    figure = {
        "output_type": "display_data",
        "metadata": {},
        "data": {"text/plain": "<Figure size 640x480 with 1 Axes>", "image/png": "AAAA"},
    }
    path = _notebook(
        tmp_path,
        [
            ("# NBVAL_IGNORE_OUTPUT\nprint(time())", [_stdout("1700000000\n")]),
            ("print('a'); print('b')", [_stdout("a\n"), _stdout("b\n")]),
            ("print(f'{t:.2f} s')", [_stdout("took 1.25 s\n")]),
            ("plot()", [figure]),
        ],
    )
    fresh_figure = {
        **figure,
        "data": {"text/plain": figure["data"]["text/plain"]},
    }  # the browser drops images
    run = _as_run(
        path,
        {
            1: [_stdout("1800000000\n")],  # ignored by its marker
            2: [_stdout("a\nb\n")],  # one stream instead of two: nbval merges them
            3: [_stdout("took 9.75 s\n")],  # a timing: the sanitizer replaces it
            4: [fresh_figure],
        },
    )
    assert output_differences(path, run) == []
    missing = output_differences(path, _as_run(path, {4: []}))
    assert len(missing) == 1 and "Missing output fields" in missing[0]


def test_a_different_cell_layout_is_reported(tmp_path: Path) -> None:
    path = _notebook(tmp_path, [("x = 1", [])])
    problems = output_differences(path, _as_run(path)[:1])
    assert problems and "cells" in problems[0]


def test_the_record_covers_a_folder_only_with_current_hashes_and_the_same_cpu_settings(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "nbs"
    folder.mkdir()
    first = _notebook(folder, [("x = 1", [])])
    second = first.with_name("second.ipynb")
    second.write_text(first.read_text())
    record = tmp_path / "record.json"
    assert compared_everywhere(folder, {}, record)  # no record yet

    write_record({key(first): sha256(first)}, record, settings={})
    reasons = compared_everywhere(folder, {}, record)
    assert reasons == ["second.ipynb: not compared in the browser as it is now"]

    write_record({key(first): sha256(first), key(second): sha256(second)}, record, settings={})
    assert compared_everywhere(folder, {}, record) == []
    assert compared_everywhere(folder, {"ATEN_CPU_CAPABILITY": "default"}, record)  # other settings
    second.write_text(second.read_text().replace("x = 1", "x = 2"))  # changed since
    assert compared_everywhere(folder, {}, record) == [
        "second.ipynb: not compared in the browser as it is now"
    ]


def test_the_script_make_calls_exits_one_with_reasons_and_two_on_bad_arguments(tmp_path: Path) -> None:
    script = REPO / "scripts" / "compared_in_browser.py"
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "a.ipynb").write_text("{}")
    done = subprocess.run([sys.executable, script, str(empty)], capture_output=True, text=True)
    assert done.returncode == 1
    assert "a.ipynb: not compared" in done.stdout or "no record" in done.stdout
    bad = subprocess.run([sys.executable, script, str(empty), "oops"], capture_output=True, text=True)
    assert bad.returncode == 2
