"""Linear attention (parallel and recurrent) and Performer features, against their quadratic forms and softmax."""

from __future__ import annotations

import pytest
import torch

from attn_edu.attention import scaled_dot_product_attention
from attn_edu.efficient import (
    elu_feature_map,
    linear_attention,
    linear_attention_recurrent,
    linformer_attention,
    orthogonal_random_matrix,
    performer_attention,
    performer_features,
)
from attn_edu.masks import causal_mask


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


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


def test_linformer_with_the_identity_is_exact_and_its_error_falls_with_the_rank():
    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(2, 4, 16, 8, generator=g),
        torch.randn(2, 4, 64, 8, generator=g),
        torch.randn(2, 4, 64, 8, generator=g),
    )
    exact = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(linformer_attention(q, k, v, torch.eye(64)), exact, atol=1e-5, rtol=1e-5)
    errors = {}
    for r in (4, 16, 256):
        runs = []
        for seed in range(4):
            e = torch.randn(r, 64, generator=torch.Generator().manual_seed(seed)) / r**0.5  # JL projection
            runs.append(((linformer_attention(q, k, v, e) - exact).norm() / exact.norm()).item())
        errors[r] = sorted(runs)[len(runs) // 2]
    assert errors[4] > errors[16] > errors[256], errors


def test_linformer_checks_the_projection_length():
    q, k, v = torch.randn(5, 8), torch.randn(12, 8), torch.randn(12, 8)
    with pytest.raises(ValueError, match=r"e_proj: expected shape \(r, S\)"):
        linformer_attention(q, k, v, torch.randn(4, 11))
    with pytest.raises(ValueError, match="f_proj"):
        linformer_attention(q, k, v, torch.randn(4, 12), torch.randn(4, 10))
