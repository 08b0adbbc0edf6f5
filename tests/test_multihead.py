"""Multi-head / grouped-query attention against torch.nn.MultiheadAttention and torch SDPA."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from attn_edu.attention import scaled_dot_product_attention
from attn_edu.masks import causal_mask, combine_masks, key_mask, padding_mask, to_torch_polarity
from attn_edu.multihead import (
    MultiHeadAttention,
    SupportsKVCache,
    attention_parameter_count,
    merge_heads,
    repeat_kv,
    split_heads,
)

TOL = {"atol": 1e-5, "rtol": 1e-5}


def close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual, expected, **TOL)


def torch_mha(embed_dim: int, num_heads: int, seed: int = 0, **kwargs) -> nn.MultiheadAttention:
    torch.manual_seed(seed)
    mha = nn.MultiheadAttention(embed_dim, num_heads, batch_first=True, **kwargs)
    with torch.no_grad():  # torch zero-initialises the biases; random ones test the bias copy too
        for name, p in mha.named_parameters():
            if "bias" in name:
                p.normal_()
    return mha.eval()


def torch_sdpa(q, k, v, mask=None, *, is_causal=False, scale=None):
    """torch's SDPA behind our signature: bool mask, bottom-right causal (torch's is top-left)."""
    if is_causal:
        mask = combine_masks(mask, causal_mask(q.shape[-2], k.shape[-2]))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


class ListCache:
    """Stand-in KV cache: keeps every update in a list and concatenates along the sequence axis."""

    def __init__(self) -> None:
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []

    @property
    def seq_len(self) -> int:
        return sum(k.shape[2] for k in self.keys)

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys.append(k)
        self.values.append(v)
        return torch.cat(self.keys, dim=2), torch.cat(self.values, dim=2)


class ToyRotary(nn.Module):
    """Stand-in rotary embedding: rotates channel pairs (i, i + D/2) by angle position * freq_i."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[int, tuple[int, ...], tuple[int, ...]]] = []

    @staticmethod
    def rotate(x: torch.Tensor, offset: int) -> torch.Tensor:
        T, D = x.shape[-2:]
        pos = torch.arange(offset, offset + T, dtype=x.dtype)[:, None]  # (T, 1)
        angle = pos * (0.7 ** torch.arange(D // 2, dtype=x.dtype))  # (T, D/2)
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([x1 * angle.cos() - x2 * angle.sin(), x1 * angle.sin() + x2 * angle.cos()], dim=-1)

    def forward(self, q, k, *, offset=0):
        self.calls.append((offset, tuple(q.shape), tuple(k.shape)))
        return self.rotate(q, offset), self.rotate(k, offset)


# --- head bookkeeping -------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(B=st.integers(1, 3), T=st.integers(1, 5), H=st.integers(1, 4), D=st.integers(1, 5))
def test_split_merge_round_trip_and_layout(B, T, H, D):
    x = torch.randn(B, T, H * D)
    heads = split_heads(x, H)
    assert heads.shape == (B, H, T, D)
    for h in range(H):  # head h owns channels h*D .. (h+1)*D - 1
        assert torch.equal(heads[:, h], x[..., h * D : (h + 1) * D])
    assert torch.equal(merge_heads(heads), x)


@settings(max_examples=25, deadline=None)
@given(H_kv=st.integers(1, 3), n_rep=st.integers(1, 4), S=st.integers(1, 4))
def test_repeat_kv_groups_consecutive_heads(H_kv, n_rep, S):
    kv = torch.randn(2, H_kv, S, 3)
    out = repeat_kv(kv, n_rep)
    assert out.shape == (2, H_kv * n_rep, S, 3)
    for h in range(H_kv * n_rep):
        assert torch.equal(out[:, h], kv[:, h // n_rep])


def test_repeat_kv_matches_torch_sdpa_enable_gqa():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 6, 5, 4), torch.randn(2, 2, 7, 4), torch.randn(2, 2, 7, 4)
    expected = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    close(scaled_dot_product_attention(q, repeat_kv(k, 3), repeat_kv(v, 3)), expected)


# --- equality with torch.nn.MultiheadAttention ------------------------------------------------


@pytest.mark.parametrize("B, T, C, H", [(2, 5, 12, 3), (1, 7, 15, 5), (3, 1, 8, 1), (2, 9, 6, 6)])
def test_self_attention_matches_torch(B, T, C, H):
    ref = torch_mha(C, H)
    ours = MultiHeadAttention.from_torch(ref)
    x = torch.randn(B, T, C)
    close(ours(x), ref(x, x, x, need_weights=False)[0])


@pytest.mark.parametrize(
    "T, S, C, H, kdim, vdim", [(3, 7, 12, 4, 5, 9), (6, 2, 10, 2, 10, 3), (1, 5, 9, 3, 7, 7)]
)
def test_cross_attention_matches_torch(T, S, C, H, kdim, vdim):
    ref = torch_mha(C, H, kdim=kdim, vdim=vdim)
    ours = MultiHeadAttention.from_torch(ref)
    query, key, value = torch.randn(2, T, C), torch.randn(2, S, kdim), torch.randn(2, S, vdim)
    close(ours(query, key, value), ref(query, key, value, need_weights=False)[0])


def test_packed_cross_attention_matches_torch():
    """kdim == vdim == embed_dim: torch packs q/k/v into in_proj_weight even for cross-attention."""
    ref = torch_mha(8, 2)
    ours = MultiHeadAttention.from_torch(ref)
    query, memory = torch.randn(2, 3, 8), torch.randn(2, 6, 8)
    close(ours(query, memory), ref(query, memory, memory, need_weights=False)[0])


def test_no_bias_and_batch_first_false_match_torch():
    torch.manual_seed(1)
    ref = nn.MultiheadAttention(12, 4, bias=False)  # batch_first=False: torch takes (T, B, C)
    ours = MultiHeadAttention.from_torch(ref)
    assert ours.q_proj.bias is None and ours.out_proj.bias is None
    x = torch.randn(3, 5, 12)  # (B, T, C)
    expected = ref(x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1))[0].transpose(0, 1)
    close(ours(x), expected)


@pytest.mark.parametrize("T, C, H", [(6, 12, 3), (5, 10, 5)])
def test_key_padding_mask_matches_torch(T, C, H):
    ref = torch_mha(C, H)
    ours = MultiHeadAttention.from_torch(ref)
    x = torch.randn(3, T, C)
    real = padding_mask([T, 2, 1], T)  # (B, S), True = real token
    expected = ref(x, x, x, key_padding_mask=to_torch_polarity(real), need_weights=False)[0]
    close(ours(x, mask=key_mask(real)), expected)


@pytest.mark.parametrize("T, C, H", [(7, 12, 4), (3, 9, 3), (1, 4, 2)])
def test_causal_mask_matches_torch(T, C, H):
    ref = torch_mha(C, H)
    ours = MultiHeadAttention.from_torch(ref)
    x = torch.randn(2, T, C)
    expected = ref(x, x, x, attn_mask=to_torch_polarity(causal_mask(T)), need_weights=False)[0]
    close(ours(x, is_causal=True), expected)
    close(ours(x, mask=causal_mask(T)), expected)


def test_causal_and_padding_together_match_torch():
    ref = torch_mha(12, 3)
    ours = MultiHeadAttention.from_torch(ref)
    x = torch.randn(2, 6, 12)
    real = padding_mask([6, 4], 6)
    expected = ref(
        x,
        x,
        x,
        attn_mask=to_torch_polarity(causal_mask(6)),
        key_padding_mask=to_torch_polarity(real),
        need_weights=False,
    )[0]
    close(ours(x, mask=key_mask(real), is_causal=True), expected)


@settings(max_examples=15, deadline=None)
@given(
    B=st.integers(1, 3),
    T=st.integers(1, 6),
    S=st.integers(1, 6),
    H=st.integers(1, 4),
    D=st.integers(1, 4),
    kdim=st.integers(1, 7),
    vdim=st.integers(1, 7),
    seed=st.integers(0, 2**16),
)
def test_random_shapes_match_torch(B, T, S, H, D, kdim, vdim, seed):
    ref = torch_mha(H * D, H, seed=seed, kdim=kdim, vdim=vdim)
    ours = MultiHeadAttention.from_torch(ref)
    query, key, value = torch.randn(B, T, H * D), torch.randn(B, S, kdim), torch.randn(B, S, vdim)
    close(ours(query, key, value), ref(query, key, value, need_weights=False)[0])


def test_need_weights_match_torch_per_head_weights():
    ref = torch_mha(12, 3)
    ours = MultiHeadAttention.from_torch(ref)
    query, memory = torch.randn(2, 4, 12), torch.randn(2, 6, 12)
    real = padding_mask([6, 3], 6)
    expected_out, expected_w = ref(
        query, memory, memory, key_padding_mask=~real, need_weights=True, average_attn_weights=False
    )
    out, weights = ours(query, memory, mask=key_mask(real), need_weights=True)
    assert weights.shape == (2, 3, 4, 6)
    close(out, expected_out)
    close(weights, expected_w)
    close(weights.sum(-1), torch.ones(2, 3, 4))
    assert torch.all(weights[1, ..., 3:] == 0)  # padded keys get exactly zero weight


def test_from_torch_refuses_extra_key_positions():
    with pytest.raises(ValueError, match="add_bias_kv"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, add_bias_kv=True))
    with pytest.raises(ValueError, match="add_zero_attn"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, add_zero_attn=True))
    with pytest.raises(TypeError, match="mha"):
        MultiHeadAttention.from_torch(nn.Linear(8, 8))


