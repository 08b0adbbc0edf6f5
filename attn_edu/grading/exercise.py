"""The records an exercise is made of: :class:`Case`, :class:`Mistake`, :class:`Property`, :class:`Exercise`,
and :class:`Question` for a concept question (a choice or a number, no code).

A check module (``attn_edu/grading/checks/<concept>.py``) builds its exercises from these records and lists
them in its ``EXERCISES`` tuple; the notebook's concept questions sit beside it, in the ``QUESTIONS`` tuple of
``attn_edu/grading/questions/<concept>.py``. :mod:`attn_edu.grading.registry` collects the tuples. The records hold plain functions and data, so judging them needs nothing from the
learner's process.
"""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class Case:
    """One call of the learner's function: ``fn(*args, **kwargs)``."""

    args: tuple[Any, ...]  # positional arguments, named by Exercise.arg_names
    kwargs: dict[str, Any] = field(default_factory=dict)  # keyword arguments (tensors, bools, ints, None)
    group: str = "values"  # "values", or the name of the Property these inputs test


@dataclass(frozen=True)
class Mistake:
    """A known-wrong version of the function and what to tell a learner whose output matches it."""

    fn: Callable[..., Any]  # same signature as the reference
    message: str  # names the mistake and the fix


# The slip every softmax exercise shares, and what a check says about it: a large-score case catches it.
OVERFLOW_HINT = (
    "the softmax is not shifted: in float32, exp overflows past about 88, so the case with the largest scores "
    "gives inf / inf = NaN. Subtract each row's largest score before exp (the shift cancels in the ratio), as "
    "a library softmax does."
)


