"""The grading engine's newer parts: properties judged by a predicate (measurement exercises), exercise kinds
in the heading badge, and Triton exercises' tensors sent to the device that compiles them."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from attn_edu.grading.exercise import KINDS, Case, Exercise, Mistake, Property, badge
from attn_edu.grading.judge import judge
from attn_edu.grading.result import Status
from attn_edu.grading.run import kernel_device, run_case


def _count_cases(g: torch.Generator) -> list[Case]:
    sizes = [int(n) for n in torch.randint(2, 40, (3,), generator=g)]
    return [Case((n,)) for n in sizes] + [Case((n,), group="pairs") for n in (7, 12)]


def _pairs_counted(case: Case, got: torch.Tensor) -> str | None:
    """An independent route to the answer: count the pairs one by one."""
    (n,) = case.args
    counted = sum(1 for i in range(n) for j in range(n) if i < j)
    return None if int(got) == counted else f"counting them gives {counted}, the answer says {int(got)}"


# The number of unordered pairs of n things; the property counts them instead of using the formula.
PAIRS = Exercise(
    exercise_id="99.1",
    title="pairs",
    function_name="pairs",
    arg_names=("n",),
    reference=lambda n: torch.tensor(n * (n - 1) // 2),
    make_cases=_count_cases,
    mistakes=(Mistake(lambda n: torch.tensor(n * n), "that counts ordered pairs with repeats"),),
    properties=(Property("pairs", "count the pairs (i, j) with i < j", holds=_pairs_counted),),
    kind="measure",
)


def _judged(exercise: Exercise, fn) -> tuple[Status, str, str]:
    cases = exercise.make_cases(torch.Generator().manual_seed(0))
    result = judge(exercise, cases, [run_case(fn, c, None) for c in cases])
    return result.status, result.message, result.hint


def test_a_property_with_a_predicate_judges_by_the_predicate_alone() -> None:
    status, message, _ = _judged(PAIRS, PAIRS.reference)
    assert status is Status.PASS and "1 property holds" in message
    # right on the value cases, wrong on the property's: the predicate (not the reference) catches it
    wrong_on_seven = lambda n: torch.tensor(n * (n - 1) // 2 + (n == 7))  # noqa: E731
    exercise = dataclasses.replace(PAIRS, reference=wrong_on_seven)
    status, message, hint = _judged(exercise, wrong_on_seven)
    assert status is Status.FAIL
    assert message.startswith("pairs: counting them gives 21, the answer says 22, for n=7"), message
    assert hint == "count the pairs (i, j) with i < j"


def test_a_predicate_that_cannot_read_the_output_fails_the_answer_not_the_check() -> None:
    exercise = dataclasses.replace(PAIRS, reference=lambda n: torch.arange(n))
    status, message, _ = _judged(exercise, lambda n: torch.arange(n))
    assert status is Status.FAIL and "cannot be checked" in message, message


def test_the_badge_names_the_kind() -> None:
    assert badge(PAIRS) == "★☆☆☆☆ recall · measure · about 10 min · 1 point"
    plain = dataclasses.replace(PAIRS, kind="", difficulty=2, minutes=5)
    assert badge(plain) == "★★☆☆☆ one idea · about 5 min · 2 points"
    project = dataclasses.replace(PAIRS, kind="triton", difficulty=3, minutes=40)
    assert project.points == 12 and badge(project).endswith("Triton kernel · about 40 min · 12 points")
    kernel = dataclasses.replace(project, difficulty=5)
    assert badge(kernel).startswith("★★★★★ kernel · ") and kernel.points == 20
    assert set(KINDS) == {"", "build", "measure", "triton"}


def test_a_triton_exercise_runs_on_the_gpu_only_when_triton_compiles(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert kernel_device() == "cuda"
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the interpreter runs on CPU tensors, GPU or not
    assert kernel_device() == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("TRITON_INTERPRET")
    assert kernel_device() == "cpu"


def test_run_case_copies_the_inputs_to_the_device_and_the_result_back() -> None:
    seen = []

    def fn(x):
        seen.append(x.device.type)
        return torch.full(x.shape, 2.0)

    x = torch.arange(3.0)
    outcome = run_case(fn, Case((x,)), None, device="meta")  # a device every machine has
    assert seen == ["meta"] and x.device.type == "cpu"  # the case's own tensor stays where it was
    assert outcome.kind == "tensor" and outcome.tensor.tolist() == [2.0, 2.0, 2.0]