# --- against hand-written multi-head and grouped-query attention ------------------------------


def test_heads_match_a_loop_over_heads():
    """The paper's form: one small attention per head on its slice of W^Q, W^K, W^V, then Concat W^O."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(12, 3, num_kv_heads=3)
    x = torch.randn(2, 5, 12)
    D = mha.head_dim
    heads = []
    for h in range(3):
        rows = slice(h * D, (h + 1) * D)
        q = x @ mha.q_proj.weight[rows].T + mha.q_proj.bias[rows]  # (B, T, D)
        k = x @ mha.k_proj.weight[rows].T + mha.k_proj.bias[rows]  # (B, T, D)
        v = x @ mha.v_proj.weight[rows].T + mha.v_proj.bias[rows]  # (B, T, D)
        heads.append(F.scaled_dot_product_attention(q, k, v, is_causal=True))
    expected = mha.out_proj(torch.cat(heads, dim=-1))
    close(mha(x, is_causal=True), expected)


@pytest.mark.parametrize("H, H_kv", [(6, 2), (4, 1), (3, 3)])
def test_gqa_equals_mha_with_repeated_kv_weights(H, H_kv):
    torch.manual_seed(0)
    C = 2 * H
    gqa = MultiHeadAttention(C, H, num_kv_heads=H_kv)
    mha = MultiHeadAttention(C, H)  # H_kv == H
    n_rep, D = H // H_kv, gqa.head_dim
    with torch.no_grad():
        for name in ("q_proj", "out_proj"):
            getattr(mha, name).load_state_dict(getattr(gqa, name).state_dict())
        for name in ("k_proj", "v_proj"):
            small, full = getattr(gqa, name), getattr(mha, name)
            # kv head j's D rows are copied to query heads j*n_rep .. (j+1)*n_rep - 1
            full.weight.copy_(small.weight.view(H_kv, D, C).repeat_interleave(n_rep, dim=0).reshape(C, C))
            full.bias.copy_(small.bias.view(H_kv, D).repeat_interleave(n_rep, dim=0).reshape(C))
    assert gqa.k_proj.weight.shape == (H_kv * D, C)
    query, memory = torch.randn(2, 5, C), torch.randn(2, 3, C)
    close(gqa(query, memory), mha(query, memory))
    close(gqa(query, is_causal=True), mha(query, is_causal=True))


@pytest.mark.parametrize("C, H, H_kv, D", [(12, 3, 3, 8), (8, 4, 2, 6), (10, 5, 1, 4), (7, 2, 1, 3)])
def test_head_dim_can_differ_from_embed_dim_over_num_heads(C, H, H_kv, D):
    """T5's d_kv, Gemma's head_dim: H heads of size D, projected from C and back to C (H·D ≠ C)."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(C, H, num_kv_heads=H_kv, head_dim=D)
    assert mha.q_proj.weight.shape == (H * D, C) and mha.k_proj.weight.shape == (H_kv * D, C)
    assert mha.out_proj.weight.shape == (C, H * D) and mha.scale == pytest.approx(D**-0.5)
    x, memory = torch.randn(2, 5, C), torch.randn(2, 3, C)
    for source, is_causal in ((x, True), (memory, False)):
        q = split_heads(mha.q_proj(x), H)  # (B, H, T, D)
        k, v = split_heads(mha.k_proj(source), H_kv), split_heads(mha.v_proj(source), H_kv)
        heads = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=True)
        out, weights = mha(x, source, is_causal=is_causal, need_weights=True)
        assert out.shape == (2, 5, C) and weights.shape == (2, H, 5, source.shape[1])
        close(out, mha.out_proj(merge_heads(heads)))


