"""gpt-oss (OpenAI, 2025): a mixture-of-experts decoder whose layers alternate a sliding window and full attention.

    x = token_embedding(ids)                                   no position table: RoPE (with YaRN) rotates q and k
    x = PreNormDecoderBlock(x)  × num_layers                   RMSNorm, GQA attention with biases and sinks,
                                                               a mixture of clamped-SwiGLU experts
    logits = lm_head(final_norm(x))                            untied

The Llama skeleton (:mod:`attn_edu.models.llama`) with what the model card lists (OpenAI, "gpt-oss-120b &
gpt-oss-20b Model Card", 2025, §2.1), each piece an existing part of the course:

- **Attention**: grouped-query (gpt-oss: 64 query heads, 8 key/value heads of ``D = 64``), with biases on
  the q, k, v and output projections, scaled by ``D^-0.5``. Each head has one learned *sink* logit in its
  softmax's denominator (:class:`attn_edu.gating.SinkAttention`), so a head may read less than a whole unit
  of value. Layers alternate a banded causal window (gpt-oss: 128 tokens) and full attention, as GPT-3 did
  (Brown et al., 2020, §2.1); ``layer_types`` names each layer's kind, and the window is
  :class:`attn_edu.multihead.MultiHeadAttention`'s ``window``.
- **Positions**: RoPE with YaRN (gpt-oss: ×32 over a trained context of 4096, base 150000;
  :class:`attn_edu.rope_scaling.RopeScaling` with ``truncate=False``).
- **Feed-forward**: a mixture of experts (:class:`attn_edu.moe.MoEFeedForward`; gpt-oss-20b: 32 experts,
  gpt-oss-120b: 128, 4 per token). The router has a bias and takes the softmax over the chosen experts'
  logits only; each expert is a :class:`attn_edu.blocks.SwiGLUFeedForward` with biases and gpt-oss's
  clamped unit (:class:`attn_edu.moe.ClampedSwiGLU`, its ``unit``).

With a :class:`attn_edu.kv_cache.KVCache` from :func:`attn_edu.generation.new_cache`, the sliding layers keep a
rolling cache of ``W`` slots and the full layers a growing one. The forward pass keeps no routing statistics
(the load-balancing loss trains; here we only run): call a block's ``ffn`` to see them.

Shapes:
    input_ids ``(B, T)``; logits ``(B, T, V)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from attn_edu._validate import check_head_dim, check_positive_int
from attn_edu.blocks import PreNormDecoderBlock, RMSNorm, SwiGLUFeedForward, init_normal_
from attn_edu.gating import SinkAttention
from attn_edu.models.llama import RotaryDecoder
from attn_edu.moe import ClampedSwiGLU, MoEFeedForward
from attn_edu.multihead import MultiHeadAttention
from attn_edu.rope import RotaryEmbedding
from attn_edu.rope_scaling import RopeScaling

SLIDING, FULL = "sliding_attention", "full_attention"  # the two layer types (transformers spells them so too)


@dataclass(frozen=True)
class GptOssConfig:
    """Sizes of a gpt-oss model. The defaults are tiny; gpt-oss-20b is ``GptOssConfig(vocab_size=201088,
    embed_dim=2880, num_layers=24, num_heads=64, num_kv_heads=8, head_dim=64, num_experts=32,
    experts_per_token=4, ffn_dim=2880, sliding_window=128, rope_scaling=RopeScaling("yarn", 32.0,
    original_max_positions=4096, beta_fast=32.0, beta_slow=1.0, truncate=False))`` (gpt-oss-120b: 36 layers,
    128 experts)."""

    vocab_size: int = 64  # V (gpt-oss: 201088, the o200k_harmony tokenizer)
    embed_dim: int = 64  # C (gpt-oss: 2880)
    num_layers: int = 2  # decoder blocks (gpt-oss-20b: 24; 120b: 36)
    num_heads: int = 4  # H query heads (gpt-oss: 64)
    num_kv_heads: int = 2  # H_kv key/value heads, divides H (gpt-oss: 8)
    head_dim: int | None = None  # D; None = C / H (gpt-oss: 64, so H·D = 4096 > C = 2880)
    num_experts: int = 4  # E experts per layer (gpt-oss-20b: 32; 120b: 128)
    experts_per_token: int = 2  # k experts each token runs through (gpt-oss: 4)
    ffn_dim: int = 64  # each expert's hidden width (gpt-oss: 2880)
    swiglu_limit: float = 7.0  # ClampedSwiGLU's clamp (gpt-oss: 7.0)
    swiglu_alpha: float = 1.702  # ClampedSwiGLU's Swish slope (gpt-oss: 1.702)
    norm_eps: float = 1e-5  # RMSNorm epsilon (gpt-oss: 1e-5)
    rope_base: float = 150000.0  # RoPE base θ (gpt-oss: 150000)
    rope_scaling: RopeScaling | None = None  # context extension; None: plain RoPE (gpt-oss: YaRN, see above)
    sliding_window: int | None = (
        8  # W: a sliding layer's token sees itself and W - 1 before it (gpt-oss: 128)
    )
    # One of "sliding_attention" / "full_attention" per layer. None: they alternate, sliding first (gpt-oss),
    # or all full when sliding_window is None.
    layer_types: tuple[str, ...] | None = None
    tie_embeddings: bool = False  # lm_head reuses the token embedding (gpt-oss: no)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "embed_dim", "num_layers", "num_heads", "num_kv_heads", "ffn_dim"):
            check_positive_int(name, getattr(self, name))
        check_positive_int("num_experts", self.num_experts)
        check_positive_int("experts_per_token", self.experts_per_token)
        if self.experts_per_token > self.num_experts:
            raise ValueError(
                f"experts_per_token: expected at most num_experts={self.num_experts}, got {self.experts_per_token}"
            )
        object.__setattr__(self, "head_dim", check_head_dim(self.embed_dim, self.num_heads, self.head_dim))
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_kv_heads: must divide num_heads={self.num_heads}, got {self.num_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(
                f"head_dim: RoPE rotates pairs of channels, so D must be even, got D={self.head_dim}"
            )
        ClampedSwiGLU(self.swiglu_limit, self.swiglu_alpha)  # checks both numbers
        if isinstance(self.rope_scaling, dict):  # as dataclasses.asdict and a JSON record store it
            object.__setattr__(self, "rope_scaling", RopeScaling(**self.rope_scaling))
        if self.rope_scaling is not None and not isinstance(self.rope_scaling, RopeScaling):
            kind = type(self.rope_scaling).__name__
            raise ValueError(
                f"rope_scaling: expected None or an attn_edu.rope_scaling.RopeScaling, got {kind}"
            )
        if self.sliding_window is not None:
            check_positive_int("sliding_window", self.sliding_window)
        self._set_layer_types()

    def _set_layer_types(self) -> None:
        types = self.layer_types
        if types is None:  # frozen: the default becomes an explicit tuple, once, here
            alternate = self.sliding_window is not None
            types = tuple(SLIDING if alternate and i % 2 == 0 else FULL for i in range(self.num_layers))
        if isinstance(types, str) or not all(t in (SLIDING, FULL) for t in types):
            raise ValueError(f"layer_types: expected one of {SLIDING!r}, {FULL!r} per layer, got {types!r}")
        types = tuple(types)
        if len(types) != self.num_layers:
            raise ValueError(f"layer_types: expected num_layers={self.num_layers} entries, got {len(types)}")
        if SLIDING in types and self.sliding_window is None:
            raise ValueError("sliding_window: layer_types has sliding layers, so it needs a window, got None")
        object.__setattr__(self, "layer_types", types)

    def window(self, layer: int) -> int | None:
        """Layer ``layer``'s attention window: ``sliding_window`` for a sliding layer, ``None`` (all) for a full one."""
        return self.sliding_window if self.layer_types[layer] == SLIDING else None


