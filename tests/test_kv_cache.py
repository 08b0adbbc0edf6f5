"""KV cache: both storage strategies agree, the memory formula equals the real tensors, real model sizes."""

from __future__ import annotations

import pytest
import torch

from attn_edu.kv_cache import (
    CrossKVCacheLayer,
    KVCache,
    KVCacheLayer,
    RollingKVCacheLayer,
    StreamingKVCacheLayer,
    decode_roofline,
    kv_cache_bytes,
    kv_cache_table,
)
from attn_edu.models import GPT, T5, GPTConfig, Llama, LlamaConfig, T5Config
from attn_edu.multihead import MultiHeadAttention, SupportsKVCache

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def test_cache_layer_satisfies_the_attention_protocol():
    assert isinstance(KVCacheLayer(), SupportsKVCache)


@pytest.mark.parametrize("max_len", [None, 9])
def test_update_appends_along_the_sequence(max_len):
    layer = KVCacheLayer(max_len)
    ks = [torch.randn(2, 3, n, 4) for n in (4, 1, 1, 3)]
    vs = [torch.randn(2, 3, n, 4) for n in (4, 1, 1, 3)]
    for i, (k, v) in enumerate(zip(ks, vs)):
        assert layer.seq_len == sum(x.shape[2] for x in ks[:i])  # read before update: the offset
        k_all, v_all = layer.update(k, v)
        torch.testing.assert_close(k_all, torch.cat(ks[: i + 1], dim=2))
        torch.testing.assert_close(v_all, torch.cat(vs[: i + 1], dim=2))
    assert layer.seq_len == 9
    layer.reset()
    assert layer.seq_len == 0 and layer.nbytes() == 0


def test_preallocated_cache_reserves_max_len_and_writes_in_place():
    layer = KVCacheLayer(max_len=16)
    layer.update(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4))
    buffer = layer.k.data_ptr()
    layer.update(torch.randn(1, 2, 1, 4), torch.randn(1, 2, 1, 4))
    assert layer.k.data_ptr() == buffer  # no reallocation
    assert layer.nbytes() == kv_cache_bytes(
        num_layers=1, num_kv_heads=2, seq_len=16, head_dim=4, dtype_bytes=4
    )


def test_rolling_layer_keeps_the_last_window_tokens_in_their_slots():
    layer = RollingKVCacheLayer(window=4)
    assert isinstance(layer, SupportsKVCache)
    tokens = torch.arange(11.0).view(1, 1, 11, 1)  # key p holds the number p
    layer.update(tokens[:, :, :3], tokens[:, :, :3])  # a 3-token prompt
    for p in range(3, 11):
        k_all, v_all = layer.update(tokens[:, :, p : p + 1], tokens[:, :, p : p + 1])
        kept = sorted(k_all.flatten().tolist())
        assert kept == list(range(max(0, p - 3), p + 1)), (p, kept)  # the window: p and the 3 before
        assert torch.equal(k_all, v_all)
    assert layer.seq_len == 11
    assert layer.k.flatten().tolist() == [8.0, 9.0, 10.0, 7.0]  # token p in slot p mod 4
    # A several-token update after wrapping returns the stored tokens in time order, then the new ones.
    k_all, _ = layer.update(tokens[:, :, :2] + 11, tokens[:, :, :2] + 11)
    assert k_all.flatten().tolist() == [7.0, 8.0, 9.0, 10.0, 11.0, 12.0]
    assert layer.k.flatten().tolist() == [12.0, 9.0, 10.0, 11.0] and layer.seq_len == 13


