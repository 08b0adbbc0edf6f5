"""Checks of notebook 02 (`attn_edu.grading.checks.attention`): independent right answers pass, the FLOP count's
property and the diagnoses speak. (Stubs and each named mistake, for every exercise: tests/test_checks_registry.py.)"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from helpers import answer_key

from attn_edu.grading import Status, check
from attn_edu.grading.exercise import make_cases
from attn_edu.grading.registry import exercises, get_exercise

EXERCISES = {i: e for i, e in exercises().items() if i.startswith("02.")}


# ---------------------------------------------------------------------------------------------------------
# Independent correct versions (PyTorch's SDPA, plain loops) pass


def _peer_weights(q, k, scale=None):
    # Attention with v = identity returns the weights themselves
    S = k.shape[-2]
    eye = torch.eye(S).expand(*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), S, S)
    return F.scaled_dot_product_attention(q, k, eye, scale=scale)


def _peer_sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def _peer_flops(B, H, T, S, D, Dv):
    # PyTorch's own formula for a batched matrix product, applied to the two products' shapes
    from torch.utils.flop_counter import bmm_flop

    scores = bmm_flop((B * H, T, D), (B * H, D, S))  # q kᵀ
    mixing = bmm_flop((B * H, T, S), (B * H, S, Dv))  # P v
    return torch.tensor(scores + mixing)


def _peer_cross(x, context, w_q, w_k, w_v, w_o):
    # PyTorch's own multi-head attention forward, one head, separate projections (kdim, vdim != C)
    out, _ = F.multi_head_attention_forward(
        x.transpose(0, 1), context.transpose(0, 1), context.transpose(0, 1),  # (L, B, ·): torch's layout
        embed_dim_to_check=x.shape[-1], num_heads=1, in_proj_weight=None, in_proj_bias=None,
        bias_k=None, bias_v=None, add_zero_attn=False, dropout_p=0.0, out_proj_weight=w_o,
        out_proj_bias=None, training=False, need_weights=False, use_separate_proj_weight=True,
        q_proj_weight=w_q, k_proj_weight=w_k, v_proj_weight=w_v,
    )  # fmt: skip
    return out.transpose(0, 1)  # (B, T, C)


@pytest.mark.parametrize(
    "exercise_id, fn",
    [("02.1", _peer_weights), ("02.2", _peer_sdpa), ("02.3", _peer_flops), ("02.4", _peer_cross)],
)
def test_independent_correct_versions_pass(exercise_id: str, fn) -> None:
    result = check(exercise_id, fn)
    assert result.status is Status.PASS, result
    assert result.points == result.max_points == get_exercise(exercise_id).points


# ---------------------------------------------------------------------------------------------------------
# Enough named mistakes, a diagnosis for an unknown mistake, and 02.3's FlopCounterMode property
# (each mistake being named on both input sets is checked for every exercise in test_checks_registry.py)


def test_each_exercise_knows_at_least_three_mistakes() -> None:
    assert set(EXERCISES) == {"02.1", "02.2", "02.3", "02.4"}
    for exercise in EXERCISES.values():
        assert len(exercise.mistakes) >= 3 and len(exercise.hints) >= 2


def test_no_exercise_of_notebook_02_takes_a_mask() -> None:
    # masks are notebook 04's; notebook 02's cases hold q, k, v, sizes and a scale only
    for exercise in EXERCISES.values():
        for case in make_cases(exercise, 0):
            assert set(case.kwargs) <= {"scale"}
            assert not any(isinstance(a, torch.Tensor) and a.dtype == torch.bool for a in case.args)


def test_cases_cover_t_not_s_dv_not_d_and_the_given_scale() -> None:
    weights, sdpa = make_cases(EXERCISES["02.1"], 0), make_cases(EXERCISES["02.2"], 0)
    assert all(c.args[0].shape[-2] != c.args[1].shape[-2] for c in weights + sdpa)
    assert all(c.args[1].shape[-1] != c.args[2].shape[-1] for c in sdpa)  # D != Dv
    assert any("scale" in c.kwargs for c in weights) and any("scale" not in c.kwargs for c in weights)
    flops = make_cases(EXERCISES["02.3"], 0)
    assert all(T != S and D != Dv for _, _, T, S, D, Dv in (c.args for c in flops))


def test_unknown_mistake_gets_numbers_and_a_diagnosis() -> None:
    right = answer_key(get_exercise("02.1"))

    def halves(q, k, **scale):
        return right(q, k, **scale) / 2

    result = check("02.1", halves)
    assert result.status is Status.FAIL
    assert "max abs difference" in result.message and "expected" in result.message and "got" in result.message
    assert "sum to 1" in result.hint


def test_an_answer_off_by_one_flop_fails_pytorchs_count() -> None:
    # Right on the value cases (large sizes), one FLOP too many on the small ones the counter runs on
    def off_by_one(B, H, T, S, D, Dv):
        flops = 2 * B * H * T * S * (D + Dv)
        return torch.tensor(flops + (1 if B * H * T * S < 1000 else 0))

    result = check("02.3", off_by_one)
    assert result.status is Status.FAIL and result.message.startswith("PyTorch's count: ")
    assert "PyTorch's FlopCounterMode counts " in result.message and "the answer says" in result.message
    counted = re.search(r"counts ([\d,]+) FLOPs, the answer says ([\d,]+)", result.message)
    assert int(counted[2].replace(",", "")) == int(counted[1].replace(",", "")) + 1
    assert "FlopCounterMode" in result.hint


def test_a_float_count_is_refused_with_the_dtype() -> None:
    result = check("02.3", lambda B, H, T, S, D, Dv: torch.tensor(2.0 * B * H * T * S * (D + Dv)))
    assert result.status is Status.FAIL and "int64" in result.message