def test_gqa_matches_torch_sdpa_enable_gqa():
    torch.manual_seed(0)
    mha = MultiHeadAttention(12, 6, num_kv_heads=2)
    x = torch.randn(2, 5, 12)
    q = split_heads(mha.q_proj(x), 6)
    k, v = split_heads(mha.k_proj(x), 2), split_heads(mha.v_proj(x), 2)
    heads = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    close(mha(x, is_causal=True), mha.out_proj(merge_heads(heads)))


# --- KV cache, rotary, attention_fn, score_bias ----------------------------------------------


@pytest.mark.parametrize("H_kv, chunks", [(4, [1] * 6), (2, [3, 1, 2]), (1, [1, 4, 1])])
def test_kv_cache_decoding_equals_full_causal_forward(H_kv, chunks):
    torch.manual_seed(0)
    rotary = ToyRotary()
    mha = MultiHeadAttention(16, 4, num_kv_heads=H_kv, rotary=rotary)
    x = torch.randn(2, sum(chunks), 16)
    full = mha(x, is_causal=True)
    cache = ListCache()
    assert isinstance(cache, SupportsKVCache)
    pieces, start = [], 0
    for n in chunks:
        pieces.append(mha(x[:, start : start + n], is_causal=True, kv_cache=cache))
        start += n
    close(torch.cat(pieces, dim=1), full)
    assert cache.keys[0].shape[1] == H_kv  # the cache stores H_kv heads, not H


