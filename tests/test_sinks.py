"""Learned sink logits (gpt-oss): the reference attention against transformers' own, and their properties.

The peer is ``eager_attention_forward`` of ``transformers.models.gpt_oss``, the code gpt-oss runs when no
fused kernel is asked for; it takes an additive float mask and reads the sinks from its module.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

from attn_edu.attention import attention_weights, scaled_dot_product_attention
from attn_edu.flash import split_kv_attention, tiled_attention, tiled_attention_forward
from attn_edu.masks import causal_mask, padding_mask


def _peer(q, k, v, allowed, sinks, scale):
    """transformers' gpt-oss attention: (B, H, T, D) in, (B, H, T, Dv) out."""
    module = SimpleNamespace(sinks=sinks, num_key_value_groups=1, training=False)
    additive = torch.zeros(allowed.shape, dtype=q.dtype).masked_fill(~allowed, float("-inf"))
    out, weights = eager_attention_forward(module, q, k, v, additive, scaling=scale)
    return out.transpose(1, 2), weights  # the peer returns (B, T, H, Dv)


def _inputs(T, S, *, seed=0, B=2, H=3, D=8, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, n, D, generator=g, dtype=torch.float64) for n in (T, S, S))
    sinks = torch.randn(H, generator=g, dtype=torch.float64) * 2
    for x in (q, k, v, sinks):
        x.requires_grad_(requires_grad)
    return q, k, v, sinks


@pytest.mark.parametrize("T, S", [(6, 6), (3, 9), (9, 4)], ids=["T=S", "T<S", "T>S"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_sinks_equal_gpt_oss_eager_attention_with_their_gradients(T, S, causal) -> None:
    q, k, v, sinks = _inputs(T, S, requires_grad=True)
    allowed = causal_mask(T, S) if causal else torch.ones(T, S, dtype=torch.bool)
    allowed = allowed & padding_mask(torch.tensor([S, S - 1]), S)[:, None, None, :]  # (B, 1, T, S)
    scale = 1 / math.sqrt(q.shape[-1])
    ours = scaled_dot_product_attention(q, k, v, allowed, sinks=sinks)
    theirs, their_weights = _peer(q, k, v, allowed, sinks, scale)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(attention_weights(q, k, allowed, sinks=sinks), their_weights)
    seed = torch.randn(ours.shape, generator=torch.Generator().manual_seed(1), dtype=ours.dtype)
    grads = torch.autograd.grad((ours * seed).sum(), (q, k, v, sinks))
    peer_grads = torch.autograd.grad((theirs * seed).sum(), (q, k, v, sinks))
    for name, a, b in zip("q k v sinks".split(), grads, peer_grads):
        torch.testing.assert_close(a, b, msg=lambda m, name=name: f"d{name}: {m}")
    if causal and T > S:  # the first T - S queries see no key: all their weight is on the sink
        assert (ours[:, :, : T - S] == 0).all()


def test_a_query_that_sees_nothing_returns_zeros_and_finite_gradients() -> None:
    q, k, v, sinks = _inputs(4, 5, requires_grad=True)
    allowed = torch.ones(4, 5, dtype=torch.bool)
    allowed[1] = False  # query 1 sees no key
    out = scaled_dot_product_attention(q, k, v, allowed, sinks=sinks)
    assert (out[:, :, 1] == 0).all() and torch.isfinite(out).all()
    out.sum().backward()
    assert all(torch.isfinite(x.grad).all() for x in (q, k, v, sinks))


def test_the_weights_leave_the_sinks_share_and_a_very_negative_sink_is_no_sink() -> None:
    q, k, v, sinks = _inputs(5, 7)
    weights = attention_weights(q, k, sinks=sinks)  # (B, H, T, S)
    scores = q @ k.mT / math.sqrt(q.shape[-1])  # (B, H, T, S)
    p_sink = torch.exp(
        sinks[:, None] - torch.logsumexp(torch.cat([scores, sinks[:, None, None].expand(2, 3, 5, 1)], -1), -1)
    )
    torch.testing.assert_close(weights.sum(-1), 1 - p_sink)  # each row gives the sink its share
    assert (weights.sum(-1) < 1).all()
    gone = torch.full_like(sinks, -1e4)  # exp(-1e4) underflows to 0: the plain softmax
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, sinks=gone), scaled_dot_product_attention(q, k, v)
    )
    raised = scaled_dot_product_attention(q, k, v, sinks=sinks + 3)  # a larger sink reads less of every value
    assert raised.norm(dim=-1).mean() < scaled_dot_product_attention(q, k, v, sinks=sinks).norm(dim=-1).mean()


