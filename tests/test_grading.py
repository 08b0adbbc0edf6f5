"""The grading engine (`attn_edu.grading`): every kind of answer gets a status, time limits hold, strict mode, the
watch for calls into the package. Exercise-specific tests live in `tests/test_checks_<concept>.py`."""

from __future__ import annotations

import dataclasses
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import answer_key

from attn_edu.grading import Status, check, hint
from attn_edu.grading.exercise import LEVELS
from attn_edu.grading.notebook import submitted
from attn_edu.grading.registry import CHECK_MODULES, collect, exercises, get_exercise, questions
from attn_edu.grading.run import ExerciseTimeout, one_thread, time_limit, watch_shortcuts

EXERCISES = {i: e for i, e in exercises().items() if i.startswith("02.")}  # the engine is tested on these


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with one_thread():  # as check() does; direct judge() calls here run on tiny tensors too
        yield


# ---------------------------------------------------------------------------------------------------------
# Every other kind of answer gets a status, never an exception


def test_not_implemented_is_not_attempted() -> None:
    def todo(q, k, scale=None):
        raise NotImplementedError("Exercise 02.1: ...")

    result = check("02.1", todo)
    assert result.status is Status.NOT_ATTEMPTED and result.points == 0


@pytest.mark.parametrize(
    "answer, status, words",
    [
        (lambda q, k, scale=None: [[0.5]], Status.FAIL, "got list"),
        (lambda q, k, scale=None: np.zeros(3), Status.FAIL, "got ndarray"),
        (lambda q, k, scale=None: type("Yes", (), {"__eq__": lambda s, o: True})(), Status.FAIL, "got Yes"),
        (lambda q, k, scale=None: torch.zeros(1).as_subclass(torch.nn.Parameter), Status.FAIL, "subclass"),
        (
            lambda q, k, scale=None: q @ k.transpose(-2, -1) @ k.transpose(-2, -1),
            Status.ERROR,
            "RuntimeError",
        ),
        (lambda q, k, scale=None: (_ for _ in ()).throw(SystemExit(3)), Status.ERROR, "SystemExit"),
        (lambda q, k, scale=None: (k @ q.transpose(-2, -1)).softmax(-1), Status.FAIL, "expected shape"),
        (
            lambda q, k, scale=None: (q.double() @ k.double().transpose(-2, -1) / q.shape[-1] ** 0.5).softmax(
                -1
            ),
            Status.FAIL,
            "dtype",
        ),
        (  # the answer key itself: its reference calls the library on the learner's behalf
            lambda q, k, scale=None: get_exercise("02.1").reference(q, k, scale),
            Status.FAIL,
            "calls attn_edu.attention.attention_weights",
        ),
    ],
)
def test_wrong_answers_get_a_status(answer, status: Status, words: str) -> None:
    result = check("02.1", answer)
    assert result.status is status, result
    assert words in result.message, result


def test_a_partly_right_answer_earns_the_share_of_its_cases() -> None:
    top_left = get_exercise("04.1").mistakes[0].fn  # right only where T == S (one case of five)
    key = answer_key(get_exercise("04.1"), fn=top_left)
    result = check("04.1", key)
    assert result.status is Status.FAIL and result.points == round(get_exercise("04.1").points / 5, 2), result

    def right_then_raises(T, S):
        if T > S:
            raise ValueError("T > S not handled")
        return torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)

    result = check("04.1", right_then_raises)  # cases (5,5), (3,7), (1,4) right, then (7,3) raises
    assert result.status is Status.ERROR and result.points == round(3 / 5 * get_exercise("04.1").points, 2)
    assert (
        check("04.1", torch.no_grad()(lambda T, S: _causal_by_hand(T, S))).points
        == get_exercise("04.1").points
    )
    from attn_edu import masks

    assert check("04.1", masks.causal_mask).points == 0  # a call into the library earns nothing


