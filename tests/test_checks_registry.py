"""Every registered exercise, whichever notebook it belongs to: the reference passes, a stub is not attempted,
each known mistake fails with its own hint (on the notebook's inputs and on the grading command's, which differ),
and every solution notebook's exercises are registered.

Concept-specific tests (independent correct versions, edge cases) live in ``tests/test_checks_<concept>.py``.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import sys
from pathlib import Path

import pytest
from helpers import answer_key, same_call

from attn_edu.grading import Status, check
from attn_edu.grading.command import GRADER_SEED
from attn_edu.grading.exercise import Case, make_cases
from attn_edu.grading.harness import KERNELS
from attn_edu.grading.judge import judge
from attn_edu.grading.registry import exercises
from attn_edu.grading.run import run_case

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = exercises()
IDS = sorted(EXERCISES)
MISTAKES = [(eid, i) for eid in IDS for i in range(len(EXERCISES[eid].mistakes))]
CONCEPT_MODULES = ("retrieval", "attention", "masks", "multihead", "positional", "rope", "objectives")
CONCEPT_MODULES += (
    "params",
    "kv_cache",
    "generation",
    "sparse",
    "efficient",
    "moe",
    "flash",
    "interp",
    "blocks",
)


def _package_twin(exercise_id: str):
    """The package's own function of the same name, when it takes the exercise's arguments."""
    exercise = EXERCISES[exercise_id]
    case = make_cases(exercise, 0)[0]
    for name in CONCEPT_MODULES:
        module = importlib.import_module(f"attn_edu.{name}")
        twin = getattr(module, exercise.function_name, None)
        if inspect.isfunction(twin) and twin.__module__ == module.__name__:
            try:
                inspect.signature(twin).bind(*case.args, **case.kwargs)
            except TypeError:
                return None
            return twin
    return None


TWINS = {eid: twin for eid in IDS if (twin := _package_twin(eid)) is not None}

# Exercises whose sizes, bases and factors (not only the tensors' entries) are drawn from the seed: besides the
# notebook's seed (0, what check() uses) and the grader's, they are judged on MORE_SEEDS, so that the reference
# passes and each mistake is named at whatever the generator draws.
SIZES_DRAWN = ("06.1", "07.3", "07.4")
MORE_SEEDS = (1, 2, 3, 4)


def _grader_seeds(exercise_id: str) -> tuple[int, ...]:
    """The seeds on which an exercise is judged as the grading command judges it."""
    return (GRADER_SEED, *MORE_SEEDS) if exercise_id in SIZES_DRAWN else (GRADER_SEED,)


def _graded(exercise_id: str, fn, seed: int):
    """What the grading command's judge says of ``fn`` on the cases of ``seed``."""
    exercise = EXERCISES[exercise_id]
    cases = make_cases(exercise, seed)
    return judge(exercise, cases, [run_case(fn, case, None) for case in cases])


# Exercises whose answer is a measurement too small to have a library function of its own. Every other
# reference must call the library's concept code, so that changing the library moves its exercises.
MEASUREMENTS = {
    "03.1": "the sample variance of q·k over pairs: torch.var on a product, the measurement itself",
}
PACKAGE_DIR = os.path.dirname(importlib.import_module("attn_edu").__file__) + os.sep
SUPPORT_MODULES = {"attn_edu._validate", "attn_edu.report", "attn_edu.source", "attn_edu.env"}


def _library_calls(exercise_id: str) -> set[str]:
    """The public functions and classes of the library (outside grading/ and the support modules) that
    the exercise's reference calls on its cases, directly or not."""
    exercise, called = EXERCISES[exercise_id], set()

    def profile(frame, event, arg):
        module = frame.f_globals.get("__name__", "")
        if (
            event == "call"
            and frame.f_code.co_filename.startswith(PACKAGE_DIR)
            and not module.startswith("attn_edu.grading")
            and module not in SUPPORT_MODULES
            and (not frame.f_code.co_name.startswith("_") or frame.f_code.co_name in ("__init__", "__call__"))
        ):
            called.add(f"{module}.{frame.f_code.co_qualname}")

    for case in make_cases(exercise, 0):
        sys.setprofile(profile)
        try:
            exercise.reference(*case.args, **case.kwargs)
        finally:
            sys.setprofile(None)
    return {name for name in called if name.startswith("attn_edu.")}


@pytest.mark.parametrize("exercise_id", IDS)
def test_every_reference_calls_into_the_library(exercise_id: str) -> None:
    calls = _library_calls(exercise_id)
    if exercise_id in MEASUREMENTS:
        assert not calls, f"{exercise_id} calls {sorted(calls)}: take it off the MEASUREMENTS list"
    else:
        assert calls, (
            f"{exercise_id}'s reference reimplements the answer: make it call the library's function"
        )


