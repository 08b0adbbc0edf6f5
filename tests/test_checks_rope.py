"""Checks of notebook 07 (`attn_edu.grading.checks.rope`): right answers pass, stubs are not attempted, mistakes are named."""

from __future__ import annotations

import math

import pytest
import torch

from attn_edu.grading import Status, check
from attn_edu.grading.command import GRADER_SEED
from attn_edu.grading.exercise import make_cases
from attn_edu.grading.registry import get_exercise

IDS = ("07.1", "07.2", "07.3", "07.5")
EXERCISES = {eid: get_exercise(eid) for eid in IDS}
SEEDS = (0, 1, 2, 3, 4, GRADER_SEED)  # the notebook's, a few more, the grader's


# Independent correct versions: explicit 2x2 rotations and complex numbers, not the references' code.


def _theta(D: int) -> torch.Tensor:
    return 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)  # (D/2,)


def _rope_by_matrices(x, offset=0):
    T, D = x.shape[-2], x.shape[-1]
    out = torch.empty_like(x)
    for t in range(T):
        for i, th in enumerate(_theta(D).tolist()):
            a = (offset + t) * th
            rot = torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=torch.float64)
            pair = torch.stack((x[..., t, i], x[..., t, i + D // 2]), dim=-1).double()  # (..., 2)
            turned = pair @ rot.T
            out[..., t, i], out[..., t, i + D // 2] = turned[..., 0].float(), turned[..., 1].float()
    return out


def _offset_score_complex(q, k, delta):
    D = q.shape[-1]
    zq = torch.complex(q[:, : D // 2].double(), q[:, D // 2 :].double())  # (N, D/2)
    zk = torch.complex(k[:, : D // 2].double(), k[:, D // 2 :].double())
    turn = torch.exp(1j * delta[:, None].double() * _theta(D))  # (N, D/2)
    return (zq * turn * zk.conj()).sum(-1).real.float()


def _ntk_by_last_pair(head_dim, factor, base=10000.0):
    # Solve base'^(-(D-2)/D) = base^(-(D-2)/D) / factor for base'.
    new_base = (base ** (-(head_dim - 2) / head_dim) / factor) ** (-head_dim / (head_dim - 2))
    return (new_base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)).float()


@pytest.mark.parametrize(
    "exercise_id, fn",
    [("07.1", _rope_by_matrices), ("07.2", _offset_score_complex), ("07.3", _ntk_by_last_pair)],
)
def test_independent_correct_versions_pass(exercise_id: str, fn) -> None:
    result = check(exercise_id, fn)
    assert result.status is Status.PASS, result


@pytest.mark.parametrize("seed", SEEDS)
def test_the_drawn_ntk_cases_keep_the_edge_cases(seed: int) -> None:
    cases = make_cases(EXERCISES["07.3"], seed)
    assert all(D % 2 == 0 and D >= 4 and factor > 1 for D, factor in (c.args for c in cases))
    assert any(c.args[0] <= 6 for c in cases)  # a small head, where D / (D - 2) is far from 1
    assert any(c.args[0] & (c.args[0] - 1) for c in cases)  # a head_dim that is not a power of two
    assert any("base" in c.kwargs for c in cases) and any(not c.kwargs for c in cases)  # and the default base


def test_offset_score_really_is_the_score_at_absolute_positions() -> None:
    # The 07.2 reference puts q at delta and k at 0; any pair (n + delta, n) must give the same score.
    from attn_edu.rope import apply_rope

    exercise = EXERCISES["07.2"]
    q, k, delta = make_cases(exercise, 0)[1].args
    n = torch.arange(len(delta)) * 37 + 5
    q_rot = apply_rope(q[:, None, :], (n + delta)[:, None])[:, 0]
    k_rot = apply_rope(k[:, None, :], n[:, None])[:, 0]
    torch.testing.assert_close((q_rot * k_rot).sum(-1), exercise.reference(q, k, delta), atol=1e-4, rtol=1e-4)


# 07.4: Hugging Face's own "yarn" rope init function is the peer.


def _yarn_from_transformers(
    head_dim, factor, original_max_positions, base=10000.0, beta_fast=32.0, beta_slow=1.0
):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = LlamaConfig(
        hidden_size=head_dim * 4,
        num_attention_heads=4,  # head_dim = hidden_size / num_attention_heads
        rope_theta=base,
        max_position_embeddings=int(original_max_positions * factor),
        rope_scaling={
            "rope_type": "yarn",
            "factor": factor,
            "original_max_position_embeddings": original_max_positions,
            "beta_fast": beta_fast,
            "beta_slow": beta_slow,
        },
    )
    inv_freq, _attention_factor = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    return inv_freq  # (D/2,)


def test_transformers_yarn_init_passes_the_yarn_check() -> None:
    pytest.importorskip("transformers")
    result = check("07.4", _yarn_from_transformers)
    assert result.status is Status.PASS, result


@pytest.mark.parametrize("seed", SEEDS)
def test_yarn_cases_cover_the_hard_inputs(seed: int) -> None:
    cases = make_cases(get_exercise("07.4"), seed)
    assert any(c.args[0] & (c.args[0] - 1) for c in cases)  # a head_dim that is not a power of two
    assert any(c.args[2] & (c.args[2] - 1) for c in cases)  # a context that is not a power of two
    assert any("beta_fast" in c.kwargs for c in cases) and any("base" in c.kwargs for c in cases)
    # the ramp's rounded ends lie inside the table and apart (never the low == high corner)
    for case in cases:
        D, _, L = case.args
        base = case.kwargs.get("base", 10000.0)
        fast, slow = case.kwargs.get("beta_fast", 32.0), case.kwargs.get("beta_slow", 1.0)
        turns = torch.tensor([fast, slow], dtype=torch.float64)
        index = D * torch.log(L / (2 * math.pi * turns)) / (2 * math.log(base))  # pairs with that many turns
        low, high = math.floor(index[0]), math.ceil(index[1])
        assert 0 <= low < high <= D // 2 - 1, (case, low, high)  # pair 0 kept, the last pair interpolated


# 07.5: the score by distance from complex numbers, and the property that measures it at absolute positions.


def _score_by_distance_complex(q, k, max_distance, base):
    D = q.shape[-1]
    theta = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)  # (D/2,)
    zq = torch.complex(q[: D // 2].double(), q[D // 2 :].double())  # half-split pairs as complex numbers
    zk = torch.complex(k[: D // 2].double(), k[D // 2 :].double())
    turn = torch.exp(1j * torch.arange(max_distance + 1, dtype=torch.float64)[:, None] * theta)  # (N, D/2)
    return (zq * turn * zk.conj()).sum(-1).real.to(q.dtype)  # Re Σ q_i e^(iδθ_i) conj(k_i)


def test_a_complex_number_version_passes_07_5() -> None:
    result = check("07.5", _score_by_distance_complex)
    assert result.status is Status.PASS and "1 property holds" in result.message, result


def test_the_all_ones_case_shows_the_decay() -> None:
    exercise = get_exercise("07.5")
    ones = [c for c in make_cases(exercise, 0) if c.group == "values" and bool((c.args[0] == 1).all())]
    assert len(ones) == 1
    scores = exercise.reference(*ones[0].args)  # Σ_i 2 cos(δ θ_i)
    D = ones[0].args[0].shape[-1]
    assert float(scores[0]) == D and float(scores[-100:].abs().mean()) < 0.25 * D


def test_the_absolute_positions_catch_the_wrong_sign_but_not_on_q_equal_k() -> None:
    exercise = get_exercise("07.5")
    prop = exercise.properties[0]
    cases = [c for c in make_cases(exercise, 0) if c.group == prop.name]
    flipped = exercise.mistakes[0]  # k turned to δ instead of q: the score at -δ
    assert "wrong sign" in flipped.message
    for case in cases:
        assert prop.holds(case, exercise.reference(*case.args)) is None
        q, k = case.args[:2]
        wrong = prop.holds(case, flipped.fn(*case.args))
        if torch.equal(q, k):
            assert wrong is None  # cos is even: q = k cannot tell δ from -δ
        else:
            assert wrong is not None and "max difference" in wrong and "position" in wrong, wrong
