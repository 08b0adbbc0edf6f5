"""What an exercise hands the learner: helpers a learner's function may call, kept apart from the answer key.

The grading command runs a learner's notebook where :mod:`attn_edu.grading.checks` and
:mod:`attn_edu.grading.questions` (the references, the case generators, the answers) cannot be imported, so what a
notebook is told to import lives here. Calls into this module are never counted as a shortcut: it holds no
answer, only the given parts an exercise is built around.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from types import CodeType
from typing import Any, NamedTuple

import torch
from torch import nn

from attn_edu._validate import check_positive_int
from attn_edu.blocks import FeedForward
from attn_edu.multihead import MultiHeadAttention

_GIVEN: weakref.WeakSet[Any] = weakref.WeakSet()  # the modules handed out here, and their sub-modules


def is_given(obj: object) -> bool:
    """True for a module this file handed out: a learner's function may call it (``attn(x)``) as intended."""
    try:
        return obj in _GIVEN
    except TypeError:  # not weakly referenceable, or unhashable: not one of ours
        return False


class Sublayers(NamedTuple):
    """The four parts a block is assembled from (unpack as ``attn, ffn, attn_norm, ffn_norm``)."""

    attn: MultiHeadAttention  # self-attention, called as attn(x)
    ffn: FeedForward  # position-wise FFN, called as ffn(x)
    attn_norm: nn.LayerNorm  # the norm that belongs to the attention sub-layer
    ffn_norm: nn.LayerNorm  # the norm that belongs to the FFN sub-layer


def toy_sublayers(dim: int, num_heads: int, seed: int) -> Sublayers:
    """Small, seeded sub-layers for one block: multi-head attention, a GELU FFN and two LayerNorms.

    The same ``(dim, num_heads, seed)`` always gives the same weights, in any process. The norms get
    random gains and biases (not PyTorch's 1 and 0), different for the two norms, so a norm used in the
    wrong place changes the output. The caller's random state is left as it was.

    Example:
        >>> attn, ffn, attn_norm, ffn_norm = toy_sublayers(12, 3, seed=0)
        >>> x = torch.randn(2, 5, 12)
        >>> (x + attn(attn_norm(x))).shape
        torch.Size([2, 5, 12])
        >>> torch.equal(toy_sublayers(12, 3, seed=0).ffn_norm.bias, ffn_norm.bias)
        True
    """
    check_positive_int("dim", dim)
    check_positive_int("num_heads", num_heads)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        attn = MultiHeadAttention(dim, num_heads)
        ffn = FeedForward(dim, 3 * dim, activation="gelu")
        norms = [nn.LayerNorm(dim), nn.LayerNorm(dim)]
        with torch.no_grad():
            for norm in norms:
                norm.weight.copy_(1.0 + 0.5 * torch.randn(dim))
                norm.bias.copy_(0.5 * torch.randn(dim))
    parts = Sublayers(attn, ffn, *norms)
    for part in parts:
        _GIVEN.update(part.modules())
    return parts


def _codes(code: CodeType) -> Iterator[CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _codes(const)


# The code objects of this file's functions: a call made from one of them is the given part at work.
GIVEN_CODE = frozenset(c for fn in (toy_sublayers, is_given) for c in _codes(fn.__code__))
