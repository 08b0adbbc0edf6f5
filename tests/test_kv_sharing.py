"""Cross-layer KV sharing (attn_edu.kv_sharing): equal to Gemma 3n's shared-KV attention in transformers, decoding
through a cache that holds only the producing layers' keys and values, and clear errors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attn_edu.generation import generate, new_cache
from attn_edu.kv_sharing import SharedKVAttention, share_kv, share_kv_from
from attn_edu.models import Llama, LlamaConfig
from attn_edu.multihead import MultiHeadAttention
from attn_edu.rope import RotaryEmbedding

CONFIG = LlamaConfig(vocab_size=13, embed_dim=16, num_layers=4, num_heads=4, num_kv_heads=2, ffn_dim=32)


def test_equal_to_gemma_3n_shared_kv_attention() -> None:
    """Three layers of transformers' Gemma3nTextAttention, the last two reusing the first one's keys and values
    (``kv_sharing_modes`` = store, reuse, reuse), against ours with the same weights. Gemma 3n normalises q, k and v
    per head (RMSNorm) and scales scores by 1: the norms are taken out of both sides, as ours has none."""
    modeling = pytest.importorskip("transformers.models.gemma3n.modeling_gemma3n")
    from transformers.models.gemma3n.configuration_gemma3n import Gemma3nTextConfig

    config = Gemma3nTextConfig(
        hidden_size=16,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=4,
        num_hidden_layers=3,
        num_kv_shared_layers=2,
        layer_types=["full_attention"] * 3,
        intermediate_size=32,
        vocab_size=10,
        vocab_size_per_layer_input=10,
        hidden_size_per_layer_input=4,
        laurel_rank=2,
        activation_sparsity_pattern=[0.0] * 3,
    )
    config._attn_implementation = "eager"
    assert config.kv_sharing_modes == ["store", "reuse", "reuse"]
    torch.manual_seed(0)
    peers = [modeling.Gemma3nTextAttention(config, i) for i in range(3)]
    for peer in peers:
        peer.q_norm = nn.Identity()
        if not peer.is_kv_shared_layer:
            peer.k_norm, peer.v_norm = nn.Identity(), nn.Identity()
    rope = RotaryEmbedding(4, base=config.rope_parameters["full_attention"]["rope_theta"], layout="half")
    ours = [
        MultiHeadAttention(16, 4, num_kv_heads=2, head_dim=4, bias=False, scale=1.0, rotary=rope)
        for _ in range(3)
    ]
    with torch.no_grad():
        for mine, peer in zip(ours, peers):
            mine.q_proj.weight.copy_(peer.q_proj.weight)
            mine.out_proj.weight.copy_(peer.o_proj.weight)
            if not peer.is_kv_shared_layer:
                mine.k_proj.weight.copy_(peer.k_proj.weight)
                mine.v_proj.weight.copy_(peer.v_proj.weight)
    ours[1:] = [SharedKVAttention(layer, source=ours[0]) for layer in ours[1:]]
    T = 7
    xs = [torch.randn(2, T, 16) for _ in range(3)]  # each layer its own input, as in a model
    position = modeling.Gemma3nRotaryEmbedding(config)(
        xs[0], torch.arange(T)[None], layer_type="full_attention"
    )
    causal = torch.full((T, T), float("-inf")).triu(1)[None, None]
    shared: dict = {}
    with torch.no_grad():
        expected = [peer(x, position, causal, shared_kv_states=shared)[0] for peer, x in zip(peers, xs)]
        got = [layer(x, is_causal=True) for layer, x in zip(ours, xs)]
    for mine, theirs in zip(got, expected):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)
    # Sharing matters: the same query weights with keys and values of their own give something else.
    assert not torch.allclose(got[1], ours[1].source(xs[1], is_causal=True), atol=1e-3)


def test_a_shared_model_decodes_as_its_full_pass_with_half_the_cache() -> None:
    torch.manual_seed(0)
    plain = Llama(CONFIG).eval()
    shared = share_kv(Llama(CONFIG)).eval()
    ids = torch.randint(13, (2, 10), generator=torch.Generator().manual_seed(1))
    cache = new_cache(shared)
    with torch.no_grad():
        full = shared(ids)
        steps = [shared(ids[:, :4], kv_cache=cache)] + [
            shared(ids[:, t : t + 1], kv_cache=cache) for t in range(4, 10)
        ]
        plain_cache = new_cache(plain)
        plain(ids, kv_cache=plain_cache)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-5)
    assert (
        cache.nbytes() * 2 == plain_cache.nbytes() == 2 * 10 * 4 * (2 * 2 * 4) * 4
    )  # B, T, layers, K+V·H_kv·D, fp32
    assert [layer.nbytes() == 0 for layer in cache.layers] == [False, True, False, True]
    torch.testing.assert_close(
        generate(shared, ids[:, :3], 5), generate(shared, ids[:, :3], 5, use_cache=False)
    )
    # The sharing layers have no key or value projections: 2 layers x (Wk + Wv) of C x H_kv·D fewer weights.
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(plain) - count(shared) == 2 * 2 * 16 * (2 * 4)


def test_the_producer_learns_from_the_layers_that_read_it() -> None:
    torch.manual_seed(0)
    low, high = MultiHeadAttention(8, 2), MultiHeadAttention(8, 2)
    shared = SharedKVAttention(high, source=low)
    x, y = torch.randn(1, 5, 8), torch.randn(1, 5, 8)
    low(x, is_causal=True)  # its output is not used: only what the sharing layer reads
    shared(y, is_causal=True).square().sum().backward()
    assert low.k_proj.weight.grad.abs().sum() > 0 and low.v_proj.weight.grad.abs().sum() > 0
    assert low.q_proj.weight.grad is None


def test_a_window_is_kept_by_the_sharing_layer() -> None:
    torch.manual_seed(0)
    low, high = MultiHeadAttention(8, 2, window=3), MultiHeadAttention(8, 2, window=3)
    shared = SharedKVAttention(high, source=low)
    x, y = torch.randn(1, 9, 8), torch.randn(1, 9, 8)
    low(x, is_causal=True)
    torch.testing.assert_close(shared(y, is_causal=True), high.attend(y, *low.project_kv(x), is_causal=True))


def test_bad_input_is_named() -> None:
    low, high = MultiHeadAttention(8, 2), MultiHeadAttention(8, 2)
    shared = SharedKVAttention(high, source=low)
    with pytest.raises(RuntimeError, match="source: has not run yet"):
        shared(torch.randn(1, 3, 8))
    low(torch.randn(1, 3, 8))
    with pytest.raises(ValueError, match=r"query: expected shape \(B, T, C\) with C=8, got \(1, 3, 6\)"):
        shared(torch.randn(1, 3, 6))
    with pytest.raises(ValueError, match="query: has 5 tokens, but the source layer's keys only 3"):
        shared(torch.randn(1, 5, 8))
    with pytest.raises(ValueError, match=r"source: must have attn's key/value heads"):
        SharedKVAttention(MultiHeadAttention(8, 2), source=MultiHeadAttention(8, 2, num_kv_heads=1))
    with pytest.raises(ValueError, match="source: expected an attn_edu.multihead.MultiHeadAttention"):
        SharedKVAttention(MultiHeadAttention(8, 2), source=nn.Linear(8, 8))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sources: layer 2 must read itself or an earlier layer"):
        share_kv_from(Llama(CONFIG), [0, 0, 3, 3])
    with pytest.raises(
        ValueError, match="sources: layer 2 must read itself or an earlier layer that computes"
    ):
        share_kv_from(Llama(CONFIG), [0, 0, 1, 3])  # layer 1 shares, so it has no keys of its own
    with pytest.raises(ValueError, match=r"sources: expected one index per layer \(4\), got 2"):
        share_kv_from(Llama(CONFIG), [0, 0])
    with pytest.raises(ValueError, match="every: expected a positive int"):
        share_kv(Llama(CONFIG), every=0)
