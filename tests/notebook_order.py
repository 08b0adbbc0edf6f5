"""Run the longest notebooks first, so that two workers finish together.

pytest-xdist hands a notebook (nbval's cells, or one browser test) to whichever worker is free; in file order
the longest notebook (13) comes last, and one worker then runs it alone while the other waits. The time a
notebook took when its outputs were stored is in its cells' metadata (nbclient and JupyterLab record
``iopub.execute_input`` and ``shell.execute_reply`` for each cell): sorting by it, longest first, leaves only
short notebooks for the end.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path


def _when(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def stored_seconds(notebook: Path) -> float:
    """Seconds the notebook's code cells took when its outputs were stored (0 when it records none)."""
    try:
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError):
        return 0.0
    total = 0.0
    for cell in cells:
        timing = cell.get("metadata", {}).get("execution", {})
        start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
        if start and end:
            try:
                total += max(0.0, (_when(end) - _when(start)).total_seconds())
            except ValueError:
                continue
    return total


def longest_first(notebooks: list[Path]) -> list[Path]:
    """``notebooks`` by stored run time, longest first (ties by name, so every worker agrees)."""
    return sorted(notebooks, key=lambda path: (-round(stored_seconds(path), 1), path.name))