def test_every_solution_notebook_has_registered_exercises() -> None:
    notebooks = {p.name[:2] for p in (ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")}
    registered = {eid.split(".")[0] for eid in IDS}
    assert notebooks <= registered, f"solutions without checks: {sorted(notebooks - registered)}"


@pytest.mark.parametrize("exercise_id", IDS)
def test_reference_passes_and_stub_is_not_attempted(exercise_id: str) -> None:
    exercise = EXERCISES[exercise_id]
    if (
        exercise_id in KERNELS
    ):  # check() runs the given code around the kernel or update of the exercise's name: judged here directly
        assert _graded(exercise_id, answer_key(exercise), 0).status is Status.PASS
    else:
        assert check(exercise_id, answer_key(exercise)).status is Status.PASS
    for seed in _grader_seeds(exercise_id):
        graded = _graded(exercise_id, answer_key(exercise, seed), seed)
        assert graded.status is Status.PASS, (seed, graded)

    def stub(*args, **kwargs):
        raise NotImplementedError(f"Exercise {exercise_id}: ...")

    result = _graded(exercise_id, stub, 0) if exercise_id in KERNELS else check(exercise_id, stub)
    assert result.status is Status.NOT_ATTEMPTED and result.points == 0
    assert len(exercise.mistakes) >= 2, "each exercise recognises at least two common mistakes"
    assert len(exercise.hints) >= 2, "each exercise has tiered hints"


@pytest.mark.parametrize(("exercise_id", "index"), MISTAKES)
def test_each_mistake_fails_with_its_hint(exercise_id: str, index: int) -> None:
    exercise = EXERCISES[exercise_id]
    mistake = exercise.mistakes[index]
    if (
        exercise_id in KERNELS
    ):  # check() runs the given code around the kernel or update of the exercise's name: judged here directly
        result = _graded(exercise_id, answer_key(exercise, fn=mistake.fn), 0)
    else:
        result = check(exercise_id, answer_key(exercise, fn=mistake.fn))
    assert result.status is Status.FAIL and result.hint == mistake.message, result
    for seed in _grader_seeds(exercise_id):  # the grading command's inputs, and more where sizes are drawn
        graded = _graded(exercise_id, answer_key(exercise, seed, mistake.fn), seed)
        assert graded.status is Status.FAIL and graded.hint == mistake.message, (seed, graded)


def _same_inputs(a: Case, b: Case) -> bool:
    """Whether two cases call the function with equal arguments (tensors: same shape, dtype and entries)."""
    return same_call(a.args, a.kwargs, b.args, b.kwargs)


@pytest.mark.parametrize("exercise_id", IDS)
def test_the_grading_command_draws_other_inputs_than_the_notebook(exercise_id: str) -> None:
    """A learner who computes the answers to check()'s inputs in the notebook (seed 0) with the library and
    returns them by lookup meets other inputs in the grading command: its cases depend on the seed."""
    exercise = EXERCISES[exercise_id]
    notebook, grader = make_cases(exercise, 0), make_cases(exercise, GRADER_SEED)
    assert len(notebook) != len(grader) or not all(map(_same_inputs, notebook, grader)), (
        f"{exercise_id}'s cases ignore the generator: draw sizes or values from it"
    )


def test_most_exercises_have_a_package_twin() -> None:
    assert len(TWINS) >= 15  # the shortcut a learner is most tempted by: importing the answer


@pytest.mark.parametrize("exercise_id", sorted(TWINS))
def test_the_package_twin_is_reported_not_passed(exercise_id: str) -> None:
    twin = TWINS[exercise_id]
    name = f"{twin.__module__}.{twin.__qualname__}"
    if (
        exercise_id in KERNELS
    ):  # the check runs its own driver around the learner's update: the twin is no update
        result = check(exercise_id, twin)
        assert result.status is Status.ERROR and "no function named" in result.message, result
        return
    handed_over = check(exercise_id, twin)  # `from attn_edu.masks import causal_mask`, then check() it

    def wrapped(*args, **kwargs):  # the learner's own function calling it
        return twin(*args, **kwargs)

    for result in (handed_over, check(exercise_id, wrapped)):
        assert result.status is Status.FAIL and result.points == 0, result
        assert name in result.message and "yourself" in result.hint
    # the grading command judges the same outcome
    cases = make_cases(EXERCISES[exercise_id], GRADER_SEED)
    graded = judge(EXERCISES[exercise_id], cases, [run_case(wrapped, cases[0], None)])
    assert graded.status is Status.FAIL and name in graded.message


def _solution_lines() -> dict[str, list[str]]:
    """The code lines of each exercise's solution regions in solutions/, without comments or spaces."""
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            source = "".join(cell["source"])
            marker = re.search(r"#\s*Exercise\s+(\d+\.\d+)\s*:", source)
            if cell["cell_type"] != "code" or marker is None:
                continue
            for region in re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", source, flags=re.S):
                for line in region.splitlines():
                    code = re.sub(r"\s+", "", line.split("  #")[0])
                    if len(code) >= 20:
                        found.setdefault(marker.group(1), []).append(code)
    return found


def test_no_hint_is_a_line_of_the_solution() -> None:
    """Hints climb from a nudge to a sketch; none hands over the answer line (the region's last line, or a
    return statement) or two lines of the solution to paste."""
    lines, leaks = _solution_lines(), []
    for exercise_id, exercise in EXERCISES.items():
        solution = lines.get(exercise_id, [])
        for n, text in enumerate(exercise.hints, 1):
            squeezed = re.sub(r"\s+", "", text)
            pasted = [line for line in solution if line in squeezed]
            if solution and solution[-1] in pasted:
                leaks.append(f"{exercise_id} hint {n} holds the answer line {solution[-1]}")
            elif len(pasted) >= 2:
                leaks.append(f"{exercise_id} hint {n} holds {len(pasted)} lines of the solution: {pasted}")
            if re.match(r"\s*return\s", text):
                leaks.append(f"{exercise_id} hint {n} is a return statement: {text}")
    assert not leaks, "\n".join(leaks)