@pytest.mark.parametrize("prompt", [3, 9])
def test_rolling_cache_attention_equals_sliding_window_attention_over_the_whole_sequence(prompt):
    """A prompt shorter or longer than the window, then single tokens far past it: always the full band."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, num_kv_heads=2, window=4)
    x = torch.randn(2, 20, 16)
    cache = RollingKVCacheLayer(window=4)
    steps = [mha(x[:, :prompt], is_causal=True, kv_cache=cache)]
    steps += [mha(x[:, t : t + 1], is_causal=True, kv_cache=cache) for t in range(prompt, 20)]
    torch.testing.assert_close(torch.cat(steps, dim=1), mha(x, is_causal=True))
    assert cache.k.shape == (2, 2, 4, 4)  # (B, H_kv, window, D): it never grew


def test_rolling_cache_memory_stays_constant_while_a_full_cache_grows():
    torch.manual_seed(0)
    model = Llama(
        LlamaConfig(vocab_size=20, embed_dim=16, num_heads=2, num_kv_heads=1, ffn_dim=32, sliding_window=6)
    ).eval()
    prompt, tokens = torch.randint(20, (1, 4)), torch.randint(20, (1, 30))
    rolling, full = KVCache(2, window=6), KVCache(2)
    sizes = []
    with torch.no_grad():
        logits_rolling = [model(prompt, kv_cache=rolling)]
        logits_full = [model(prompt, kv_cache=full)]
        for token in tokens.unbind(1):
            logits_rolling.append(model(token[:, None], kv_cache=rolling))
            logits_full.append(model(token[:, None], kv_cache=full))
            sizes.append((rolling.nbytes(), full.nbytes()))
    # Same logits either way (the band hides what the full cache keeps), but only one cache grows.
    torch.testing.assert_close(torch.cat(logits_rolling, 1), torch.cat(logits_full, 1))
    one_token = kv_cache_bytes(num_layers=2, num_kv_heads=1, seq_len=1, head_dim=8, dtype_bytes=4)
    assert {r for r, _ in sizes} == {6 * one_token}
    assert sizes[-1][1] == 34 * one_token and rolling.seq_len == full.seq_len == 34


def _streaming_llama(num_layers: int) -> Llama:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=20, embed_dim=16, num_heads=2, num_kv_heads=1, ffn_dim=32, num_layers=num_layers
    )
    return Llama(config).eval()


def _decode(model: Llama, tokens: torch.Tensor, cache: KVCache, prompt: int) -> torch.Tensor:
    """Logits of a prompt, then of one token at a time: ``(B, T, V)``."""
    with torch.no_grad():
        steps = [model(tokens[:, :prompt], kv_cache=cache)]
        steps += [model(tokens[:, t : t + 1], kv_cache=cache) for t in range(prompt, tokens.shape[1])]
    return torch.cat(steps, dim=1)


def test_streaming_layer_keeps_the_sinks_and_the_latest_tokens_in_order():
    layer = StreamingKVCacheLayer(n_sink=2, window=3)
    assert isinstance(layer, SupportsKVCache) and layer.positions_in_cache
    tokens = torch.arange(12.0).view(1, 1, 12, 1)  # key p holds p
    k_all, _ = layer.update(tokens[:, :, :4], tokens[:, :, :4])  # a prompt that fits: all of it
    assert k_all.flatten().tolist() == [0, 1, 2, 3]
    k_all, _ = layer.update(tokens[:, :, 4:5], tokens[:, :, 4:5])  # one more: 2 sinks + 3 latest, full
    assert k_all.flatten().tolist() == [0, 1, 2, 3, 4]
    k_all, v_all = layer.update(tokens[:, :, 5:6], tokens[:, :, 5:6])
    assert k_all.flatten().tolist() == [0, 1, 3, 4, 5] and torch.equal(k_all, v_all)
    k_all, _ = layer.update(tokens[:, :, 6:11], tokens[:, :, 6:11])  # longer than the window: read whole
    assert k_all.flatten().tolist() == [0, 1, 6, 7, 8, 9, 10] and layer.seq_len == 11
    k_all, _ = layer.update(tokens[:, :, 11:], tokens[:, :, 11:])  # then trimmed
    assert k_all.flatten().tolist() == [0, 1, 9, 10, 11]
    window_only = StreamingKVCacheLayer(n_sink=0, window=3)
    for p in range(6):
        k_all, _ = window_only.update(tokens[:, :, p : p + 1], tokens[:, :, p : p + 1])
    assert k_all.flatten().tolist() == [3, 4, 5] and window_only.nbytes() == 2 * 3 * 4


@pytest.mark.parametrize("prompt", [1, 5])
def test_streaming_cache_equals_full_attention_until_the_first_eviction(prompt):
    model = _streaming_llama(2)
    tokens = torch.randint(20, (2, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(tokens)  # (B, T, V)
    streamed = _decode(model, tokens, KVCache(2, n_sink=4, window=6), prompt)  # holds all 10: nothing leaves
    torch.testing.assert_close(streamed, full, rtol=1e-5, atol=1e-5)


def test_streaming_cache_equals_the_model_read_on_the_kept_tokens_at_their_cache_positions():
    """One layer: its keys and values depend on one token each, so after evictions a decoding step equals the
    whole model run on the tokens the cache kept (sinks, then the latest), the new one last. Window-only too."""
    model = _streaming_llama(1)
    tokens = torch.randint(20, (2, 24), generator=torch.Generator().manual_seed(2))
    for n_sink in (0, 3):
        streamed = _decode(model, tokens, KVCache(1, n_sink=n_sink, window=5), prompt=2)
        for t in (8, 15, 23):  # far past the n_sink + 5 tokens the cache holds
            kept = torch.cat([tokens[:, :n_sink], tokens[:, t - 4 : t + 1]], dim=1)  # (B, n_sink + 5)
            with torch.no_grad():
                expected = model(kept)[:, -1]  # (B, V)
            torch.testing.assert_close(streamed[:, t], expected, rtol=1e-5, atol=1e-5)


def test_streaming_cache_memory_is_fixed_at_sinks_plus_window():
    model = _streaming_llama(2)
    tokens = torch.randint(20, (1, 40), generator=torch.Generator().manual_seed(3))
    cache = KVCache(2, n_sink=4, window=8)
    sizes = []
    with torch.no_grad():
        model(tokens[:, :3], kv_cache=cache)
        for t in range(3, 40):
            model(tokens[:, t : t + 1], kv_cache=cache)
            sizes.append(cache.nbytes())
    one_token = kv_cache_bytes(num_layers=2, num_kv_heads=1, seq_len=1, head_dim=8, dtype_bytes=4)
    assert max(sizes) == sizes[-1] == 12 * one_token and cache.seq_len == 40


@pytest.mark.parametrize("max_len", [None, 12])
def test_attention_with_a_cache_equals_attention_over_the_whole_sequence(max_len):
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, num_kv_heads=2)
    x = torch.randn(2, 12, 16)
    cache = KVCacheLayer(max_len)
    steps = [mha(x[:, :7], is_causal=True, kv_cache=cache)]
    steps += [mha(x[:, t : t + 1], is_causal=True, kv_cache=cache) for t in range(7, 12)]
    torch.testing.assert_close(torch.cat(steps, dim=1), mha(x, is_causal=True))


class ProjectionCounter:
    """Counts the calls of a module (a forward hook), to see which projections a cached step skips."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.calls = 0
        module.register_forward_hook(lambda *_: setattr(self, "calls", self.calls + 1))


