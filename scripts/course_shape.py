"""The shape of a course notebook: its core path, its optional depth, and the words a learner reads in each.

    python scripts/course_shape.py [NOTEBOOK ...]     (default: every course/*.ipynb)

prints, per notebook, the markdown words of the core path and of the whole notebook, the minutes the title
cell promises and what the shape check (``tests/test_course_shape.py``) finds wrong, if anything.

The shape every course notebook follows:

* **The title cell** (the first markdown cell) starts ``# NN · Title``, lists what the learner will be able to
  do under ``**You will be able to:**`` (two or more bullets) and promises a time,
  ``**Core path: about N minutes.**``, that covers the core's words at 200 a minute and is at most 15.
* **The core path** is every cell before the first optional section: its syllabus points in order, then
  ``## Summary``, which links the notebook's exercises (``../exercises/NN_*.ipynb``) and the next notebook.
  At most 2,500 markdown words (notebook 00: 1,500).
* **Optional sections** follow the summary. Each starts a markdown cell with
  ``## Going deeper (optional): <title>`` and, on its next line, ``*Why read it:* <one line>``. Nothing but
  optional sections comes after the summary.
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COURSE = REPO / "course"
EXERCISES = REPO / "exercises"

WORDS_PER_MINUTE = 200
CORE_WORDS = 2500
CORE_WORDS_FIRST = 1500  # notebook 00: a welcome, not a lecture
MAX_CORE_MINUTES = 15

TITLE_RE = re.compile(r"^# (\d\d) · \S")
GOALS_RE = re.compile(r"^\*\*You will be able to:\*\*\s*$")
BULLET_RE = re.compile(r"^\s*[-*] \S")
TIME_RE = re.compile(r"\*\*Core path: about (\d+) minutes\.?\*\*")
DEEPER_PREFIX = "## Going deeper (optional): "
WHY_RE = re.compile(r"^\*Why read it:\* \S")


@dataclass
class Shape:
    """What the shape check reads off one notebook."""

    name: str
    core_words: int = 0
    total_words: int = 0
    minutes: int | None = None
    deeper: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _text(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def words(text: str) -> int:
    """Words as a reader counts them: runs of non-space characters."""
    return len(text.split())


def _links(text: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", text)


def read_shape(path: Path) -> Shape:
    """Read ``path`` (a course notebook) and say what its shape is and where it breaks the rules above."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    shape = Shape(path.stem)
    markdown = [_text(cell) for cell in cells if cell["cell_type"] == "markdown"]
    if not markdown:
        shape.problems.append("no markdown cell")
        return shape
    shape.total_words = sum(words(text) for text in markdown)

    title = markdown[0].splitlines()
    number = path.name[:2]
    if not title or not TITLE_RE.match(title[0]) or title[0][2:4] != number:
        shape.problems.append(f"the first markdown cell must start '# {number} · <title>'")
    goals = [i for i, line in enumerate(title) if GOALS_RE.match(line)]
    bullets = 0
    if goals:
        for line in title[goals[0] + 1 :]:
            if BULLET_RE.match(line):
                bullets += 1
            elif line.strip() and not line.startswith("  "):
                break
    if bullets < 2:
        shape.problems.append(
            "the title cell must list the goals under '**You will be able to:**' (2+ bullets)"
        )
    time = TIME_RE.search(markdown[0])
    if time:
        shape.minutes = int(time.group(1))
    else:
        shape.problems.append("the title cell must promise '**Core path: about N minutes.**'")

    summary_at = None
    deeper_at = None
    for index, text in enumerate(markdown):
        lines = text.splitlines()
        for number_in_cell, line in enumerate(lines):
            if line.startswith("## Going deeper"):
                if (
                    number_in_cell != 0
                    or not line.startswith(DEEPER_PREFIX)
                    or len(line) <= len(DEEPER_PREFIX)
                ):
                    shape.problems.append(
                        f"'{line}': an optional section starts its own cell with '{DEEPER_PREFIX}<title>'"
                    )
                nxt = next((rest for rest in lines[number_in_cell + 1 :] if rest.strip()), "")
                if not WHY_RE.match(nxt):
                    shape.problems.append(f"'{line}': its next line must be '*Why read it:* <one line>'")
                shape.deeper.append(line[len(DEEPER_PREFIX) :])
                if deeper_at is None:
                    deeper_at = index
                if summary_at is None:
                    shape.problems.append(f"'{line}' comes before '## Summary': depth follows the core path")
            elif line.startswith("## "):
                if line.strip() == "## Summary":
                    if summary_at is not None:
                        shape.problems.append("two '## Summary' sections")
                    summary_at = index
                elif summary_at is not None:
                    shape.problems.append(f"'{line}' comes after the summary: only optional sections may")
    if summary_at is None:
        shape.problems.append("no '## Summary' section")

    core = markdown[:deeper_at] if deeper_at is not None else markdown
    shape.core_words = sum(words(text) for text in core)
    budget = CORE_WORDS_FIRST if number == "00" else CORE_WORDS
    if shape.core_words > budget:
        shape.problems.append(f"the core path has {shape.core_words} words of markdown, over {budget}")
    if shape.minutes is not None:
        needed = math.ceil(shape.core_words / WORDS_PER_MINUTE)
        if not needed <= shape.minutes <= MAX_CORE_MINUTES:
            shape.problems.append(
                f"'Core path: about {shape.minutes} minutes' must cover {shape.core_words} words at "
                f"{WORDS_PER_MINUTE} a minute ({needed}) and be at most {MAX_CORE_MINUTES}"
            )

    if summary_at is not None:
        summary = "\n".join(markdown[summary_at:deeper_at])
        links = _links(summary)
        exercises = sorted(EXERCISES.glob(f"{number}_*.ipynb"))
        for exercise in exercises:
            if f"../exercises/{exercise.name}" not in links:
                shape.problems.append(f"the summary must link its exercises: ../exercises/{exercise.name}")
        following = sorted(path.parent.glob(f"{int(number) + 1:02d}_*.ipynb"))
        for nxt in following:
            if nxt.name not in links:
                shape.problems.append(f"the summary must link the next notebook: {nxt.name}")
    return shape


def table(shapes: list[Shape]) -> str:
    """The words a learner reads, per notebook, as a plain-text table."""
    rows = [f"{'notebook':<34} {'core':>6} {'total':>6} {'min':>4}  optional sections"]
    for shape in shapes:
        minutes = "-" if shape.minutes is None else str(shape.minutes)
        rows.append(
            f"{shape.name:<34} {shape.core_words:>6} {shape.total_words:>6} {minutes:>4}  {len(shape.deeper)}"
        )
    rows.append(
        f"{'all':<34} {sum(s.core_words for s in shapes):>6} {sum(s.total_words for s in shapes):>6} "
        f"{sum(s.minutes or 0 for s in shapes):>4}"
    )
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    paths = [Path(arg) for arg in argv] or sorted(COURSE.glob("*.ipynb"))
    shapes = [read_shape(path) for path in paths]
    print(table(shapes))
    for shape in shapes:
        for problem in shape.problems:
            print(f"  {shape.name}: {problem}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
