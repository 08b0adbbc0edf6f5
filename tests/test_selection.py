"""Learned key selection: DeepSeek-V3.2's indexer against transformers' DeepseekV32Indexer, top-k and MoBA
block masks against their definitions, and what each keeps of the attention mass."""

from __future__ import annotations

import pytest
import torch
from transformers import DeepseekV32Config
from transformers.models.deepseek_v32.modeling_deepseek_v32 import (
    DeepseekV32Indexer,
    DeepseekV32RotaryEmbedding,
)

from attn_edu.attention import attention_weights, scaled_dot_product_attention
from attn_edu.masks import causal_mask
from attn_edu.selection import (
    LightningIndexer,
    attention_recall,
    block_topk_mask,
    index_scores,
    moba_attention,
    topk_attention,
    topk_mask,
)


def _peer(top_k: int, seed: int = 0) -> DeepseekV32Indexer:
    config = DeepseekV32Config(
        hidden_size=32,
        q_lora_rank=24,
        index_n_heads=4,
        index_head_dim=16,
        qk_rope_head_dim=8,
        index_topk=top_k,
        num_attention_heads=2,
    )
    torch.manual_seed(seed)
    indexer = DeepseekV32Indexer(config, layer_idx=0).eval()
    with torch.no_grad():  # LayerNorm starts at (1, 0): draw it, so that copying it is tested
        indexer.k_norm.weight.normal_(1.0, 0.3)
        indexer.k_norm.bias.normal_(0.0, 0.3)
    return indexer


@pytest.mark.parametrize(
    "T, top_k", [(12, 5), (20, 8), (6, 16)], ids=["12 keep 5", "20 keep 8", "fewer than k"]
)
def test_indexer_selects_what_deepseek_v32_selects(T: int, top_k: int) -> None:
    peer = _peer(top_k)
    ours = LightningIndexer.from_hf(peer).eval()
    gen = torch.Generator().manual_seed(1)
    x, q_latent = torch.randn(2, T, 32, generator=gen), torch.randn(2, T, 24, generator=gen)
    rotary = DeepseekV32RotaryEmbedding(peer.config)
    positions = torch.arange(T)[None].expand(2, T)
    cos_sin = rotary(x, positions)  # the peer's own RoPE tables
    additive = torch.zeros(T, T).masked_fill(~causal_mask(T), -torch.inf)[None].expand(2, T, T)
    with torch.no_grad():
        expected = peer(x, q_latent, cos_sin, additive, positions).long()  # (B, T, k) indices
        scores = ours(x, q_latent)  # (B, T, T)
        keep = ours.select(x, q_latent, top_k)
    peer_keep = torch.zeros_like(keep).scatter(-1, expected, True) & causal_mask(T)  # its picks, visible only
    # The same keys, except where the k-th best score ties with the next (ReLU makes exact zeros, and then
    # either choice is a correct top-k): there both picks must have equal scores.
    kth = scores.topk(min(top_k + 1, T), dim=-1).values  # (B, T, k + 1)
    clear = (kth[..., -2] > kth[..., -1] + 1e-6) if top_k < T else torch.ones(2, T, dtype=torch.bool)
    visible = causal_mask(T).sum(-1) > top_k  # (T,): rows where a choice is made at all
    assert torch.equal(keep[~visible.expand(2, T)], peer_keep[~visible.expand(2, T)])
    decided = clear & visible
    if top_k < T:  # most rows choose, and clearly, so the comparison below has teeth
        assert decided.float().mean() > 0.5
    else:  # every row keeps every visible key
        assert torch.equal(keep, causal_mask(T).expand(2, T, T))
    assert torch.equal(keep[decided], peer_keep[decided])
    picked = scores.masked_fill(~keep, 0).sum(-1), scores.masked_fill(~peer_keep, 0).sum(-1)
    torch.testing.assert_close(*picked, rtol=1e-5, atol=1e-5)


def test_index_scores_are_the_weighted_sum_of_relu_heads() -> None:
    gen = torch.Generator().manual_seed(0)
    q, k, w = (
        torch.randn(2, 3, 5, 4, generator=gen),
        torch.randn(2, 7, 4, generator=gen),
        torch.randn(2, 5, 3, generator=gen),
    )
    got = index_scores(q, k, w, scale=0.5)
    expected = sum(w[:, :, h, None] * torch.relu(0.5 * q[:, h] @ k.transpose(-1, -2)) for h in range(3))
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("T, S", [(9, 9), (3, 9)], ids=["T = S", "T < S (a cache)"])
def test_topk_mask_keeps_the_best_visible_keys(T: int, S: int) -> None:
    scores = torch.randn(2, T, S, generator=torch.Generator().manual_seed(T))
    keep = topk_mask(scores, 4)
    visible = causal_mask(T, S)
    assert not (keep & ~visible).any()  # never a future key
    torch.testing.assert_close(keep.sum(-1), visible.sum(-1).clamp(max=4).expand(2, T))
    worst_kept = scores.masked_fill(~keep, torch.inf).amin(-1)
    best_dropped = scores.masked_fill(keep | ~visible, -torch.inf).amax(-1)
    assert (worst_kept > best_dropped).all()


