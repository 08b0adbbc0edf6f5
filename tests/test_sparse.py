"""Sparse attention patterns: against Hugging Face's mask functions, by their definitions, and their density."""

from __future__ import annotations

import pytest
import torch

from attn_edu.attention import scaled_dot_product_attention
from attn_edu.masks import causal_mask
from attn_edu.sparse import (
    bigbird_mask,
    dilated_window_mask,
    global_tokens_mask,
    layers_to_reach,
    lsh_buckets,
    lsh_mask,
    mask_density,
    random_blocks_mask,
    sliding_window_attention,
    sliding_window_mask,
)


def _hf_mask(mask_function, T: int, S: int) -> torch.Tensor:
    # Hugging Face mask functions take absolute query positions (cache_position): S - T + t.
    q_idx = torch.arange(T)[:, None] + (S - T)
    kv_idx = torch.arange(S)[None, :]
    return torch.as_tensor(mask_function(0, 0, q_idx, kv_idx)).expand(T, S)


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("T, S", [(9, 9), (5, 12)])
@pytest.mark.parametrize("window", [1, 3, 4])
def test_sliding_window_matches_hugging_face_masks(T, S, window):
    masking_utils = pytest.importorskip("transformers.masking_utils")
    causal_fn = masking_utils.sliding_window_causal_mask_function(window)
    assert torch.equal(sliding_window_mask(T, S, window=window), _hf_mask(causal_fn, T, S))
    # HF's bidirectional window is inclusive (|d| <= w): our window = w + 1.
    both_fn = masking_utils.sliding_window_bidirectional_mask_function(window - 1)
    assert torch.equal(sliding_window_mask(T, S, window=window, causal=False), _hf_mask(both_fn, T, S))


def test_sliding_window_properties():
    mask = sliding_window_mask(12, window=4)
    assert torch.equal(mask & causal_mask(12), mask)  # never sees the future
    assert mask.sum(dim=-1).tolist() == [1, 2, 3] + [4] * 9  # window keys once warmed up
    assert torch.equal(sliding_window_mask(6, 9, window=9), causal_mask(6, 9))  # wide window = causal


@pytest.mark.parametrize("causal", [True, False])
def test_dilated_window(causal):
    assert torch.equal(
        dilated_window_mask(7, 10, window=3, dilation=1, causal=causal),
        sliding_window_mask(7, 10, window=3, causal=causal),
    )
    mask = dilated_window_mask(20, window=3, dilation=4, causal=causal)
    t = 10
    distances = sorted(abs(t - s) for s in mask[t].nonzero().flatten().tolist())
    assert distances == ([0, 4, 8] if causal else [0, 4, 4, 8, 8])


def test_global_tokens_rows_and_columns():
    mask = global_tokens_mask(6, global_positions=[0, 4])
    is_global = torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.bool)
    assert mask[is_global].all() and mask[:, is_global].all()  # attend everywhere, attended by all
    assert not mask[~is_global][:, ~is_global].any()  # the rest is left to other patterns
    # Bottom-right: 3 queries at absolute positions 2, 3, 4 of 5 keys; position 4 is global.
    short = global_tokens_mask(3, 5, global_positions=[4])
    assert short[2].all() and short[:, 4].all() and short.sum() == 5 + 2


def test_random_blocks_count_reproducibility_and_blocks():
    mask = random_blocks_mask(10, 13, num_random=3, generator=_g(0))
    assert mask.shape == (10, 13) and (mask.sum(dim=-1) == 3).all()
    assert torch.equal(mask, random_blocks_mask(10, 13, num_random=3, generator=_g(0)))
    assert not torch.equal(mask, random_blocks_mask(10, 13, num_random=3, generator=_g(1)))
    blocked = random_blocks_mask(16, num_random=2, generator=_g(0), block_size=4)
    as_blocks = blocked.reshape(4, 4, 4, 4)  # (query block, row, key block, col)
    assert (as_blocks.all(dim=(1, 3)) == as_blocks.any(dim=(1, 3))).all()  # whole blocks on or off
    assert (as_blocks.any(dim=(1, 3)).sum(dim=-1) == 2).all()


def test_bigbird_is_window_or_global_or_random_and_gets_sparser():
    T = 48
    mask = bigbird_mask(T, window=3, global_positions=[0, 1], num_random=2, generator=_g(5))
    parts = (
        sliding_window_mask(T, window=3, causal=False)
        | global_tokens_mask(T, global_positions=[0, 1])
        | random_blocks_mask(T, num_random=2, generator=_g(5))
    )
    assert torch.equal(mask, parts)
    densities = [
        mask_density(bigbird_mask(n, window=3, global_positions=[0], num_random=2, generator=_g(0)))
        for n in (32, 64, 128)
    ]
    assert densities[0] > densities[1] > densities[2]
    q = k = v = torch.randn(1, T, 8)
    assert torch.isfinite(scaled_dot_product_attention(q, k, v, mask)).all()


@pytest.mark.parametrize(
    "seq_len, window", [(1, 1), (1, 5), (2, 1), (9, 1), (7, 3), (11, 4), (13, 20), (40, 6)]
)
def test_layers_to_reach_is_the_first_power_of_the_mask_that_reaches_token_0(seq_len, window):
    mask = sliding_window_mask(seq_len, window=window).int()  # (T, T): output t reads input s
    reach, powers = torch.eye(seq_len, dtype=torch.int), []
    for _ in range(seq_len + 1):  # a chain longer than seq_len adds nothing new
        powers.append(bool(reach[-1, 0]))
        reach = (reach @ mask).clamp(max=1)
    want = powers.index(True) if any(powers) else -1
    assert layers_to_reach(seq_len, window) == want
    with pytest.raises(ValueError, match="window: expected a positive int"):
        layers_to_reach(seq_len, 0)
    with pytest.raises(ValueError, match="seq_len: expected a positive int"):
        layers_to_reach(0, window)


