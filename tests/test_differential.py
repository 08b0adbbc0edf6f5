"""Differential attention against transformers' DiffLlamaAttention, and the properties of the difference map."""

from __future__ import annotations

import pytest
import torch
from transformers import DiffLlamaConfig
from transformers.models.diffllama.modeling_diffllama import DiffLlamaAttention

from attn_edu.attention import attention_weights
from attn_edu.differential import DifferentialAttention, differential_attention, lambda_init
from attn_edu.masks import causal_mask
from attn_edu.rope import RotaryEmbedding, rope_angles, rope_frequencies


def _peer(C: int, H: int, H_kv: int, layer: int) -> DiffLlamaAttention:
    config = DiffLlamaConfig(
        hidden_size=C, num_attention_heads=H, num_key_value_heads=H_kv, rms_norm_eps=1e-5, lambda_std_dev=0.3
    )
    config._attn_implementation = "eager"
    torch.manual_seed(layer)
    return DiffLlamaAttention(config, layer_idx=layer).eval()


@pytest.mark.parametrize("H, H_kv, layer", [(4, 4, 0), (4, 2, 3), (8, 2, 7)], ids=["MHA", "GQA", "GQA-4"])
@pytest.mark.parametrize("T", [1, 6])
def test_differential_attention_equals_diffllama(H: int, H_kv: int, layer: int, T: int) -> None:
    C = 8 * H
    peer = _peer(C, H, H_kv, layer)
    D = peer.head_dim
    ours = DifferentialAttention.from_hf(peer, rotary=RotaryEmbedding(D)).eval()
    assert ours.lambda_init == pytest.approx(lambda_init(layer))
    x = torch.randn(2, T, C, generator=torch.Generator().manual_seed(1))
    angles = rope_angles(torch.arange(T), rope_frequencies(D))  # (T, D/2)
    both = torch.cat([angles, angles], dim=-1)[None]  # (1, T, D): transformers' cos/sin layout
    additive = torch.zeros(T, T).masked_fill(~causal_mask(T, T), float("-inf"))[None, None]
    with torch.no_grad():
        expected, _ = peer(x, position_embeddings=(both.cos(), both.sin()), attention_mask=additive)
        got = ours(x, is_causal=True)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_the_difference_map_rows_sum_to_one_minus_lambda_and_can_be_negative() -> None:
    g = torch.Generator().manual_seed(0)
    q1, k1, q2, k2 = (torch.randn(2, 3, 5, 8, generator=g, dtype=torch.float64) for _ in range(4))
    eye = torch.eye(5, dtype=torch.float64).expand(2, 3, 5, 5)  # v = I reads the map itself
    lam = torch.tensor([0.2, 0.5, 0.8], dtype=torch.float64)  # (H,): one λ per head
    diff = differential_attention(q1, k1, q2, k2, eye, lam)  # (B, H, T, S)
    torch.testing.assert_close(diff.sum(-1), (1 - lam)[:, None].expand(2, 3, 5))
    assert (diff < 0).any()
    w1, w2 = attention_weights(q1, k1), attention_weights(q2, k2)
    torch.testing.assert_close(diff, w1 - lam[:, None, None] * w2)
    causal = differential_attention(q1, k1, q2, k2, eye, lam, is_causal=True)
    assert (causal.masked_select(~causal_mask(5, 5)) == 0).all()  # both maps masked alike


def test_a_noise_shared_by_both_maps_cancels() -> None:
    """The paper's argument in one line: a map common to both softmaxes is removed in proportion to λ."""
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 4, 8, generator=g), torch.randn(1, 9, 8, generator=g)
    v = torch.randn(1, 9, 3, generator=g)
    same = differential_attention(q, k, q, k, v, 1.0)  # λ = 1 and identical maps: nothing is left
    assert same.abs().max() < 1e-6


def test_bad_arguments_name_themselves() -> None:
    with pytest.raises(ValueError, match="num_heads: expected an even number"):
        DifferentialAttention(12, 3)
    with pytest.raises(ValueError, match="num_kv_heads: expected an even number"):
        DifferentialAttention(16, 4, num_kv_heads=1)
    with pytest.raises(ValueError, match="layer: expected an int >= 0"):
        lambda_init(-1)
    q = torch.randn(2, 4, 8)
    with pytest.raises(ValueError, match="q2"):
        differential_attention(q, q, torch.randn(2, 4, 6), q, q, 0.5)


def test_the_layer_returns_its_difference_maps_and_plugs_into_a_decoder_block() -> None:
    torch.manual_seed(0)
    layer = DifferentialAttention(16, 4, num_kv_heads=2, layer=2).eval()
    x = torch.randn(2, 6, 16)
    with torch.no_grad():
        out, maps = layer(x, is_causal=True, need_weights=True)
        torch.testing.assert_close(out, layer(x, is_causal=True))
    assert maps.shape == (2, 2, 6, 6)  # (B, H/2, T, S): one map per output head
    torch.testing.assert_close(maps.sum(-1), (1 - layer.lam()).expand(2, 2, 6))  # rows sum to 1 - λ
    assert (maps.masked_select(~causal_mask(6, 6)) == 0).all()
    with pytest.raises(ValueError, match="score_bias, kv_cache"):
        layer(x, is_causal=True, kv_cache=object())
