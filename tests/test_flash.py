"""Tiled (FlashAttention-style) attention and online softmax against the reference and torch SDPA."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import attn_edu.flash
from attn_edu.attention import scaled_dot_product_attention
from attn_edu.flash import (
    causal_tile_count,
    combine_splits,
    logsumexp_from_stats,
    online_softmax,
    online_softmax_steps,
    split_kv_attention,
    tiled_attention,
    tiled_attention_backward,
    tiled_attention_forward,
)
from attn_edu.masks import causal_mask

FP32 = {"atol": 1e-5, "rtol": 1e-5}


def _qkv(*batch: int, T: int, S: int, D: int = 8, Dv: int | None = None, dtype=torch.float32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*batch, T, D, generator=g).to(dtype)
    k = torch.randn(*batch, S, D, generator=g).to(dtype)
    v = torch.randn(*batch, S, Dv or D, generator=g).to(dtype)
    return q, k, v


def _grads(fn, q, k, v, grad_out, **kwargs):
    q, k, v = (x.detach().clone().requires_grad_() for x in (q, k, v))
    out = fn(q, k, v, **kwargs)
    out.backward(grad_out)
    return out.detach(), q.grad, k.grad, v.grad


# --- online softmax ---------------------------------------------------------------------------


@pytest.mark.parametrize("block_size", [1, 3, 16, 100])
def test_online_softmax_equals_torch_softmax(block_size):
    x = torch.randn(4, 5, 37) * 4
    torch.testing.assert_close(online_softmax(x, block_size), torch.softmax(x, dim=-1))


def test_online_softmax_steps_track_running_max_and_rescaled_sum():
    x = torch.randn(3, 23) * 3
    steps = list(online_softmax_steps(x, 5))
    assert len(steps) == 5  # ceil(23 / 5) blocks
    for j, (m_i, l_i) in enumerate(steps):
        seen = x[:, : (j + 1) * 5]
        torch.testing.assert_close(m_i, seen.amax(dim=-1))
        torch.testing.assert_close(l_i, torch.exp(seen - m_i[:, None]).sum(dim=-1))


def test_online_softmax_all_masked_row_gives_zeros_and_half_keeps_dtype():
    x = torch.tensor([[float("-inf")] * 4, [0.0, 1.0, float("-inf"), 2.0]])
    out = online_softmax(x, 3)
    assert torch.equal(out[0], torch.zeros(4))
    torch.testing.assert_close(out[1], torch.softmax(x[1], dim=-1))
    half = torch.randn(2, 9).half()
    assert online_softmax(half, 4).dtype == torch.float16
    torch.testing.assert_close(
        online_softmax(half, 4).float(), torch.softmax(half.float(), -1), atol=1e-3, rtol=0
    )


# --- forward and backward against the reference -----------------------------------------------

SHAPES = [(37, 53), (53, 37), (16, 16), (1, 9), (9, 1), (64, 64)]
# Odd tiles (7 x 13) leave a partial tile at every edge: they meet every shape, causal or not. Tiles that divide
# the sequence (16) and one tile larger than it (64) meet the shapes where that differs: T != S both ways and
# T = S = 64 (4 x 4 tiles of 16, or one of 64).
CASES = [(*shape, blocks) for shape in SHAPES for blocks in [(7, 13)]] + [
    (*shape, blocks) for shape in [(37, 53), (53, 37), (64, 64)] for blocks in [(16, 16), (64, 64)]
]


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("T, S, blocks", CASES)
def test_forward_and_gradients_equal_reference(T, S, is_causal, blocks):
    block_q, block_k = blocks
    q, k, v = _qkv(2, 3, T=T, S=S, D=8, Dv=5)
    grad_out = torch.randn(2, 3, T, 5)
    blocks = {"block_q": block_q, "block_k": block_k}
    got = _grads(tiled_attention, q, k, v, grad_out, is_causal=is_causal, **blocks)
    want = _grads(scaled_dot_product_attention, q, k, v, grad_out, is_causal=is_causal)
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, want):
        torch.testing.assert_close(a, b, **FP32, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("T, S", [(37, 37), (37, 53), (53, 37)])
def test_matches_torch_sdpa_where_the_conventions_agree(T, S, is_causal):
    # torch's is_causal is top-left aligned: it agrees with ours only when T == S.
    if is_causal and T != S:
        pytest.skip("top-left and bottom-right causal differ when T != S (see test below)")
    q, k, v = _qkv(2, 2, T=T, S=S)
    grad_out = torch.randn(2, 2, T, 8)
    got = _grads(tiled_attention, q, k, v, grad_out, is_causal=is_causal, block_q=16, block_k=16)
    want = _grads(F.scaled_dot_product_attention, q, k, v, grad_out, is_causal=is_causal)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **FP32)


def test_causal_is_bottom_right_not_torch_top_left():
    q, k, v = _qkv(1, T=4, S=9)
    ours = tiled_attention(q, k, v, is_causal=True, block_q=2, block_k=4)
    bottom_right = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_mask(4, 9))
    top_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(ours, bottom_right, **FP32)
    assert not torch.allclose(ours, top_left, atol=1e-3)


def test_causal_with_fewer_keys_than_queries_gives_zero_rows_and_zero_gradients():
    T, S = 11, 4  # queries 0..6 sit before the first key: nothing visible
    q, k, v = _qkv(2, T=T, S=S)
    grad_out = torch.randn(2, T, 8)
    out, dq, dk, dv = _grads(tiled_attention, q, k, v, grad_out, is_causal=True, block_q=3, block_k=3)
    for t in (out, dq, dk, dv):
        assert torch.isfinite(t).all()
    assert torch.equal(out[:, : T - S], torch.zeros(2, T - S, 8))
    assert torch.equal(dq[:, : T - S], torch.zeros(2, T - S, 8))
    _, lse = tiled_attention_forward(q, k, v, is_causal=True, block_q=3, block_k=3)
    assert torch.isneginf(lse[:, : T - S]).all() and torch.isfinite(lse[:, T - S :]).all()
    want = _grads(scaled_dot_product_attention, q, k, v, grad_out, is_causal=True)
    for a, b in zip((out, dq, dk, dv), want):
        torch.testing.assert_close(a, b, **FP32)


@pytest.mark.parametrize("is_causal", [False, True])
def test_lse_equals_logsumexp_of_scaled_scores(is_causal):
    q, k, v = _qkv(2, 3, T=37, S=53)
    _, lse = tiled_attention_forward(q, k, v, is_causal=is_causal, scale=0.3, block_q=16, block_k=16)
    scores = (q @ k.transpose(-2, -1)) * 0.3
    if is_causal:
        scores = scores.masked_fill(~causal_mask(37, 53), float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(scores, dim=-1), **FP32)


def test_user_mask_with_fully_masked_rows_and_broadcast_kv_heads():
    q, _, _ = _qkv(2, 4, T=21, S=30)
    _, k, v = _qkv(2, 1, T=21, S=30, seed=1)  # one k/v shared by the 4 query heads
    mask = torch.rand(2, 1, 21, 30, generator=torch.Generator().manual_seed(2)) > 0.6
    mask[:, :, 5] = False  # query 5 sees nothing
    grad_out = torch.randn(2, 4, 21, 8)
    got = _grads(tiled_attention, q, k, v, grad_out, mask=mask, is_causal=True, block_q=8, block_k=8)
    want = _grads(scaled_dot_product_attention, q, k, v, grad_out, mask=mask, is_causal=True)
    assert got[2].shape == k.shape and got[3].shape == v.shape
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **FP32)
    assert torch.equal(got[0][:, :, 5], torch.zeros(2, 4, 8))


def test_backward_function_matches_autograd_of_reference():
    q, k, v = _qkv(3, T=10, S=14)
    grad_out = torch.randn(3, 10, 8)
    out, lse = tiled_attention_forward(q, k, v, is_causal=True, block_q=4, block_k=4)
    got = tiled_attention_backward(q, k, v, out, lse, grad_out, is_causal=True, block_q=4, block_k=4)
    want = _grads(scaled_dot_product_attention, q, k, v, grad_out, is_causal=True)[1:]
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **FP32)


def test_any_leading_dims():
    for batch in [(), (5,), (2, 3, 2)]:
        q, k, v = _qkv(*batch, T=9, S=12)
        torch.testing.assert_close(
            tiled_attention(q, k, v, block_q=4, block_k=5), scaled_dot_product_attention(q, k, v), **FP32
        )


# --- what makes it "flash": no (T, S) matrix, skipped future blocks ----------------------------


def test_autograd_saves_no_quadratic_tensor():
    T = S = 256
    q, k, v = (x.requires_grad_() for x in _qkv(1, T=T, S=S, D=16))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        tiled_attention(q, k, v, is_causal=True).sum()
    assert saved and max(saved) < T * S / 8, saved  # q, k, v, out (T*D) and lse (T), nothing T*S

    saved.clear()
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        scaled_dot_product_attention(q, k, v, is_causal=True).sum()
    assert max(saved) >= T * S  # the reference keeps the attention matrix: the hook can see it


def test_causal_never_reads_key_blocks_in_the_future():
    q, k, v = _qkv(1, T=64, S=64)
    v[..., 48:, :] = float("nan")  # a key block no query before position 48 may see
    out = tiled_attention(q, k, v, is_causal=True, block_q=16, block_k=16)
    assert torch.isfinite(out[..., :48, :]).all()  # those query blocks skipped the poisoned block


@pytest.mark.parametrize(
    "T, S, block_q, block_k", [(10, 10, 4, 3), (5, 9, 4, 4), (12, 5, 5, 2), (64, 64, 16, 16), (1, 7, 3, 8)]
)
def test_causal_tile_count_is_what_the_forward_computes(T, S, block_q, block_k, monkeypatch):
    mask = causal_mask(T, S)  # (T, S)
    tiles = [
        mask[i : i + block_q, j : j + block_k] for i in range(0, T, block_q) for j in range(0, S, block_k)
    ]
    assert causal_tile_count(T, S, block_q, block_k) == sum(bool(tile.any()) for tile in tiles)
    computed, tile_allowed = [], attn_edu.flash._tile_allowed  # called once for every tile computed

    def counting(*args, **kwargs):
        computed.append(args[:4])
        return tile_allowed(*args, **kwargs)

    monkeypatch.setattr(attn_edu.flash, "_tile_allowed", counting)
    tiled_attention_forward(*_qkv(1, T=T, S=S), is_causal=True, block_q=block_q, block_k=block_k)
    assert len(computed) == causal_tile_count(T, S, block_q, block_k)
    with pytest.raises(ValueError, match="block_k: expected a positive int"):
        causal_tile_count(T, S, block_q, 0)


# --- half precision and bad input -------------------------------------------------------------


def test_fp16_within_loose_tolerance_and_keeps_dtype():
    q, k, v = _qkv(2, 2, T=37, S=53, dtype=torch.float16)
    grad_out = torch.randn(2, 2, 37, 8).half()
    got = _grads(tiled_attention, q, k, v, grad_out, is_causal=True, block_q=16, block_k=16)
    want = _grads(
        scaled_dot_product_attention, *(x.float() for x in (q, k, v)), grad_out.float(), is_causal=True
    )
    for a, b in zip(got, want):
        assert a.dtype == torch.float16
        torch.testing.assert_close(a.float(), b, atol=5e-3, rtol=5e-3)


def test_bad_input_raises_value_error_naming_the_argument():
    q, k, v = _qkv(2, T=5, S=7)
    with pytest.raises(ValueError, match=r"k: expected shape \(\.\.\., S, D\) with D=8"):
        tiled_attention(q, k[..., :4], v)
    with pytest.raises(ValueError, match=r"v: expected shape \(\.\.\., S, Dv\) with S=7"):
        tiled_attention(q, k, v[:, :6])
    with pytest.raises(ValueError, match="q: expected a floating-point tensor"):
        tiled_attention(q.long(), k, v)
    with pytest.raises(ValueError, match="expected one dtype"):
        tiled_attention(q.half(), k, v)
    with pytest.raises(ValueError, match="block_q: expected a positive int"):
        tiled_attention(q, k, v, block_q=0)
    with pytest.raises(ValueError, match="block_k: expected a positive int"):
        tiled_attention(q, k, v, block_k=2.5)
    with pytest.raises(ValueError, match="scale"):
        tiled_attention(q, k, v, scale=-1.0)
    with pytest.raises(ValueError, match="mask: expected a bool mask"):
        tiled_attention(q, k, v, torch.zeros(5, 7))
    with pytest.raises(ValueError, match=r"mask: expected a shape that broadcasts to \(\.\.\., T, S\)"):
        tiled_attention(q, k, v, torch.ones(7, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="leading dims"):
        tiled_attention(q, *_qkv(3, T=5, S=7)[1:])
    with pytest.raises(ValueError, match="block_size: expected a positive int"):
        online_softmax(torch.randn(4), 0)
    with pytest.raises(ValueError, match=r"x: expected shape \(\.\.\., N\)"):
        online_softmax(torch.randn(()), 2)


@pytest.mark.parametrize("block_size", [1, 3, 8])
def test_logsumexp_from_stats_equals_torch(block_size):
    g = torch.Generator().manual_seed(4)
    x = 30 * torch.randn(3, 4, 11, generator=g, dtype=torch.float64) + 100.0  # exp(x) overflows float32
    x[0, 1] = float("-inf")  # a row that sees nothing
    x[1, 2, :5] = float("-inf")
    m_i, l_i = list(online_softmax_steps(x, block_size))[-1]
    got = logsumexp_from_stats(m_i, l_i)
    torch.testing.assert_close(got, torch.logsumexp(x.float(), dim=-1), rtol=1e-6, atol=1e-4)
    assert torch.isneginf(got[0, 1])


@pytest.mark.parametrize("num_splits", [1, 2, 3, 7, 64])
def test_split_kv_decoding_equals_the_reference(num_splits):
    """One query (decoding) over a long cache, in uneven splits; also GQA-style broadcast heads."""
    g = torch.Generator().manual_seed(num_splits)
    q = torch.randn(2, 4, 1, 16, generator=g)  # (B, H, T=1, D)
    k, v = torch.randn(2, 1, 997, 16, generator=g), torch.randn(2, 1, 997, 8, generator=g)  # shared kv head
    out = split_kv_attention(q, k, v, num_splits=num_splits)
    torch.testing.assert_close(out, scaled_dot_product_attention(q, k, v), atol=1e-5, rtol=1e-5)


def test_split_kv_with_causal_queries_and_masks_that_empty_whole_splits():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, n, 8, generator=g) for n in (5, 40, 40))
    for mask in (None, torch.arange(40) < 9):  # keys 9.. hidden: most splits see nothing
        expected = scaled_dot_product_attention(q, k, v, mask, is_causal=True)
        got = split_kv_attention(q, k, v, mask, num_splits=6, is_causal=True)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    nothing = split_kv_attention(q, k, v, torch.zeros(40, dtype=torch.bool), num_splits=4)
    assert torch.equal(nothing, torch.zeros_like(nothing))  # no key anywhere: zeros, never NaN


def test_combine_splits_checks_its_inputs():
    with pytest.raises(ValueError, match="lses"):
        combine_splits(torch.randn(3, 2, 5, 4), torch.randn(3, 2, 4))
    with pytest.raises(ValueError, match="num_splits"):
        split_kv_attention(torch.randn(1, 4), torch.randn(3, 4), torch.randn(3, 4), num_splits=4)