def test_attend_on_projected_memory_equals_the_forward():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, num_kv_heads=2, kdim=10, vdim=10)
    memory, queries = torch.randn(2, 7, 10), torch.randn(2, 5, 16)
    k, v = mha.project_kv(memory)
    assert k.shape == v.shape == (2, 2, 7, 4)  # (B, H_kv, S, D)
    steps = [mha.attend(queries[:, t : t + 1], k, v) for t in range(5)]
    torch.testing.assert_close(torch.cat(steps, dim=1), mha(queries, memory))
    with pytest.raises(ValueError, match=r"k: expected shape \(B, H_kv, S, D\)"):
        mha.attend(queries, k[:, :1], v)


def test_t5_projects_the_encoder_output_once_per_cache():
    torch.manual_seed(0)
    config = T5Config(
        vocab_size=20, embed_dim=16, num_layers=1, num_decoder_layers=2, num_heads=2, ffn_dim=32
    )
    model = T5(config).eval()
    source, target = torch.randint(20, (2, 6)), torch.randint(20, (2, 5))
    counters = [ProjectionCounter(block.cross_attn.k_proj) for block in model.decoder_blocks]
    with torch.no_grad():
        memory = model.encode(source)
        full = model.decode(target, memory)
        cache = KVCache(2)
        steps = [model.decode(target[:, t : t + 1], memory, kv_cache=cache) for t in range(5)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)
    assert [c.calls for c in counters] == [1 + 1, 1 + 1]  # the full decode, then once for 5 steps
    assert cache.cross_layers[0].nbytes() == 2 * (2 * 2 * 6 * 8) * 4  # K and V: (B, H_kv, S, D) float32
    with pytest.raises(ValueError, match="kv_cache: holds cross-attention keys for 2 sequences of 6"):
        model.decode(target[:, :1], model.encode(torch.randint(20, (2, 9))), kv_cache=cache)
    cache.reset()
    assert cache.cross_layers[0].nbytes() == 0


