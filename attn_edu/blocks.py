"""Transformer blocks: attention and a feed-forward network, each wrapped in a residual and a norm.

    x = x + Attention(Norm(x))        pre-norm  (GPT-2, Llama, T5; Xiong et al., 2020)
    x = x + FFN(Norm(x))

    x = Norm(x + Attention(x))        post-norm (the original Transformer, BERT;
    x = Norm(x + FFN(x))                         Vaswani et al., 2017, section 3.1: "LayerNorm(x + Sublayer(x))")

The pieces come first (norm statistics, :class:`RMSNorm`, the feed-forward variants), then the blocks.
Blocks do not build their parts: pass the attention, the FFN and the norms in, so one block class
serves GPT-2 (LayerNorm + GELU) and Llama (RMSNorm + SwiGLU) alike. ``residual=False`` removes the
skip connections (for the gradient-flow experiment of notebook 08, :func:`first_block_grad_norm`); it is a
plain flag rather than four more classes because nothing else changes.

The Annotated Transformer (Rush, 2018) quotes the paper's post-norm ``LayerNorm(x + Sublayer(x))``
in its prose, but its ``SublayerConnection`` computes ``x + Sublayer(LayerNorm(x))``: pre-norm, noted
only in a one-line code comment. It trains more easily that way, but it is not the paper's model;
here the two are separate classes.

Shapes:
    every block maps x ``(B, T, C)`` to ``(B, T, C)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from attn_edu._validate import check_floating, check_positive_int, check_shape
from attn_edu.multihead import MultiHeadAttention, SupportsKVCache

# ---------------------------------------------------------------------------------------------------
# Normalisation: which numbers share a mean and a variance
# ---------------------------------------------------------------------------------------------------


def batch_norm_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and (biased) variance per *channel*, over every token of every sequence in the batch.

    BatchNorm (Ioffe & Szegedy, 2015) normalises with these. For text they mix tokens of unrelated
    sentences and padding, change with the batch, and need running averages at inference: the
    reasons Transformers use LayerNorm instead.

    Shapes:
        x ``(B, T, C)``; returns mean and var ``(C,)``.

    Example:
        >>> x = torch.tensor([[[1.0, 10.0], [3.0, 30.0]]])      # B=1, T=2, C=2
        >>> batch_norm_stats(x)
        (tensor([ 2., 20.]), tensor([  1., 100.]))
    """
    check_floating("x", x)
    check_shape("x", x, "B T C")
    return x.mean(dim=(0, 1)), x.var(dim=(0, 1), unbiased=False)  # (C,), (C,)


