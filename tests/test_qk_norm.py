"""QK-norm: each head's queries and keys normalised before the dot product, against peers written another way."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attn_edu.attention import attention_weights
from attn_edu.multihead import MultiHeadAttention, merge_heads, split_heads
from attn_edu.qk_norm import QKNorm

TOL = {"atol": 1e-5, "rtol": 1e-5}


def random_gains(norm: QKNorm, seed: int = 1) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in (norm.q_norm, norm.k_norm):
            layer.weight.copy_(torch.rand(layer.weight.shape, generator=g) + 0.5)


@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_each_head_is_normalised_over_its_own_coordinates(kind):
    norm = QKNorm(16, kind=kind)
    q = torch.randn(2, 3, 5, 16) * torch.tensor([0.1, 1.0, 30.0]).view(1, 3, 1, 1) + 4  # heads of any size
    k = torch.randn(2, 1, 7, 16) * 50
    nq, nk = norm(q, k)
    assert nq.shape == q.shape and nk.shape == k.shape
    for x in (nq, nk):
        # eps = 1e-6 costs the quietest head (variance 0.01) a relative 1e-4 of its unit variance
        if kind == "layer":  # mean 0, variance 1 over the D coordinates of every head and token
            torch.testing.assert_close(x.mean(-1), torch.zeros(x.shape[:-1]), atol=1e-5, rtol=0)
            torch.testing.assert_close(x.var(-1, unbiased=False), torch.ones(x.shape[:-1]), atol=1e-3, rtol=0)
        else:  # mean square 1, mean left in
            torch.testing.assert_close(x.pow(2).mean(-1), torch.ones(x.shape[:-1]), atol=1e-3, rtol=0)


@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_attention_with_qk_norm_equals_attention_of_normalised_q_and_k_by_hand(kind):
    torch.manual_seed(0)
    C, H, D = 12, 3, 4
    mha = MultiHeadAttention(C, H, qk_norm=QKNorm(D, kind=kind))
    random_gains(mha.qk_norm)
    x = torch.randn(2, 6, C)

    def by_hand(t: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
        centred = t - t.mean(-1, keepdim=True) if kind == "layer" else t
        spread = centred.pow(2).mean(-1, keepdim=True)  # the variance, or the mean square
        return centred / torch.sqrt(spread + 1e-6) * gain

    q = by_hand(split_heads(mha.q_proj(x), H), mha.qk_norm.q_norm.weight)  # (B, H, T, D)
    k = by_hand(split_heads(mha.k_proj(x), H), mha.qk_norm.k_norm.weight)  # (B, H, S, D)
    v = split_heads(mha.v_proj(x), H)  # (B, H, S, D)
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # torch's, scale 1/sqrt(D)
    torch.testing.assert_close(mha(x, is_causal=True), mha.out_proj(merge_heads(heads)), **TOL)
    weights = torch.softmax(
        q @ k.transpose(-2, -1) / math.sqrt(D) + torch.full((6, 6), -torch.inf).triu(1), -1
    )
    torch.testing.assert_close(mha(x, is_causal=True, need_weights=True)[1], weights, **TOL)


def test_rms_qk_norm_with_gqa_matches_qwen3_attention():
    transformers = pytest.importorskip("transformers")
    from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention

    torch.manual_seed(0)
    C, H, H_kv, D = 24, 6, 2, 8
    config = transformers.Qwen3Config(
        hidden_size=C, num_attention_heads=H, num_key_value_heads=H_kv, head_dim=D, attention_bias=False,
        rms_norm_eps=1e-6, num_hidden_layers=1,
    )  # fmt: skip
    config._attn_implementation = "eager"  # no mask means no mask (SDPA would guess "causal")
    peer = Qwen3Attention(config, layer_idx=0).eval()
    with torch.no_grad():
        peer.q_norm.weight.uniform_(0.5, 1.5)
        peer.k_norm.weight.uniform_(0.5, 1.5)
    ours = MultiHeadAttention(C, H, num_kv_heads=H_kv, head_dim=D, bias=False, qk_norm=QKNorm(D, kind="rms"))
    ours.load_state_dict(
        {
            "q_proj.weight": peer.q_proj.weight,
            "k_proj.weight": peer.k_proj.weight,
            "v_proj.weight": peer.v_proj.weight,
            "out_proj.weight": peer.o_proj.weight,
            "qk_norm.q_norm.weight": peer.q_norm.weight,
            "qk_norm.k_norm.weight": peer.k_norm.weight,
        }
    )
    x = torch.randn(2, 5, C)
    no_rotation = (
        torch.ones(2, 5, D),
        torch.zeros(2, 5, D),
    )  # Qwen 3 applies RoPE after its norms: cos 1, sin 0
    torch.testing.assert_close(ours(x), peer(x, no_rotation, None)[0], **TOL)


def test_the_scale_is_applied_to_the_normalised_scores_as_given():
    torch.manual_seed(0)
    D = 16
    norm = QKNorm(D)
    q, k = torch.randn(2, 1, 3, D), torch.randn(2, 1, 5, D)
    nq, nk = norm(q, k)
    for scale in (1.0, 1 / D, 0.37):
        expected = torch.softmax(scale * nq @ nk.transpose(-2, -1), dim=-1)  # (B, H, T, S)
        torch.testing.assert_close(attention_weights(nq, nk, scale=scale), expected, **TOL)


def test_gains_of_d_to_the_minus_quarter_carry_one_over_sqrt_d():
    torch.manual_seed(0)
    D = 64
    q, k = torch.randn(3, 1, 4, D) * 5, torch.randn(3, 1, 6, D) + 1
    unscaled = attention_weights(*QKNorm(D, gain=D**-0.25)(q, k), scale=1.0)
    scaled = attention_weights(*QKNorm(D)(q, k))  # default scale 1/sqrt(D), gains 1
    torch.testing.assert_close(unscaled, scaled, **TOL)
    # QK-norm alone does not shrink the scores: unit-variance coordinates, so q·k still has variance ~D
    nq, nk = QKNorm(D)(torch.randn(4000, D) * 3, torch.randn(4000, D) * 0.1)
    variance = (nq * nk).sum(-1).var().item()
    assert abs(variance / D - 1) < 0.1, f"Var(q·k) = {variance:.1f}, expected about D = {D}"


@pytest.mark.parametrize("H_kv, chunks", [(4, [1] * 5), (2, [2, 1, 2]), (1, [3, 2])])
def test_kv_cache_decoding_with_qk_norm_equals_the_full_forward(H_kv, chunks):
    from attn_edu.kv_cache import KVCache

    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, num_kv_heads=H_kv, qk_norm=QKNorm(4))
    random_gains(mha.qk_norm)
    x = torch.randn(2, sum(chunks), 16)
    cache = KVCache(1).layers[0]
    pieces, start = [], 0
    for n in chunks:
        pieces.append(mha(x[:, start : start + n], is_causal=True, kv_cache=cache))
        start += n
    torch.testing.assert_close(torch.cat(pieces, dim=1), mha(x, is_causal=True), **TOL)


def test_qk_norm_parameters_are_trained_and_saved():
    mha = MultiHeadAttention(8, 2, qk_norm=QKNorm(4, gain=0.5))
    names = [name for name, _ in mha.named_parameters()]
    assert "qk_norm.q_norm.weight" in names and "qk_norm.k_norm.weight" in names
    assert "qk_norm.q_norm.bias" not in names  # a gain, no bias (ViT-22B)
    assert torch.equal(mha.state_dict()["qk_norm.k_norm.weight"], torch.full((4,), 0.5))
    mha(torch.randn(1, 3, 8)).sum().backward()
    assert mha.qk_norm.q_norm.weight.grad is not None and mha.qk_norm.q_norm.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_zero_centred_gains_equal_plain_gains_plus_one(kind):
    """Qwen3-Next stores each QK-norm gain as ``w = γ - 1``: the same norm as a plain gain ``1 + w``."""
    plain, zero = QKNorm(8, kind=kind), QKNorm(8, kind=kind, zero_centred=True)
    assert zero.q_norm.weight.abs().max() == 0  # gain 1 at the start, like the plain norm's ones
    random_gains(plain)
    with torch.no_grad():
        for ours, theirs in ((zero.q_norm, plain.q_norm), (zero.k_norm, plain.k_norm)):
            ours.weight.copy_(theirs.weight - 1)
    q, k = torch.randn(2, 4, 5, 8), 3 + torch.randn(2, 2, 7, 8)
    for got, expected in zip(zero(q, k), plain(q, k)):
        torch.testing.assert_close(got, expected, **TOL)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"head_dim": 0}, r"head_dim"),
        ({"head_dim": 4, "kind": "batch"}, r"kind: expected 'layer' \(LayerNorm\) or 'rms'"),
        ({"head_dim": 4, "gain": 0.0}, r"gain: expected a finite number > 0"),
        ({"head_dim": 4, "gain": float("nan")}, r"gain: expected a finite number > 0"),
    ],
)
def test_bad_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        QKNorm(**kwargs)


def test_wrong_head_size_names_the_argument():
    with pytest.raises(ValueError, match=r"k: expected shape \(\.\.\., D\) with D=4"):
        QKNorm(4)(torch.randn(1, 1, 2, 4), torch.randn(1, 1, 2, 5))
    with pytest.raises(ValueError, match=r"q: expected a floating"):
        QKNorm(4)(torch.ones(1, 1, 2, 4, dtype=torch.long), torch.randn(1, 1, 2, 4))
