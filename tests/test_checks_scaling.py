"""Checks of notebook 03 (`attn_edu.grading.checks.scaling`): right answers pass, stubs are not attempted, mistakes are named,
and the properties of 03.2 (autograd's Jacobian) and 03.4 (the crossing) catch wrong answers."""

from __future__ import annotations

import math

import pytest
import torch

from attn_edu.grading import Status, check
from attn_edu.grading.exercise import make_cases
from attn_edu.grading.registry import get_exercise

IDS = ("03.1", "03.2", "03.3", "03.4")
EXERCISES = {eid: get_exercise(eid) for eid in IDS}


# Independent correct versions: plain loops and other PyTorch routes, not the references' code.


def _variance_by_loop(q, k):
    dots = torch.einsum("...nd,...nd->...n", q, k)  # (..., N)
    centred = dots - dots.mean(dim=-1, keepdim=True)
    return (centred**2).sum(dim=-1) / dots.shape[-1]  # the biased estimator: also accepted


def _jacobian_by_autograd(weights):
    # The production peer: torch.autograd differentiates torch.softmax at z = log p, one row at a time.
    S = weights.shape[-1]
    rows = [
        torch.autograd.functional.jacobian(lambda z: torch.softmax(z, -1), r.log())
        for r in weights.reshape(-1, S)
    ]
    return torch.stack(rows).reshape(*weights.shape, S)


def _jacobian_by_loop(weights):
    p = weights.reshape(-1, weights.shape[-1])
    R, S = p.shape
    out = torch.empty(R, S, S)
    for r in range(R):
        for i in range(S):
            for j in range(S):
                out[r, i, j] = p[r, i] * ((1.0 if i == j else 0.0) - p[r, j])
    return out.reshape(*weights.shape, S)


def _entropy_with_where(weights):
    logs = torch.where(weights > 0, weights.log(), 0.0)
    return -(weights * logs).sum(dim=-1)


def _saturation_all_at_once(q, k, threshold):
    # Every d at once: cumulative sums of the coordinate-wise products are the scores of the first d coordinates.
    scores = torch.einsum("nd,nsd->nsd", q, k).cumsum(dim=-1)  # (N, S, Dmax)
    curve = scores.softmax(dim=1).max(dim=1).values.mean(dim=0)  # (Dmax,)
    reached = torch.nonzero(curve >= threshold)
    return torch.tensor(reached[0, 0].item() + 1 if reached.numel() else -1)


@pytest.mark.parametrize(
    "exercise_id, fn",
    [
        ("03.1", _variance_by_loop),
        ("03.2", _jacobian_by_autograd),
        ("03.2", _jacobian_by_loop),
        ("03.3", _entropy_with_where),
        ("03.4", _saturation_all_at_once),
    ],
)
def test_independent_correct_versions_pass(exercise_id: str, fn) -> None:
    result = check(exercise_id, fn)
    assert result.status is Status.PASS, result


def test_variance_returned_as_a_float_is_refused() -> None:
    result = check("03.1", lambda q, k: float((q * k).sum(-1).var()))
    assert result.status is Status.FAIL and "got float" in result.message


def test_entropy_without_care_for_zero_weights_fails_the_property() -> None:
    result = check("03.3", lambda w: -(w * w.log()).sum(dim=-1))
    assert result.status is Status.FAIL
    assert result.message.startswith("zero weights:") and "NaN" in result.message
    assert "log only where the weight is positive" in result.hint


def test_the_measured_variance_grows_like_d_k() -> None:
    # What the exercise is for: on unit-variance inputs the reference is about D.
    g = torch.Generator().manual_seed(0)
    for D in (3, 40, 200):
        q, k = torch.randn(4000, D, generator=g), torch.randn(4000, D, generator=g)
        assert math.isclose(float(EXERCISES["03.1"].reference(q, k)), D, rel_tol=0.1)


def _property_cases(exercise_id: str):
    exercise = EXERCISES[exercise_id]
    (prop,) = exercise.properties
    cases = [c for c in make_cases(exercise, 0) if c.group == prop.name]
    assert cases
    return exercise, prop, cases


def test_a_jacobian_off_in_one_entry_fails_autograds_property() -> None:
    exercise, prop, cases = _property_cases("03.2")
    for case in cases:
        right = exercise.reference(*case.args)
        assert prop.holds(case, right) is None
        wrong = right.clone()
        wrong.view(-1)[7] += 1e-3
        message = prop.holds(case, wrong)
        assert message and "autograd" in message and "up to 0.001" in message, message
        assert "shape" in prop.holds(case, right.transpose(-1, -2)[..., 0])


def test_the_saturated_row_passes_back_almost_no_gradient() -> None:
    g = torch.Generator().manual_seed(1)
    scores = torch.randn(4, 7, generator=g)
    ahead = scores + 25.0 * torch.nn.functional.one_hot(torch.tensor([2, 0, 6, 2]), 7)  # one key far ahead
    sharp = EXERCISES["03.2"].reference(torch.softmax(ahead, dim=-1))  # nearly one-hot rows
    mild = EXERCISES["03.2"].reference(torch.softmax(scores, dim=-1))
    assert sharp.abs().max() < 1e-3 < 0.05 < mild.abs().max()


def test_the_crossing_property_catches_answers_off_by_one() -> None:
    exercise, prop, cases = _property_cases("03.4")
    found = [c for c in cases if int(exercise.reference(*c.args)) > 1]
    never = [c for c in cases if int(exercise.reference(*c.args)) == -1]
    assert found and never, "the property needs a case that saturates and one that does not"
    for case in found:
        d = int(exercise.reference(*case.args))
        assert prop.holds(case, torch.tensor(d)) is None
        below = prop.holds(case, torch.tensor(d - 1))
        assert below and "below" in below and f"at d = {d - 1}" in below, below
        assert prop.holds(case, torch.tensor(-1)).endswith("so not -1")
        later = prop.holds(case, torch.tensor(case.args[0].shape[-1]))  # Dmax: reached long before
        assert later and f"at d = {d} " in later, later
        assert "0-d integer" in prop.holds(case, torch.tensor(float(d)))
    for case in never:
        assert prop.holds(case, torch.tensor(-1)) is None
        assert "below" in prop.holds(case, torch.tensor(case.args[0].shape[-1]))


def test_unscaled_attention_saturates_and_scaled_attention_does_not() -> None:
    # What the exercise is for: unit-variance q and k with 16 keys reach a mean max weight of 0.9 at a
    # d of a few hundred at most; with the 1/sqrt(d) they never do.
    g = torch.Generator().manual_seed(0)
    q = torch.randn(200, 400, generator=g, dtype=torch.float64)
    k = torch.randn(200, 16, 400, generator=g, dtype=torch.float64)
    d = int(EXERCISES["03.4"].reference(q, k, 0.9))
    assert 50 < d < 400
    scaled = EXERCISES["03.4"].mistakes[0]
    assert "divided by √d" in scaled.message and int(scaled.fn(q, k, 0.9)) == -1