def test_points_grow_with_difficulty_and_time() -> None:
    items = exercises()
    assert items["03.1"].points == 1  # level 1, 5 minutes: the least an exercise is worth
    assert items["12.3"].points < items["12.1"].points < items["12.2"].points  # recall < one idea < algorithm
    assert {e.difficulty for e in items.values()} <= set(LEVELS) and len(LEVELS) >= 4
    assert all(q.points == 1 for q in questions().values())
    assert all(
        items[a].points <= items[b].points
        for a in items
        for b in items
        if items[a].minutes <= items[b].minutes and items[a].difficulty <= items[b].difficulty
    )


def test_an_error_names_the_learners_line() -> None:
    def causal_mask(T, S):
        ones = torch.ones(T, S)
        return ones @ torch.ones(T + 1, 2)  # the line that raises

    result = check("04.1", causal_mask)
    assert result.status is Status.ERROR and "(in causal_mask, line " in result.message, result
    assert "`return ones @ torch.ones(T + 1, 2)" in result.message


def test_a_slow_function_times_out() -> None:
    def forever(q, k, scale=None):
        while True:
            pass

    started = time.monotonic()
    result = check("02.1", forever, timeout=0.2)
    assert result.status is Status.TIMEOUT and "0.2 s" in result.message
    assert time.monotonic() - started < 2


def test_time_limits_nest() -> None:
    with pytest.raises(ExerciseTimeout):
        with time_limit(0.3):
            with time_limit(5):
                pass
            while True:  # the outer limit still fires after the inner one ended
                time.sleep(0.01)


def test_unknown_id_and_non_function_do_not_raise() -> None:
    assert check("99.9", print).status is Status.ERROR
    assert check("02.1", 42).status is Status.ERROR


def test_strict_mode_raises_for_anything_but_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTN_EDU_STRICT", "1")
    assert check("02.3", answer_key(get_exercise("02.3"))).passed
    with pytest.raises(AssertionError, match="02.3"):
        check("02.3", lambda B, H, T, S, D, Dv: None)


def test_strict_argument_overrides_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ATTN_EDU_STRICT", raising=False)
    with pytest.raises(AssertionError, match="Exercise 02.3"):
        check("02.3", lambda B, H, T, S, D, Dv: None, strict=True)
    with pytest.raises(AssertionError, match="Question 04.q2"):
        check("04.q2", "a", strict=True)
    assert check("02.3", answer_key(get_exercise("02.3")), strict=True).passed
    monkeypatch.setenv("ATTN_EDU_STRICT", "1")
    assert not check("02.3", lambda B, H, T, S, D, Dv: None, strict=False).passed