def layer_norm_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and (biased) variance per *token*, over its own ``C`` channels (Ba et al., 2016).

    Each token is normalised on its own: the result does not depend on the batch, the sequence
    length or padding, and training and inference compute the same thing.

    Shapes:
        x ``(B, T, C)``; returns mean and var ``(B, T, 1)``.

    Example:
        >>> x = torch.tensor([[[1.0, 3.0], [10.0, 30.0]]])
        >>> mean, var = layer_norm_stats(x)
        >>> mean.flatten(), var.flatten()
        (tensor([ 2., 20.]), tensor([  1., 100.]))
    """
    check_floating("x", x)
    check_shape("x", x, "B T C")
    return x.mean(dim=-1, keepdim=True), x.var(dim=-1, keepdim=True, unbiased=False)  # (B, T, 1) each


class RMSNorm(nn.Module):
    """Root-mean-square norm: rescale each token to unit RMS, with no mean subtraction and no bias.

        RMSNorm(x) = x / sqrt(mean(x²) + eps) · g                 (Zhang & Sennrich, 2019, §3)

    Cheaper than LayerNorm and as good in practice; used by T5 (which calls it "T5LayerNorm") and
    Llama. The statistic is computed in float32 even for half-precision input. ``zero_centred=True``
    stores ``w = g - 1`` (starting at 0) and scales by ``1 + w`` in float32 (Qwen3-Next): weight decay
    then pulls each gain towards 1, not 0, so the gains cannot grow unchecked.

    Shapes:
        x ``(..., C)``; returns ``(..., C)``.

    Example:
        >>> norm = RMSNorm(2)
        >>> norm(torch.tensor([[3.0, 4.0]])).detach()       # RMS of (3, 4) is sqrt(12.5)
        tensor([[0.8485, 1.1314]])
    """

    def __init__(self, dim: int, eps: float = 1e-6, *, zero_centred: bool = False) -> None:
        super().__init__()
        self.dim, self.eps, self.zero_centred = check_positive_int("dim", dim), eps, zero_centred
        self.weight = nn.Parameter(torch.full((dim,), 0.0 if zero_centred else 1.0))  # g, or w = g - 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_floating("x", x)
        check_shape("x", x, "... C", C=self.dim)
        mean_square = x.float().pow(2).mean(dim=-1, keepdim=True)  # (..., 1)
        normed = x.float() * torch.rsqrt(mean_square + self.eps)  # (..., C)
        if self.zero_centred:
            return (normed * (1 + self.weight.float())).to(x.dtype)  # (..., C): gain 1 + w
        return normed.to(x.dtype) * self.weight  # (..., C)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}" + (", zero_centred=True" if self.zero_centred else "")


# ---------------------------------------------------------------------------------------------------
# Feed-forward networks: the same small MLP applied to every token on its own
# ---------------------------------------------------------------------------------------------------

_ACTIVATIONS = {
    "relu": nn.ReLU,  # the original Transformer, T5
    "gelu": nn.GELU,  # exact erf form (Hendrycks & Gimpel, 2016): BERT
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),  # tanh approximation: GPT-2's "gelu_new"
}


class FeedForward(nn.Module):
    """Position-wise feed-forward network: widen, apply a nonlinearity, narrow back.

        FFN(x) = act(x W_1 + b_1) W_2 + b_2                     (Vaswani et al., 2017, section 3.3)

    ``activation`` is ``"relu"`` (the paper, T5), ``"gelu"`` (BERT) or ``"gelu_tanh"`` (GPT-2).
    The hidden width is usually ``4 C``. T5 has no biases (``bias=False``).

    Shapes:
        x ``(B, T, C)``; returns ``(B, T, C)``.

    Example:
        >>> ffn = FeedForward(8, 32, activation="gelu")
        >>> ffn(torch.randn(2, 3, 8)).shape
        torch.Size([2, 3, 8])
    """

    def __init__(self, dim: int, hidden: int, activation: str = "relu", *, bias: bool = True) -> None:
        super().__init__()
        check_positive_int("dim", dim)
        check_positive_int("hidden", hidden)
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation: expected one of {sorted(_ACTIVATIONS)}, got {activation!r}")
        self.activation_name = activation
        self.up_proj = nn.Linear(dim, hidden, bias=bias)  # W_1: C -> hidden
        self.activation = _ACTIVATIONS[activation]()
        self.down_proj = nn.Linear(hidden, dim, bias=bias)  # W_2: hidden -> C

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.activation(self.up_proj(x))  # (B, T, hidden)
        return self.down_proj(h)  # (B, T, C)


class SwiGLUFeedForward(nn.Module):
    """Gated feed-forward network with a Swish (SiLU) gate: Llama's FFN.

        FFN_SwiGLU(x) = (Swish(x W) ⊙ x V) W_2              (Shazeer, 2020, "GLU Variants Improve Transformer")

    One projection (``gate_proj``, W) decides, per hidden unit, how much of the other (``up_proj``,
    V) passes. With three matrices instead of two, Llama shrinks the hidden width to about
    ``2/3 · 4 C`` to keep the parameter count of a ``4 C`` ReLU FFN. No biases, as in Llama.
    ``unit(x W, x V)`` replaces ``Swish(x W) ⊙ x V`` when given: gpt-oss's experts use
    :class:`attn_edu.moe.ClampedSwiGLU` (and biases, ``bias=True``).

    Shapes:
        x ``(B, T, C)``; returns ``(B, T, C)``.

    Example:
        >>> SwiGLUFeedForward(8, 24)(torch.randn(2, 3, 8)).shape
        torch.Size([2, 3, 8])
    """

    def __init__(
        self, dim: int, hidden: int, *, bias: bool = False, unit: Callable[..., torch.Tensor] | None = None
    ) -> None:
        super().__init__()
        check_positive_int("dim", dim)
        check_positive_int("hidden", hidden)
        if unit is not None and not callable(unit):
            raise ValueError(f"unit: expected None or a function of (gate, up), got {unit!r}")
        self.gate_proj = nn.Linear(dim, hidden, bias=bias)  # W
        self.up_proj = nn.Linear(dim, hidden, bias=bias)  # V
        self.down_proj = nn.Linear(hidden, dim, bias=bias)  # W_2
        self.unit = unit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.unit is not None:  # e.g. gpt-oss's clamped unit
            return self.down_proj(self.unit(self.gate_proj(x), self.up_proj(x)))  # (B, T, C)
        gate = nn.functional.silu(self.gate_proj(x))  # (B, T, hidden); Swish_1 = SiLU
        return self.down_proj(gate * self.up_proj(x))  # (B, T, C)

    def extra_repr(self) -> str:
        return "" if self.unit is None else f"unit={self.unit}"


# ---------------------------------------------------------------------------------------------------
# Blocks
# ---------------------------------------------------------------------------------------------------


def _add(x: torch.Tensor, h: torch.Tensor, residual: bool) -> torch.Tensor:
    """The skip connection ``x + h`` (He et al., 2016), or just ``h`` when it is switched off."""
    return x + h if residual else h


class PreNormEncoderBlock(nn.Module):
    """Encoder block, pre-norm: ``x + Attn(Norm(x))`` then ``x + FFN(Norm(x))`` (bidirectional).

    The residual path from input to output passes through no norm, so gradients reach early layers
    unchanged; this is why pre-norm trains without learning-rate warm-up (Xiong et al., 2020).
    Used by T5's encoder. A final norm after the last block is the model's job.

    Args:
        attn: a self-attention module called as ``attn(x, mask=..., score_bias=...)``, e.g.
            :class:`attn_edu.multihead.MultiHeadAttention`.
        ffn: the feed-forward module (:class:`FeedForward`, :class:`SwiGLUFeedForward`).
        attn_norm, ffn_norm: the norms in front of each sub-layer (``nn.LayerNorm`` or :class:`RMSNorm`).
        residual: keep the skip connections (``False`` only for experiments).
        dropout: dropout on each sub-layer's output before the addition (Vaswani et al., §5.4).

    Shapes:
        x ``(B, T, C)``; mask broadcastable to ``(B, H, T, T)``; returns ``(B, T, C)``.

    Example:
        >>> from attn_edu.multihead import MultiHeadAttention
        >>> block = PreNormEncoderBlock(
        ...     MultiHeadAttention(8, 2), FeedForward(8, 32), nn.LayerNorm(8), nn.LayerNorm(8))
        >>> block(torch.randn(2, 5, 8)).shape
        torch.Size([2, 5, 8])
    """

    def __init__(
        self,
        attn: nn.Module,
        ffn: nn.Module,
        attn_norm: nn.Module,
        ffn_norm: nn.Module,
        *,
        residual: bool = True,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.attn, self.ffn = attn, ffn
        self.attn_norm, self.ffn_norm = attn_norm, ffn_norm
        self.residual = residual
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, x: torch.Tensor, *, mask: torch.Tensor | None = None, score_bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        check_shape("x", x, "B T C")
        h = self.attn(self.attn_norm(x), mask=mask, score_bias=score_bias)  # (B, T, C)
        x = _add(x, self.dropout(h), self.residual)  # (B, T, C)
        h = self.ffn(self.ffn_norm(x))  # (B, T, C)
        return _add(x, self.dropout(h), self.residual)  # (B, T, C)


class PostNormEncoderBlock(nn.Module):
    """Encoder block, post-norm: ``Norm(x + Attn(x))`` then ``Norm(x + FFN(x))`` (bidirectional).

    The original Transformer (Vaswani et al., 2017, §3.1) and BERT. Every residual sum is
    normalised, so the output scale stays fixed however deep the stack, but gradients to early
    layers pass through every norm; deep post-norm stacks need learning-rate warm-up (Xiong et al.,
    2020). Note the Annotated Transformer's code is pre-norm despite quoting this formula.

    Arguments as :class:`PreNormEncoderBlock`; ``attn_norm`` and ``ffn_norm`` come *after* their
    sub-layer here.

    Shapes:
        x ``(B, T, C)``; mask broadcastable to ``(B, H, T, T)``; returns ``(B, T, C)``.

    Example:
        >>> from attn_edu.multihead import MultiHeadAttention
        >>> block = PostNormEncoderBlock(
        ...     MultiHeadAttention(8, 2), FeedForward(8, 32), nn.LayerNorm(8), nn.LayerNorm(8))
        >>> y = block(torch.randn(2, 5, 8))
        >>> torch.allclose(y.mean(-1), torch.zeros(2, 5), atol=1e-5)   # LayerNorm last: zero mean
        True
    """

    def __init__(
        self,
        attn: nn.Module,
        ffn: nn.Module,
        attn_norm: nn.Module,
        ffn_norm: nn.Module,
        *,
        residual: bool = True,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.attn, self.ffn = attn, ffn
        self.attn_norm, self.ffn_norm = attn_norm, ffn_norm
        self.residual = residual
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, x: torch.Tensor, *, mask: torch.Tensor | None = None, score_bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        check_shape("x", x, "B T C")
        h = self.attn(x, mask=mask, score_bias=score_bias)  # (B, T, C)
        x = self.attn_norm(_add(x, self.dropout(h), self.residual))  # (B, T, C)
        h = self.ffn(x)  # (B, T, C)
        return self.ffn_norm(_add(x, self.dropout(h), self.residual))  # (B, T, C)


class PreNormDecoderBlock(nn.Module):
    """Decoder-only block, pre-norm and causal: GPT-2 (Radford et al., 2019, §2.3) and Llama.

    As :class:`PreNormEncoderBlock`, but each token sees only itself and earlier tokens
    (``is_causal=True``, bottom-right aligned, so it stays right with a KV cache). ``kv_cache`` is
    one layer's cache (:class:`attn_edu.kv_cache.KVCacheLayer`); ``mask`` may add e.g. padding.
    ``ffn`` may be a mixture of experts (:class:`attn_edu.moe.MoEFeedForward`, gpt-oss), which returns
    ``(out, routing_stats)``: the block adds ``out`` and leaves the statistics (call the layer itself to
    read them).

    Shapes:
        x ``(B, T, C)``; mask broadcastable to ``(B, H, T, S)`` with ``S`` = cached + new tokens;
        returns ``(B, T, C)``.

    Example:
        >>> from attn_edu.multihead import MultiHeadAttention
        >>> block = PreNormDecoderBlock(
        ...     MultiHeadAttention(8, 2), FeedForward(8, 32), nn.LayerNorm(8), nn.LayerNorm(8))
        >>> x = torch.randn(1, 5, 8)
        >>> torch.allclose(block(x)[:, :3], block(x[:, :3]), atol=1e-6)   # the future does not leak
        True
    """

    def __init__(
        self,
        attn: nn.Module,
        ffn: nn.Module,
        attn_norm: nn.Module,
        ffn_norm: nn.Module,
        *,
        residual: bool = True,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.attn, self.ffn = attn, ffn
        self.attn_norm, self.ffn_norm = attn_norm, ffn_norm
        self.residual = residual
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        score_bias: torch.Tensor | None = None,
        kv_cache: SupportsKVCache | None = None,
    ) -> torch.Tensor:
        check_shape("x", x, "B T C")
        h = self.attn(
            self.attn_norm(x), mask=mask, is_causal=True, score_bias=score_bias, kv_cache=kv_cache
        )  # (B, T, C)
        x = _add(x, self.dropout(h), self.residual)  # (B, T, C)
        h = self.ffn(self.ffn_norm(x))  # (B, T, C), or (that, RoutingStats) from a mixture of experts
        if isinstance(h, tuple):
            h = h[0]  # (B, T, C)
        return _add(x, self.dropout(h), self.residual)  # (B, T, C)


class PostNormDecoderBlock(nn.Module):
    """Decoder-only block, post-norm and causal: GPT-1 (Radford et al., 2018), which kept the
    original Transformer's ``Norm(x + Sublayer(x))``.

    Arguments and shapes as :class:`PreNormDecoderBlock`; the norms come after each sum.

    Example:
        >>> from attn_edu.multihead import MultiHeadAttention
        >>> block = PostNormDecoderBlock(
        ...     MultiHeadAttention(8, 2), FeedForward(8, 32), nn.LayerNorm(8), nn.LayerNorm(8))
        >>> block(torch.randn(2, 5, 8)).shape
        torch.Size([2, 5, 8])
    """

    def __init__(
        self,
        attn: nn.Module,
        ffn: nn.Module,
        attn_norm: nn.Module,
        ffn_norm: nn.Module,
        *,
        residual: bool = True,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.attn, self.ffn = attn, ffn
        self.attn_norm, self.ffn_norm = attn_norm, ffn_norm
        self.residual = residual
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        score_bias: torch.Tensor | None = None,
        kv_cache: SupportsKVCache | None = None,
    ) -> torch.Tensor:
        check_shape("x", x, "B T C")
        h = self.attn(x, mask=mask, is_causal=True, score_bias=score_bias, kv_cache=kv_cache)  # (B, T, C)
        x = self.attn_norm(_add(x, self.dropout(h), self.residual))  # (B, T, C)
        h = self.ffn(x)  # (B, T, C)
        return self.ffn_norm(_add(x, self.dropout(h), self.residual))  # (B, T, C)


class CrossAttentionBlock(nn.Module):
    """Encoder-decoder block, pre-norm: causal self-attention, cross-attention to the encoder, FFN.

        x = x + SelfAttn(Norm(x))                  causal, over the decoder's own tokens
        x = x + CrossAttn(Norm(x), memory)         queries from the decoder, keys/values from the encoder
        x = x + FFN(Norm(x))

    The three sub-layers of the Transformer decoder (Vaswani et al., 2017, §3.1), with T5's pre-norm
    placement (Raffel et al., 2020, §3.1). ``memory_kv`` is the encoder output's keys and values,
    ``block.cross_attn.project_kv(memory)``: the encoder output stays the same while the decoder writes
    and only the queries change, so it is projected once per input (:meth:`attn_edu.models.T5.decode`
    keeps it in the cache) and never again inside the block. ``memory_mask`` hides padded encoder
    positions; ``score_bias`` (T5's relative bias) applies to self-attention only, as in T5.
    ``kv_cache`` caches the self-attention.

    Shapes:
        x ``(B, T, C)``, memory_kv ``(B, H_kv, S, D)`` each; mask broadcastable to ``(B, H, T, T)``,
        memory_mask to ``(B, H, T, S)``; returns ``(B, T, C)``.

    Example:
        >>> from attn_edu.multihead import MultiHeadAttention
        >>> block = CrossAttentionBlock(MultiHeadAttention(8, 2), MultiHeadAttention(8, 2), FeedForward(8, 32),
        ...                             RMSNorm(8), RMSNorm(8), RMSNorm(8))
        >>> memory = torch.randn(2, 7, 8)                          # the encoder output (B, S, C)
        >>> block(torch.randn(2, 3, 8), block.cross_attn.project_kv(memory)).shape
        torch.Size([2, 3, 8])
    """

    def __init__(
        self,
        self_attn: nn.Module,
        cross_attn: nn.Module,
        ffn: nn.Module,
        self_attn_norm: nn.Module,
        cross_attn_norm: nn.Module,
        ffn_norm: nn.Module,
        *,
        residual: bool = True,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.self_attn, self.cross_attn, self.ffn = self_attn, cross_attn, ffn
        self.self_attn_norm, self.cross_attn_norm, self.ffn_norm = self_attn_norm, cross_attn_norm, ffn_norm
        self.residual = residual
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        x: torch.Tensor,
        memory_kv: tuple[torch.Tensor, torch.Tensor],
        *,
        mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        score_bias: torch.Tensor | None = None,
        kv_cache: SupportsKVCache | None = None,
    ) -> torch.Tensor:
        check_shape("x", x, "B T C")
        if not (isinstance(memory_kv, (tuple, list)) and len(memory_kv) == 2):
            got = (
                f"a tensor of shape {tuple(memory_kv.shape)}"
                if torch.is_tensor(memory_kv)
                else type(memory_kv).__name__
            )
            raise TypeError(
                "memory_kv: expected the encoder output's (k, v), as block.cross_attn.project_kv(memory) "
                f"returns them, got {got}"
            )
        h = self.self_attn(
            self.self_attn_norm(x), mask=mask, is_causal=True, score_bias=score_bias, kv_cache=kv_cache
        )  # (B, T, C)
        x = _add(x, self.dropout(h), self.residual)  # (B, T, C)
        # Queries from the decoder; K and V of the encoder output, projected once by the caller
        h = self.cross_attn.attend(self.cross_attn_norm(x), *memory_kv, mask=memory_mask)  # (B, T, C)
        x = _add(x, self.dropout(h), self.residual)  # (B, T, C)
        h = self.ffn(self.ffn_norm(x))  # (B, T, C)
        return _add(x, self.dropout(h), self.residual)  # (B, T, C)


def first_block_grad_norm(
    depth: int,
    *,
    residual: bool = True,
    norm: bool = True,
    gain: float = 1.0,
    dim: int = 32,
    heads: int = 4,
    seed: int = 0,
) -> float:
    """How much gradient reaches the first of ``depth`` stacked blocks: the norm of its parameters' gradient.

    Builds ``depth`` :class:`PreNormEncoderBlock` (attention with ``heads`` heads, a GELU :class:`FeedForward`
    of width ``4 * dim``, LayerNorms, or ``nn.Identity`` with ``norm=False``; skips unless ``residual=False``)
    from seed ``seed``, multiplies every ``nn.Linear`` weight by ``gain`` (``gain > 1``: weights larger than
    PyTorch's default), sends one random batch ``x`` ``(4, 16, dim)`` through, and back-propagates the loss
    ``<stack(x), g>`` for a fixed random ``g`` of the output's shape. Everything is in float64: the gradient
    is a product of one Jacobian per block, and a long product is sensitive to rounding. The same ``seed``
    gives the same ``x`` and ``g`` at every depth, and the same first blocks; the blocks are built after
    ``torch.manual_seed(seed)``, so the call also reseeds torch's global generator.

    Without skips the gradient to block 1 is the product ``J_N ... J_2`` times block 1's own Jacobian, and
    shrinks or grows geometrically with ``depth``; a skip turns each factor into ``I + J_i`` (He et al.,
    2016), whose identity carries the gradient down whatever the ``J_i`` do.

    Example:
        >>> shallow = first_block_grad_norm(1, residual=False, norm=False)
        >>> deep = first_block_grad_norm(8, residual=False, norm=False)
        >>> deep / shallow < 1e-6                          # a plain stack: the gradient vanishes
        True
        >>> 0.5 < first_block_grad_norm(8) / first_block_grad_norm(1) < 2   # with skips it stays put
        True
    """
    for name, value in (("depth", depth), ("dim", dim), ("heads", heads)):
        check_positive_int(name, value)
    if not (isinstance(gain, (int, float)) and math.isfinite(gain) and gain > 0):
        raise ValueError(f"gain: expected a finite number > 0, got {gain!r}")
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 16, dim, generator=generator).double()  # (B, T, C) the same input at every depth
    # (B, T, C) the gradient sent into the top of the stack
    upstream = torch.randn(4, 16, dim, generator=generator).double()
    torch.manual_seed(seed)
    make_norm = (lambda: nn.LayerNorm(dim)) if norm else nn.Identity
    stack = nn.Sequential(
        *(
            PreNormEncoderBlock(
                MultiHeadAttention(dim, heads),
                FeedForward(dim, 4 * dim, activation="gelu"),
                make_norm(),
                make_norm(),
                residual=residual,
            )
            for _ in range(depth)
        )
    ).double()
    with torch.no_grad():
        for layer in stack.modules():
            if isinstance(layer, nn.Linear):
                layer.weight.mul_(gain)
    (stack(x) * upstream).sum().backward()  # d<stack(x), g>/d(output) = g
    return torch.cat([p.grad.flatten() for p in stack[0].parameters()]).norm().item()


def block_flops(seq_len: int, dim: int, hidden: int) -> dict[str, int]:
    """FLOPs of one block's matrix products on one sequence, split by how they grow with its length.

        attention_core   4 T² C                 scores q kᵀ (2 T² C) and the weighted sum P v (2 T² C)
        per_token        8 T C² + 4 T C F       q, k, v, out projections (4 · 2 T C²); FFN up and down (2 · 2 T C F)

    A multiply-add counts as 2 FLOPs, as :class:`torch.utils.flop_counter.FlopCounterMode` counts them; norms,
    softmax, the activation and biases (``O(T C)`` each) are left out. The per-token terms are what any layer
    that transforms tokens one by one pays too (an RNN of width ``C``: ``4 T C²``); only ``attention_core``
    grows as ``T²``, and it costs more than the rest only once ``T > 2 C + F`` (GPT-2 small: 4,608 tokens).
    ``F`` is the hidden width of a two-matrix FFN (:class:`FeedForward`).

    Example:
        >>> block_flops(1024, 768, 3072)                 # GPT-2 small at its full context
        {'attention_core': 3221225472, 'per_token': 14495514624}
    """
    T, C, F = (check_positive_int(n, v) for n, v in (("seq_len", seq_len), ("dim", dim), ("hidden", hidden)))
    return {"attention_core": 4 * T * T * C, "per_token": 8 * T * C * C + 4 * T * C * F}


def init_normal_(module: nn.Module, std: float = 0.02) -> nn.Module:
    """GPT-2-style initialisation: every ``Linear`` and ``Embedding`` weight from ``N(0, std²)``, biases 0.

    PyTorch's default ``nn.Embedding`` init is ``N(0, 1)``, far larger than the ``0.02`` that GPT-2
    and BERT use (Radford et al., 2019; Devlin et al., 2019); with tied input/output embeddings
    that makes the first logits huge. Norm gains stay 1. Works on the ``meta`` device too.

    Example:
        >>> layer = init_normal_(nn.Linear(1000, 1000))
        >>> round(float(layer.weight.detach().std()), 2), float(layer.bias.detach().abs().max())
        (0.02, 0.0)
    """
    if not (isinstance(std, (int, float)) and math.isfinite(std) and std > 0):
        raise ValueError(f"std: expected a finite number > 0, got {std!r}")
    for sub in module.modules():
        if isinstance(sub, (nn.Linear, nn.Embedding)):
            nn.init.normal_(sub.weight, mean=0.0, std=std)
        if isinstance(sub, nn.Linear) and sub.bias is not None:
            nn.init.zeros_(sub.bias)
    return module
