"""A concept question is graded on its first answer: where that answer is kept, and how the grader reads it.

``check("04.q1", answer)`` tells a learner at once whether an answer is right, so without a record a
multiple-choice question could be passed by trying every letter. In a notebook (an IPython kernel) the first
answer checked for each question is therefore kept, in a small file beside the notebook
(:data:`ANSWERS_FILE`, or the path in ``ATTN_EDU_ANSWERS``), and every later check shows it in the cell's
output as a record of its own MIME type (:data:`RECORD_MIME`), saved with the notebook. ``python -m
attn_edu.grade`` scores a question on the first record it finds in the submitted notebook's outputs, and on the
answer in the notebook only where there is none (a cell never run, outputs cleared).

What this stops, and what it does not (the README's "Grading: what a grade guarantees"): it stops trying
letters until one is right. It does not stop a learner who deletes the file and clears the outputs, or who
writes a record by hand; both leave a notebook that was edited to deceive, which the instructor's rules on
misconduct cover, as for a paper exam.

Nothing here holds an answer: the module is imported by the notebooks and by the grading command's worker.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

RECORD_MIME = "application/vnd.attn-edu.first-answer+json"
ANSWERS_FILE = ".attn_edu_answers.json"


def answers_path() -> Path:
    """Where first answers are kept: ``ATTN_EDU_ANSWERS`` if set, else :data:`ANSWERS_FILE` in the working
    folder (in JupyterLab, the notebook's folder)."""
    return Path(os.environ.get("ATTN_EDU_ANSWERS") or ANSWERS_FILE)


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (the only place first answers are kept)."""
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def keep_first(question_id: str, encoded: Any, path: Path | None = None) -> Any:
    """The first answer checked for ``question_id``: ``encoded`` itself the first time (it is then kept in
    ``path``), the kept one after that. A file that cannot be read or written starts a new record.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "answers.json"
        >>> keep_first("04.q1", "b", path), keep_first("04.q1", "c", path), keep_first("04.q2", 3, path)
        ('b', 'b', 3)
    """
    path = answers_path() if path is None else path
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        kept = kept if isinstance(kept, dict) else {}
    except (OSError, ValueError):
        kept = {}
    if question_id not in kept:
        kept[question_id] = encoded
        try:
            path.write_text(json.dumps(kept, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        except OSError:
            pass  # a read-only folder: the answer is still shown, only not kept
    return kept[question_id]


def record(question_id: str, first: Any) -> dict[str, Any]:
    """The record a check's output carries under :data:`RECORD_MIME`."""
    return {"id": question_id, "first": first}


def recorded_first_answers(notebook: dict[str, Any]) -> dict[str, Any]:
    """``{question id: first answer}`` from the records in a notebook's saved outputs (the first per id, in
    cell order); answers stay encoded as :func:`attn_edu.grading.protocol.encode_answer` made them.

    Example:
        >>> out = {"output_type": "display_data", "data": {RECORD_MIME: record("04.q1", "b")}}
        >>> recorded_first_answers({"cells": [{"cell_type": "code", "outputs": [out]}]})
        {'04.q1': 'b'}
    """
    found: dict[str, Any] = {}
    for cell in notebook.get("cells", []) if isinstance(notebook, dict) else []:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        for output in cell.get("outputs") or []:
            data = output.get("data") if isinstance(output, dict) else None
            kept = data.get(RECORD_MIME) if isinstance(data, dict) else None
            if isinstance(kept, dict) and isinstance(kept.get("id"), str) and "first" in kept:
                found.setdefault(kept["id"], kept["first"])
    return found


__all__ = ["ANSWERS_FILE", "RECORD_MIME", "answers_path", "keep_first", "record", "recorded_first_answers"]
