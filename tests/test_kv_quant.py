"""The quantised KV cache (KIVI): every value back within half a step of itself; keys per channel survive an
outlier channel that per-token scales would not; a model decodes through it as through the float cache, at a
quarter (int8) or an eighth (int4) of the float32 bytes plus the scales."""

from __future__ import annotations

import pytest
import torch

from attn_edu.kv_cache import KVCache
from attn_edu.kv_quant import QuantizedKVCache, QuantizedKVCacheLayer, decode_loss, dequantize, quantize
from attn_edu.models import GPT, GPTConfig
from attn_edu.objectives import causal_lm_loss


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("dim", [-1, -2])
def test_every_value_comes_back_within_half_a_step(bits: int, dim: int) -> None:
    x = torch.randn(3, 5, 6, 8, generator=torch.Generator().manual_seed(bits)) * 3
    codes, scale, low = quantize(x if dim == -1 else x.transpose(-1, -2), bits, dim=-1)
    back = dequantize(codes, scale, low, bits, x.shape[dim])
    back = back if dim == -1 else back.transpose(-1, -2)
    step = scale.float() if dim == -1 else scale.float().transpose(-1, -2)
    # half a step, plus what storing the scale and the minimum in float16 moves (2^-11 of their size)
    assert ((back - x).abs() <= 0.5 * step + 2e-3 * x.abs().amax()).all()
    assert codes.dtype == torch.uint8 and codes.shape[-1] == x.shape[dim] // (8 // bits)


def test_keys_per_channel_survive_an_outlier_channel() -> None:
    k = torch.randn(1, 1, 32, 16, generator=torch.Generator().manual_seed(0))
    k[..., 3] *= 50  # one key channel carries large values for every token, as KIVI measured in real models
    per_channel = dequantize(*quantize(k.transpose(-1, -2), 4, dim=-1), 4, 32).transpose(-1, -2)
    per_token = dequantize(*quantize(k, 4, dim=-1), 4, 16)
    others = [c for c in range(16) if c != 3]
    error_channel = (per_channel - k)[..., others].abs().mean()
    error_token = (per_token - k)[..., others].abs().mean()
    assert error_token > 5 * error_channel, (error_token, error_channel)


def _model() -> GPT:
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=32, max_seq_len=160, embed_dim=64, num_layers=2, num_heads=2, ffn_dim=128)
    return GPT(config).eval()


@pytest.mark.parametrize(("bits", "tolerance", "share"), [(8, 0.02, 0.30), (4, 0.3, 0.18)])
def test_a_model_decodes_through_it_as_through_the_float_cache(
    bits: int, tolerance: float, share: float
) -> None:
    model = _model()
    ids = torch.randint(32, (2, 140), generator=torch.Generator().manual_seed(1))
    float_cache, quant_cache = KVCache(2), QuantizedKVCache(2, bits=bits, group_size=32)
    with torch.no_grad():
        model(ids[:, :20], kv_cache=float_cache)
        model(ids[:, :20], kv_cache=quant_cache)
        gaps = []
        for t in range(20, 140):  # one token a step, as decoding feeds them
            reference = model(ids[:, t : t + 1], kv_cache=float_cache)
            gaps.append((model(ids[:, t : t + 1], kv_cache=quant_cache) - reference).abs().max().item())
    assert quant_cache.seq_len == float_cache.seq_len == 140
    assert max(gaps) < tolerance, max(gaps)
    # 140 tokens: 4 groups of 32 as codes (with float16 scales and minima), the newest 12 in float
    assert len(quant_cache.layers[0].groups) == 4 and quant_cache.layers[0].k_float.shape[2] == 12
    # Per value: bits / 8 bytes of code against 4 of float32, plus at most 8 bytes of float16 scale and minimum per
    # 32 values (one pair per 32 tokens of a key channel, one per 32 channels of a value token); the rest float.
    share = quant_cache.nbytes() / float_cache.nbytes()
    codes_only = (128 * bits / 32 + 12) / 140
    assert codes_only < share <= (128 * (bits / 32 + 8 / 32 / 4) + 12) / 140, share


def test_decode_loss_through_a_float_cache_is_the_full_pass_loss_and_int8_barely_moves_it() -> None:
    model = _model()
    ids = torch.randint(32, (3, 100), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = causal_lm_loss(model(ids), ids).item()
    assert decode_loss(model, ids, KVCache(2)) == pytest.approx(full, abs=1e-5)
    int8 = decode_loss(model, ids, QuantizedKVCache(2, bits=8, group_size=32))
    int4 = decode_loss(model, ids, QuantizedKVCache(2, bits=4, group_size=32))
    assert abs(int8 - full) < 1e-3 and abs(int4 - full) < 5e-2 and abs(int4 - full) > abs(int8 - full)


def test_bad_arguments_name_themselves() -> None:
    with pytest.raises(ValueError, match="bits: expected one of"):
        QuantizedKVCacheLayer(bits=3)
    with pytest.raises(ValueError, match="group_size"):
        QuantizedKVCacheLayer(group_size=0)
    with pytest.raises(ValueError, match="4-bit codes pack two to a byte"):
        quantize(torch.zeros(2, 3), 4, dim=-1)
    with pytest.raises(ValueError, match="crop: a quantised cache"):
        QuantizedKVCache(1).crop(0)
    with pytest.raises(ValueError, match=r"k, v: expected \(B, H_kv, T, D\)"):
        QuantizedKVCacheLayer().update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 2, 4))
