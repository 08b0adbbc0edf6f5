"""A Llama-style decoder-only language model (Touvron et al., 2023).

    x = token_embedding(ids)                                   no position table: RoPE rotates q and k
    x = PreNormDecoderBlock(x)  × num_layers                   RMSNorm, GQA attention with RoPE, SwiGLU FFN
    logits = lm_head(final_norm(x))

The same skeleton as GPT-2 with the later improvements Llama collected (Touvron et al., 2023a, §2.2):
RMSNorm instead of LayerNorm (Zhang & Sennrich, 2019), SwiGLU instead of GELU (Shazeer, 2020),
rotary position embeddings instead of a learned table (Su et al., 2021; half-split layout, as in
Hugging Face), no biases anywhere; Llama 2 70B and Llama 3 add grouped-query attention
(``num_kv_heads < num_heads``; Ainslie et al., 2023). ``sliding_window=W`` makes it Mistral-like
(Jiang et al., 2023): every layer attends only to the last ``W`` positions, and
:func:`attn_edu.generation.generate` then keeps a rolling cache of ``W`` slots per layer.
``rope_scaling`` stretches RoPE past the trained context (position interpolation, NTK-aware, YaRN;
:class:`attn_edu.rope_scaling.RopeScaling`), as Hugging Face's ``rope_scaling`` does.

Shapes:
    input_ids ``(B, T)``; logits ``(B, T, V)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from attn_edu._validate import check_head_dim, check_positive_int, check_token_ids
from attn_edu.attention import scaled_dot_product_attention
from attn_edu.blocks import PreNormDecoderBlock, RMSNorm, SwiGLUFeedForward, init_normal_
from attn_edu.multihead import AttentionFn, MultiHeadAttention
from attn_edu.rope import RotaryEmbedding
from attn_edu.rope_scaling import RopeScaling

if TYPE_CHECKING:
    from attn_edu.kv_cache import KVCache


@dataclass(frozen=True)
class LlamaConfig:
    """Sizes of a Llama-style model. The defaults are tiny; Llama-2-7B is ``LlamaConfig(vocab_size=32000,
    embed_dim=4096, num_layers=32, num_heads=32, num_kv_heads=32, ffn_dim=11008)``."""

    vocab_size: int = 64  # V (Llama 2: 32000 SentencePiece tokens; Llama 3: 128256)
    embed_dim: int = 64  # C (Llama-2-7B: 4096)
    num_layers: int = 2  # decoder blocks (Llama-2-7B: 32)
    num_heads: int = 4  # H query heads; D = C / H (Llama: D = 128)
    num_kv_heads: int = 2  # H_kv key/value heads, divides H (GQA; = H is plain MHA, 1 is MQA)
    head_dim: int | None = None  # D when not C / H (Gemma-7B: 256 with C = 3072, H = 16); None = C / H
    ffn_dim: int = 176  # SwiGLU hidden width, about 2/3 · 4 C rounded up (Llama-2-7B: 11008)
    norm_eps: float = 1e-5  # RMSNorm epsilon (Llama 2: 1e-5)
    rope_base: float = 10000.0  # RoPE base θ (Llama 2: 10000; Llama 3: 500000)
    dropout: float = 0.0  # dropout on sub-layer outputs (Llama: none)
    tie_embeddings: bool = False  # lm_head reuses the token embedding (Llama: no; small Llama 3.2: yes)
    sliding_window: int | None = None  # each token sees itself and W - 1 before it (Mistral 7B: 4096)
    rope_scaling: RopeScaling | None = None  # context extension (PI, NTK-aware, YaRN); None: plain RoPE

    def __post_init__(self) -> None:
        for name in ("vocab_size", "embed_dim", "num_layers", "num_heads", "num_kv_heads", "ffn_dim"):
            check_positive_int(name, getattr(self, name))
        head_dim = check_head_dim(self.embed_dim, self.num_heads, self.head_dim)
        object.__setattr__(self, "head_dim", head_dim)  # frozen: None becomes C / H, once, here
        if self.sliding_window is not None:
            check_positive_int("sliding_window", self.sliding_window)
        if isinstance(self.rope_scaling, dict):  # as dataclasses.asdict and a JSON record store it
            object.__setattr__(self, "rope_scaling", RopeScaling(**self.rope_scaling))
        if self.rope_scaling is not None and not isinstance(self.rope_scaling, RopeScaling):
            kind = type(self.rope_scaling).__name__
            raise ValueError(
                f"rope_scaling: expected None or an attn_edu.rope_scaling.RopeScaling, got {kind}"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_kv_heads: must divide num_heads={self.num_heads}, got {self.num_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(
                f"head_dim: RoPE rotates pairs of channels, so D must be even, got D={self.head_dim}"
            )


class RotaryDecoder(nn.Module):
    """The forward pass of every decoder here that has no position table (Llama, :class:`attn_edu.models.GptOss`,
    :class:`attn_edu.models.Qwen3Next`): token embedding, then each block with its layer of the cache, then the
    final norm and the output head. Positions need no code here: each attention reads its cache's ``seq_len`` as
    the RoPE offset. A subclass builds ``token_embedding``, ``blocks``, ``final_norm``, ``lm_head`` and ``config``.

    Shapes:
        input_ids ``(B, T)``; returns logits ``(B, T, V)``.
    """

    def forward(self, input_ids: torch.Tensor, *, kv_cache: KVCache | None = None) -> torch.Tensor:
        check_token_ids("input_ids", input_ids, self.config.vocab_size)
        if kv_cache is not None and len(kv_cache.layers) != len(self.blocks):
            raise ValueError(
                f"kv_cache: expected {len(self.blocks)} layers (attn_edu.generation.new_cache(model) builds one), "
                f"got {len(kv_cache.layers)}"
            )
        x = self.token_embedding(input_ids)  # (B, T, C)
        for i, block in enumerate(self.blocks):
            x = block(x, kv_cache=None if kv_cache is None else kv_cache.layers[i])  # (B, T, C)
        return self.lm_head(self.final_norm(x))  # (B, T, V)


class Llama(RotaryDecoder):
    """Llama-style causal language model: RMSNorm, RoPE, grouped-query attention, SwiGLU, no biases.

    One :class:`attn_edu.rope.RotaryEmbedding` (it has no weights) is shared by every layer's
    attention. With ``kv_cache``, layer ``i`` uses ``kv_cache.layers[i]`` and the attention rotates
    the new tokens from position ``kv_cache.seq_len`` on; the cache stores only ``H_kv`` heads.
    ``attention_fn`` is handed to every attention layer (default: the reference implementation).

    Shapes:
        input_ids ``(B, T)``; returns logits ``(B, T, V)``.

    Example:
        >>> model = Llama(LlamaConfig(vocab_size=10, embed_dim=16, num_heads=4, num_kv_heads=1, ffn_dim=40))
        >>> model(torch.tensor([[1, 2, 3]])).shape
        torch.Size([1, 3, 10])
    """

    def __init__(
        self, config: LlamaConfig, *, attention_fn: AttentionFn = scaled_dot_product_attention
    ) -> None:
        super().__init__()
        if not isinstance(config, LlamaConfig):
            raise ValueError(f"config: expected a LlamaConfig, got {type(config).__name__}")
        self.config = c = config
        self.rotary = RotaryEmbedding(c.head_dim, base=c.rope_base, layout="half", scaling=c.rope_scaling)
        self.token_embedding = nn.Embedding(c.vocab_size, c.embed_dim)
        self.blocks = nn.ModuleList(
            PreNormDecoderBlock(
                MultiHeadAttention(
                    c.embed_dim,
                    c.num_heads,
                    num_kv_heads=c.num_kv_heads,
                    head_dim=c.head_dim,
                    bias=False,
                    rotary=self.rotary,
                    attention_fn=attention_fn,
                    window=c.sliding_window,
                ),
                SwiGLUFeedForward(c.embed_dim, c.ffn_dim),
                RMSNorm(c.embed_dim, eps=c.norm_eps),
                RMSNorm(c.embed_dim, eps=c.norm_eps),
                dropout=c.dropout,
            )
            for _ in range(c.num_layers)
        )
        self.final_norm = RMSNorm(c.embed_dim, eps=c.norm_eps)
        self.lm_head = nn.Linear(c.embed_dim, c.vocab_size, bias=False)
        init_normal_(self)
        if c.tie_embeddings:
            self.lm_head.weight = self.token_embedding.weight

    @classmethod
    def from_hf(cls, model: Any) -> Llama:
        """Build a :class:`Llama` from a Hugging Face ``LlamaForCausalLM`` (see :func:`attn_edu.interop.llama_from_hf`)."""
        from attn_edu.interop import llama_from_hf

        return llama_from_hf(model)
