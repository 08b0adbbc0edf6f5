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


def lanes(notebooks: list[Path], count: int, head_start: float = 0.0) -> list[list[Path]]:
    """``notebooks`` cut into ``count`` lanes of near-equal stored run time, one per worker, so that a long
    notebook runs beside a short one, not beside another long one.

    Greedy (longest first, each into the lane with the least time so far); even lanes then run longest first and
    odd lanes shortest first. Two workers on two cores share the cores: a long notebook beside a long one would
    take most of both, and neither's time would say what one learner waits for. Lane 0 starts ``head_start``
    seconds late (the browser suite's other tests run there first, beside lane 1's shortest notebooks), so the
    lanes still end together.
    """
    loads, out = [0.0] * max(1, count), [[] for _ in range(max(1, count))]
    loads[0] = head_start
    for notebook in longest_first(notebooks):
        lane = loads.index(min(loads))
        out[lane].append(notebook)
        loads[lane] += stored_seconds(notebook)
    return [lane if i % 2 == 0 else lane[::-1] for i, lane in enumerate(out)]
