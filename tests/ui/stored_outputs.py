"""Compare the outputs a notebook produced in the browser with the ones stored in it, the way nbval does.

The browser suite runs every course notebook in JupyterLab; ``make ui`` starts it with the Makefile's
OTHER_CPU settings (ATen's non-vectorised kernels, MKL's compatible path), so its kernels compute as another
CPU would. The stored outputs come from a native run, so comparing what the browser computed with them proves
at once that they are current and that they reproduce off this CPU's own kernels: ``make nbval`` then skips
its own pass over ``course/`` as another CPU computes. The comparison is nbval's own: its comment markers and
cell tags (``# NBVAL_IGNORE_OUTPUT``, ``nbval-ignore-output``, ``# NBVAL_SKIP``), its merging of stream
outputs, its sanitizers (``tests/nbval_sanitize.cfg``), and its ``compare_outputs`` (images and widget model
ids are not compared). Only the report is written here.

``record`` and ``compared_everywhere`` keep the list of notebooks compared so, with each file's sha256
and the CPU settings of the run, in ``artifacts/ui/outputs-compared.json``: ``make nbval`` skips its pass
over exactly those files, and only when the settings were OTHER_CPU's (``scripts/compared_in_browser.py``).
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
import os
from collections import OrderedDict, defaultdict
from pathlib import Path
from types import SimpleNamespace

import nbformat
from nbval.plugin import (
    IPyNbCell,
    coalesce_streams,
    find_comment_markers,
    find_metadata_tags,
    get_sanitize_patterns,
    nocolors,
)

REPO = Path(__file__).resolve().parents[2]
SANITIZE_FILE = REPO / "tests" / "nbval_sanitize.cfg"
# What nbval leaves out of the comparison without --nbdime (nbval.plugin.IPyNbFile.__init__).
SKIP_COMPARE = (
    "metadata",
    "traceback",
    "prompt_number",
    "output_type",
    "name",
    "execution_count",
    "application/vnd.jupyter.widget-view+json",  # model ids are random
    "image/png",
    "image/jpeg",
)
# The settings that make a run compute as another CPU would (the Makefile's OTHER_CPU); unset = native.
CPU_SETTINGS = ("ATEN_CPU_CAPABILITY", "MKL_CBWR")
RECORD = REPO / "artifacts" / "ui" / "outputs-compared.json"


class _Comparer:
    """Just enough of an nbval cell for nbval's ``compare_outputs`` to run on two lists of outputs."""

    compare_outputs = IPyNbCell.compare_outputs
    sanitize = IPyNbCell.sanitize

    def __init__(self, patterns: list[tuple[str, str]]) -> None:
        self.parent = SimpleNamespace(skip_compare=SKIP_COMPARE, sanitize_patterns=OrderedDict(patterns))
        self.colors = nocolors
        self.comparison_traceback: list[str] = []

    def format_output_compare(self, key: str, left: object, right: object) -> None:
        if isinstance(left, str) and isinstance(right, str):
            diff = difflib.unified_diff(
                left.splitlines(), right.splitlines(), "stored", "in the browser", lineterm=""
            )
            self.comparison_traceback.append(f'output "{key}" differs:\n' + "\n".join(diff))
        else:
            self.comparison_traceback.append(
                f'output "{key}" differs: stored {left!r}, in the browser {right!r}'
            )


def _output(raw: dict) -> nbformat.NotebookNode:
    """One output as nbformat reads it from a file: multiline strings joined (JSON may split them)."""
    output = copy.deepcopy(raw)
    if isinstance(output.get("text"), list):
        output["text"] = "".join(output["text"])
    for mime, value in output.get("data", {}).items():
        if isinstance(value, list) and all(isinstance(line, str) for line in value):
            output["data"][mime] = "".join(value)
    return nbformat.from_dict(output)


def _options(cell: nbformat.NotebookNode) -> defaultdict:
    """nbval's options for a code cell under ``--nbval``: metadata tags, then comment markers."""
    options = defaultdict(bool, find_metadata_tags(cell.metadata))
    options.update(dict(find_comment_markers(cell.source)))
    options.setdefault("check", True)
    return options


def output_differences(stored: Path, executed: list[dict]) -> list[str]:
    """One message per code cell whose browser outputs differ from the stored ones (empty: all agree).

    ``executed`` is the notebook's cells as JupyterLab holds them after running (``cell_type`` and
    ``outputs`` in nbformat's JSON), in the stored notebook's order.
    """
    notebook = nbformat.read(stored, as_version=4)
    if [cell.cell_type for cell in notebook.cells] != [cell["cell_type"] for cell in executed]:
        return [f"{stored.name}: the browser holds {len(executed)} cells, the file {len(notebook.cells)}"]
    patterns = get_sanitize_patterns(SANITIZE_FILE.read_text(encoding="utf-8"))
    problems = []
    code_cells = [(ref, run) for ref, run in zip(notebook.cells, executed) if ref.cell_type == "code"]
    for number, (ref, run) in enumerate(code_cells):
        options = _options(ref)
        if options["skip"] or not options["check"] or ref.execution_count is None:
            continue  # nbval does not compare these either
        comparer = _Comparer(patterns)
        fresh = coalesce_streams([_output(out) for out in run["outputs"]])
        kept = coalesce_streams([_output(out) for out in ref.outputs])
        if not comparer.compare_outputs(fresh, kept):
            detail = "\n".join(comparer.comparison_traceback)
            problems.append(f"code cell {number} (id {ref.get('id', '?')}): outputs differ\n{detail}")
    return problems


def cpu_settings() -> dict[str, str]:
    """The CPU settings this process (and the JupyterLab it starts) runs with; empty when native."""
    return {name: os.environ[name] for name in CPU_SETTINGS if os.environ.get(name)}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def key(notebook: Path) -> str:
    """How the record names a notebook: its path from the repository's root (else its full path)."""
    notebook = notebook.resolve()
    return str(notebook.relative_to(REPO)) if notebook.is_relative_to(REPO) else str(notebook)


def write_record(
    compared: dict[str, str], path: Path = RECORD, settings: dict[str, str] | None = None
) -> None:
    """Save ``{key(notebook): sha256}`` of the notebooks whose outputs matched, with the CPU settings of the
    run (this process's, unless ``settings`` names them)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    settings = cpu_settings() if settings is None else settings
    record = {"cpu_settings": settings, "notebooks": dict(sorted(compared.items()))}
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def compared_everywhere(folder: Path, settings: dict[str, str], path: Path = RECORD) -> list[str]:
    """Why ``folder``'s notebooks, as they are now, were not all compared in the browser with ``settings``.

    Empty when every ``*.ipynb`` in ``folder`` is in the record with its current sha256 and the record's
    CPU settings are ``settings``.
    """
    if not path.is_file():
        return [f"no record at {path} (the browser suite has not run, or found no Chromium)"]
    record = json.loads(path.read_text(encoding="utf-8"))
    if record.get("cpu_settings") != settings:
        return [f"the browser ran with CPU settings {record.get('cpu_settings')}, not {settings}"]
    compared = record.get("notebooks", {})
    reasons = []
    for notebook in sorted(folder.glob("*.ipynb")):
        if compared.get(key(notebook)) != sha256(notebook):
            reasons.append(f"{notebook.name}: not compared in the browser as it is now")
    return reasons
