"""Multi-head latent attention: equal to Hugging Face's DeepseekV3Attention, its two forms equal to each other,
cached decoding equal to the full pass, and a cache of d_c + d_R numbers per token."""

from __future__ import annotations

import pytest
import torch

from attn_edu.interop import mla_from_hf
from attn_edu.kv_cache import KVCacheLayer, kv_cache_bytes
from attn_edu.mla import MultiHeadLatentAttention, mla_cache_bytes

TOL = {"atol": 1e-5, "rtol": 1e-5}
SIZES = dict(embed_dim=24, num_heads=3, kv_rank=10, nope_dim=6, rope_dim=4, v_dim=5)


def _mla(seed: int = 0, **overrides) -> MultiHeadLatentAttention:
    torch.manual_seed(seed)
    mla = MultiHeadLatentAttention(**(SIZES | overrides)).eval()
    with torch.no_grad():
        for p in mla.parameters():  # norm gains start at 1: perturb every tensor so each is tested
            p.add_(0.1 * torch.randn_like(p))
    return mla


@pytest.mark.parametrize("q_rank", [None, 16])
@pytest.mark.parametrize("interleave", [True, False])
def test_mla_matches_deepseek_v3_attention(q_rank, interleave):
    transformers = pytest.importorskip("transformers")
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as hf_module

    config = transformers.DeepseekV3Config(
        vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=4, kv_lora_rank=12, q_lora_rank=q_rank, qk_nope_head_dim=8, qk_rope_head_dim=4,
        v_head_dim=6, rope_interleave=interleave, attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(0)
    hf = hf_module.DeepseekV3Attention(config, layer_idx=0).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.copy_(0.3 * torch.randn_like(p))  # norm gains too
    ours = mla_from_hf(hf)
    x = torch.randn(2, 9, 32)
    positions = torch.arange(9)[None].expand(2, -1)
    cos_sin = hf_module.DeepseekV3RotaryEmbedding(config)(x, positions)
    causal = torch.full((9, 9), float("-inf")).triu(1)[None, None]  # (1, 1, T, S) additive
    with torch.no_grad():
        expected = hf(x, cos_sin, causal)[0]
        torch.testing.assert_close(ours(x), expected, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(ours(x, absorb=True), expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("absorb", [False, True])
def test_cached_decoding_equals_the_full_pass_and_caches_only_the_latents(absorb):
    mla = _mla()
    x = torch.randn(2, 11, 24)
    cache = KVCacheLayer()
    with torch.no_grad():
        steps = [mla(x[:, :4], kv_cache=cache, absorb=absorb)]
        steps += [mla(x[:, t : t + 1], kv_cache=cache, absorb=absorb) for t in range(4, 11)]
        torch.testing.assert_close(torch.cat(steps, dim=1), mla(x), **TOL)
    assert cache.k.shape == (2, 1, 11, 10) and cache.v.shape == (2, 1, 11, 4)  # latent; shared rotary key
    per_token = mla.cache_numbers_per_token()
    assert cache.nbytes() == 2 * 11 * per_token * 4  # B · S · (d_c + d_R) · 4 bytes
    mha_equivalent = kv_cache_bytes(
        num_layers=1, num_kv_heads=3, seq_len=11, head_dim=10, batch_size=2, dtype_bytes=4
    )
    assert cache.nbytes() < mha_equivalent / 4  # MHA with the same heads (D = nope + rope) caches 2·H·D


def test_absorbed_form_is_multi_query_attention_over_the_latents():
    """Same output with and without absorbing, for queries after a cache (T != S), with the query's low rank."""
    mla = _mla(seed=1, q_rank=7)
    x = torch.randn(1, 13, 24)
    for absorb in (False, True):
        cache = KVCacheLayer()
        with torch.no_grad():
            mla(x[:, :8], kv_cache=cache, absorb=absorb)
            last = mla(x[:, 8:], kv_cache=cache, absorb=absorb)  # 5 queries, 13 keys
        torch.testing.assert_close(last, mla(x)[:, 8:], **TOL)


def test_mla_is_causal_and_its_rotary_key_carries_the_position():
    mla = _mla(seed=2)
    x = torch.randn(1, 8, 24)
    changed = x.clone()
    changed[:, 5:] += 1.0
    with torch.no_grad():
        plain = mla(x)
        torch.testing.assert_close(mla(changed)[:, :5], plain[:, :5], **TOL)  # the future never leaks
        assert not torch.allclose(mla(changed)[:, 5:], plain[:, 5:])
        mla.rotary.inv_freq.zero_()  # no rotation: the same weights, blind to order
        assert not torch.allclose(mla(x), plain)


def test_deepseek_v2_cache_is_57_times_smaller_than_mha():
    # DeepSeek-V2 (config.json on the Hub): 60 layers, 128 heads of 128, kv_lora_rank 512, qk_rope_head_dim 64.
    mla = mla_cache_bytes(num_layers=60, kv_rank=512, rope_dim=64, seq_len=4096)
    mha = kv_cache_bytes(num_layers=60, num_kv_heads=128, seq_len=4096, head_dim=128)
    assert mha / mla == pytest.approx(
        32768 / 576
    )  # ≈ 56.9: DeepSeek-AI (2024), Table 1's 2·n_h·d_h vs 9/2·d_h


def test_bad_input_names_the_argument():
    mla = _mla()
    with pytest.raises(ValueError, match=r"x: expected shape \(B, T, C\)"):
        mla(torch.randn(2, 5, 23))
    with pytest.raises(ValueError, match="rope_dim"):
        MultiHeadLatentAttention(**(SIZES | {"rope_dim": 3}))  # RoPE rotates pairs
    with pytest.raises(ValueError, match="kv_rank"):
        MultiHeadLatentAttention(**(SIZES | {"kv_rank": 0}))
    with pytest.raises(ValueError, match="seq_len"):
        mla_cache_bytes(num_layers=1, kv_rank=4, rope_dim=2, seq_len=0)
