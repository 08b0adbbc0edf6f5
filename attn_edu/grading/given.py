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


def tiny_language_model(vocab_size: int, seed: int) -> nn.Module:
    """A seeded, untrained one-layer GPT small enough to train in a fraction of a second on one CPU thread.

    Width 32, two heads, an FFN of 64, sequences of up to 16 tokens; the same ``(vocab_size, seed)`` always
    gives the same weights, in any process. The caller's random state is left as it was. It returns the
    logits ``(B, T, V)`` of ids ``(B, T)``; ``model.parameters()`` are what an optimizer trains.

    Example:
        >>> model = tiny_language_model(20, seed=0)
        >>> model(torch.zeros(2, 5, dtype=torch.long)).shape
        torch.Size([2, 5, 20])
        >>> torch.equal(next(tiny_language_model(20, seed=0).parameters()), next(model.parameters()))
        True
    """
    from attn_edu.models import GPT, GPTConfig

    check_positive_int("vocab_size", vocab_size)
    config = GPTConfig(
        vocab_size=vocab_size, max_seq_len=16, embed_dim=32, num_layers=1, num_heads=2, ffn_dim=64
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT(config)
    _GIVEN.update(model.modules())
    return model


def _codes(code: CodeType) -> Iterator[CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _codes(const)


# The code objects of this file's functions: a call made from one of them is the given part at work.
GIVEN_CODE = frozenset(
    c for fn in (toy_sublayers, tiny_language_model, is_given) for c in _codes(fn.__code__)
)


# ---------------------------------------------------------------------------------------------------------
# Notebook 10: a tiny language model whose every call a decoding loop makes is on record (10.6, 10.11)

# (start_pos, T) of every call of a TinyLM, in order: what a generation loop fed the model (read by
# attn_edu.grading.algorithms for 10.11, which clears it before each call of the learner's function).
DECODER_CALLS: list[tuple[int, int]] = []
TINY_LM_VOCAB = 29  # token ids 0 .. 28
TINY_LM_MAX_LEN = 512  # rows of its position table: start_pos + T must stay within it
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class TinyLM(nn.Module):
    """A seeded GPT-2-style decoder (attn_edu.models.GPT) called the way a decoding loop calls a model.

    ``model(ids, cache, start_pos)`` returns the logits ``(B, T, V)`` of the tokens ``ids (B, T)``, which sit
    at positions ``start_pos .. start_pos + T - 1``; with ``cache`` (from :meth:`new_cache`) their keys and
    values are appended to it and the tokens attend to everything stored there before them. ``cache=None``
    runs the tokens alone (a whole sequence, ``start_pos=0``). The model does not check ``start_pos``
    against the cache, as Meta's Llama reference does not: a wrong one silently moves the tokens.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.vocab_size = TINY_LM_VOCAB

    def new_cache(self) -> Any:
        """An empty KV cache with one layer per block of the model."""
        from attn_edu.kv_cache import KVCache

        return KVCache(len(self.model.blocks))

    def forward(self, ids: torch.Tensor, cache: Any = None, start_pos: int = 0) -> torch.Tensor:
        if isinstance(start_pos, bool) or not isinstance(start_pos, int) or start_pos < 0:
            raise ValueError(
                f"start_pos: expected an int >= 0 (the position of ids[:, 0]), got {start_pos!r}"
            )
        if not isinstance(ids, torch.Tensor) or ids.ndim != 2 or ids.is_floating_point():
            shown = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
            raise ValueError(f"ids: expected integer token ids of shape (B, T), got {shown}")
        B, T = ids.shape
        if start_pos + T > TINY_LM_MAX_LEN:
            raise ValueError(f"start_pos: positions {start_pos} .. {start_pos + T - 1} pass the model's "
                             f"{TINY_LM_MAX_LEN} positions")  # fmt: skip
        DECODER_CALLS.append((start_pos, T))
        m = self.model
        x = m.token_embedding(ids) + m.position_embedding(T, offset=start_pos)  # (B, T, C)
        layers = [None] * len(m.blocks) if cache is None else cache.layers
        for block, layer in zip(m.blocks, layers):
            x = block(x, kv_cache=layer)  # (B, T, C)
        return m.lm_head(m.final_norm(x))  # (B, T, V)


def tiny_lm(
    seed: int, *, num_layers: int = 2, num_heads: int = 2, head_dim: int = 8, dtype: str = "float32"
) -> TinyLM:
    """A tiny seeded decoder for the decoding exercises: the same arguments give the same weights in any
    process, in ``dtype`` (``"float32"`` or ``"bfloat16"``). Its weights are drawn large (N(0, 0.5²)), so that
    its greedy choices are clear-cut and depend on every token and position it reads.

    Example:
        >>> model = tiny_lm(0)
        >>> cache = model.new_cache()
        >>> logits = model(torch.tensor([[3, 1, 4]]), cache, 0)  # the prompt at positions 0, 1, 2
        >>> step = model(torch.tensor([[1]]), cache, 3)  # one more token, at position 3
        >>> torch.allclose(step[:, -1], model(torch.tensor([[3, 1, 4, 1]]))[:, -1], atol=1e-5)
        True
    """
    from attn_edu.models import GPT, GPTConfig

    for name, value in (("num_layers", num_layers), ("num_heads", num_heads), ("head_dim", head_dim)):
        check_positive_int(name, value)
    if dtype not in _DTYPES:
        raise ValueError(f"dtype: expected one of {sorted(_DTYPES)}, got {dtype!r}")
    C = num_heads * head_dim
    config = GPTConfig(TINY_LM_VOCAB, TINY_LM_MAX_LEN, C, num_layers, num_heads, 4 * C)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT(config)
        with torch.no_grad():
            for parameter in model.parameters():
                if parameter.ndim == 2:  # every matrix and table; norms keep gain 1 and bias 0
                    parameter.normal_(0.0, 0.5)
    lm = TinyLM(model.to(_DTYPES[dtype]).eval().requires_grad_(False))  # decoding needs no gradients
    _GIVEN.add(lm)
    return lm


GIVEN_CODE = GIVEN_CODE | frozenset(
    c for fn in (tiny_lm, TinyLM.forward, TinyLM.new_cache, TinyLM.__init__) for c in _codes(fn.__code__)
)
