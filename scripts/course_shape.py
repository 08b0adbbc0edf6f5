"""The shape of a course notebook: its core path, its optional depth, and the words a learner reads in each.

    python scripts/course_shape.py [NOTEBOOK ...]     (default: every course/*.ipynb)

prints, per notebook, the markdown words of the core path and of the whole notebook, the code a learner reads
in the core, the core's stored run time, the core time computed from the three, the minutes the title cell
states, and what the shape check (``tests/test_course_shape.py``) finds wrong, if anything.

The shape every course notebook follows:

* **The title cell** (the first markdown cell) starts ``# NN · Title``, lists what the learner will be able to
  do under ``**You will be able to:**`` (two or more bullets) and promises a time,
  ``**Core path: about N minutes.**``, within a minute of the core time computed below.
* **The core path** is every cell before the first optional section: its syllabus points in order, then
  ``## Summary``, which links the notebook's exercises (``../exercises/NN_*.ipynb``) and the next notebook.
  At most 2,500 markdown words (notebook 00: 1,500).
* **The core time** is computed, not estimated: the core's prose at 200 words a minute, plus the code a learner
  reads at 10 lines a minute, plus the time its cells took to run when the outputs were stored. The code a
  learner reads is every non-blank, non-comment line of the core's code cells (not the Colab install cell, not
  a cell whose source is collapsed, ``jupyter.source_hidden``) and of the library source that a core cell
  shows (``show_source``). Ten lines a minute is the pace of reading code to understand it rather than to
  skim it: reviewers who read to find defects manage 150–500 lines an hour (SmartBear's study of Cisco's code
  reviews, 2006, advises under 500), and a learner whose prose has just said what the code does reads faster
  than a reviewer hunting bugs, but not by much. A picture in the prose (``![alt text](figures/name.svg)``, a
  diagram of :mod:`attn_edu.viz.diagrams`) adds no words: a sighted learner looks at it instead of reading its
  alt text, which is there for a screen reader, and says again in words what the picture shows (its prose and
  code around it are counted as usual). The budget: at most 25 minutes (notebook 00: 15), and the
  fifteen cores together at most five hours.
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
CODE_LINES_PER_MINUTE = 10  # why ten: see the module docstring
CORE_WORDS = 2500
CORE_WORDS_FIRST = 1500  # notebook 00: a welcome, not a lecture
MAX_CORE_MINUTES = 25
MAX_CORE_MINUTES_FIRST = 15
MAX_FIRST_PASS_MINUTES = 300  # the fifteen cores

TITLE_RE = re.compile(r"^# (\d\d) · \S")
GOALS_RE = re.compile(r"^\*\*You will be able to:\*\*\s*$")
BULLET_RE = re.compile(r"^\s*[-*] \S")
TIME_RE = re.compile(r"\*\*Core path: about (\d+) minutes\.?\*\*")
DEEPER_PREFIX = "## Going deeper (optional): "
WHY_RE = re.compile(r"^\*Why read it:\* \S")
IMAGE_RE = re.compile(r"!\[[^\]]*\]\([^)]*\)")  # ![alt text](figures/name.svg): looked at, not read


@dataclass
class Shape:
    """What the shape check reads off one notebook."""

    name: str
    core_words: int = 0
    total_words: int = 0
    core_code_lines: int = 0  # the code a learner reads in the core, shown library source included
    core_run_seconds: float = 0.0  # the core cells' run time when the outputs were stored
    minutes: int | None = None  # what the title cell states
    deeper: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _text(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def words(text: str) -> int:
    """Words as a reader counts them: runs of non-space characters, outside images (see the module docstring).

    Example:
        >>> words("Look: ![three masks side by side, dark cells may attend](figures/mask_kinds.svg) and read on.")
        4
    """
    return len(IMAGE_RE.sub(" ", text).split())


def code_lines(text: str) -> int:
    """Lines a learner reads in a code cell: not blank, not only a comment."""
    return sum(1 for line in text.splitlines() if line.strip() and not line.strip().startswith("#"))


def _run_seconds(cell: dict) -> float:
    timing = cell.get("metadata", {}).get("execution", {})
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not (start and end):
        return 0.0
    from datetime import datetime

    def when(stamp: str) -> datetime:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))

    return max(0.0, (when(end) - when(start)).total_seconds())


def _read_code(cell: dict) -> int:
    """The code lines of one code cell that a learner reads: its source unless collapsed or the Colab install
    line, and the library source it shows."""
    source = _text(cell)
    if "google.colab" in source or cell.get("metadata", {}).get("jupyter", {}).get("source_hidden"):
        lines = 0
    else:
        lines = code_lines(source)
    if "show_source(" in source:
        for output in cell.get("outputs", []):
            shown = output.get("data", {}).get("text/plain")
            if shown:
                lines += code_lines("".join(shown) if isinstance(shown, list) else shown)
    return lines


def core_minutes(shape: Shape) -> int:
    """The computed core time: prose, code and run time, in whole minutes (rounded up)."""
    return math.ceil(
        shape.core_words / WORDS_PER_MINUTE
        + shape.core_code_lines / CODE_LINES_PER_MINUTE
        + shape.core_run_seconds / 60
    )


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
    core_cells = cells
    if deeper_at is not None:
        optional_from = [i for i, cell in enumerate(cells) if cell["cell_type"] == "markdown"][deeper_at]
        core_cells = cells[:optional_from]
    code = [cell for cell in core_cells if cell["cell_type"] == "code"]
    shape.core_code_lines = sum(_read_code(cell) for cell in code)
    shape.core_run_seconds = sum(_run_seconds(cell) for cell in code)
    computed = core_minutes(shape)
    if shape.minutes is not None and abs(shape.minutes - computed) > 1:
        shape.problems.append(
            f"'Core path: about {shape.minutes} minutes' must state the computed core time, {computed} minutes "
            f"({shape.core_words} words, {shape.core_code_lines} lines of code, "
            f"{shape.core_run_seconds:.0f} s of run time)"
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


def over_budget(shape: Shape) -> str | None:
    """Why this core is over its time budget, or None."""
    budget = MAX_CORE_MINUTES_FIRST if shape.name[:2] == "00" else MAX_CORE_MINUTES
    minutes = core_minutes(shape)
    if minutes > budget:
        return f"the core takes {minutes} minutes, over its budget of {budget}"
    return None


def table(shapes: list[Shape]) -> str:
    """The words and code a learner reads, per notebook, and the core time, as a plain-text table."""
    rows = [
        f"{'notebook':<34} {'words':>6} {'total':>6} {'code':>5} {'run s':>6} {'core':>5} {'title':>5}  optional"
    ]
    for shape in shapes:
        minutes = "-" if shape.minutes is None else str(shape.minutes)
        rows.append(
            f"{shape.name:<34} {shape.core_words:>6} {shape.total_words:>6} {shape.core_code_lines:>5} "
            f"{shape.core_run_seconds:>6.0f} {core_minutes(shape):>5} {minutes:>5}  {len(shape.deeper)}"
        )
    rows.append(
        f"{'all':<34} {sum(s.core_words for s in shapes):>6} {sum(s.total_words for s in shapes):>6} "
        f"{sum(s.core_code_lines for s in shapes):>5} {sum(s.core_run_seconds for s in shapes):>6.0f} "
        f"{sum(core_minutes(s) for s in shapes):>5} {sum(s.minutes or 0 for s in shapes):>5}"
    )
    rows.append(
        "core = prose at 200 words/min + code at 10 lines/min + stored run time; title = what the title cell states"
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