def unshifted_softmax(scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """The softmax of that known mistake: ``exp / sum`` without subtracting the row's maximum, so a score past
    about 88 gives ``inf / inf = NaN`` in float32 (masked ``-inf`` scores still give 0)."""
    e = scores.exp()
    return e / e.sum(dim=dim, keepdim=True)


def lifted(scores: torch.Tensor, top: float) -> torch.Tensor:
    """A large-score case's scores: rows 0, 2, 4, ... (the last dim is a row) moved up so that each one's largest
    score is ``top``, the other rows left as they are. The softmax ignores a row's shift, so the weights stay
    those of ordinary scores; exp does not: past about 88 it overflows float32 unless the row's largest score
    is subtracted first."""
    out = scores.clone()
    out[..., ::2, :] += top - out[..., ::2, :].amax(dim=-1, keepdim=True)  # (..., T, S)
    return out


def overflow_diagnosis(
    unshifted: Callable[..., torch.Tensor], *, atol: float = 1e-5, rtol: float = 1e-4
) -> Callable[[Case, torch.Tensor], str | None]:
    """A diagnosis (:attr:`Exercise.diagnoses`) that names the unshifted softmax when, on a case where
    ``unshifted`` (the exercise's answer written with :func:`unshifted_softmax`) overflows, an output is wrong
    only in rows (along the last dim) that overflow there or hold NaN or inf.

    The named :class:`Mistake` catches that answer when its output matches entry for entry. A learner may
    write the same slip otherwise: a mask multiplied in after ``exp`` (a hidden score's inf times 0 is NaN, in
    rows the other way leaves alone), a sum clamped away from 0 (zeros instead of NaN), the nucleus of top-p
    taken from the same softmax. Every other row still matches ``unshifted``'s, within ``atol`` and ``rtol``.
    """

    def diagnose(case: Case, got: torch.Tensor) -> str | None:
        wrong = unshifted(*case.args, **case.kwargs)
        if not got.is_floating_point() or got.shape != wrong.shape:
            return None
        overflowed = (~torch.isfinite(wrong)).any(dim=-1)  # (...,) one flag a row
        if not overflowed.any():
            return None
        aside = overflowed | (~torch.isfinite(got)).any(dim=-1)  # (...,)
        rest, expected = got[~aside].double(), wrong[~aside].double()
        return OVERFLOW_HINT if torch.isclose(rest, expected, rtol=rtol, atol=atol).all() else None

    return diagnose


@dataclass(frozen=True)
class Property:
    """A requirement tested on its own cases (``Case.group == name``) after the values agree.

    Without ``holds`` the learner's output on those cases is compared with the reference's. With it, the
    output is judged by the predicate alone: ``holds(case, output)`` returns ``None`` when the property holds,
    else what is wrong in numbers. A *measurement* exercise checks its answer this way, by what the number
    must satisfy (the FLOPs that PyTorch's counter counts, the least-squares optimality of a fit), not by a
    second copy of the formula.
    """

    name: str  # e.g. "fully masked rows"
    message: str  # what the property demands, shown when it fails
    holds: Callable[[Case, torch.Tensor], str | None] | None = None


@dataclass(frozen=True)
class Exercise:
    """Everything a check needs: the reference, the cases, the known mistakes and the hints."""

    exercise_id: str  # "NN.k": notebook number, then the exercise number in that notebook
    title: str  # one line: what the learner writes
    function_name: str  # the learner's function in the notebook; the grading command looks it up by name
    arg_names: tuple[str, ...]  # names of the positional arguments, used in messages
    # The attn_edu answer, same signature as the learner's function: a lambda (or def) in the check module
    # that calls the library, since calls from the checks are the package's own, not a learner's shortcut.
    reference: Callable[..., torch.Tensor]
    make_cases: Callable[[torch.Generator], list[Case]]  # random cases (value cases and property cases)
    mistakes: tuple[Mistake, ...] = ()  # known-wrong variants, tried in order
    properties: tuple[Property, ...] = ()  # checked last, each on its own cases
    diagnoses: tuple[Callable[[Case, torch.Tensor], str | None], ...] = ()  # explain a value mismatch
    hints: tuple[str, ...] = ()  # tiered: general first, nearly the answer last
    difficulty: int = 1  # a level of LEVELS, 1 (recall) to 5 (a kernel); stars in the notebook
    # About how long a careful first-time solver who read the notebook needs: 3 minutes of reading, then per line
    # of the solution 1 minute at level 1 up to 6 at level 5 (LEVEL_RATE), at least LEVEL_FLOOR, in fives.
    minutes: int = 10
    # "" a function to write; "build" assembles a module and matches a production peer; "measure" runs an
    # experiment whose answer is checked by a Property with ``holds``; "triton" a kernel for Triton.
    kind: str = ""
    atol: float = 1e-5  # float outputs match when |got - expected| <= atol + rtol * |expected|
    rtol: float = 1e-4

    @property
    def points(self) -> int:
        """Points for a PASS: the level times the minutes in tens, rounded up (a 5-minute recall 1, a 15-minute
        exercise of one idea 4, a 35-minute algorithm 16); a partial answer earns its share of the cases."""
        return self.difficulty * math.ceil(self.minutes / 10)


LETTERS = "abcdefgh"  # the labels of a question's choices, in order


@dataclass(frozen=True)
class Question:
    """A concept question: pick one of ``choices`` (answered with its letter) or give a number.

    In the notebook the learner writes ``answer_q1 = "b"`` (or a number) and runs
    ``check("03.q1", answer_q1)``; a right answer shows the explanation, a wrong one what that
    answer misses (``wrong``), never the right answer.
    """

    # "NN.qk": notebook number, then q and the question's number in that notebook; "NN.pk" for a prediction, which
    # the course notebook asks before the cell that answers it (points=0: a prediction is for the learner)
    exercise_id: str
    title: str  # one line: what is asked
    answer: str | float  # a letter of LETTERS for a choice question, else the number
    explanation: str  # why the answer is right; shown once it is given
    choices: tuple[str, ...] = ()  # the options, lettered a, b, c, ... (empty: the answer is a number)
    # What a wrong answer misses: a choice's letter, or a number that a known slip gives, with its message.
    wrong: tuple[tuple[str | float, str], ...] = ()
    tolerance: float = 0.0  # a number passes when |given - answer| <= tolerance
    hints: tuple[str, ...] = ()  # tiered, as for exercises; never the answer
    points: int = 1  # a question is worth one point: it takes minutes, and its answer is right or wrong
    difficulty: int = 1
    minutes: int = 2

    @property
    def variable_name(self) -> str:
        """The name the notebook stores the answer in: ``answer_q1`` for question ``03.q1``."""
        return "answer_" + self.exercise_id.split(".", 1)[1]

    @property
    def kind(self) -> str:
        return "choice" if self.choices else "number"

    def form(self) -> str:
        """What an answer looks like, for the exercise notebook's stub: ``"a", "b", "c" or "d"`` or ``a number``."""
        if not self.choices:
            return "a number"
        letters = [f'"{letter}"' for letter in LETTERS[: len(self.choices)]]
        return ", ".join(letters[:-1]) + f" or {letters[-1]}"


# The difficulty scale: what a level asks of the learner, from a formula the text states to a kernel.
LEVELS = {1: "recall", 2: "one idea", 3: "combine", 4: "algorithm", 5: "kernel"}
LEVEL_MEANING = {
    1: "recall or transcribe a formula the text states, one or two lines",
    2: "a few lines that carry one idea",
    3: "several ideas combined, or shapes to get right across steps",
    4: "an algorithm with state: tiled, recurrent, a loop that carries running values",
    5: "a kernel or a small project: an algorithm written for the hardware",
}
LEVEL_RATE = {1: 1, 2: 2, 3: 3, 4: 4, 5: 6}  # minutes per line of solution code at each level
LEVEL_FLOOR = {1: 5, 2: 10, 3: 15, 4: 30, 5: 60}  # the fewest minutes an exercise of each level takes
KINDS = {"": "", "build": "build and verify", "measure": "measure", "triton": "Triton kernel"}


def badge(item: Exercise | Question) -> str:
    """The level, kind, time and points an exercise's heading shows: ``★★★☆☆ combine · measure · about 20 min ·
    6 points`` (no kind for a plain function or a question)."""
    stars = "★" * item.difficulty + "☆" * (len(LEVELS) - item.difficulty)
    kind = KINDS[item.kind] if isinstance(item, Exercise) else ""  # a question's kind is its answer's form
    worth = f"{item.points} point{'s' if item.points != 1 else ''}"
    return f"{stars} {LEVELS[item.difficulty]}{f' · {kind}' if kind else ''} · about {item.minutes} min · {worth}"


GRADER_SEED = 20240611  # the grader's inputs without a secret: not the ones check() uses in the notebook (0)


def case_seed(secret: str | None, learner: str, exercise_id: str, seed: int = GRADER_SEED) -> int:
    """The seed of one learner's inputs for one exercise: from the instructor's secret and the learner's id,
    so two learners' inputs differ and nobody without the secret can compute them; ``seed`` for all alike
    when there is no secret.

    Example:
        >>> case_seed("s3cret", "ada", "04.1") != case_seed("s3cret", "grace", "04.1")
        True
        >>> case_seed(None, "ada", "04.1") == case_seed(None, "grace", "04.1") == GRADER_SEED
        True
    """
    if not secret:
        return seed
    digest = hmac.new(secret.encode(), f"{learner}\0{exercise_id}".encode(), hashlib.sha256).digest()
    return int.from_bytes(digest[:7], "big")


def make_cases(exercise: Exercise, seed: int) -> list[Case]:
    """The exercise's cases for one seed: the same seed always gives the same inputs."""
    return exercise.make_cases(torch.Generator().manual_seed(seed))