def test_topk_attention_is_exact_when_k_covers_every_key_and_recall_grows_with_k() -> None:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 16, 8, generator=gen) for _ in range(3))
    full = scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(topk_attention(q, k, v, is_causal=True, top_k=16), full)
    weights = attention_weights(q, k, is_causal=True)
    recalls = [attention_recall(weights, topk_mask(weights, n)).mean() for n in (1, 2, 4, 8, 16)]
    assert all(a < b for a, b in zip(recalls, recalls[1:])) and recalls[-1] == pytest.approx(1.0)
    # top-k by the true weights keeps more mass than any other k keys, e.g. the latest k (a sliding window)
    window = causal_mask(16) & ~causal_mask(16, 16).roll(0)  # placeholder replaced below
    latest = torch.ones(16, 16, dtype=torch.bool).tril() & torch.ones(16, 16, dtype=torch.bool).triu(-3)
    assert (
        attention_recall(weights, topk_mask(weights, 4)) >= attention_recall(weights, latest) - 1e-6
    ).all()
    del window


def test_block_mask_follows_moba() -> None:
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 3, 12, 4, generator=gen), torch.randn(2, 3, 12, 4, generator=gen)
    keep = block_topk_mask(q, k, block_size=4, top_k=2)
    assert not (keep & ~causal_mask(12)).any()
    for t in range(12):
        own = t // 4
        assert keep[..., t, own * 4 : t + 1].all()  # its own block, causally
        earlier = keep[..., t, : own * 4].reshape(2, 3, own, 4) if own else None
        if earlier is not None:  # whole blocks: exactly one earlier block, the one whose mean key scores best
            assert (earlier.all(-1) | ~earlier.any(-1)).all()
            means = k[..., : own * 4, :].reshape(2, 3, own, 4, 4).mean(-2)  # (B, H, own, D)
            best = (q[..., t, None, :] * means).sum(-1).argmax(-1)  # (B, H)
            assert earlier.all(-1).sum(-1).eq(1).all() and earlier.all(-1).gather(-1, best[..., None]).all()
    # every block selected: plain causal attention
    v = torch.randn(2, 3, 12, 4, generator=gen)
    full = scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(moba_attention(q, k, v, block_size=4, top_k=3), full)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: topk_mask(torch.randn(3, 3), 0), "top_k: expected a positive int"),
        (
            lambda: index_scores(torch.randn(1, 2, 3, 4), torch.randn(1, 3, 5), torch.randn(1, 3, 2)),
            "k: expected shape",
        ),
        (lambda: block_topk_mask(torch.randn(4, 8), torch.randn(4, 8), block_size=0, top_k=1), "block_size"),
        (
            lambda: moba_attention(*(torch.randn(4, 8),) * 3, is_causal=False, block_size=2, top_k=1),
            "is_causal",
        ),
    ],
)
def test_bad_input_names_the_argument(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_recall_by_budget_ranks_the_exact_top_k_first() -> None:
    """No set of k keys holds more mass than the k heaviest, so top-k bounds MoBA and the window at every budget;
    a budget as long as the text keeps everything."""
    from attn_edu.selection import recall_by_budget

    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 2, 32, 8, generator=gen) * 2, torch.randn(2, 2, 32, 8, generator=gen) * 2
    recall = recall_by_budget(q, k, [8, 16, 32], block_size=8)
    for name in ("MoBA blocks", "latest k"):
        assert all(best >= other - 1e-6 for best, other in zip(recall["top-k"], recall[name]))
    assert all(values[-1] == pytest.approx(1.0) for values in recall.values())
    assert recall["top-k"] == sorted(recall["top-k"])
    with pytest.raises(ValueError, match="budgets: each must be a multiple of block_size=8"):
        recall_by_budget(q, k, [12])


def test_attention_inputs_are_what_the_maps_are_made_of() -> None:
    from attn_edu.interp import attention_inputs, attention_maps
    from attn_edu.models import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(
        GPTConfig(vocab_size=11, max_seq_len=16, embed_dim=16, num_heads=2, num_layers=2, ffn_dim=32)
    ).eval()
    ids = torch.randint(11, (2, 9))
    pairs, maps = attention_inputs(model, ids), attention_maps(model, ids)
    assert len(pairs) == len(maps) == 2
    for (q, k), weights in zip(pairs, maps):
        torch.testing.assert_close(attention_weights(q, k, is_causal=True), weights)