class GptOss(RotaryDecoder):
    """gpt-oss: grouped-query attention with biases, sinks and YaRN RoPE, alternating windows, a mixture of experts.

    One :class:`attn_edu.rope.RotaryEmbedding` is shared by every layer. Layer ``i`` is a
    :class:`attn_edu.blocks.PreNormDecoderBlock` whose attention is a
    :class:`attn_edu.multihead.MultiHeadAttention` (``bias=True``, ``window=config.window(i)``,
    ``attention_fn=`` :class:`attn_edu.gating.SinkAttention`) and whose feed-forward is a
    :class:`attn_edu.moe.MoEFeedForward` of ``num_experts`` clamped-SwiGLU experts. With ``kv_cache``, layer
    ``i`` uses ``kv_cache.layers[i]``; :func:`attn_edu.generation.new_cache` builds one whose sliding layers roll.

    Shapes:
        input_ids ``(B, T)``; returns logits ``(B, T, V)``.

    Example:
        >>> import torch
        >>> model = GptOss(GptOssConfig(vocab_size=10, embed_dim=16, num_layers=2, sliding_window=2))
        >>> model.config.layer_types, [block.attn.window for block in model.blocks]
        (('sliding_attention', 'full_attention'), [2, None])
        >>> model(torch.tensor([[1, 2, 3]])).shape
        torch.Size([1, 3, 10])
    """

    def __init__(self, config: GptOssConfig) -> None:
        super().__init__()
        if not isinstance(config, GptOssConfig):
            raise ValueError(f"config: expected a GptOssConfig, got {type(config).__name__}")
        self.config = c = config
        self.rotary = RotaryEmbedding(c.head_dim, base=c.rope_base, layout="half", scaling=c.rope_scaling)
        self.token_embedding = nn.Embedding(c.vocab_size, c.embed_dim)
        self.blocks = nn.ModuleList(self._block(i) for i in range(c.num_layers))
        self.final_norm = RMSNorm(c.embed_dim, eps=c.norm_eps)
        self.lm_head = nn.Linear(c.embed_dim, c.vocab_size, bias=False)
        init_normal_(self)  # the sinks start at 0, as in gpt-oss's training
        if c.tie_embeddings:
            self.lm_head.weight = self.token_embedding.weight

    def _block(self, i: int) -> PreNormDecoderBlock:
        c = self.config
        attention = MultiHeadAttention(
            c.embed_dim,
            c.num_heads,
            num_kv_heads=c.num_kv_heads,
            head_dim=c.head_dim,
            bias=True,
            rotary=self.rotary,
            attention_fn=SinkAttention(c.num_heads),  # (H,) learned sink logits
            window=c.window(i),
        )
        unit = ClampedSwiGLU(c.swiglu_limit, c.swiglu_alpha)
        experts = MoEFeedForward(
            c.embed_dim,
            c.ffn_dim,
            c.num_experts,
            k=c.experts_per_token,
            router_bias=True,
            expert=lambda: SwiGLUFeedForward(c.embed_dim, c.ffn_dim, bias=True, unit=unit),
        )
        norms = RMSNorm(c.embed_dim, eps=c.norm_eps), RMSNorm(c.embed_dim, eps=c.norm_eps)
        return PreNormDecoderBlock(attention, experts, *norms)

    @classmethod
    def from_hf(cls, model: Any) -> GptOss:
        """Build a :class:`GptOss` from a Hugging Face ``GptOssForCausalLM`` (see :func:`attn_edu.interop.gpt_oss_from_hf`)."""
        from attn_edu.interop import gpt_oss_from_hf

        return gpt_oss_from_hf(model)