def test_rotary_called_with_cache_offset_and_shapes():
    torch.manual_seed(0)
    rotary = ToyRotary()
    mha = MultiHeadAttention(12, 6, num_kv_heads=3, rotary=rotary)
    cache = ListCache()
    mha(torch.randn(2, 3, 12), is_causal=True, kv_cache=cache)
    mha(torch.randn(2, 1, 12), is_causal=True, kv_cache=cache)
    mha(torch.randn(2, 2, 12), is_causal=True, kv_cache=cache)
    mha(torch.randn(2, 4, 12))  # no cache: offset 0
    assert rotary.calls == [
        (0, (2, 6, 3, 2), (2, 3, 3, 2)),
        (3, (2, 6, 1, 2), (2, 3, 1, 2)),
        (4, (2, 6, 2, 2), (2, 3, 2, 2)),
        (0, (2, 6, 4, 2), (2, 3, 4, 2)),
    ]


def test_rotary_changes_the_output():
    torch.manual_seed(0)
    plain = MultiHeadAttention(8, 2)
    rotated = MultiHeadAttention(8, 2, rotary=ToyRotary())
    rotated.load_state_dict(plain.state_dict())
    x = torch.randn(1, 5, 8)
    assert not torch.allclose(plain(x, is_causal=True), rotated(x, is_causal=True), atol=1e-3)


