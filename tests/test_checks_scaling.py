"""Checks of notebook 03 (`attn_edu.grading.checks.scaling`): right answers pass, stubs are not attempted, mistakes are named."""

from __future__ import annotations

import math

import pytest
import torch

from attn_edu.grading import Status, check
from attn_edu.grading.registry import get_exercise

IDS = ("03.1", "03.2", "03.3")
EXERCISES = {eid: get_exercise(eid) for eid in IDS}


# Independent correct versions: plain loops and other PyTorch routes, not the references' code.


def _variance_by_loop(q, k):
    dots = torch.einsum("...nd,...nd->...n", q, k)  # (..., N)
    centred = dots - dots.mean(dim=-1, keepdim=True)
    return (centred**2).sum(dim=-1) / dots.shape[-1]  # the biased estimator: also accepted


def _scores_by_loop(q, k, num_heads):
    B, T, C = q.shape
    D = C // num_heads
    out = torch.empty(B, num_heads, T, k.shape[1])
    for h in range(num_heads):
        part = slice(h * D, (h + 1) * D)
        out[:, h] = q[..., part] @ k[..., part].transpose(1, 2) * D**-0.5
    return out


def _entropy_with_where(weights):
    logs = torch.where(weights > 0, weights.log(), 0.0)
    return -(weights * logs).sum(dim=-1)


@pytest.mark.parametrize(
    "exercise_id, fn", [("03.1", _variance_by_loop), ("03.2", _scores_by_loop), ("03.3", _entropy_with_where)]
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
    assert "entr" in result.hint


def test_the_measured_variance_grows_like_d_k() -> None:
    # What the exercise is for: on unit-variance inputs the reference is about D.
    g = torch.Generator().manual_seed(0)
    for D in (3, 40, 200):
        q, k = torch.randn(4000, D, generator=g), torch.randn(4000, D, generator=g)
        assert math.isclose(float(EXERCISES["03.1"].reference(q, k)), D, rel_tol=0.1)