def test_cross_cache_stores_only_matching_keys_and_values():
    cache = CrossKVCacheLayer()
    with pytest.raises(ValueError, match="v: expected shape"):
        cache.store(torch.zeros(1, 2, 5, 4), torch.zeros(1, 2, 4, 4))


def decode(model, cache: KVCache, prompt_len: int, new_tokens: int, vocab: int) -> None:
    """Prefill a prompt, then feed ``new_tokens`` single tokens, as generation does."""
    with torch.no_grad():
        model(torch.randint(vocab, (3, prompt_len)), kv_cache=cache)
        for _ in range(new_tokens):
            model(torch.randint(vocab, (3, 1)), kv_cache=cache)


@pytest.mark.parametrize("kind", ["MHA", "GQA", "MQA"])
def test_memory_formula_equals_the_real_cache_after_decoding(kind):
    torch.manual_seed(0)
    if kind == "MHA":
        model = GPT(
            GPTConfig(vocab_size=30, max_seq_len=32, embed_dim=32, num_layers=3, num_heads=4, ffn_dim=32)
        )
        layers, kv_heads, head_dim = 3, 4, 8
    else:
        kv_heads = 2 if kind == "GQA" else 1
        model = Llama(
            LlamaConfig(
                vocab_size=30, embed_dim=32, num_layers=3, num_heads=4, num_kv_heads=kv_heads, ffn_dim=32
            )
        )
        layers, head_dim = 3, 8
    for dtype, size in [(torch.float32, 4), (torch.float64, 8)]:
        model = model.to(dtype)
        cache = KVCache(layers)
        decode(model, cache, prompt_len=5, new_tokens=6, vocab=30)
        assert cache.seq_len == 11
        for layer in cache.layers:
            assert layer.k.shape == (3, kv_heads, 11, head_dim)  # (B, H_kv, S, D): H_kv, not H
        want = kv_cache_bytes(
            num_layers=layers,
            num_kv_heads=kv_heads,
            seq_len=11,
            head_dim=head_dim,
            batch_size=3,
            dtype_bytes=size,
        )
        real = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.k, layer.v))
        assert cache.nbytes() == real == want


def test_gqa_cache_is_smaller_by_the_group_size():
    torch.manual_seed(0)
    sizes = {}
    for kv_heads in (4, 2, 1):
        model = Llama(
            LlamaConfig(vocab_size=30, embed_dim=32, num_heads=4, num_kv_heads=kv_heads, ffn_dim=32)
        )
        cache = KVCache(2)
        decode(model, cache, prompt_len=4, new_tokens=3, vocab=30)
        sizes[kv_heads] = cache.nbytes()
    assert sizes[4] == 2 * sizes[2] == 4 * sizes[1]


def test_table_of_real_models():
    rows = {row["model"]: row for row in kv_cache_table(4096)}
    # Llama-2-7B, fp16: 32 layers · 32 heads · 128 dims · 2 (K, V) · 2 bytes = 512 KiB per token.
    assert rows["Llama-2-7B"]["KiB_per_token"] == 32 * 32 * 128 * 2 * 2 / 1024
    assert rows["Llama-2-7B"]["GiB"] == 2.0
    assert rows["Llama-3-8B"]["saving"] == 4.0 and rows["Mistral-7B"]["kv_heads"] == 8
    assert rows["Falcon-7B"]["kind"] == "MQA" and rows["Falcon-7B"]["saving"] == 71.0
    assert rows["Llama-2-70B"]["GiB"] == pytest.approx(80 * 8 * 4096 * 128 * 4 / 2**30, abs=1e-4)
    doubled = {row["model"]: row for row in kv_cache_table(8192, batch_size=2)}
    assert doubled["Llama-3-8B"]["GiB"] == 4 * rows["Llama-3-8B"]["GiB"]  # linear in S and in B


