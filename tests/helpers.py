"""Helpers several test files share (their fixtures are in ``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn


def randomize_(module: nn.Module, seed: int = 0, scale: float = 0.1) -> nn.Module:
    """Add ``scale`` times Gaussian noise to every parameter, in place, and return the module in eval mode.

    Models and blocks initialise biases to 0 and norm gains to 1; a weight copied to the wrong place (or not at
    all) would then go unnoticed. Perturbed, every tensor matters to the output.
    """
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn_like(p))
    return module.eval()


def _same(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and torch.equal(a, b)
        )
    return type(a) is type(b) and a == b


def same_call(args: tuple, kwargs: dict, other_args: tuple, other_kwargs: dict) -> bool:
    """Whether two calls pass equal arguments (tensors: same shape, dtype and entries)."""
    return (
        len(args) == len(other_args)
        and all(_same(a, b) for a, b in zip(args, other_args))
        and kwargs.keys() == other_kwargs.keys()
        and all(_same(kwargs[k], other_kwargs[k]) for k in kwargs)
    )


def answer_key(
    exercise: Any, seed: int = 0, fn: Callable[..., torch.Tensor] | None = None
) -> Callable[..., torch.Tensor]:
    """A learner's answer to ``exercise`` for tests of the grading engine: what ``fn`` (the reference unless
    given: a correct answer; or a mistake's function, a wrong one) returns on the cases of ``seed`` (0: those
    ``check()`` uses), computed here, before the check, and returned by lookup.

    The check's own functions cannot stand in for a learner: they call the library, which the check refuses.
    """
    from attn_edu.grading.exercise import make_cases

    fn = exercise.reference if fn is None else fn
    table = []
    for case in make_cases(exercise, seed):
        try:
            table.append((case, fn(*case.args, **case.kwargs)))
        except Exception as err:  # noqa: BLE001 - a mistake that cannot run on a case raises there as the learner's
            table.append((case, err))

    def answer(*args: object, **kwargs: object) -> torch.Tensor:
        for case, out in table:
            if same_call(case.args, case.kwargs, args, kwargs):
                if isinstance(out, Exception):
                    raise out
                return out.clone()
        raise KeyError(f"not an input of {exercise.exercise_id}'s cases for seed {seed}")

    return answer


def once_per_run(tmp_path_factory: Any, name: str, compute: Callable[[], Any]) -> Any:
    """``compute()`` once for the whole test run, however many pytest-xdist workers ask: the first computes
    it, under a file lock in their common temporary folder, and writes it as JSON; the others read it."""
    import json
    import os

    from filelock import FileLock  # a dependency of torch

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by every worker of this run
    path = root / f"{name}.json"
    with FileLock(str(path) + ".lock"):
        if not path.is_file():
            path.write_text(json.dumps(compute()))
        return json.loads(path.read_text())