def test_grading_process_only_records_the_function(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTN_EDU_GRADER_CHILD", "1")

    def never_called(B, H, T, S, D, Dv):
        raise AssertionError("the grading process calls it itself")

    check("02.3", never_called)
    assert submitted("02.3") is never_called


# ---------------------------------------------------------------------------------------------------------
# What the learner sees


def test_result_shows_as_coloured_line() -> None:
    passed = check("02.3", answer_key(get_exercise("02.3")))
    key = answer_key(get_exercise("02.3"))
    failed = check("02.3", lambda *sizes: key(*sizes) // 2)
    assert repr(passed).startswith("✔ Exercise 02.3 passed") and "#1a7f37" in passed._repr_html_()
    assert repr(failed).startswith("✘ Exercise 02.3 failed") and "#cf222e" in failed._repr_html_()
    assert "Hint: that counts each multiply-add once" in repr(failed)
    assert "<b>Hint:</b>" in failed._repr_html_()


def test_hints_come_in_tiers() -> None:
    tiers = [hint("02.2", n).text for n in range(1, 4)]
    assert len(set(tiers)) == 3 and tiers[0].startswith("1/3") and "hint('02.2', 2)" in tiers[0]
    assert hint("02.2", 99).text == tiers[-1]


def test_an_id_is_listed_once() -> None:
    again = SimpleNamespace(
        __name__="again", EXERCISES=(dataclasses.replace(EXERCISES["02.1"], title="again"),)
    )
    with pytest.raises(ValueError, match="02.1.*appears twice"):
        collect((*CHECK_MODULES, again))


# ---------------------------------------------------------------------------------------------------------
# Calling the package instead of writing the answer is reported


def _causal_by_hand(T, S):
    return torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)


def test_a_call_into_the_package_fails_even_when_it_then_crashes() -> None:
    from attn_edu import masks

    def learner(T, S):
        masks.causal_mask(T, S)
        raise RuntimeError("and then something else went wrong")

    result = check("04.1", learner)
    assert result.status is Status.FAIL and "attn_edu.masks.causal_mask" in result.message
    assert check("04.1", _causal_by_hand).status is Status.PASS  # torch alone is fine


def test_classes_methods_and_context_managers_of_the_package_count() -> None:
    from attn_edu.grading.given import toy_sublayers
    from attn_edu.interp import gate_heads
    from attn_edu.multihead import MultiHeadAttention

    attn, ffn, attn_norm, _ = toy_sublayers(8, 2, seed=0)  # the parts exercise 08.2 hands over
    with watch_shortcuts() as called:
        attn(attn_norm(torch.randn(1, 3, 8)))  # used as intended: forward runs from torch's Module.__call__
        ffn.forward(torch.randn(1, 3, 8))
    assert called == []
    library = MultiHeadAttention(8, 2)  # the library's own module, behind torch's Module.__call__
    with watch_shortcuts() as called:
        library(torch.randn(1, 3, 8))
    assert called == ["attn_edu.multihead.MultiHeadAttention.forward"]
    with watch_shortcuts() as called:
        attn = MultiHeadAttention(8, 2)
        with gate_heads(attn, torch.ones(2)):  # entered through contextlib
            pass
        attn.forward(torch.randn(1, 3, 8))
    assert {
        "attn_edu.multihead.MultiHeadAttention.__init__",
        "attn_edu.interp.gate_heads",
        "attn_edu.multihead.MultiHeadAttention.forward",
    } <= set(called)
    assert not any("_validate" in name or "split_heads" in name for name in called)  # only direct calls


def test_switching_the_watch_off_is_reported_and_the_profiler_restored() -> None:
    before = sys.getprofile()

    def learner(T, S):
        sys.setprofile(None)
        return _causal_by_hand(T, S)

    result = check("04.1", learner)
    assert result.status is Status.FAIL and "sys.setprofile" in result.message
    assert sys.getprofile() is before


def test_a_kernel_exercise_without_triton_says_what_to_install() -> None:
    """Where Triton cannot be installed, the exercise notebook's stand-in lets the kernel cells run, and the
    check reports the install hint (not a shortcut into the package, not a NameError)."""
    from attn_edu.grading.stand_in import TritonStandIn

    triton = tl = TritonStandIn()

    @triton.jit
    def softmax_kernel(x_ptr, out_ptr, n_cols, row_stride, BLOCK: tl.constexpr):  # noqa: ANN001, ANN202
        pass

    def softmax_rows(x):  # noqa: ANN001, ANN202
        out = torch.empty_like(x)
        softmax_kernel[(x.shape[0],)](
            x, out, x.shape[1], x.stride(0), BLOCK=triton.next_power_of_2(x.shape[1])
        )
        return out

    result = check("12.4", softmax_rows)
    assert result.status is Status.ERROR and "TritonNotInstalledError" in result.message, result
    assert 'pip install "attn-edu[triton]"' in result.message


def test_a_failing_answer_runs_the_reference_once_per_case() -> None:
    """Judging a wrong answer compares it with the reference, then counts the cases it got right (partial
    credit): the reference's outputs are computed once and kept, since a reference may be a training run."""
    from attn_edu.grading.exercise import make_cases
    from attn_edu.grading.judge import judge
    from attn_edu.grading.run import run_case

    exercise = get_exercise("02.1")
    calls = []

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        return exercise.reference(*args, **kwargs)

    counting = dataclasses.replace(exercise, reference=counted)
    cases = make_cases(counting, 0)
    right = answer_key(exercise)  # the reference's outputs, computed before the judging starts
    seen = []

    def half_right(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - right on the first case only
        seen.append(1)
        out = right(*args, **kwargs)
        return out if len(seen) == 1 else out + 1.0

    result = judge(counting, cases, [run_case(half_right, case, None) for case in cases])
    assert result.status is Status.FAIL and 0 < result.points < result.max_points, result
    assert len(calls) == len(cases), (len(calls), len(cases))
