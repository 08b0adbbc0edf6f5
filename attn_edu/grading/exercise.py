"""The records an exercise is made of: :class:`Case`, :class:`Mistake`, :class:`Property`, :class:`Exercise`.

A check module (``attn_edu/grading/checks/<concept>.py``) builds its exercises from these records and lists
them in its ``EXERCISES`` tuple; :mod:`attn_edu.grading.registry` collects the tuples. The records hold
plain functions and data, so judging them needs nothing from the learner's process.
"""

from __future__ import annotations

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


@dataclass(frozen=True)
class Property:
    """A requirement tested on its own cases (``Case.group == name``) after the values agree."""

    name: str  # e.g. "fully masked rows"
    message: str  # what the property demands, shown when it fails


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
    points: int = 1  # points for a PASS
    atol: float = 1e-5  # float outputs match when |got - expected| <= atol + rtol * |expected|
    rtol: float = 1e-4


def make_cases(exercise: Exercise, seed: int) -> list[Case]:
    """The exercise's cases for one seed: the same seed always gives the same inputs."""
    return exercise.make_cases(torch.Generator().manual_seed(seed))
