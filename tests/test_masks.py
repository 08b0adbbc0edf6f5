"""Mask builders: polarity, bottom-right alignment, padding sides, composition, errors."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attn_edu import masks


@given(T=st.integers(1, 20), S=st.integers(1, 20))
def test_causal_mask_bottom_right(T: int, S: int) -> None:
    m = masks.causal_mask(T, S)
    assert m.shape == (T, S) and m.dtype == torch.bool
    for t in range(T):
        visible = m[t].nonzero().flatten().tolist()
        assert visible == list(range(max(0, min(S, S - T + t + 1))))  # keys 0 .. S-T+t


def test_causal_mask_matches_torch_lower_right() -> None:
    from torch.nn.attention.bias import causal_lower_right

    for T, S in [(3, 3), (2, 5), (4, 9)]:
        q = torch.randn(1, 1, T, 4)
        k, v = torch.randn(1, 1, S, 4), torch.randn(1, 1, S, 4)
        theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(T, S))
        ours = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=masks.causal_mask(T, S))
        torch.testing.assert_close(ours, theirs)


def test_top_left_differs_only_when_t_not_s() -> None:
    assert torch.equal(masks.causal_mask(4), masks.causal_mask_top_left(4))
    assert not torch.equal(masks.causal_mask(2, 5), masks.causal_mask_top_left(2, 5))


@given(lengths=st.lists(st.integers(0, 9), min_size=1, max_size=6), extra=st.integers(0, 3))
def test_padding_mask_counts_real_tokens(lengths: list[int], extra: int) -> None:
    max_len = max(max(lengths), 1) + extra
    right = masks.padding_mask(lengths, max_len)
    left = masks.padding_mask(lengths, max_len, side="left")
    assert right.shape == left.shape == (len(lengths), max_len)
    assert right.sum(-1).tolist() == lengths == left.sum(-1).tolist()
    assert torch.equal(left, right.flip(-1))


def test_key_and_query_key_masks() -> None:
    pad = masks.padding_mask([3, 1], 4)
    km = masks.key_mask(pad)
    assert km.shape == (2, 1, 1, 4)
    qk = masks.query_key_mask(pad, pad)
    assert qk.shape == (2, 1, 4, 4)
    assert not qk[1, 0, 1:].any()  # padded queries see nothing
    assert qk[1, 0, 0].tolist() == [True, False, False, False]


def test_combine_masks_is_logical_and() -> None:
    a = masks.causal_mask(4)
    b = masks.key_mask(masks.padding_mask([2, 4], 4))
    c = masks.combine_masks(a, None, b)
    assert c.shape == (2, 1, 4, 4)
    assert torch.equal(c, a & b)
    assert masks.combine_masks(None, None) is None


def test_conversions_for_other_conventions() -> None:
    m = masks.causal_mask(3)
    additive = masks.to_additive(m)
    assert torch.equal(additive == 0, m) and torch.isneginf(additive[~m]).all()
    assert torch.equal(masks.to_torch_polarity(m), ~m)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: masks.causal_mask(0), "T: expected a positive int"),
        (lambda: masks.causal_mask(3, -1), "S: expected a positive int"),
        (lambda: masks.padding_mask([[1, 2]], 3), r"lengths: expected a 1-D integer tensor of shape \(B,\)"),
        (lambda: masks.padding_mask([5], 3), "does not fit in max_len=3"),
        (lambda: masks.padding_mask([-1], 3), "non-negative"),
        (lambda: masks.padding_mask([1], 3, side="middle"), "side: expected 'right' or 'left'"),
        (lambda: masks.key_mask(torch.ones(2, 3, 4, dtype=torch.bool)), r"padding: expected shape \(B, S\)"),
        (lambda: masks.key_mask(torch.ones(2, 3)), "padding: expected a bool mask"),
        (
            lambda: masks.query_key_mask(
                torch.ones(2, 3, dtype=torch.bool), torch.ones(3, 3, dtype=torch.bool)
            ),
            "B=3 does not match B=2",
        ),
        (
            lambda: masks.combine_masks(
                torch.ones(2, 3, dtype=torch.bool), torch.ones(4, 3, dtype=torch.bool)
            ),
            "broadcast together",
        ),
    ],
)
def test_bad_input(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()