def test_cache_errors():
    layer = KVCacheLayer()
    with pytest.raises(ValueError, match=r"k: expected shape \(B, H_kv, T, D\)"):
        layer.update(torch.randn(2, 3, 4), torch.randn(2, 3, 4))
    layer.update(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4))
    with pytest.raises(ValueError, match=r"k: expected shape \(B, H_kv, T, D\) with B=1, H_kv=2, D=4"):
        layer.update(torch.randn(1, 3, 1, 4), torch.randn(1, 3, 1, 4))
    with pytest.raises(ValueError, match="v: expected shape"):
        layer.update(torch.randn(1, 2, 1, 4), torch.randn(1, 2, 2, 4))
    full = KVCacheLayer(max_len=4)
    full.update(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4))
    with pytest.raises(ValueError, match="max_len=4"):
        full.update(torch.randn(1, 2, 2, 4), torch.randn(1, 2, 2, 4))
    with pytest.raises(ValueError, match="num_layers"):
        KVCache(0)
    with pytest.raises(ValueError, match="window"):
        KVCache(2, max_len=8, window=4)
    with pytest.raises(ValueError, match="window"):
        RollingKVCacheLayer(0)
    with pytest.raises(ValueError, match="n_sink: expected an int >= 0"):
        StreamingKVCacheLayer(-1, 4)
    with pytest.raises(ValueError, match="window: expected a positive int"):
        StreamingKVCacheLayer(4, 0)
    with pytest.raises(ValueError, match="window: a streaming cache"):
        KVCache(2, n_sink=4)
    with pytest.raises(ValueError, match="window"):
        MultiHeadAttention(8, 2, window=0)
    rolling = RollingKVCacheLayer(3)
    rolling.update(torch.randn(1, 2, 1, 4), torch.randn(1, 2, 1, 4))
    with pytest.raises(ValueError, match=r"k: expected shape \(B, H_kv, T, D\) with B=1, H_kv=2, D=4"):
        rolling.update(torch.randn(1, 2, 1, 5), torch.randn(1, 2, 1, 5))
    with pytest.raises(ValueError, match="seq_len"):
        kv_cache_bytes(num_layers=1, num_kv_heads=1, seq_len=0, head_dim=8)


def test_decode_roofline_is_bandwidth_over_bytes():
    from attn_edu.hardware import GPUS

    weights, per_token = 14 * 10**9, 2**19  # a 7B model in bf16; Llama-2-7B's 512 KiB of cache per token
    short = decode_roofline(weight_bytes=weights, cache_bytes_per_token=per_token, context=1)
    assert short["tokens_per_s"] == pytest.approx(GPUS["H100"]["hbm_tb_s"] * 1e12 / (weights + per_token))
    rows = [
        decode_roofline(weight_bytes=weights, cache_bytes_per_token=per_token, context=n)
        for n in (1024, 8192, 65536)
    ]
    assert rows[0]["tokens_per_s"] > rows[1]["tokens_per_s"] > rows[2]["tokens_per_s"]  # the cache grows
    assert rows[0]["cache_share"] < rows[1]["cache_share"] < rows[2]["cache_share"]
    batched = decode_roofline(
        weight_bytes=weights, cache_bytes_per_token=per_token, context=1024, batch_size=16
    )
    assert rows[0]["tokens_per_s"] < batched["tokens_per_s"] < 16 * rows[0]["tokens_per_s"]  # weights shared
    h200 = decode_roofline(weight_bytes=weights, cache_bytes_per_token=per_token, context=1024, gpu="H200")
    assert h200["tokens_per_s"] / rows[0]["tokens_per_s"] == pytest.approx(4.8 / 3.35)
    with pytest.raises(ValueError, match="gpu"):
        decode_roofline(weight_bytes=weights, cache_bytes_per_token=per_token, context=8, gpu="V100")
    with pytest.raises(ValueError, match="context"):
        decode_roofline(weight_bytes=weights, cache_bytes_per_token=per_token, context=0)


def test_format_kv_cache_table_agrees_with_kv_cache_table_at_every_context():
    from attn_edu.kv_cache import MODEL_SHAPES, format_kv_cache_table, kv_cache_table

    contexts = {"1k": 1024, "8k": 8192}
    lines = format_kv_cache_table(contexts).splitlines()
    assert len(lines) == 1 + len(MODEL_SHAPES)
    assert "GiB @ 1k" in lines[0] and "GiB @ 8k" in lines[0]
    for line, small, large in zip(lines[1:], kv_cache_table(1024), kv_cache_table(8192)):
        fields = line.split()
        assert line.startswith(str(small["model"])) and fields[-1] == f"{small['saving']:.0f}x"
        assert float(fields[-3]) == pytest.approx(small["GiB"], abs=6e-4)  # printed with 3 decimals
        assert float(fields[-2]) == pytest.approx(large["GiB"], abs=6e-4)  # printed with 3 decimals
        assert float(fields[-2]) == pytest.approx(8 * float(fields[-3]), abs=5e-3)  # linear in the context
    with pytest.raises(ValueError, match="contexts"):
        format_kv_cache_table({})
