"""Checks of notebook 06 (`attn_edu.grading.checks.positional`): right answers pass, stubs are not attempted,
mistakes are named."""

from __future__ import annotations

import math

import pytest
import torch

from attn_edu.grading import Status, check
from attn_edu.grading.exercise import make_cases
from attn_edu.grading.registry import get_exercise

IDS = ("06.1", "06.2", "06.3")
EXERCISES = {eid: get_exercise(eid) for eid in IDS}


# Independent correct versions, written the way a learner would, not with the references' code.


def _sinusoidal_float32(num_positions, dim):
    pos = torch.arange(num_positions, dtype=torch.float32)[:, None]
    omega = 1.0 / 10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    pe = torch.zeros(num_positions, dim)
    pe[:, 0::2] = torch.sin(pos * omega)
    pe[:, 1::2] = torch.cos(pos * omega)
    return pe


def _alibi_by_loop(slopes, T, S):
    out = torch.empty(len(slopes), T, S)
    for h, m in enumerate(slopes.tolist()):
        for t in range(T):
            for s in range(S):
                out[h, t, s] = -m * abs(s - (S - T + t))
    return out


def _bucket_by_loop(relative_position, num_buckets=32, max_distance=128):
    n = num_buckets // 2
    exact = n // 2
    out = []
    for r in relative_position.flatten().tolist():
        offset, d = (n if r > 0 else 0), abs(r)
        if d < exact:
            out.append(offset + d)
        else:
            far = exact + int(math.log(d / exact) / math.log(max_distance / exact) * (n - exact))
            out.append(offset + min(far, n - 1))
    return torch.tensor(out).reshape(relative_position.shape)


@pytest.mark.parametrize(
    "exercise_id, fn", [("06.1", _sinusoidal_float32), ("06.2", _alibi_by_loop), ("06.3", _bucket_by_loop)]
)
def test_independent_correct_versions_pass(exercise_id: str, fn) -> None:
    result = check(exercise_id, fn)
    assert result.status is Status.PASS, result


def test_cases_cover_t_not_equal_s_and_odd_head_counts() -> None:
    cases = make_cases(EXERCISES["06.2"], 0)
    assert any(T != S for _, T, S in (c.args for c in cases))
    assert any(len(slopes) % 2 == 1 for slopes, _, _ in (c.args for c in cases))


def test_a_float_bucket_table_is_refused() -> None:
    result = check("06.3", lambda rel, **kw: EXERCISES["06.3"].reference(rel, **kw).float())
    assert result.status is Status.FAIL and "dtype" in result.message