def test_mask_density():
    assert mask_density(causal_mask(10)) == pytest.approx(55 / 100)
    assert mask_density(torch.ones(3, 4, dtype=torch.bool)) == 1.0
    with pytest.raises(ValueError, match="mask: expected a bool mask"):
        mask_density(torch.ones(3, 3))


def test_mask_argument_errors():
    with pytest.raises(ValueError, match="window: expected a positive int"):
        sliding_window_mask(4, window=0)
    with pytest.raises(ValueError, match="dilation: expected a positive int"):
        dilated_window_mask(4, window=2, dilation=0)
    with pytest.raises(ValueError, match=r"global_positions: expected positions in 0 \.\. 3"):
        global_tokens_mask(4, global_positions=[4])
    with pytest.raises(ValueError, match="num_random: expected at most 3"):
        random_blocks_mask(4, 3, num_random=4, generator=_g(0))


@pytest.mark.parametrize(
    "T, window, block", [(50, 7, 16), (64, 64, 16), (33, 5, 64), (100, 1, 8), (17, 30, 4)]
)
def test_blocked_sliding_window_attention_equals_the_masked_dense_one(T, window, block):
    g = _g(T)
    q, k, v = (torch.randn(2, 3, T, 8, generator=g) for _ in range(3))
    dense = scaled_dot_product_attention(q, k, v, sliding_window_mask(T, window=window))
    torch.testing.assert_close(sliding_window_attention(q, k, v, window=window, block=block), dense)


def test_blocked_sliding_window_attention_refuses_cross_attention():
    q, k = torch.randn(4, 8), torch.randn(6, 8)
    with pytest.raises(ValueError, match="k: expected as many keys as queries"):
        sliding_window_attention(q, k, k, window=2)


def test_lsh_puts_near_vectors_together_and_far_ones_apart():
    g = _g(0)
    x = torch.nn.functional.normalize(torch.randn(200, 16, generator=g), dim=-1)
    near = torch.nn.functional.normalize(x + 0.05 * torch.randn(200, 16, generator=g), dim=-1)
    buckets = lsh_buckets(torch.stack([x, near, -x]), 16, rounds=1, generator=g)[0]  # (3, 200)
    assert (buckets[0] == buckets[1]).float().mean() > 0.7  # a small angle: mostly the same bucket
    assert not (buckets[0] == buckets[2]).any()  # opposite vectors: argmax of [xR; -xR] flips
    assert buckets.min() >= 0 and buckets.max() < 16


def test_lsh_mask_is_symmetric_sees_itself_and_grows_with_rounds():
    g = _g(1)
    x = torch.randn(64, 8, generator=g)
    masks = [lsh_mask(lsh_buckets(x, 8, rounds=r, generator=_g(2))) for r in (1, 2, 4)]
    for mask in masks:
        assert torch.equal(mask, mask.T) and bool(mask.diagonal().all())
    densities = [mask_density(m) for m in masks]
    assert densities[0] < densities[1] < densities[2] < 1  # more rounds, more pairs found
    assert torch.equal(lsh_mask(lsh_buckets(x, 8, generator=_g(2)), causal=True), masks[0] & causal_mask(64))
    with pytest.raises(ValueError, match="num_buckets"):
        lsh_buckets(x, 7)


def test_lsh_attention_error_falls_with_rounds():
    """Shared-QK attention (Reformer) restricted to same-bucket keys approaches full attention as rounds grow."""
    errors = {1: [], 8: []}
    for seed in range(5):
        g = _g(10 + seed)
        qk = torch.nn.functional.normalize(torch.randn(128, 16, generator=g), dim=-1) * 4  # sharp attention
        v = torch.randn(128, 8, generator=g)
        full = scaled_dot_product_attention(qk, qk, v, scale=1.0)
        for rounds in errors:
            mask = lsh_mask(lsh_buckets(qk, 8, rounds=rounds, generator=_g(100 + seed)))
            approx = scaled_dot_product_attention(qk, qk, v, mask, scale=1.0)
            errors[rounds].append(((approx - full).norm() / full.norm()).item())
    assert max(errors[8]) < min(errors[1]), errors


def test_the_banded_kernel_is_an_attention_fn() -> None:
    """With the course's common signature it replaces a model's attention: a GPT reading through a window that
    covers its whole context computes what it computes with full causal attention."""
    from functools import partial

    from attn_edu.models import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(
        GPTConfig(vocab_size=11, max_seq_len=12, embed_dim=16, num_heads=2, num_layers=2, ffn_dim=32)
    ).eval()
    ids = torch.randint(11, (2, 12))
    with torch.no_grad():
        full = model(ids)
        for block in model.blocks:
            block.attn.attention_fn = partial(sliding_window_attention, window=12, block=5)
        torch.testing.assert_close(model(ids), full)
    with pytest.raises(ValueError, match="mask: the band is the mask"):
        sliding_window_attention(
            *torch.randn(3, 4, 2).unbind(0), torch.ones(4, 4, dtype=torch.bool), window=2
        )
