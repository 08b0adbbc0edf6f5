"""Checks of notebook 02 (`attn_edu.grading.checks.attention`): independent right answers pass, the property
and the diagnoses speak. (Stubs and each named mistake, for every exercise: tests/test_checks_registry.py.)"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attn_edu.grading import Status, check
from attn_edu.grading.registry import exercises, get_exercise

EXERCISES = {i: e for i, e in exercises().items() if i.startswith("02.")}


# ---------------------------------------------------------------------------------------------------------
# Independent correct versions (PyTorch's SDPA, plain loops) pass


def _peer_weights(q, k, mask=None):
    # Attention with v = identity returns the weights themselves; fully masked rows are NaN in PyTorch
    S = k.shape[-2]
    eye = torch.eye(S).expand(*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), S, S)
    return F.scaled_dot_product_attention(q, k, eye, attn_mask=mask).nan_to_num(0.0)


def _peer_sdpa(q, k, v, mask=None, *, is_causal=False):
    if is_causal:
        from torch.nn.attention.bias import causal_lower_right

        T, S = q.shape[-2], k.shape[-2]
        causal = causal_lower_right(T, S)._materialize(q.device)
        mask = causal if mask is None else mask & causal
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).nan_to_num(0.0)


def _peer_mask(lengths, T):
    out = torch.zeros(len(lengths), 1, T, T, dtype=torch.bool)
    for b, length in enumerate(lengths.tolist()):
        for t in range(T):
            for s in range(min(t + 1, length)):
                out[b, 0, t, s] = True
    return out


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
    [("02.1", _peer_weights), ("02.2", _peer_sdpa), ("02.3", _peer_mask), ("02.4", _peer_cross)],
)
def test_independent_correct_versions_pass(exercise_id: str, fn) -> None:
    result = check(exercise_id, fn)
    assert result.status is Status.PASS, result
    assert result.points == result.max_points == 1


# ---------------------------------------------------------------------------------------------------------
# Enough named mistakes, the fully-masked-rows property, a diagnosis for an unknown mistake
# (each mistake being named on both input sets is checked for every exercise in test_checks_registry.py)


def test_each_exercise_knows_at_least_three_mistakes() -> None:
    assert set(EXERCISES) == {"02.1", "02.2", "02.3", "02.4"}
    for exercise in EXERCISES.values():
        assert len(exercise.mistakes) >= 3 and len(exercise.hints) >= 2


def test_nan_in_fully_masked_rows_fails_the_property() -> None:
    def plain_softmax(q, k, mask=None):
        scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1)

    result = check("02.1", plain_softmax)
    assert result.status is Status.FAIL
    assert result.message.startswith("fully masked rows:") and "NaN" in result.message
    assert "zeros" in result.hint


def test_unknown_mistake_gets_numbers_and_a_diagnosis() -> None:
    def halves(q, k, mask=None):
        return get_exercise("02.1").reference(q, k, mask) / 2

    result = check("02.1", halves)
    assert result.status is Status.FAIL
    assert "max abs difference" in result.message and "expected" in result.message and "got" in result.message
    assert "sum to 1" in result.hint
