"""Checks of notebook 01 (`attn_edu.grading.checks.retrieval`): right answers pass, stubs are not attempted, mistakes are named."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import answer_key

from attn_edu import retrieval
from attn_edu.grading import Status, check
from attn_edu.grading.command import GRADER_SEED
from attn_edu.grading.exercise import make_cases
from attn_edu.grading.registry import get_exercise

IDS = ("01.1", "01.2", "01.3", "01.4")
EXERCISES = {eid: get_exercise(eid) for eid in IDS}


# Independent correct versions: loops, einsum and log-sum-exp, not the references' code.
# (Additive attention has no PyTorch module; its peer is an explicit loop over queries and keys.)


def _soft_lookup_by_loop(query, keys, values, temperature=1.0):
    scores = torch.einsum("...td,...sd->...ts", query, keys) / temperature  # (..., T, S)
    log_weights = scores - torch.logsumexp(scores, dim=-1, keepdim=True)
    return torch.einsum("...ts,...sv->...tv", log_weights.exp(), values)  # (..., T, Dv)


def _nw_by_loop(x_query, x_train, y_train, bandwidth=1.0):
    out = torch.empty(len(x_query))
    for t, x in enumerate(x_query):
        scores = -((x - x_train) ** 2) / (2 * bandwidth**2)  # (S,)
        weights = torch.exp(scores - scores.max())  # stable: the largest term is e^0 = 1
        out[t] = (weights * y_train).sum() / weights.sum()
    return out


def _best_bandwidth_by_loop(x_train, y_train, x_val, y_val, bandwidths):
    # every candidate's validation error with plain Python loops in float64, then the smallest by hand
    best, best_error = None, math.inf
    for sigma in bandwidths:
        error = 0.0
        for x, y in zip(x_val.tolist(), y_val.tolist()):
            kernel = [math.exp(-((x - xi) ** 2) / (2 * float(sigma) ** 2)) for xi in x_train.tolist()]
            if sum(kernel) == 0:  # every kernel value underflowed: the nearest training point's target
                nearest = min(range(len(x_train)), key=lambda i: abs(x - float(x_train[i])))
                kernel = [float(i == nearest) for i in range(len(x_train))]
            prediction = sum(w * yi for w, yi in zip(kernel, y_train.tolist())) / sum(kernel)
            error += (prediction - y) ** 2 / len(x_val)
        if error < best_error:
            best, best_error = sigma, error
    return best.clone()  # 0-d, float32 like the candidates


def _additive_by_loop(query, keys, values, w_q, w_k, v):
    # Bahdanau's e_ts = v · tanh(W_q q_t + W_k k_s), one (query, key) pair at a time
    lead = query.shape[:-2]
    q, k, val = (
        query.reshape(-1, *query.shape[-2:]),
        keys.reshape(-1, *keys.shape[-2:]),
        values.reshape(-1, *values.shape[-2:]),
    )
    out = torch.empty(q.shape[0], q.shape[1], val.shape[-1])
    for b in range(q.shape[0]):
        for t in range(q.shape[1]):
            scores = torch.stack([v @ torch.tanh(w_q @ q[b, t] + w_k @ k[b, s]) for s in range(k.shape[1])])
            out[b, t] = torch.softmax(scores, dim=0) @ val[b]
    return out.reshape(*lead, *out.shape[-2:])


@pytest.mark.parametrize(
    "exercise_id, fn",
    [
        ("01.1", _soft_lookup_by_loop),
        ("01.2", _nw_by_loop),
        ("01.3", _best_bandwidth_by_loop),
        ("01.4", _additive_by_loop),
    ],
)
def test_independent_correct_versions_pass(exercise_id: str, fn) -> None:
    result = check(exercise_id, fn)
    assert result.status is Status.PASS, result


def test_cases_cover_t_not_s_odd_heads_and_non_powers_of_two() -> None:
    cases = make_cases(EXERCISES["01.1"], 0)
    assert any(c.args[0].shape[-2] != c.args[1].shape[-2] for c in cases)
    assert any(c.args[0].ndim == 4 and c.args[0].shape[1] % 2 == 1 for c in cases)
    assert any(c.args[0].shape[-1] & (c.args[0].shape[-1] - 1) for c in cases)
    nw = make_cases(EXERCISES["01.2"], 0)
    assert all(c.kwargs["bandwidth"] != 1.0 for c in nw)  # σ, σ² and σ⁴ must differ
    assert any(len(c.args[0]) != len(c.args[1]) for c in nw)


def test_naive_exponentials_fail_the_stability_properties() -> None:
    def soft_naive(query, keys, values, temperature=1.0):
        e = torch.exp(query @ keys.transpose(-2, -1) / temperature)
        return e / e.sum(dim=-1, keepdim=True) @ values

    def nw_naive(x_query, x_train, y_train, bandwidth=1.0):
        k = torch.exp(-((x_query[:, None] - x_train[None, :]) ** 2) / (2 * bandwidth**2))
        return k / k.sum(dim=1, keepdim=True) @ y_train

    soft = check("01.1", soft_naive)
    assert (
        soft.status is Status.FAIL and soft.message.startswith("low temperature:") and "NaN" in soft.message
    )
    assert "largest score before exp" in soft.hint
    nw = check("01.2", nw_naive)
    assert nw.status is Status.FAIL and nw.message.startswith("narrow bandwidth:") and "NaN" in nw.message
    assert "nearest" in nw.hint


def test_weights_that_do_not_sum_to_one_are_diagnosed() -> None:
    # An unrecognised slip (weights from a sigmoid): the diagnosis names the broken budget.
    result = check(
        "01.1", lambda q, k, v, temperature=1.0: torch.sigmoid(q @ k.transpose(-2, -1) / temperature) @ v
    )
    assert result.status is Status.FAIL and "sum to 1" in result.hint


def test_the_references_are_the_library() -> None:
    # What the exercises teach: the low-temperature lookup is the hard one; NW at a huge bandwidth is the mean.
    g = torch.Generator().manual_seed(1)
    q, k, v = torch.randn(5, 3, generator=g), torch.randn(8, 3, generator=g), torch.randn(8, 2, generator=g)
    torch.testing.assert_close(
        EXERCISES["01.1"].reference(q, k, v, temperature=1e-3), retrieval.hard_lookup(q, k, v)
    )
    x, y = torch.rand(9, generator=g), torch.randn(9, generator=g)
    far = EXERCISES["01.2"].reference(torch.rand(4, generator=g), x, y, bandwidth=1e4)
    torch.testing.assert_close(far, y.mean().expand(4))
    # 01.3 on section 6's kind of data: the validation winner is neither the smallest nor the largest bandwidth.
    candidates = torch.tensor([0.01, 0.25, 10.0])
    x_train, x_val = torch.rand(60, generator=g) * 5, torch.rand(40, generator=g) * 5
    y_train = torch.sin(2 * x_train) + 0.3 * torch.randn(60, generator=g)  # noisy: 0.01 chases the noise
    y_val = torch.sin(2 * x_val) + 0.3 * torch.randn(40, generator=g)
    torch.testing.assert_close(
        EXERCISES["01.3"].reference(x_train, y_train, x_val, y_val, candidates), torch.tensor(0.25)
    )


# ---------------------------------------------------------------------------------------------------------
# 01.3, the measurement: every case separates the slips, and the property catches a wrong pick by itself


@pytest.mark.parametrize("seed", [0, GRADER_SEED])
def test_bandwidth_cases_give_every_slip_its_own_answer(seed: int) -> None:
    exercise = EXERCISES["01.3"]
    for case in make_cases(exercise, seed):
        x_train, y_train, x_val, y_val, bandwidths = case.args
        assert len(x_train) != len(x_val) and not (bandwidths == bandwidths.round()).any()
        answers = [exercise.reference(*case.args)] + [m.fn(*case.args) for m in exercise.mistakes[:2]]
        assert len({float(a) for a in answers}) == 3  # best, worst, training-error winner: all different


def _runner_up_on_property_cases():
    """Right on the value cases; on the property's cases the second-best candidate (or a non-candidate)."""
    exercise = EXERCISES["01.3"]
    property_cases = [c for c in make_cases(exercise, 0) if c.group != "values"]
    right = answer_key(exercise)

    def answer(x_train, y_train, x_val, y_val, bandwidths, *, off_grid=False):
        if not any(torch.equal(x_train, c.args[0]) for c in property_cases):
            return right(x_train, y_train, x_val, y_val, bandwidths)
        errors = torch.stack(
            [(_nw_by_loop(x_val, x_train, y_train, float(b)) - y_val).pow(2).mean() for b in bandwidths]
        )
        best = bandwidths[errors.argmin()]
        return best * 1.1 if off_grid else bandwidths[errors.argsort()[1]]

    return answer


def test_the_property_recomputes_every_candidates_error() -> None:
    answer = _runner_up_on_property_cases()
    second = check("01.3", answer)
    assert second.status is Status.FAIL and second.message.startswith("the lowest validation error: σ = ")
    assert "has validation MSE" in second.message and ", the lowest, for x_train" in second.message
    off = check("01.3", lambda *args: answer(*args, off_grid=True))
    assert off.status is Status.FAIL and "is not one of the candidates" in off.message
    assert "lowest mean squared error" in off.hint
