"""Soft retrieval: lookups, kernel regression, scoring functions, against torch and plain formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_edu.attention import scaled_dot_product_attention
from attn_edu.masks import causal_mask, key_mask, padding_mask
from attn_edu.retrieval import (
    AdditiveScore,
    DotProductScore,
    attention_pool,
    average_pool,
    dot_product_score,
    gaussian_kernel_score,
    hard_lookup,
    hard_lookup_weights,
    nadaraya_watson,
    pool_weights,
    scaled_dot_product_score,
    soft_lookup,
    soft_lookup_weights,
)

TOL = {"atol": 1e-5, "rtol": 1e-5}


# --- hard and soft lookup -----------------------------------------------------------------------


def test_hard_lookup_behaves_like_a_dict():
    table = {0: 10.0, 1: -3.0, 2: 7.5, 3: 0.25}
    keys = torch.eye(4)  # key i is the one-hot code of i
    values = torch.tensor(list(table.values()))[:, None]  # (S, 1)
    asked = [2, 0, 3, 3, 1]
    query = keys[asked]  # (T, D): each query equals one key
    expected = torch.tensor([table[i] for i in asked])[:, None]
    assert torch.equal(hard_lookup(query, keys, values), expected)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**16), T=st.integers(1, 5), S=st.integers(2, 7), D=st.integers(1, 6))
def test_soft_lookup_tends_to_hard_lookup_as_temperature_goes_to_zero(seed, T, S, D):
    g = torch.Generator().manual_seed(seed)
    query, keys, values = (torch.randn(2, n, d, generator=g) for n, d in ((T, D), (S, D), (S, 3)))
    scores = dot_product_score(query, keys)
    top2 = scores.topk(2, dim=-1).values
    if (top2[..., 0] - top2[..., 1]).min() < 1e-2:  # near-tie: the limit is a blend, not one key
        return
    hard = hard_lookup(query, keys, values)
    one_hot = hard_lookup_weights(query, keys)
    # The weight on the best key grows monotonically as the temperature falls.
    best = [
        (soft_lookup_weights(query, keys, temperature=t) * one_hot).sum(-1) for t in (10.0, 1.0, 0.1, 1e-4)
    ]
    assert all(torch.all(a <= b + 1e-6) for a, b in zip(best, best[1:])), best
    torch.testing.assert_close(soft_lookup(query, keys, values, temperature=1e-4), hard, **TOL)
    torch.testing.assert_close(
        soft_lookup_weights(query, keys, temperature=1e-4), hard_lookup_weights(query, keys), **TOL
    )


def test_soft_lookup_weights_sum_to_one_and_flatten_with_temperature():
    torch.manual_seed(0)
    query, keys = torch.randn(3, 5, 4), torch.randn(3, 6, 4)
    for t in (0.1, 1.0, 7.0):
        w = soft_lookup_weights(query, keys, temperature=t)
        assert torch.all(w >= 0)
        torch.testing.assert_close(w.sum(-1), torch.ones(3, 5))
    hot = soft_lookup_weights(query, keys, temperature=1e6)
    torch.testing.assert_close(hot, torch.full_like(hot, 1 / 6), **TOL)


def test_soft_lookup_matches_torch_sdpa_with_scale():
    torch.manual_seed(0)
    query, keys, values = torch.randn(2, 5, 4), torch.randn(2, 7, 4), torch.randn(2, 7, 3)
    for t in (0.5, 2.0, math.sqrt(4)):
        expected = F.scaled_dot_product_attention(query, keys, values, scale=1 / t)
        torch.testing.assert_close(soft_lookup(query, keys, values, temperature=t), expected, **TOL)


# --- attention pooling with different scores ---------------------------------------------------


def test_pool_weights_match_softmax_and_sum_to_one():
    torch.manual_seed(0)
    scores = torch.randn(2, 4, 5) * 3
    weights = pool_weights(scores)
    torch.testing.assert_close(weights, torch.softmax(scores, dim=-1))
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4))


@pytest.mark.parametrize("T, S, D", [(5, 7, 4), (1, 3, 9), (6, 6, 5)])
def test_scaled_dot_product_pooling_equals_reference_and_torch(T, S, D):
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, T, D), torch.randn(2, 3, S, D), torch.randn(2, 3, S, 2)
    mask = key_mask(padding_mask([S, max(1, S - 2)], S))  # (B, 1, 1, S)
    pooled = attention_pool(scaled_dot_product_score(q, k), v, mask)
    torch.testing.assert_close(pooled, scaled_dot_product_attention(q, k, v, mask), **TOL)
    torch.testing.assert_close(pooled, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), **TOL)
    unscaled = attention_pool(dot_product_score(q, k), v, causal_mask(T, S))
    expected = scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0)
    torch.testing.assert_close(unscaled, expected, **TOL)


def test_attention_pool_fully_masked_row_is_zero_with_finite_gradient():
    scores = torch.randn(3, 4, requires_grad=True)
    values = torch.randn(4, 2)
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[1] = False
    out = attention_pool(scores, values, mask)
    assert torch.equal(out[1], torch.zeros(2))
    out.sum().backward()
    assert torch.isfinite(scores.grad).all()
    assert torch.equal(scores.grad[1], torch.zeros(4))


# --- additive (Bahdanau) score ------------------------------------------------------------------


def test_additive_score_shapes_and_formula():
    torch.manual_seed(0)
    score = AdditiveScore(query_dim=3, key_dim=5, hidden_dim=4)
    query, keys = torch.randn(2, 6, 3), torch.randn(2, 7, 5)
    out = score(query, keys)
    assert out.shape == (2, 6, 7)
    W_q, W_k, v = score.q_proj.weight, score.k_proj.weight, score.score_proj.weight[0]
    for b, t, s in [(0, 0, 0), (1, 5, 6), (0, 3, 2)]:  # v^T tanh(W_q q + W_k k), pair by pair
        expected = v @ torch.tanh(W_q @ query[b, t] + W_k @ keys[b, s])
        torch.testing.assert_close(out[b, t, s], expected)
    assert score(torch.randn(4, 3), torch.randn(9, 5)).shape == (4, 9)  # no batch dim


def test_additive_attention_gradients_reach_every_parameter():
    torch.manual_seed(0)
    score = AdditiveScore(query_dim=3, key_dim=5, hidden_dim=4)
    query, keys = torch.randn(2, 6, 3), torch.randn(2, 7, 5)
    values = torch.randn(2, 7, 2, requires_grad=True)
    mask = padding_mask([7, 4], 7)[:, None, :]  # (B, 1, S): no head axis here
    out = attention_pool(score(query, keys), values, mask)
    assert out.shape == (2, 6, 2)
    out.pow(2).sum().backward()
    for name, p in score.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert torch.equal(values.grad[1, 4:], torch.zeros(3, 2))  # hidden keys' values get no gradient


def test_dot_product_score_is_the_projected_scaled_dot_product_of_torch():
    torch.manual_seed(0)
    score = DotProductScore(query_dim=3, key_dim=5, head_dim=4)
    query, keys = torch.randn(2, 6, 3), torch.randn(2, 7, 5)
    out = score(query, keys)
    assert out.shape == (2, 6, 7)
    W_q, W_k = score.q_proj.weight, score.k_proj.weight  # (D, query_dim), (D, key_dim)
    for b, t, s in [(0, 0, 0), (1, 5, 6), (0, 3, 2)]:  # (W_q q) · (W_k k) / sqrt(D), pair by pair
        torch.testing.assert_close(out[b, t, s], (W_q @ query[b, t]) @ (W_k @ keys[b, s]) / 2.0)
    # Its softmax is the weights torch's fused attention uses: read them out with identity values.
    mask = padding_mask([7, 3], 7)[:, None, :]  # (B, 1, S)
    q, k = score.q_proj(query), score.k_proj(keys)  # (B, T, D), (B, S, D)
    torch_weights = F.scaled_dot_product_attention(q, k, torch.eye(7).expand(2, 7, 7), attn_mask=mask)
    torch.testing.assert_close(pool_weights(out, mask), torch_weights, **TOL)


# --- kernel regression --------------------------------------------------------------------------


def numpy_nadaraya_watson(xq, xt, yt, sigma):
    kernel = np.exp(-((xq[:, None] - xt[None, :]) ** 2) / (2 * sigma**2))
    return (kernel * yt[None, :]).sum(1) / kernel.sum(1)


@pytest.mark.parametrize("sigma", [0.3, 1.0, 2.5])
def test_nadaraya_watson_matches_the_kernel_formula(sigma):
    rng = np.random.default_rng(0)
    xt = np.sort(rng.uniform(0, 5, 20))
    yt = 2 * np.sin(xt) + xt**0.8 + rng.normal(0, 0.5, 20)
    xq = np.linspace(0, 5, 13)
    as_tensor = lambda a: torch.tensor(a, dtype=torch.float32)
    ours = nadaraya_watson(as_tensor(xq), as_tensor(xt), as_tensor(yt), bandwidth=sigma)
    np.testing.assert_allclose(ours.numpy(), numpy_nadaraya_watson(xq, xt, yt, sigma), rtol=1e-5, atol=1e-6)


def test_tiny_bandwidth_interpolates_training_points():
    torch.manual_seed(0)
    x_train = torch.randperm(30).float() / 7  # distinct points, at least 1/7 apart
    y_train = torch.randn(30)
    fit = nadaraya_watson(x_train, x_train, y_train, bandwidth=1e-3)
    torch.testing.assert_close(fit, y_train, **TOL)
    near = nadaraya_watson(x_train + 0.01, x_train, y_train, bandwidth=1e-2)  # nearest neighbour
    torch.testing.assert_close(near, y_train, **TOL)


def test_huge_bandwidth_gives_the_mean_like_average_pooling():
    torch.manual_seed(0)
    x_train, y_train, x_query = torch.rand(25) * 5, torch.randn(25), torch.linspace(0, 5, 9)
    mean = torch.full((9,), float(y_train.mean()))
    torch.testing.assert_close(average_pool(x_query, y_train), mean, **TOL)
    torch.testing.assert_close(nadaraya_watson(x_query, x_train, y_train, bandwidth=1e4), mean, **TOL)


def test_kernel_regression_on_vector_points_and_targets():
    torch.manual_seed(0)
    x_train, y_train, x_query = torch.randn(10, 2), torch.randn(10, 3), torch.randn(4, 2)
    out = nadaraya_watson(x_query, x_train, y_train, bandwidth=0.7)
    assert out.shape == (4, 3)
    sq_dist = ((x_query[:, None] - x_train[None]) ** 2).sum(-1)
    weights = torch.softmax(-sq_dist / (2 * 0.7**2), dim=-1)
    torch.testing.assert_close(out, weights @ y_train, **TOL)
    torch.testing.assert_close(gaussian_kernel_score(x_query, x_train, 0.7), -sq_dist / 0.98)


# --- bad input ----------------------------------------------------------------------------------


def test_bad_input_names_the_argument():
    q, k, v = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2)
    for bad in (0.0, -1.0, True):
        with pytest.raises(ValueError, match="temperature"):
            soft_lookup(q, k, v, temperature=bad)
    with pytest.raises(ValueError, match="bandwidth"):
        nadaraya_watson(torch.rand(3), torch.rand(5), torch.rand(5), bandwidth=0)
    with pytest.raises(ValueError, match="y_train"):
        nadaraya_watson(torch.rand(3), torch.rand(5), torch.rand(4))
    with pytest.raises(ValueError, match="x_train"):
        gaussian_kernel_score(torch.rand(3, 2), torch.rand(5, 3), 1.0)
    with pytest.raises(ValueError, match="values"):
        attention_pool(torch.randn(3, 5), torch.randn(4, 2))
    with pytest.raises(ValueError, match="values"):
        hard_lookup(q, k, torch.randn(6, 2))
    with pytest.raises(ValueError, match="keys"):
        dot_product_score(q, torch.randn(5, 3))
    with pytest.raises(ValueError, match="mask"):
        attention_pool(torch.randn(3, 5), v, torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="values: expected a floating-point tensor"):
        attention_pool(torch.randn(3, 5), torch.ones(5, 2, dtype=torch.long))  # weights cast to int: all 0
    with pytest.raises(ValueError, match="scores: expected a floating-point tensor"):
        attention_pool(torch.ones(3, 5, dtype=torch.long), v)
    with pytest.raises(ValueError, match="keys"):
        AdditiveScore(4, 2, 8)(q, k)
    with pytest.raises(ValueError, match="query"):
        DotProductScore(3, 4, 8)(q, k)
