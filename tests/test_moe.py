"""Mixture-of-experts routing: weights, counts, the load-balancing loss, and the MoE layer against a dense mixture."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from attn_edu.moe import ClampedSwiGLU, MoEFeedForward, TopKRouter


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_router_weights_sum_to_one_and_stats_count_every_token_k_times():
    torch.manual_seed(0)
    router = TopKRouter(8, num_experts=5, k=2)
    x = torch.randn(30, 8)
    weights, expert_index, stats = router(x)
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(30))
    assert (weights >= 0).all() and (weights[:, 0] >= weights[:, 1]).all()
    assert torch.equal(expert_index, router.gate(x).topk(2, dim=-1).indices)
    assert int(stats.tokens_per_expert.sum()) == 30 * 2
    assert all(int(stats.tokens_per_expert[e]) == int((expert_index == e).sum()) for e in range(5))
    torch.testing.assert_close(stats.fraction.sum(), torch.tensor(1.0))
    stats.load_balancing_loss.backward()
    assert router.gate.weight.grad.abs().sum() > 0  # the auxiliary loss trains the router


def test_load_balancing_loss_is_one_for_a_uniform_router_and_larger_when_collapsed():
    router = TopKRouter(4, num_experts=4, k=1)
    nn.init.zeros_(router.gate.weight)  # every expert equally likely
    assert router(torch.randn(16, 4))[2].load_balancing_loss.item() == pytest.approx(1.0)
    with torch.no_grad():
        router.gate.weight.zero_()
        router.gate.weight[2, :] = 5.0  # expert 2 wins every positive token
    x = torch.rand(16, 4) + 0.1
    stats = router(x)[2]
    assert stats.tokens_per_expert.tolist() == [0, 0, 16, 0]
    assert stats.load_balancing_loss.item() > 3.5  # close to E = 4, the worst case


def test_moe_equals_dense_mixture_of_chosen_experts():
    torch.manual_seed(1)
    moe = MoEFeedForward(6, 12, num_experts=4, k=2)
    x = torch.randn(2, 5, 6)
    out, stats = moe(x)
    tokens = x.reshape(10, 6)
    weights, expert_index, _ = moe.router(tokens)
    every_expert = torch.stack([expert(tokens) for expert in moe.experts], dim=1)  # (N, E, C)
    chosen = every_expert.gather(1, expert_index[..., None].expand(-1, -1, 6))  # (N, k, C)
    torch.testing.assert_close(out, (weights[..., None] * chosen).sum(dim=1).reshape(2, 5, 6))
    assert int(stats.tokens_per_expert.sum()) == 10 * 2


def test_moe_with_all_experts_active_and_identical_equals_one_ffn():
    torch.manual_seed(2)
    ffn = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))
    moe = MoEFeedForward(8, 16, num_experts=3, k=3)
    for expert in moe.experts:
        expert.load_state_dict(ffn.state_dict())
    x = torch.randn(2, 7, 8)
    out, _ = moe(x)
    torch.testing.assert_close(out, ffn(x))


def test_moe_argument_errors():
    with pytest.raises(ValueError, match="k: expected at most num_experts=2"):
        TopKRouter(4, num_experts=2, k=3)
    with pytest.raises(ValueError, match=r"x: expected shape \(B, T, C\) with C=4"):
        MoEFeedForward(4, 8, num_experts=2)(torch.randn(2, 3, 5))
    assert math.isfinite(MoEFeedForward(4, 8, num_experts=2, k=1)(torch.randn(1, 1, 4))[0].sum().item())


def test_experts_of_another_kind_and_a_router_bias():
    """gpt-oss's options: every expert built by ``expert()``, and a bias per expert in the router's logits."""
    from attn_edu.blocks import SwiGLUFeedForward

    torch.manual_seed(3)
    moe = MoEFeedForward(
        6, 10, num_experts=4, k=2, router_bias=True,
        expert=lambda: SwiGLUFeedForward(6, 10, bias=True, unit=ClampedSwiGLU(limit=1.0)),
    )  # fmt: skip
    assert all(isinstance(e, SwiGLUFeedForward) and e.unit.limit == 1.0 for e in moe.experts)
    assert len({id(e) for e in moe.experts}) == 4  # four experts, not one shared
    x = torch.randn(2, 5, 6)
    tokens = x.reshape(10, 6)
    with torch.no_grad():
        moe.router.gate.bias.copy_(torch.tensor([0.0, 0.0, 50.0, 40.0]))  # experts 2 and 3 win every token
        out, stats = moe(x)
    assert stats.tokens_per_expert.tolist() == [0, 0, 10, 10]
    weights = torch.softmax(moe.router.gate(tokens)[:, [2, 3]], dim=-1)  # (N, 2): softmax over the two chosen
    expected = weights[:, :1] * moe.experts[2](tokens) + weights[:, 1:] * moe.experts[3](tokens)
    torch.testing.assert_close(out, expected.reshape(2, 5, 6))
    with pytest.raises(ValueError, match="expert: expected None or a function"):
        MoEFeedForward(4, 8, num_experts=2, expert=nn.Linear(4, 4).weight)


def test_a_shared_expert_runs_on_every_token_through_its_sigmoid_gate():
    """Qwen3-Next's option: ``shared_expert`` is added to the routed mixture, scaled by ``sigmoid(x w_s)``."""
    from attn_edu.blocks import SwiGLUFeedForward

    torch.manual_seed(4)
    routed = MoEFeedForward(6, 10, num_experts=4, k=2, expert=lambda: SwiGLUFeedForward(6, 10))
    shared = MoEFeedForward(
        6,
        10,
        num_experts=4,
        k=2,
        expert=lambda: SwiGLUFeedForward(6, 10),
        shared_expert=SwiGLUFeedForward(6, 12),
    )
    shared.load_state_dict(routed.state_dict(), strict=False)  # the same router and experts
    x = torch.randn(2, 5, 6)
    with torch.no_grad():
        out, stats = shared(x)
        alone, routed_stats = routed(x)
        gate = torch.sigmoid(shared.shared_expert_gate(x))  # (B, T, 1)
        assert ((gate > 0) & (gate < 1)).all() and not torch.allclose(out, alone)
        torch.testing.assert_close(out, alone + gate * shared.shared_expert(x))
        assert torch.equal(stats.tokens_per_expert, routed_stats.tokens_per_expert)  # routing untouched
        shared.shared_expert_gate.weight.fill_(0)
        shared.shared_expert.down_proj.weight.fill_(0)  # the shared expert now adds nothing
        torch.testing.assert_close(shared(x)[0], alone)
    with pytest.raises(ValueError, match="shared_expert: expected None or an nn.Module, got function"):
        MoEFeedForward(4, 8, num_experts=2, shared_expert=lambda: nn.Linear(4, 4))