def test_sinks_in_half_precision_and_with_one_key_value_head_for_all() -> None:
    q, k, v, sinks = _inputs(4, 6)
    one_k, one_v = k[:, :1], v[:, :1]  # (B, 1, S, D): one key/value head shared by every query head
    mask = padding_mask(torch.tensor([6, 3]), 6)[:, None, None, :]  # (B, 1, 1, S)
    ref = scaled_dot_product_attention(q, one_k, one_v, mask, sinks=sinks)
    half = scaled_dot_product_attention(q.half(), one_k.half(), one_v.half(), mask, sinks=sinks.half())
    assert half.dtype == torch.float16
    torch.testing.assert_close(half.double(), ref, rtol=0, atol=5e-3)


@pytest.mark.parametrize(
    "sinks, q_shape, message",
    [
        (
            torch.zeros(4),
            (2, 3, 5, 8),
            r"sinks: expected shape \(H,\) = \(3,\), one logit per head, got \(4,\)",
        ),
        (torch.zeros(3, 1), (2, 3, 5, 8), r"got \(3, 1\)"),
        (torch.zeros(3, dtype=torch.long), (2, 3, 5, 8), "sinks"),
        ([0.0, 0.0, 0.0], (2, 3, 5, 8), "sinks: expected a torch.Tensor"),
        (torch.zeros(1), (5, 8), r"sinks: one logit per head needs q of shape \(\.\.\., H, T, D\)"),
    ],
    ids=["wrong H", "2-D", "integer", "a list", "no head dim"],
)
def test_bad_sinks_are_named_with_the_expected_shape(sinks, q_shape, message) -> None:
    q = torch.randn(q_shape)
    with pytest.raises((ValueError, TypeError), match=message):
        scaled_dot_product_attention(q, q, q, sinks=sinks)


@pytest.mark.parametrize("T, S", [(6, 6), (3, 9), (9, 4)], ids=["T=S", "T<S", "T>S"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_tiled_attention_with_sinks_equals_the_reference_forward_and_every_gradient(T, S, causal) -> None:
    q, k, v, sinks = _inputs(T, S, requires_grad=True)
    mask = padding_mask(torch.tensor([S, S - 2]), S)[:, None, None, :]  # (B, 1, 1, S)
    ref = scaled_dot_product_attention(q, k, v, mask, is_causal=causal, sinks=sinks)
    out = tiled_attention(q, k, v, mask, is_causal=causal, sinks=sinks, block_q=2, block_k=3)
    close = {"rtol": 1e-5, "atol": 1e-6}  # the tiles accumulate in float32, the reference in float64
    torch.testing.assert_close(out, ref, **close)
    seed = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1), dtype=ref.dtype)
    expected = torch.autograd.grad((ref * seed).sum(), (q, k, v, sinks))
    got = torch.autograd.grad((out * seed).sum(), (q, k, v, sinks))
    for name, a, b in zip("q k v sinks".split(), got, expected):
        torch.testing.assert_close(a, b, **close, msg=lambda m, name=name: f"d{name}: {m}")


def test_the_tiled_log_sum_exp_includes_the_sink() -> None:
    q, k, v, sinks = _inputs(5, 7)
    _, lse = tiled_attention_forward(q, k, v, sinks=sinks, block_q=2, block_k=2)
    scores = q @ k.mT / math.sqrt(q.shape[-1])  # (B, H, T, S)
    with_sink = torch.cat([scores, sinks[:, None, None].expand(*scores.shape[:-1], 1)], dim=-1)
    torch.testing.assert_close(lse, torch.logsumexp(with_sink, dim=-1).float())
    empty = torch.zeros(5, 7, dtype=torch.bool)  # no key visible: lse is the sink itself
    _, lse = tiled_attention_forward(q, k, v, mask=empty, sinks=sinks)
    torch.testing.assert_close(lse, sinks[:, None].float().expand_as(lse))


def test_split_kv_decoding_takes_the_sink_as_one_more_split() -> None:
    q, k, v, sinks = _inputs(1, 50)  # one new token against a cache of 50
    q, k, v, sinks = q.float(), k.float(), v.float(), sinks.float()
    ref = scaled_dot_product_attention(q, k, v, sinks=sinks)
    torch.testing.assert_close(split_kv_attention(q, k, v, num_splits=4, sinks=sinks), ref)
    assert not torch.allclose(split_kv_attention(q, k, v, num_splits=4), ref, atol=1e-3)  # the sink matters
