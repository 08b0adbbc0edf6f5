"""Checks of notebook 06 (`attn_edu.grading.checks.positional`): right answers pass, stubs are not attempted,
mistakes are named."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import answer_key

from attn_edu.grading import Status, check
from attn_edu.grading.command import GRADER_SEED
from attn_edu.grading.exercise import make_cases
from attn_edu.grading.registry import get_exercise
from attn_edu.positional import wavelengths

IDS = ("06.1", "06.2", "06.3", "06.5")
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


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, GRADER_SEED])
def test_the_drawn_table_sizes_keep_the_edge_cases(seed: int) -> None:
    sizes = [case.args for case in make_cases(EXERCISES["06.1"], seed)]
    assert all(n >= 1 and d >= 2 and d % 2 == 0 for n, d in sizes)
    assert any(d == 2 for _, d in sizes)  # a single pair, where all the exponent slips agree with the answer
    assert any(d & (d - 1) for _, d in sizes)  # a dim that is not a power of two
    assert any(n < d for n, d in sizes)  # fewer positions than columns
    assert max(n for n, _ in sizes) <= 100  # angles up to ~100 rad: within atol=1e-4 in float32


def test_cases_cover_t_not_equal_s_and_odd_head_counts() -> None:
    cases = make_cases(EXERCISES["06.2"], 0)
    assert any(T != S for _, T, S in (c.args for c in cases))
    assert any(len(slopes) % 2 == 1 for slopes, _, _ in (c.args for c in cases))


def test_a_float_bucket_table_is_refused() -> None:
    key = answer_key(EXERCISES["06.3"])
    result = check("06.3", lambda rel, **kw: key(rel, **kw).float())
    assert result.status is Status.FAIL and "dtype" in result.message


def _shaw_by_loops(q, k, v, key_table, value_table, max_distance, is_causal):
    """Shaw et al.'s equations 3-6 one query and one key at a time: no einsum, no broadcasting tricks."""
    B, H, T, D = q.shape
    S = k.shape[-2]
    out = torch.zeros(B, H, T, v.shape[-1])
    for b in range(B):
        for h in range(H):
            for t in range(T):
                query_pos = S - T + t  # the queries are the last T of the S positions
                scores, keys = [], []
                for s in range(S):
                    if is_causal and s > query_pos:
                        continue
                    row = max(-max_distance, min(max_distance, s - query_pos)) + max_distance
                    scores.append(torch.dot(q[b, h, t], k[b, h, s] + key_table[row]) / math.sqrt(D))
                    keys.append((s, row))
                weights = torch.softmax(torch.stack(scores), dim=0)
                for w, (s, row) in zip(weights, keys, strict=True):
                    out[b, h, t] += w * (v[b, h, s] + value_table[row])
    return out


def test_shaw_attention_written_as_loops_passes_exercise_06_4() -> None:
    """There is no torch module for Shaw's attention: the paper's equations, written as plain loops, pass."""
    result = check("06.4", _shaw_by_loops)
    assert result.status is Status.PASS, result


def test_the_shaw_cases_clip_distances_on_both_sides() -> None:
    # A slip in the clipping or the alignment only shows where distances pass -k and +k and where T != S.
    cases = make_cases(get_exercise("06.4"), 0)
    clipped_both_ways = False
    for case in cases:
        q, k, *_, max_distance, _ = case.args
        T, S = q.shape[-2], k.shape[-2]
        distance = torch.arange(S)[None, :] - (torch.arange(T)[:, None] + S - T)  # (T, S)
        clipped_both_ways |= bool(distance.min() < -max_distance and distance.max() > max_distance)
    assert clipped_both_ways
    assert any(case.args[0].shape[-2] != case.args[1].shape[-2] for case in cases)


# 06.5: least squares by the normal equations, and the property that checks a fit by them.


def _fit_by_normal_equations(table, k):
    A, B = table[:-k], table[k:]
    return torch.linalg.solve(A.T @ A, A.T @ B)  # AᵀA M = AᵀB, the textbook route


def test_a_fit_by_the_normal_equations_passes_06_5() -> None:
    result = check("06.5", _fit_by_normal_equations)
    assert result.status is Status.PASS, result
    assert check("06.5", lambda table, k: torch.linalg.pinv(table[:-k]) @ table[k:]).status is Status.PASS


def _rotation_by_hand(table, k):
    D = table.shape[-1]
    angle = k * 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    blocks = [torch.tensor([[c, -s], [s, c]], dtype=torch.float64) for c, s in zip(angle.cos(), angle.sin())]
    return torch.block_diag(*blocks)  # M_kᵀ for rows, the paper's base


def test_the_exact_rotation_is_not_a_fit() -> None:
    # M_kᵀ is right for a pure sinusoidal table with the paper's base, not for another base or a mixed table.
    result = check("06.5", _rotation_by_hand)
    assert result.status is Status.FAIL and "values differ" in result.message


def test_the_normal_equations_catch_a_map_that_does_not_fit() -> None:
    exercise = get_exercise("06.5")
    prop = exercise.properties[0]
    cases = [c for c in make_cases(exercise, 0) if c.group == prop.name]
    for case in cases:
        fitted = exercise.reference(*case.args)
        assert prop.holds(case, fitted) is None
        assert prop.holds(case, _rotation_by_hand(*case.args)) is None  # the exact M_kᵀ fits these tables
        nudged = prop.holds(case, fitted + 1e-3 * torch.ones_like(fitted))
        assert nudged is not None and "‖Aᵀ(A M − B)‖" in nudged and "of ‖Aᵀ B‖" in nudged, nudged
    # the slow pairs of a 16-wide table do not turn within 250 rows: the property asks nothing of them
    table, k = cases[0].args
    assert table.shape == (250, 16) and bool((wavelengths(16) > len(table) - k).any())
