"""Sparse masks, linear attention, Performer features and mixture-of-experts routing."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from attn_edu.attention import scaled_dot_product_attention
from attn_edu.efficient import (
    MoEFeedForward,
    TopKRouter,
    bigbird_mask,
    dilated_window_mask,
    elu_feature_map,
    global_tokens_mask,
    linear_attention,
    linear_attention_recurrent,
    mask_density,
    orthogonal_random_matrix,
    performer_attention,
    performer_features,
    random_blocks_mask,
    sliding_window_mask,
)
from attn_edu.masks import causal_mask


def _hf_mask(mask_function, T: int, S: int) -> torch.Tensor:
    # Hugging Face mask functions take absolute query positions (cache_position): S - T + t.
    q_idx = torch.arange(T)[:, None] + (S - T)
    kv_idx = torch.arange(S)[None, :]
    return torch.as_tensor(mask_function(0, 0, q_idx, kv_idx)).expand(T, S)


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --- sparse patterns ----------------------------------------------------------------------------


@pytest.mark.parametrize("T, S", [(9, 9), (5, 12)])
@pytest.mark.parametrize("window", [1, 3, 4])
def test_sliding_window_matches_hugging_face_masks(T, S, window):
    masking_utils = pytest.importorskip("transformers.masking_utils")
    causal_fn = masking_utils.sliding_window_causal_mask_function(window)
    assert torch.equal(sliding_window_mask(T, S, window=window), _hf_mask(causal_fn, T, S))
    # HF's bidirectional window is inclusive (|d| <= w): our window = w + 1.
    both_fn = masking_utils.sliding_window_bidirectional_mask_function(window - 1)
    assert torch.equal(sliding_window_mask(T, S, window=window, causal=False), _hf_mask(both_fn, T, S))


def test_sliding_window_properties():
    mask = sliding_window_mask(12, window=4)
    assert torch.equal(mask & causal_mask(12), mask)  # never sees the future
    assert mask.sum(dim=-1).tolist() == [1, 2, 3] + [4] * 9  # window keys once warmed up
    assert torch.equal(sliding_window_mask(6, 9, window=9), causal_mask(6, 9))  # wide window = causal


@pytest.mark.parametrize("causal", [True, False])
def test_dilated_window(causal):
    assert torch.equal(
        dilated_window_mask(7, 10, window=3, dilation=1, causal=causal),
        sliding_window_mask(7, 10, window=3, causal=causal),
    )
    mask = dilated_window_mask(20, window=3, dilation=4, causal=causal)
    t = 10
    distances = sorted(abs(t - s) for s in mask[t].nonzero().flatten().tolist())
    assert distances == ([0, 4, 8] if causal else [0, 4, 4, 8, 8])


def test_global_tokens_rows_and_columns():
    mask = global_tokens_mask(6, global_positions=[0, 4])
    is_global = torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.bool)
    assert mask[is_global].all() and mask[:, is_global].all()  # attend everywhere, attended by all
    assert not mask[~is_global][:, ~is_global].any()  # the rest is left to other patterns
    # Bottom-right: 3 queries at absolute positions 2, 3, 4 of 5 keys; position 4 is global.
    short = global_tokens_mask(3, 5, global_positions=[4])
    assert short[2].all() and short[:, 4].all() and short.sum() == 5 + 2


def test_random_blocks_count_reproducibility_and_blocks():
    mask = random_blocks_mask(10, 13, num_random=3, generator=_g(0))
    assert mask.shape == (10, 13) and (mask.sum(dim=-1) == 3).all()
    assert torch.equal(mask, random_blocks_mask(10, 13, num_random=3, generator=_g(0)))
    assert not torch.equal(mask, random_blocks_mask(10, 13, num_random=3, generator=_g(1)))
    blocked = random_blocks_mask(16, num_random=2, generator=_g(0), block_size=4)
    as_blocks = blocked.reshape(4, 4, 4, 4)  # (query block, row, key block, col)
    assert (as_blocks.all(dim=(1, 3)) == as_blocks.any(dim=(1, 3))).all()  # whole blocks on or off
    assert (as_blocks.any(dim=(1, 3)).sum(dim=-1) == 2).all()


def test_bigbird_is_window_or_global_or_random_and_gets_sparser():
    T = 48
    mask = bigbird_mask(T, window=3, global_positions=[0, 1], num_random=2, generator=_g(5))
    parts = (
        sliding_window_mask(T, window=3, causal=False)
        | global_tokens_mask(T, global_positions=[0, 1])
        | random_blocks_mask(T, num_random=2, generator=_g(5))
    )
    assert torch.equal(mask, parts)
    densities = [
        mask_density(bigbird_mask(n, window=3, global_positions=[0], num_random=2, generator=_g(0)))
        for n in (32, 64, 128)
    ]
    assert densities[0] > densities[1] > densities[2]
    q = k = v = torch.randn(1, T, 8)
    assert torch.isfinite(scaled_dot_product_attention(q, k, v, mask)).all()


def test_mask_density():
    assert mask_density(causal_mask(10)) == pytest.approx(55 / 100)
    assert mask_density(torch.ones(3, 4, dtype=torch.bool)) == 1.0
    with pytest.raises(ValueError, match="mask: expected a bool mask"):
        mask_density(torch.ones(3, 3))


def test_mask_argument_errors():
    with pytest.raises(ValueError, match="window: expected a positive int"):
        sliding_window_mask(4, window=0)
    with pytest.raises(ValueError, match="dilation: expected a positive int"):
        dilated_window_mask(4, window=2, dilation=0)
    with pytest.raises(ValueError, match=r"global_positions: expected positions in 0 \.\. 3"):
        global_tokens_mask(4, global_positions=[4])
    with pytest.raises(ValueError, match="num_random: expected at most 3"):
        random_blocks_mask(4, 3, num_random=4, generator=_g(0))


# --- linear attention ---------------------------------------------------------------------------


def _quadratic_linear_attention(q, k, v, mask=None):
    """The O(T·S) form: weights φ(q)·φ(k), normalised per query; a direct peer of the O(T) code."""
    weights = elu_feature_map(q) @ elu_feature_map(k).transpose(-2, -1)  # (..., T, S)
    if mask is not None:
        weights = weights * mask
    return (weights @ v) / (weights.sum(dim=-1, keepdim=True) + 1e-6)


@pytest.mark.parametrize("T, S", [(7, 7), (5, 9), (9, 4)])
def test_linear_attention_equals_its_quadratic_form(T, S):
    q, k, v = torch.randn(2, 3, T, 6), torch.randn(2, 3, S, 6), torch.randn(2, 3, S, 5)
    torch.testing.assert_close(linear_attention(q, k, v), _quadratic_linear_attention(q, k, v))
    torch.testing.assert_close(
        linear_attention(q, k, v, is_causal=True), _quadratic_linear_attention(q, k, v, causal_mask(T, S))
    )


@pytest.mark.parametrize("T, S", [(8, 8), (5, 9), (9, 4)])
def test_parallel_causal_equals_recurrent(T, S):
    q, k, v = torch.randn(2, T, 6), torch.randn(2, S, 6), torch.randn(2, S, 3)
    parallel = linear_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(parallel, linear_attention_recurrent(q, k, v))
    if T > S:  # queries before the first key see nothing: zeros, not NaN
        assert torch.equal(parallel[:, : T - S], torch.zeros(2, T - S, 3))


def test_linear_attention_rejects_a_mask_and_bad_shapes():
    q = torch.randn(4, 6)
    with pytest.raises(ValueError, match="mask: linear attention"):
        linear_attention(q, q, q, causal_mask(4))
    with pytest.raises(ValueError, match=r"k: expected shape \(\.\.\., S, D\) with D=6"):
        linear_attention(q, torch.randn(4, 5), q)
    with pytest.raises(ValueError, match=r"v: expected shape \(\.\.\., S, Dv\) with S=4"):
        linear_attention_recurrent(q, q, torch.randn(3, 6))


# --- Performer ----------------------------------------------------------------------------------


def test_orthogonal_random_matrix_blocks_are_orthogonal_and_rows_gaussian_sized():
    w = orthogonal_random_matrix(10, 4, generator=_g(0))
    assert w.shape == (10, 4)
    for block in (w[:4], w[4:8]):
        gram = block @ block.T
        torch.testing.assert_close(gram - torch.diag(gram.diag()), torch.zeros(4, 4), atol=1e-5, rtol=0)
    many = orthogonal_random_matrix(4000, 8, generator=_g(1))
    assert (many * many).sum(dim=-1).mean() == pytest.approx(8, rel=0.05)  # E|w|² = D
    torch.testing.assert_close(many.mean(dim=0), torch.zeros(8), atol=0.1, rtol=0)  # no preferred direction


def test_performer_features_estimate_the_softmax_kernel():
    g = _g(0)
    q, k = torch.randn(3, 8, generator=g) / 2, torch.randn(4, 8, generator=g) / 2
    w = orthogonal_random_matrix(20000, 8, generator=g)
    estimate = performer_features(q, w, scale=0.5) @ performer_features(k, w, scale=0.5).T
    torch.testing.assert_close(estimate, torch.exp(q @ k.T * 0.5), rtol=0.03, atol=0)
    assert (performer_features(q, w, scale=0.5) > 0).all()


@pytest.mark.parametrize("is_causal", [False, True])
def test_performer_error_shrinks_with_more_features(is_causal):
    g = _g(0)
    q, k = torch.randn(2, 20, 16, generator=g) / 2, torch.randn(2, 24, 16, generator=g) / 2
    v = torch.randn(2, 24, 8, generator=g)
    ref = scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    errors = []
    for m in (16, 64, 256, 1024):
        runs = [
            performer_attention(q, k, v, num_features=m, generator=_g(seed), is_causal=is_causal)
            for seed in range(4)
        ]
        errors.append(sum((out - ref).abs().mean().item() for out in runs) / len(runs))
    assert all(a > b for a, b in zip(errors, errors[1:])), errors
    assert errors[-1] < errors[0] / 4, errors  # Monte Carlo: error ~ 1/sqrt(m), 64x more features


# --- mixture of experts -------------------------------------------------------------------------


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