def test_swapping_attention_fn_gives_the_same_output():
    torch.manual_seed(0)
    ours = MultiHeadAttention(12, 6, num_kv_heads=2)
    swapped = MultiHeadAttention(12, 6, num_kv_heads=2, attention_fn=torch_sdpa)
    swapped.load_state_dict(ours.state_dict())
    x = torch.randn(2, 5, 12)
    mask = key_mask(padding_mask([5, 3], 5))
    close(swapped(x, mask=mask, is_causal=True), ours(x, mask=mask, is_causal=True))
    cache_ours, cache_swapped = ListCache(), ListCache()
    for t in range(5):  # T=1, S>1: bottom-right causal on both sides
        token = x[:, t : t + 1]
        close(
            swapped(token, is_causal=True, kv_cache=cache_swapped),
            ours(token, is_causal=True, kv_cache=cache_ours),
        )


def test_scale_and_score_bias_reach_attention_fn():
    seen = []

    def recording_fn(q, k, v, mask=None, *, is_causal=False, scale=None, **extra):
        seen.append((scale, sorted(extra)))
        return scaled_dot_product_attention(q, k, v, mask, is_causal=is_causal, scale=scale, **extra)

    x = torch.randn(1, 3, 8)
    MultiHeadAttention(8, 2, attention_fn=recording_fn)(x)
    MultiHeadAttention(8, 2, scale=1.0, attention_fn=recording_fn)(x, score_bias=torch.zeros(1, 2, 3, 3))
    assert seen == [(pytest.approx(0.5), []), (1.0, ["score_bias"])]


