"""An attention-only transformer: embeddings, a few attention layers with residuals, an unembedding.

    x_0 = token_embedding(ids) + position_embedding(positions)
    x_l = x_{l-1} + Attention_l(x_{l-1})            l = 1 .. num_layers (causal, no MLP, no norm)
    logits = unembed(x_L)

With no MLPs and no normalisation the model's output is a sum of paths through the heads, which is
what makes it readable (Elhage et al., 2021, "A Mathematical Framework for Transformer Circuits",
section 2). Two layers are the smallest model that can form induction heads: a layer-1 head moves
"previous token" information, and a layer-2 head uses it (Olsson et al., 2022).

``forward(..., need_weights=True)`` also returns each layer's attention weights; ``head_mask``
scales each head's output (0 ablates it) as in :func:`attn_edu.interp.gate_heads`.

Shapes:
    input_ids ``(B, T)``; logits ``(B, T, V)``; weights: a list of ``num_layers`` tensors ``(B, H, T, S)``.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from attn_edu._validate import check_positive_int, check_shape, check_token_ids
from attn_edu.interp import gate_heads
from attn_edu.multihead import MultiHeadAttention
from attn_edu.positional import LearnedPositionalEmbedding

if TYPE_CHECKING:
    from attn_edu.kv_cache import KVCache


@dataclass(frozen=True)
class AttentionOnlyConfig:
    """Sizes of an attention-only transformer; the defaults form induction heads in a few seconds."""

    vocab_size: int = 64  # V: distinct tokens
    max_seq_len: int = 64  # rows of the learned position table
    embed_dim: int = 64  # C: width of the residual stream
    num_heads: int = 4  # H: heads per layer; D = C / H
    num_layers: int = 2  # attention layers (two are needed for induction heads)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "max_seq_len", "embed_dim", "num_heads", "num_layers"):
            check_positive_int(name, getattr(self, name))
        if self.embed_dim % self.num_heads:
            raise ValueError(f"num_heads: must divide embed_dim={self.embed_dim}, got {self.num_heads}")


class AttentionOnlyTransformer(nn.Module):
    """A causal language model made of attention layers only (no MLP, no LayerNorm).

    Shapes:
        input_ids ``(B, T)``; returns logits ``(B, T, V)``, and with ``need_weights=True`` also a list
        of per-layer weights ``(B, H, T, S)``. ``head_mask`` ``(num_layers, H)`` multiplies each head's
        output (1 keeps, 0 ablates).

    Example:
        >>> model = AttentionOnlyTransformer(AttentionOnlyConfig(vocab_size=10, embed_dim=8, num_heads=2))
        >>> logits, weights = model(torch.tensor([[1, 2, 3]]), need_weights=True)
        >>> logits.shape, len(weights), weights[1].shape     # (B, T, V), layers, (B, H, T, S)
        (torch.Size([1, 3, 10]), 2, torch.Size([1, 2, 3, 3]))
    """

    def __init__(self, config: AttentionOnlyConfig) -> None:
        super().__init__()
        if not isinstance(config, AttentionOnlyConfig):
            raise ValueError(f"config: expected an AttentionOnlyConfig, got {type(config).__name__}")
        self.config = c = config
        self.token_embedding = nn.Embedding(c.vocab_size, c.embed_dim)
        self.position_embedding = LearnedPositionalEmbedding(c.max_seq_len, c.embed_dim)
        self.layers = nn.ModuleList(MultiHeadAttention(c.embed_dim, c.num_heads) for _ in range(c.num_layers))
        self.unembed = nn.Linear(c.embed_dim, c.vocab_size, bias=False)
        # PyTorch's default N(0, 1) embeddings, positions included (not GPT-2's N(0, 0.02²)): with no
        # LayerNorm to rescale the residual stream, small embeddings leave this model on a loss plateau
        # for ~100 steps before the induction circuit forms (measured on the repeated-sequence task).
        nn.init.normal_(self.position_embedding.embedding.weight, std=1.0)

    def forward(
        self,
        input_ids: torch.Tensor,
        *,
        need_weights: bool = False,
        head_mask: torch.Tensor | None = None,
        kv_cache: KVCache | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
        c = self.config
        B, T = check_token_ids("input_ids", input_ids, c.vocab_size).values()
        if head_mask is not None:
            check_shape("head_mask", head_mask, "L H", L=c.num_layers, H=c.num_heads)
        offset = 0 if kv_cache is None else int(kv_cache.seq_len)  # tokens already cached
        x = self.token_embedding(input_ids) + self.position_embedding(T, offset=offset)  # (B, T, C)
        weights: list[torch.Tensor] = []
        for i, attn in enumerate(self.layers):
            gate = nullcontext() if head_mask is None else gate_heads(attn, head_mask[i])
            with gate:
                out = attn(
                    x,
                    is_causal=True,
                    need_weights=need_weights,
                    kv_cache=None if kv_cache is None else kv_cache.layers[i],
                )
            if need_weights:
                out, layer_weights = out  # (B, T, C), (B, H, T, S)
                weights.append(layer_weights)
            x = x + out  # (B, T, C): each layer adds its heads' outputs to the residual stream
        logits = self.unembed(x)  # (B, T, V)
        return (logits, weights) if need_weights else logits
