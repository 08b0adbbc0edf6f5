"""Circuits: the QK and OV matrices reproduce what a head computes, composition scores find a planted
composition and nothing else, and patching recovers exactly the head that carries a difference."""

from __future__ import annotations

import pytest
import torch

from attn_edu.circuits import (
    composition_score,
    composition_scores,
    copying_score,
    head_circuits,
    patch_head_outputs,
    random_composition_baseline,
)
from attn_edu.models.attention_only import AttentionOnlyConfig, AttentionOnlyTransformer
from attn_edu.multihead import MultiHeadAttention


def _no_bias(attn: MultiHeadAttention) -> MultiHeadAttention:
    with torch.no_grad():
        for proj in (attn.q_proj, attn.k_proj, attn.v_proj, attn.out_proj):
            proj.bias.zero_()
    return attn


def test_circuits_reproduce_the_heads_scores_and_output():
    torch.manual_seed(0)
    attn = _no_bias(MultiHeadAttention(12, 3))
    x = torch.randn(1, 7, 12)
    with torch.no_grad():
        out, weights = attn(x, is_causal=True, need_weights=True)  # (1, T, C), (1, H, T, S)
        qk, ov = head_circuits(attn)
        scores = x[0] @ qk @ x[0].T * attn.scale  # (H, T, S): x_dst M_QK x_srcᵀ
        expected_weights = torch.softmax(
            scores.masked_fill(~torch.ones(7, 7).tril().bool(), float("-inf")), -1
        )
        torch.testing.assert_close(expected_weights, weights[0])
        written = (weights[0] @ x[0] @ ov).sum(0)  # Σ_h P_h x M_OV,h: (T, C)
        torch.testing.assert_close(written, out[0], atol=1e-5, rtol=1e-5)


def test_composition_sees_a_planted_k_composition_and_nothing_where_subspaces_miss():
    torch.manual_seed(1)
    first, second = MultiHeadAttention(16, 2), MultiHeadAttention(16, 2)
    with torch.no_grad():
        first.out_proj.weight[4:] = 0.0  # every first-layer head writes only into dims 0-3
        second.k_proj.weight[:, 4:] = 0.0  # second-layer keys read dims 0-3 ...
        second.k_proj.weight[8:, :4] = 0.0  # ... except head 1's (rows 8-15), which read nothing there
        second.k_proj.weight[8:, 8:12] = torch.randn(8, 4)  # head 1 reads dims 8-11 instead
    scores = composition_scores(first, second)
    assert scores["K"].shape == (2, 2)
    assert (scores["K"][:, 0] > 0.1).all() and torch.equal(scores["K"][:, 1], torch.zeros(2))
    for name in ("Q", "K", "V"):
        assert ((scores[name] >= 0) & (scores[name] <= 1 + 1e-6)).all()


def test_composition_score_is_one_for_aligned_rank_one_maps_and_the_baseline_is_well_above_zero():
    u = torch.randn(6)
    a = torch.outer(u, u)
    assert composition_score(a, a).item() == pytest.approx(1.0)
    baseline = random_composition_baseline(64, 16, generator=torch.Generator().manual_seed(0))
    assert 0.08 < baseline < 0.2
    with pytest.raises(ValueError, match="rank"):
        random_composition_baseline(8, 9)


def test_patching_recovers_exactly_the_one_head_that_writes():
    torch.manual_seed(2)
    model = AttentionOnlyTransformer(
        AttentionOnlyConfig(vocab_size=20, max_seq_len=12, embed_dim=16, num_heads=2)
    )
    with torch.no_grad():
        for attn in model.layers:
            attn.out_proj.weight.zero_()
            attn.out_proj.bias.zero_()
        model.layers[1].out_proj.weight[:, :8] = torch.randn(16, 8)  # only head (1, 0) writes anything
    clean = torch.randint(20, (3, 12))
    corrupted = clean.clone()
    corrupted[:, :6] = (clean[:, :6] + 1) % 20  # the first half differs, the second is the same
    with torch.no_grad():
        target = model(clean)[:, 6:]

    def metric(logits: torch.Tensor) -> float:  # closeness to the clean run's logits on the second half
        return -(logits[:, 6:] - target).pow(2).mean().item()

    result = patch_head_outputs(model, clean, corrupted, metric)
    assert result["clean"] == 0.0 and result["corrupted"] < 0
    assert result["recovered"][1, 0].item() == pytest.approx(1.0)
    others = [result["recovered"][i, h].item() for i, h in [(0, 0), (0, 1), (1, 1)]]
    assert others == pytest.approx([0.0, 0.0, 0.0], abs=1e-6)
    with pytest.raises(ValueError, match="nothing to recover"):
        patch_head_outputs(model, clean, clean, metric)
    with pytest.raises(ValueError, match="corrupted"):
        patch_head_outputs(model, clean, corrupted[:, :5], metric)


def test_copying_score_sees_copiers_and_anti_copiers():
    g = torch.Generator().manual_seed(3)
    basis = torch.linalg.qr(torch.randn(10, 10, generator=g))[0]
    copier = basis @ torch.diag(torch.rand(10, generator=g) + 0.1) @ basis.T  # positive eigenvalues
    assert copying_score(copier).item() == pytest.approx(1.0, abs=1e-5)
    assert copying_score(-copier).item() == pytest.approx(-1.0, abs=1e-5)
    mixed = torch.diag(torch.tensor([1.0, -1.0, 2.0, -2.0]))
    assert copying_score(mixed).item() == pytest.approx(0.0, abs=1e-6)
    assert copying_score(torch.stack([copier, -copier])).shape == (2,)