def test_score_bias_matches_torch_float_mask():
    """torch SDPA adds a float attn_mask to the scaled scores: the same job as our score_bias."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(12, 3, scale=1.0)  # T5-style: no 1/sqrt(D)
    x = torch.randn(2, 4, 12)
    bias = torch.randn(1, 3, 4, 4)  # (1, H, T, S), e.g. a relative-position bias

    def float_mask_sdpa(q, k, v, mask=None, *, is_causal=False, scale=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)

    peer = MultiHeadAttention(12, 3, scale=1.0, attention_fn=float_mask_sdpa)
    peer.load_state_dict(mha.state_dict())
    close(mha(x, score_bias=bias), peer(x))
    out, weights = mha(x, score_bias=bias, need_weights=True)
    close(weights.sum(-1), torch.ones(2, 3, 4))


def test_fully_masked_query_gives_zero_heads():
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(1, 3, 8)
    mask = torch.ones(3, 3, dtype=torch.bool)
    mask[1] = False  # query 1 sees nothing
    out, weights = mha(x, mask=mask, need_weights=True)
    assert not out.isnan().any()
    close(out[0, 1], mha.out_proj.bias)  # zero heads -> only the output bias is left
    assert torch.all(weights[0, :, 1] == 0)


# --- bad input --------------------------------------------------------------------------------


def test_constructor_errors():
    with pytest.raises(ValueError, match="num_heads"):
        MultiHeadAttention(10, 3)
    with pytest.raises(ValueError, match="num_kv_heads"):
        MultiHeadAttention(12, 6, num_kv_heads=4)
    with pytest.raises(ValueError, match="num_kv_heads"):
        MultiHeadAttention(12, 6, num_kv_heads=0)
    with pytest.raises(ValueError, match="scale"):
        MultiHeadAttention(12, 6, scale=-1.0)
    with pytest.raises(ValueError, match="embed_dim"):
        MultiHeadAttention(0, 1)
    with pytest.raises(ValueError, match="head_dim"):
        MultiHeadAttention(12, 6, head_dim=0)
    # a chosen head_dim lifts the divisibility rule
    assert MultiHeadAttention(10, 3, head_dim=4).inner_dim == 12


def test_forward_shape_errors_name_the_argument():
    mha = MultiHeadAttention(12, 3, kdim=5, vdim=7)
    q, k, v = torch.randn(2, 4, 12), torch.randn(2, 6, 5), torch.randn(2, 6, 7)
    with pytest.raises(ValueError, match=r"query: expected shape \(B, T, C\) with C=12"):
        mha(torch.randn(2, 4, 10), k, v)
    with pytest.raises(ValueError, match="query"):
        mha(torch.randn(4, 12), k, v)
    with pytest.raises(ValueError, match="key"):
        mha(q, torch.randn(2, 6, 4), v)
    with pytest.raises(ValueError, match="key"):
        mha(q, torch.randn(3, 6, 5), v)  # batch differs from the query's
    with pytest.raises(ValueError, match="value.*S=6"):
        mha(q, k, torch.randn(2, 5, 7))  # key and value lengths differ
    with pytest.raises(ValueError, match="value"):
        mha(q, k, torch.randn(2, 6, 5))
    with pytest.raises(ValueError, match="mask"):
        mha(q, k, v, mask=torch.ones(4, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask.*bool"):
        mha(q, k, v, mask=torch.zeros(4, 6))
    with pytest.raises(ValueError, match="score_bias"):
        mha(q, k, v, score_bias=torch.zeros(2, 2, 4, 6))


def test_bad_cache_and_helper_errors():
    class WrongHeads(ListCache):
        def update(self, k, v):
            k_all, v_all = super().update(k, v)
            return repeat_kv(k_all, 2), repeat_kv(v_all, 2)

    mha = MultiHeadAttention(8, 4, num_kv_heads=2)
    with pytest.raises(ValueError, match=r"kv_cache\.update"):
        mha(torch.randn(1, 2, 8), kv_cache=WrongHeads())
    with pytest.raises(ValueError, match="num_heads"):
        split_heads(torch.randn(1, 2, 8), 3)
    with pytest.raises(ValueError, match="x"):
        merge_heads(torch.randn(2, 8))
    with pytest.raises(ValueError, match="n_rep"):
        repeat_kv(torch.randn(1, 2, 3, 4), 0)


# --- parameter count -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("embed_dim", "num_heads", "num_kv_heads", "head_dim", "bias"),
    [(512, 8, None, None, True), (35, 7, 1, None, True), (24, 6, 3, None, False), (20, 4, 2, 7, True),
     (4096, 32, 8, None, False)],
)  # fmt: skip
def test_attention_parameter_count_is_what_the_module_holds(
    embed_dim, num_heads, num_kv_heads, head_dim, bias
):
    with torch.device("meta"):  # shapes without memory
        layer = MultiHeadAttention(
            embed_dim, num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim, bias=bias
        )
    counted = sum(p.numel() for p in layer.parameters())
    assert (
        attention_parameter_count(
            embed_dim, num_heads, num_kv_heads=num_kv_heads, head_dim=head_dim, bias=bias
        )
        == counted
    )


def test_attention_parameter_count_errors():
    with pytest.raises(ValueError, match="num_kv_heads"):
        attention_parameter_count(24, 6, num_kv_heads=4)
    with pytest.raises(ValueError, match="num_heads"):
        attention_parameter_count(25, 6)
    with pytest.raises(ValueError, match="bias"):
        attention_parameter_count(24, 6, bias=1)
