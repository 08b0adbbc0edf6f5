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


# 11.5, a measurement: an independent count (a breadth-first walk over who reads whom, layer by layer), and a
# property that catches an answer the value cases let through.


def _windows(*w: int) -> torch.Tensor:
    return torch.tensor(w, dtype=torch.int64)


def _layers_by_walking(seq_len, windows):
    reached, layers = {seq_len - 1}, 0  # the inputs the last token's output depends on after `layers` layers
    seen_at_round = None
    while 0 not in reached:
        if layers % len(windows) == 0:
            if reached == seen_at_round:
                return torch.tensor(
                    -1
                )  # a whole round of the pattern added nothing: token 0 is never reached
            seen_at_round = set(reached)
        window = int(windows[layers % len(windows)])
        reached = {s for t in reached for s in range(max(0, t - window + 1), t + 1)}
        layers += 1
    return torch.tensor(layers)


def test_layers_to_reach_counted_by_walking_passes() -> None:
    result = check("11.5", _layers_by_walking)
    assert result.status is Status.PASS, result


def test_layers_to_reach_off_by_one_on_the_property_cases_fails_the_property() -> None:
    def off_on_some(seq_len, windows):  # right on every value case, one layer too many on (14, [5]) and more
        return _layers_by_walking(seq_len, windows) + (1 if seq_len == 14 else 0)

    result = check("11.5", off_on_some)
    assert result.status is Status.FAIL and "reachability" in result.message, result
    assert "4 layers of the masks already reach token 0, 13 positions back" in result.message, result


def test_the_windows_of_a_pattern_are_taken_in_turn() -> None:
    # three local layers of window 3 (2 positions each), then a full causal one: 4 layers, not ceil(29 / 2) = 15
    assert int(EXERCISES["11.5"].reference(30, _windows(3, 3, 3, 100))) == 4
    assert int(_layers_by_walking(30, _windows(3, 3, 3, 100))) == 4
    for seed in range(6):
        for case in make_cases(EXERCISES["11.5"], seed):
            assert torch.equal(EXERCISES["11.5"].reference(*case.args), _layers_by_walking(*case.args)), case


@pytest.mark.parametrize(
    ("slip", "words"),
    [
        ("first window only", "every layer got the first window"),
        ("one short", "one layer short"),
        ("window as the step", "not window"),
    ],
)
def test_a_walk_with_a_slip_gets_its_message(slip: str, words: str) -> None:
    def walk(seq_len, windows):
        if slip == "first window only":
            return _layers_by_walking(seq_len, windows[:1])
        if slip == "one short":
            return (_layers_by_walking(seq_len, windows) - 1).clamp(min=-1)
        return _layers_by_walking(seq_len, windows + 1)  # a layer reaches window positions back

    result = check("11.5", walk)
    assert result.status is Status.FAIL and words in result.hint, result


def test_layers_to_reach_property_reports_both_facts() -> None:
    holds = EXERCISES["11.5"].properties[0].holds
    case = Case((13, _windows(5)))
    assert holds(case, torch.tensor(3)) is None  # 3 · 4 = 12 positions back: exactly token 0
    assert "reads 8 back, token 0 is 12" in holds(case, torch.tensor(2))
    assert "already reach" in holds(case, torch.tensor(4))
    assert holds(Case((25, _windows(2, 5))), torch.tensor(10)) is None  # 5 rounds of 1 + 4 positions
    assert "reads 20 back" in holds(Case((25, _windows(2, 5))), torch.tensor(8))  # 4 rounds
    assert (
        holds(Case((9, _windows(1, 1))), torch.tensor(-1)) is None
        and holds(Case((1, _windows(3))), 0) is None
    )
    never, negative = (
        holds(Case((9, _windows(2))), torch.tensor(-1)),
        holds(Case((9, _windows(2))), torch.tensor(-3)),
    )
    assert "never" in never and "0 or more" in negative
