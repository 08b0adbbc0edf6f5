"""Checks of notebook 08 (`attn_edu.grading.checks.blocks`): right answers pass, stubs are not attempted, mistakes are named."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attn_edu.grading import Status, check
from attn_edu.grading.checks.blocks import counted_block_flops
from attn_edu.grading.exercise import make_cases
from attn_edu.grading.given import toy_sublayers
from attn_edu.grading.registry import get_exercise

IDS = ("08.1", "08.2", "08.3", "08.4", "08.6")
EXERCISES = {eid: get_exercise(eid) for eid in IDS}


# Independent correct versions: PyTorch's own modules and plain formulas, not the references' code.


def _rms_norm_by_torch(x, weight, eps):
    return F.rms_norm(x, (x.shape[-1],), weight=weight, eps=eps)


def _pre_norm_by_hand(x, num_heads, seed):
    attn, ffn, attn_norm, ffn_norm = toy_sublayers(x.shape[-1], num_heads, seed)
    h = F.layer_norm(x, attn_norm.normalized_shape, attn_norm.weight, attn_norm.bias, attn_norm.eps)
    x = x + attn(h)
    h = F.layer_norm(x, ffn_norm.normalized_shape, ffn_norm.weight, ffn_norm.bias, ffn_norm.eps)
    return x + ffn.down_proj(F.gelu(ffn.up_proj(h)))


def _post_norm_by_torch_mha(x, num_heads, seed):
    # The attention sub-layer computed by torch.nn.MultiheadAttention with the same weights.
    attn, ffn, attn_norm, ffn_norm = toy_sublayers(x.shape[-1], num_heads, seed)
    C = x.shape[-1]
    mha = torch.nn.MultiheadAttention(C, num_heads, batch_first=True)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]))
        mha.in_proj_bias.copy_(torch.cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias]))
        mha.out_proj.weight.copy_(attn.out_proj.weight)
        mha.out_proj.bias.copy_(attn.out_proj.bias)
    x = attn_norm(x + mha(x, x, x, need_weights=False)[0])
    return ffn_norm(x + ffn(x))


def _swiglu_by_linear(x, w_gate, w_up, w_down):
    gate = F.linear(x, w_gate)
    return F.linear(gate * torch.sigmoid(gate) * F.linear(x, w_up), w_down)


def _crossover_by_search(d_model, num_heads):
    """Counted by hand on the given block (FFN 3 · d_model wide), searched from T = 1: no FlopCounterMode."""
    d_ff = 3 * d_model

    def product(m, k, n):  # FLOPs of an (m, k) @ (k, n) product: m·n dot products of k multiply-adds
        return 2 * m * k * n

    T = 1
    while 2 * product(T, d_model, T) <= 4 * product(T, d_model, d_model) + 2 * product(T, d_model, d_ff):
        T += 1
    return torch.tensor(T)


@pytest.mark.parametrize(
    "exercise_id, fn",
    [
        ("08.1", _rms_norm_by_torch),
        ("08.2", _pre_norm_by_hand),
        ("08.3", _post_norm_by_torch_mha),
        ("08.4", _swiglu_by_linear),
        ("08.6", _crossover_by_search),
    ],
)
def test_independent_correct_versions_pass(exercise_id: str, fn) -> None:
    result = check(exercise_id, fn)
    assert result.status is Status.PASS, result


def test_rms_norm_without_eps_is_named_however_it_is_written() -> None:
    result = check("08.1", lambda x, w, eps: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True)) * w)
    assert result.status is Status.FAIL and "eps is missing" in result.hint
    zero_token = next(c for c in make_cases(EXERCISES["08.1"], 0) if (c.args[0] == 0).all(-1).any())
    x, w, _ = zero_token.args
    assert torch.isnan(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True)) * w).any()  # what eps prevents


def test_toy_sublayers_are_seeded_and_leave_the_global_rng_alone() -> None:
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a, b = toy_sublayers(12, 3, seed=5), toy_sublayers(12, 3, seed=5)
    assert torch.equal(torch.random.get_rng_state(), before)
    for p, q in zip(torch.nn.ModuleList(a).parameters(), torch.nn.ModuleList(b).parameters(), strict=True):
        assert torch.equal(p, q)
    c = toy_sublayers(12, 3, seed=6)
    assert not torch.equal(a.attn.q_proj.weight, c.attn.q_proj.weight)
    assert not torch.equal(a.attn_norm.weight, a.ffn_norm.weight)  # the two norms differ
    with pytest.raises(ValueError, match="num_heads"):
        toy_sublayers(12, 0, seed=0)


def test_pre_and_post_norm_references_differ_on_the_cases() -> None:
    # The exercises only teach something if the two placements give different answers on the inputs.
    cases = make_cases(EXERCISES["08.2"], 0)
    for case in cases:
        pre = EXERCISES["08.2"].reference(*case.args)
        post = EXERCISES["08.3"].reference(*case.args)
        assert (pre - post).abs().max() > 0.1


def _gpt2_block_by_transformers(x, *args):
    """Hugging Face's own GPT2Block (eager attention, eval mode) with the case's weights loaded by name."""
    modeling = pytest.importorskip("transformers.models.gpt2.modeling_gpt2")
    from transformers import GPT2Config

    *weights, num_heads = args
    C, hidden = weights[8].shape  # mlp.c_fc.weight (C, hidden)
    config = GPT2Config(n_embd=C, n_head=num_heads, n_inner=hidden, attn_implementation="eager")
    block = modeling.GPT2Block(config, layer_idx=0).eval()
    block.load_state_dict(dict(zip(block.state_dict(), weights, strict=True)))  # HF's key order
    T = x.shape[1]
    # A GPT2Block on its own gets its causal mask from GPT2Model: pass it as an additive (1, 1, T, T) mask.
    future = torch.full((T, T), float("-inf")).triu(1)[None, None]
    with torch.no_grad():
        return block(x, attention_mask=future)


def test_transformers_own_gpt2_block_passes_exercise_08_5() -> None:
    """The production peer: transformers.GPT2Block itself, given the weights, is a right answer."""
    pytest.importorskip("transformers")
    result = check("08.5", _gpt2_block_by_transformers)
    assert result.status is Status.PASS, result


def test_the_gpt2_block_cases_are_not_causal_by_accident() -> None:
    # Dropping the causal mask must change every case's output, or the check could not name that slip.
    exercise = get_exercise("08.5")
    for case in make_cases(exercise, 0):
        full = exercise.reference(*case.args)
        x, *rest = case.args
        assert (full[:, :-1] - exercise.reference(x[:, :-1], *rest)).abs().max() < 1e-5  # no future leaks
        assert (full - exercise.mistakes[0].fn(*case.args)).abs().max() > 1e-3


def _off_on_the_measured_cases(shift: int):
    """Right on the value cases, ``shift`` away from the answer on the cases FlopCounterMode measures."""
    measured = {c.args for c in make_cases(EXERCISES["08.6"], 0) if c.group != "values"}
    return lambda C, H: _crossover_by_search(C, H) + (shift if (C, H) in measured else 0)


def test_flop_counter_catches_a_crossover_one_too_late_or_too_early() -> None:
    late = check("08.6", _off_on_the_measured_cases(1))
    assert late.status is Status.FAIL and "counted by FlopCounterMode" in late.message, late
    assert "more already, so T = 32 is not the smallest" in late.message  # (6, 2): the tie is at T = 30
    early = check("08.6", _off_on_the_measured_cases(-1))
    assert (
        early.status is Status.FAIL
        and "21,600 FLOPs in q kᵀ and P v, 21,600 in the projections" in early.message
    )


def test_the_measured_block_ties_exactly_one_token_before_the_crossover() -> None:
    # The counts of a real block, not the formula: the cases are ties, so > and >= give different answers.
    for d_model, d_ff in [(6, 10), (9, 7), (8, 14)]:
        T = 2 * d_model + d_ff
        core, rest = counted_block_flops(d_model, d_ff, T)
        assert (
            core == rest
            and counted_block_flops(d_model, d_ff, T + 1)[0] > counted_block_flops(d_model, d_ff, T + 1)[1]
        )


def test_the_crossover_is_measured_on_the_given_block_not_the_formula_of_another() -> None:
    # The answer is read off toy_sublayers' block (FFN 3 · d_model wide); a count that assumes GPT-2's 4 · d_model
    # FFN, the old formula's habit, is off by d_model and fails the values and the counted block alike.
    result = check("08.6", lambda C, H: _crossover_by_search(C, H) + C)
    assert result.status is Status.FAIL, result
    for d_model, heads in [(6, 2), (9, 3)]:
        T = int(_crossover_by_search(d_model, heads))
        core, rest = counted_block_flops(d_model, 3 * d_model, T - 1)
        assert core == rest  # the counted block ties one token before: a strict > is what the answer needs
