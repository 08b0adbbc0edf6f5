"""What a check returns: a :class:`Status`, a :class:`CheckResult` (shown as one coloured line), a :class:`Hint`."""

from __future__ import annotations

import html
from dataclasses import dataclass
from enum import Enum
from typing import Any


class Status(str, Enum):
    """How an exercise went; the grader's JSON and CSV use these names."""

    PASS = "PASS"
    FAIL = "FAIL"
    NOT_ATTEMPTED = "NOT_ATTEMPTED"
    ERROR = "ERROR"
    TIMEOUT = "TIMEOUT"


_MARKS = {
    Status.PASS: ("✔", "passed", "#1a7f37", "#dafbe1"),
    Status.FAIL: ("✘", "failed", "#cf222e", "#ffebe9"),
    Status.ERROR: ("✘", "raised an error", "#cf222e", "#ffebe9"),
    Status.TIMEOUT: ("✘", "timed out", "#cf222e", "#ffebe9"),
    Status.NOT_ATTEMPTED: ("○", "not attempted", "#57606a", "#f6f8fa"),
}


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check: a status, a message for the learner, and a hint for what to try next."""

    exercise_id: str  # e.g. "02.1"
    status: Status  # PASS, FAIL, NOT_ATTEMPTED, ERROR or TIMEOUT
    message: str  # what was expected and what came back (shapes, numbers)
    hint: str = ""  # the likely mistake or the next step; empty when passed
    points: float = (
        0  # points earned: all of them for a PASS, the share of the cases right for a partial answer
    )
    max_points: int = 1  # points available
    record: dict[str, Any] | None = None  # a question's first answer, saved with the output (answers.py)

    @property
    def passed(self) -> bool:
        return self.status is Status.PASS

    @property
    def noun(self) -> str:
        """ "Question" for a concept question (an id like "03.q1"), "Prediction" for a course notebook's
        prediction ("03.p1"), else "Exercise"."""
        if ".q" in self.exercise_id:
            return "Question"
        return "Prediction" if ".p" in self.exercise_id else "Exercise"

    def __repr__(self) -> str:
        mark, verb = _MARKS[self.status][:2]
        text = f"{mark} {self.noun} {self.exercise_id} {verb}: {self.message}"
        return text + (f"\n  Hint: {self.hint}" if self.hint else "")

    __str__ = __repr__

    def _repr_html_(self) -> str:
        mark, verb, colour, background = _MARKS[self.status]
        hint = f"<br><b>Hint:</b> {html.escape(self.hint)}" if self.hint else ""
        return (
            f'<div style="border-left:4px solid {colour};background:{background};padding:4px 8px">'
            f'<b style="color:{colour}">{mark} {self.noun} {html.escape(self.exercise_id)} {verb}</b>: '
            f"{html.escape(self.message)}{hint}</div>"
        )

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """The coloured line, plus a question's first-answer record where it has one (saved with the notebook)."""
        from attn_edu.grading.answers import RECORD_MIME  # no import cycle: answers.py imports nothing here

        bundle: dict[str, Any] = {"text/plain": repr(self), "text/html": self._repr_html_()}
        if self.record is not None:
            bundle[RECORD_MIME] = self.record
        return bundle

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.exercise_id,
            "status": self.status.value,
            "points": self.points,
            "max_points": self.max_points,
            "message": self.message,
            "hint": self.hint,
        }


@dataclass(frozen=True)
class Hint:
    """One tier of an exercise's hints; displays as plain text."""

    exercise_id: str
    text: str

    def __repr__(self) -> str:
        return f"Hint for {self.exercise_id}: {self.text}"

    __str__ = __repr__
