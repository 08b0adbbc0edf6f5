"""A GPT-2-style decoder-only language model (Radford et al., 2019).

    x = token_embedding(ids) + position_embedding(positions)        learned absolute positions
    x = PreNormDecoderBlock(x)  × num_layers                         causal self-attention + GELU FFN
    logits = lm_head(final_norm(x))                                  lm_head tied to token_embedding

GPT-2's changes to GPT-1 (Radford et al., 2019, §2.3): LayerNorm moved to the input of each
sub-block (pre-norm) and one more LayerNorm after the last block. The output projection shares its
matrix with the token embedding ("weight tying", Press & Wolf, 2017), which saves ``V·C`` parameters.

Shapes:
    input_ids ``(B, T)``; logits ``(B, T, V)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from attn_edu._validate import check_positive_int, check_token_ids
from attn_edu.attention import scaled_dot_product_attention
from attn_edu.blocks import FeedForward, PreNormDecoderBlock, init_normal_
from attn_edu.multihead import AttentionFn, MultiHeadAttention
from attn_edu.positional import LearnedPositionalEmbedding

if TYPE_CHECKING:
    from attn_edu.kv_cache import KVCache


@dataclass(frozen=True)
class GPTConfig:
    """Sizes of a GPT-2-style model. The defaults are tiny (trains in seconds on a CPU);
    GPT-2 small is ``GPTConfig(vocab_size=50257, max_seq_len=1024, embed_dim=768, num_layers=12,
    num_heads=12, ffn_dim=3072)``."""

    vocab_size: int = 64  # V: number of distinct tokens (GPT-2: 50257 byte-pair tokens)
    max_seq_len: int = 64  # rows of the learned position table; longer inputs are refused (GPT-2: 1024)
    embed_dim: int = 64  # C: width of the residual stream (GPT-2 small: 768)
    num_layers: int = 2  # decoder blocks (GPT-2 small: 12)
    num_heads: int = 4  # H: attention heads per block; D = C / H (GPT-2: D = 64)
    ffn_dim: int = 256  # hidden width of the feed-forward network (GPT-2: 4 C)
    norm_eps: float = 1e-5  # LayerNorm epsilon (GPT-2: 1e-5)
    dropout: float = 0.0  # dropout on sub-layer outputs and embeddings (GPT-2 trained with 0.1)
    tie_embeddings: bool = True  # lm_head reuses the token embedding matrix (GPT-2: yes)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "max_seq_len", "embed_dim", "num_layers", "num_heads", "ffn_dim"):
            check_positive_int(name, getattr(self, name))
        if self.embed_dim % self.num_heads:
            raise ValueError(f"num_heads: must divide embed_dim={self.embed_dim}, got {self.num_heads}")


class GPT(nn.Module):
    """GPT-2-style causal language model: predicts token ``t + 1`` from tokens ``0 .. t``.

    ``forward(input_ids, kv_cache=...)`` accepts a :class:`attn_edu.kv_cache.KVCache`: layer ``i``
    uses ``kv_cache.layers[i]``, and the new tokens take positions ``kv_cache.seq_len ..``, so feeding
    a prompt and then one token at a time gives the same logits as one full forward pass.
    ``attention_fn`` (any ``fn(q, k, v, mask=None, *, is_causal=False, scale=None)``) is handed to every
    attention layer; the default is the reference :func:`attn_edu.attention.scaled_dot_product_attention`.

    Shapes:
        input_ids ``(B, T)`` ints in ``0 .. V-1``; returns logits ``(B, T, V)``.

    Example:
        >>> model = GPT(GPTConfig(vocab_size=10, embed_dim=16, num_heads=2, ffn_dim=32))
        >>> model(torch.tensor([[1, 2, 3]])).shape         # (B, T, V)
        torch.Size([1, 3, 10])
    """

    def __init__(
        self, config: GPTConfig, *, attention_fn: AttentionFn = scaled_dot_product_attention
    ) -> None:
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise ValueError(f"config: expected a GPTConfig, got {type(config).__name__}")
        self.config = c = config
        self.token_embedding = nn.Embedding(c.vocab_size, c.embed_dim)
        self.position_embedding = LearnedPositionalEmbedding(c.max_seq_len, c.embed_dim)
        self.embed_dropout = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(
            PreNormDecoderBlock(
                MultiHeadAttention(c.embed_dim, c.num_heads, attention_fn=attention_fn),
                FeedForward(c.embed_dim, c.ffn_dim, activation="gelu_tanh"),
                nn.LayerNorm(c.embed_dim, eps=c.norm_eps),
                nn.LayerNorm(c.embed_dim, eps=c.norm_eps),
                dropout=c.dropout,
            )
            for _ in range(c.num_layers)
        )
        self.final_norm = nn.LayerNorm(c.embed_dim, eps=c.norm_eps)
        self.lm_head = nn.Linear(c.embed_dim, c.vocab_size, bias=False)
        init_normal_(self)
        if c.tie_embeddings:
            self.lm_head.weight = self.token_embedding.weight  # one (V, C) matrix, read in and out

    def forward(self, input_ids: torch.Tensor, *, kv_cache: KVCache | None = None) -> torch.Tensor:
        B, T = check_token_ids("input_ids", input_ids, self.config.vocab_size).values()
        offset = 0 if kv_cache is None else int(kv_cache.seq_len)  # tokens already seen
        x = self.token_embedding(input_ids)  # (B, T, C)
        x = self.embed_dropout(x + self.position_embedding(T, offset=offset))  # (B, T, C)
        for i, block in enumerate(self.blocks):
            x = block(x, kv_cache=None if kv_cache is None else kv_cache.layers[i])  # (B, T, C)
        return self.lm_head(self.final_norm(x))  # (B, T, V)

    @classmethod
    def from_hf(cls, model: Any) -> GPT:
        """Build a :class:`GPT` with the weights of a Hugging Face ``GPT2LMHeadModel`` (or ``GPT2Model``).

        The name mapping lives in :func:`attn_edu.interop.gpt_from_hf`. In ``eval()`` mode both give
        the same logits.
        """
        from attn_edu.interop import gpt_from_hf

        return gpt_from_hf(model)
