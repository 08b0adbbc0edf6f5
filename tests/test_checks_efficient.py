"""Checks of notebook 11 (`attn_edu.grading.checks.efficient`): right answers pass, stubs are not attempted, mistakes are named."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attn_edu.grading import Status, check
from attn_edu.grading.exercise import Case, make_cases
from attn_edu.grading.registry import get_exercise

IDS = ("11.1", "11.2", "11.3", "11.4", "11.5")
EXERCISES = {eid: get_exercise(eid) for eid in IDS}


# Independent correct versions: loops, the quadratic form of linear attention, Mixtral-style routing.


def _window_by_loops(T, S, window, causal=True):
    mask = torch.zeros(T, S, dtype=torch.bool)
    for t in range(T):
        p = S - T + t  # absolute position of query t
        for s in range(S):
            mask[t, s] = 0 <= p - s < window if causal else abs(p - s) < window
    return mask


def _linear_quadratic(q, k, v):
    # (φ(Q) φ(K)ᵀ ⊙ causal) V, normalised row by row: the T × S form linear attention avoids
    T, S = q.shape[-2], k.shape[-2]
    scores = (F.elu(q) + 1) @ (F.elu(k) + 1).transpose(-2, -1)  # (..., T, S)
    scores = scores * torch.ones(T, S).tril(diagonal=S - T)
    return (scores / scores.sum(dim=-1, keepdim=True)) @ v


def _rnn_by_loop(q, k, v):
    qf, kf = F.elu(q) + 1, F.elu(k) + 1
    outputs = []
    for t in range(q.shape[-2]):
        state = torch.einsum("...sf,...sv->...fv", kf[..., : t + 1, :], v[..., : t + 1, :])
        z = kf[..., : t + 1, :].sum(dim=-2)
        outputs.append(
            torch.einsum("...f,...fv->...v", qf[..., t, :], state) / (qf[..., t, :] * z).sum(-1)[..., None]
        )
    return torch.stack(outputs, dim=-2)


def _route_mixtral_style(x, gate_weight, k):
    # softmax over all experts, keep the top k, renormalise: the same weights as softmax over the top-k logits
    probs = torch.softmax(x @ gate_weight.T, dim=-1)
    top, index = probs.topk(k, dim=-1)
    return torch.zeros_like(probs).scatter(1, index, top / top.sum(dim=-1, keepdim=True))


@pytest.mark.parametrize(
    "exercise_id, fn",
    [
        ("11.1", _window_by_loops),
        ("11.3", _rnn_by_loop),
        ("11.4", _route_mixtral_style),
    ],
)
def test_independent_correct_versions_pass(exercise_id: str, fn) -> None:
    result = check(exercise_id, fn)
    assert result.status is Status.PASS, result


@pytest.mark.parametrize("exercise_id", ["11.2", "11.3"])
def test_the_quadratic_form_has_the_right_numbers_and_the_wrong_algorithm(exercise_id: str) -> None:
    result = check(exercise_id, _linear_quadratic)  # exactly what both exercises ask to avoid
    assert result.status is Status.FAIL and "without the (T, S) score matrix" in result.message, result


def test_cases_cover_cached_keys_heads_and_both_window_kinds() -> None:
    window_cases = make_cases(EXERCISES["11.1"], 0)
    assert any(c.args[0] != c.args[1] for c in window_cases)
    assert {c.kwargs.get("causal", True) for c in window_cases} == {True, False}
    linear_cases = make_cases(EXERCISES["11.2"], 0)
    assert any(c.args[0].shape[-2] < c.args[1].shape[-2] for c in linear_cases)  # T < S
    assert any(c.args[0].ndim == 4 and c.args[0].shape[1] % 2 == 1 for c in linear_cases)  # odd H
    assert any(c.args[0].shape[-1] != c.args[2].shape[-1] for c in linear_cases)  # D != Dv
    router_cases = make_cases(EXERCISES["11.4"], 0)
    assert {c.args[2] for c in router_cases} >= {1, 2, 3}


def test_a_symmetric_band_for_a_causal_window_names_the_future() -> None:
    def symmetric(T, S, window, causal=True):
        p = torch.arange(T)[:, None] + S - T
        return (p - torch.arange(S)[None, :]).abs() < window

    result = check("11.1", symmetric)
    assert result.status is Status.FAIL and "symmetric" in result.hint


def test_softmax_before_top_k_names_the_convention() -> None:
    def switch_style(x, gate_weight, k):
        probs = torch.softmax(x @ gate_weight.T, dim=-1)
        top, index = probs.topk(k, dim=-1)
        return torch.zeros_like(probs).scatter(1, index, top)

    result = check("11.4", switch_style)
    assert result.status is Status.FAIL and "Switch" in result.hint and "TopKRouter" in result.hint


def test_an_int_window_mask_gets_a_dtype_message() -> None:
    result = check("11.1", lambda T, S, window, causal=True: _window_by_loops(T, S, window, causal).int())
    assert result.status is Status.FAIL and "bool" in result.message


# 11.5, a measurement: an independent count (a breadth-first walk over who reads whom), and a property that
# catches an answer the value cases let through.


def _layers_by_walking(seq_len, window):
    reached, layers = {seq_len - 1}, 0  # the inputs the last token's output depends on after `layers` layers
    while 0 not in reached:
        grown = {s for t in reached for s in range(max(0, t - window + 1), t + 1)}
        if grown == reached:
            return torch.tensor(-1)  # nothing new: token 0 is never reached
        reached, layers = grown, layers + 1
    return torch.tensor(layers)


def test_layers_to_reach_counted_by_walking_passes() -> None:
    result = check("11.5", _layers_by_walking)
    assert result.status is Status.PASS, result


def test_layers_to_reach_off_by_one_on_the_property_cases_fails_the_property() -> None:
    def off_on_some(seq_len, window):  # right on every value case, one layer too many on (13, 5), (14, 5)
        return _layers_by_walking(seq_len, window) + (1 if seq_len in (13, 14) else 0)

    result = check("11.5", off_on_some)
    assert result.status is Status.FAIL and "reachability" in result.message, result
    assert "3 layers of the mask already reach token 0, 12 positions back" in result.message, result


def test_layers_to_reach_property_reports_both_facts() -> None:
    holds = EXERCISES["11.5"].properties[0].holds
    case = Case((13, 5))
    assert holds(case, torch.tensor(3)) is None  # 3 · 4 = 12 positions back: exactly token 0
    assert "reads 8 back, token 0 is 12" in holds(case, torch.tensor(2))
    assert "already reach" in holds(case, torch.tensor(4))
    assert holds(Case((9, 1)), torch.tensor(-1)) is None and holds(Case((1, 3)), torch.tensor(0)) is None
    assert "never" in holds(Case((9, 2)), torch.tensor(-1)) and "0 or more" in holds(
        Case((9, 2)), torch.tensor(-3)
    )
    assert holds(Case((9, 3)), torch.tensor(10**9)) is not None  # a huge answer is refused, quickly
