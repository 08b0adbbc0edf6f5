"""Checks of notebook 13 (`attn_edu.grading.checks.interp`): right answers pass, stubs are not attempted, mistakes are named."""

from __future__ import annotations

import pytest
import torch

from attn_edu.grading import Status, check
from attn_edu.grading.exercise import make_cases
from attn_edu.grading.registry import get_exercise

IDS = ("13.1", "13.2", "13.3", "13.4", "13.5")
EXERCISES = {eid: get_exercise(eid) for eid in IDS}


# Independent correct versions: plain loops over queries, heads and channels.


def _previous_by_loop(weights):
    B, H, T, S = weights.shape
    out = torch.zeros(H)
    for h in range(H):
        picked = [weights[b, h, t, S - T + t - 1] for b in range(B) for t in range(T) if S - T + t - 1 >= 0]
        out[h] = torch.stack(picked).mean()
    return out


def _induction_by_loop(weights, period):
    B, H, T, _ = weights.shape
    out = torch.zeros(H)
    for h in range(H):
        out[h] = torch.stack(
            [weights[b, h, t, t - period + 1] for b in range(B) for t in range(period, T)]
        ).mean()
    return out


def _ablate_by_loop(head_outputs, out_weight, out_bias, head):
    B, H, T, D = head_outputs.shape
    out = out_bias.expand(B, T, -1).clone()  # (B, T, C)
    for h in range(H):
        if h != head:  # each head's output goes through its own D columns of W^O
            out += head_outputs[:, h] @ out_weight[:, h * D : (h + 1) * D].T
    return out


def _pruning_by_loop(importance):
    L, H = importance.shape
    ranked = sorted((float(importance[i, j]), i, j) for i in range(L) for j in range(H))
    masks = [torch.ones(L, H)]
    for _, i, j in ranked:
        mask = masks[-1].clone()
        mask[i, j] = 0.0
        masks.append(mask)
    return torch.stack(masks)


@pytest.mark.parametrize(
    "exercise_id, fn",
    [
        ("13.1", _previous_by_loop),
        ("13.2", _induction_by_loop),
        ("13.3", _ablate_by_loop),
        ("13.4", _pruning_by_loop),
    ],
)
def test_independent_correct_versions_pass(exercise_id: str, fn) -> None:
    result = check(exercise_id, fn)
    assert result.status is Status.PASS, result


def test_cases_cover_a_kv_cache_odd_heads_and_ties() -> None:
    cases = make_cases(EXERCISES["13.1"], 0)
    shapes = [tuple(c.args[0].shape) for c in cases]
    assert any(T != S for *_, T, S in shapes) and any(H % 2 == 1 and H > 1 for _, H, _, _ in shapes)
    for case in cases:  # the inputs are causal attention patterns: rows sum to 1, nothing above the diagonal
        w = case.args[0]
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))
    importance = [c.args[0] for c in make_cases(EXERCISES["13.4"], 0)]
    assert any(len(set(i.flatten().tolist())) < i.numel() for i in importance)


def test_the_ablation_reference_matches_the_model_path() -> None:
    # 13.3's reference is what head_ablation does inside a real MultiHeadAttention.
    from attn_edu.interp import head_ablation
    from attn_edu.multihead import MultiHeadAttention, split_heads

    torch.manual_seed(0)
    attn = MultiHeadAttention(15, 5)
    x = torch.randn(2, 6, 15)

    def heads_of(module):  # the per-head outputs (B, H, T, D) that reach W^O
        captured = {}
        handle = module.out_proj.register_forward_pre_hook(lambda m, args: captured.setdefault("x", args[0]))
        module(x, is_causal=True)
        handle.remove()
        return split_heads(captured["x"], 5)

    with torch.no_grad(), head_ablation(torch.nn.Sequential(attn), [(0, 3)]):
        expected = attn(x, is_causal=True)
    got = EXERCISES["13.3"].reference(heads_of(attn), attn.out_proj.weight, attn.out_proj.bias, 3)
    torch.testing.assert_close(got, expected)


def test_a_bool_schedule_gets_a_dtype_message() -> None:
    result = check("13.4", lambda importance: _pruning_by_loop(importance).bool())
    assert result.status is Status.FAIL and "dtype" in result.message


# 13.5, a measurement: an independent score (the eigenvalues of the (C, C) product w_ov w_uᵀ w_e, which has
# the full circuit's nonzero ones), and a property that catches an answer the value cases let through.


def _copying_from_the_small_product(w_ov, w_e, w_u):
    eigenvalues = torch.linalg.eigvals(
        (w_ov @ w_u.T @ w_e).double()
    )  # the nonzero eigenvalues of w_e w_ov w_uᵀ
    return (eigenvalues.real.sum() / eigenvalues.abs().sum()).float()


def test_copying_score_from_the_small_product_passes() -> None:
    result = check("13.5", _copying_from_the_small_product)
    assert result.status is Status.PASS, result


def test_copying_score_cases_plant_eigenvalues_that_w_ov_alone_does_not_have() -> None:
    exercise, planted = (
        EXERCISES["13.5"],
        [c for c in make_cases(EXERCISES["13.5"], 0) if c.group != "values"],
    )
    scores = [float(exercise.reference(*c.args)) for c in planted]
    assert scores[:2] == pytest.approx([1.0, -1.0], abs=1e-4)  # a copier, an anti-copier
    assert scores[2] == pytest.approx(5 / (6 + 2 * 1.25**0.5), abs=1e-4)  # 3, -1, 0.5 ± i, 2, 0
    w_ov_alone = [float(exercise.mistakes[2].fn(*c.args)) for c in planted]
    assert sum(abs(a - b) > 0.05 for a, b in zip(scores, w_ov_alone)) >= 3


def test_a_copying_score_wrong_only_on_the_planted_cases_fails_the_property() -> None:
    def off_on_some(w_ov, w_e, w_u):  # right on every value case (V = 5, 7, 11, 23, 29), off on V = 9
        return _copying_from_the_small_product(w_ov, w_e, w_u) - (0.05 if w_e.shape[0] == 9 else 0.0)

    result = check("13.5", off_on_some)
    assert result.status is Status.FAIL and "known eigenvalues" in result.message, result
    assert "Σ Re λ / Σ |λ| = 1.0000, the answer says 0.9500" in result.message, result
