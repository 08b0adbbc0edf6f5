"""Qwen3-Next (Qwen team, 2025): a hybrid decoder, three Gated DeltaNet layers to each gated attention layer.

    x = token_embedding(ids)                                   no position table: partial RoPE in the attention
    x = PreNormDecoderBlock(x)  × num_layers                   zero-centred RMSNorm; per layer_types a Gated
                                                               DeltaNet or a gated attention; then a mixture of
                                                               experts with a gated shared expert
    logits = lm_head(final_norm(x))                            untied

The Llama skeleton (:mod:`attn_edu.models.llama`) with what the model card of Qwen3-Next-80B-A3B lists, each
piece an existing part of the course:

- **Token mixers** (``layer_types``): ``"linear_attention"`` layers are Gated DeltaNet
  (:class:`attn_edu.delta_rule.GatedDeltaNet`; Yang, Kautz and Hatamizadeh, "Gated Delta Networks", ICLR
  2025): a recurrent state of fixed size that decays and is overwritten by the delta rule, after a short causal
  convolution, with L2-normalised q and k and a gated RMSNorm on the output. ``"full_attention"`` layers (every
  fourth in the released model: 36 of 48 layers are linear) are grouped-query attention
  (:class:`attn_edu.multihead.MultiHeadAttention`) with three additions: an RMS QK-norm
  (:class:`attn_edu.qk_norm.QKNorm`), RoPE on the first quarter of each head only (``partial_rotary_factor``,
  :class:`attn_edu.rope.RotaryEmbedding`'s ``rotary_dim``), and a sigmoid output gate per head and coordinate
  (:class:`attn_edu.gating.OutputGate`; Qiu et al., "Gated Attention for Large Language Models", 2025, §2,
  the G1 position), computed from the same input as the queries.
- **Norms**: zero-centred RMSNorm everywhere (blocks, final norm, QK-norm): each gain is stored as ``w = g - 1``
  and applied as ``1 + w`` (:class:`attn_edu.blocks.RMSNorm`'s ``zero_centred``), so that weight decay,
  which Qwen3-Next applies to the norms too, pulls the gains towards 1 rather than 0. (The gated RMSNorm
  inside each Gated DeltaNet keeps a plain gain, as in transformers' ``Qwen3NextRMSNormGated``.)
- **Feed-forward**: a mixture of SwiGLU experts (:class:`attn_edu.moe.MoEFeedForward`; the released model: 512
  experts, 10 per token) whose router takes the softmax over all experts, keeps the top ``k`` and renormalises
  them (the same weights as :class:`attn_edu.moe.TopKRouter`'s softmax over the top ``k``), plus one shared
  SwiGLU expert that every token runs through, scaled by ``sigmoid(x w_s)`` (its ``shared_expert``).
  Layers listed in ``dense_layers`` have one plain SwiGLU FFN instead.

Decoding with :func:`attn_edu.generation.new_cache` keeps a :class:`attn_edu.delta_rule.DeltaStateLayer`
(the recurrent state and the convolution's last inputs, a fixed size) for each linear layer and a growing
:class:`attn_edu.kv_cache.KVCacheLayer` for each attention layer. The forward pass keeps no routing statistics:
call a block's ``ffn`` to see them.

Shapes:
    input_ids ``(B, T)``; logits ``(B, T, V)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from attn_edu._validate import check_head_dim, check_positive_int
from attn_edu.blocks import PreNormDecoderBlock, RMSNorm, SwiGLUFeedForward, init_normal_
from attn_edu.delta_rule import GatedDeltaNet
from attn_edu.gating import OutputGate
from attn_edu.models.llama import RotaryDecoder
from attn_edu.moe import MoEFeedForward
from attn_edu.multihead import MultiHeadAttention
from attn_edu.qk_norm import QKNorm
from attn_edu.rope import RotaryEmbedding
from attn_edu.rope_scaling import RopeScaling

LINEAR, FULL = "linear_attention", "full_attention"  # the two layer types (transformers spells them so too)


@dataclass(frozen=True)
class Qwen3NextConfig:
    """Sizes of a Qwen3-Next model. The defaults are tiny; Qwen3-Next-80B-A3B is ``Qwen3NextConfig(
    vocab_size=151936, embed_dim=2048, num_layers=48, num_heads=16, num_kv_heads=2, head_dim=256,
    rope_base=10000000.0, linear_num_heads=32, linear_num_k_heads=16, linear_k_dim=128, linear_v_dim=128,
    num_experts=512, experts_per_token=10, expert_ffn_dim=512, shared_expert_ffn_dim=512)``."""

    vocab_size: int = 64  # V (Qwen3-Next: 151936)
    embed_dim: int = 64  # C (Qwen3-Next: 2048)
    num_layers: int = 4  # decoder blocks (Qwen3-Next: 48)
    # One of "linear_attention" / "full_attention" per layer. None: every fourth layer is attention (Qwen3-Next).
    layer_types: tuple[str, ...] | None = None
    # Gated attention layers
    num_heads: int = 4  # H query heads (Qwen3-Next: 16)
    num_kv_heads: int = 2  # H_kv key/value heads, divides H (Qwen3-Next: 2)
    head_dim: int | None = None  # D; None = C / H (Qwen3-Next: 256, so H·D = 4096 > C = 2048)
    partial_rotary_factor: float = 0.25  # RoPE turns the first int(D · factor) coordinates (Qwen3-Next: 0.25)
    rope_base: float = 10000.0  # RoPE base θ (Qwen3-Next: 10^7)
    rope_scaling: RopeScaling | None = None  # context extension; None: plain RoPE (Qwen3-Next: none)
    attention_bias: bool = False  # biases on the attention's projections (Qwen3-Next: no)
    # Gated DeltaNet layers
    linear_num_heads: int = 4  # value heads, each with its own state (Qwen3-Next: 32)
    linear_num_k_heads: int = 2  # query/key heads, each shared by consecutive value heads (Qwen3-Next: 16)
    linear_k_dim: int = 16  # Dk (Qwen3-Next: 128)
    linear_v_dim: int = 16  # Dv (Qwen3-Next: 128)
    conv_size: int = 4  # the short causal convolution's width (Qwen3-Next: 4)
    chunk_size: int = 64  # tokens per chunk of the chunked delta rule (the same result for any size)
    # Feed-forward
    num_experts: int = 4  # E routed experts per layer (Qwen3-Next: 512)
    experts_per_token: int = 2  # k experts each token runs through (Qwen3-Next: 10)
    expert_ffn_dim: int = 32  # each routed expert's hidden width (Qwen3-Next: 512)
    shared_expert_ffn_dim: int = 64  # the shared expert's hidden width (Qwen3-Next: 512)
    dense_layers: tuple[int, ...] = ()  # layers with one SwiGLU FFN instead of the experts (Qwen3-Next: none)
    ffn_dim: int = 128  # the dense layers' hidden width (unused in Qwen3-Next: every layer has experts)
    norm_eps: float = 1e-6  # every RMSNorm's epsilon (Qwen3-Next: 1e-6)
    tie_embeddings: bool = False  # lm_head reuses the token embedding (Qwen3-Next: no)

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "embed_dim",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "linear_num_heads",
        ):
            check_positive_int(name, getattr(self, name))
        for name in ("linear_num_k_heads", "linear_k_dim", "linear_v_dim", "conv_size", "chunk_size"):
            check_positive_int(name, getattr(self, name))
        for name in (
            "num_experts",
            "experts_per_token",
            "expert_ffn_dim",
            "shared_expert_ffn_dim",
            "ffn_dim",
        ):
            check_positive_int(name, getattr(self, name))
        if self.experts_per_token > self.num_experts:
            raise ValueError(
                f"experts_per_token: expected at most num_experts={self.num_experts}, got {self.experts_per_token}"
            )
        object.__setattr__(self, "head_dim", check_head_dim(self.embed_dim, self.num_heads, self.head_dim))
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_kv_heads: must divide num_heads={self.num_heads}, got {self.num_kv_heads}")
        if self.linear_num_heads % self.linear_num_k_heads:
            raise ValueError(
                f"linear_num_k_heads: must divide linear_num_heads={self.linear_num_heads}, "
                f"got {self.linear_num_k_heads}"
            )
        factor = self.partial_rotary_factor
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= 1:
            raise ValueError(f"partial_rotary_factor: expected a number in (0, 1], got {factor!r}")
        if self.rotary_dim < 2 or self.rotary_dim % 2:
            raise ValueError(
                f"partial_rotary_factor: RoPE turns pairs, so int(head_dim · factor) must be even and >= 2, "
                f"got int({self.head_dim} · {factor}) = {self.rotary_dim}"
            )
        if isinstance(self.rope_scaling, dict):  # as dataclasses.asdict and a JSON record store it
            object.__setattr__(self, "rope_scaling", RopeScaling(**self.rope_scaling))
        if self.rope_scaling is not None and not isinstance(self.rope_scaling, RopeScaling):
            kind = type(self.rope_scaling).__name__
            raise ValueError(
                f"rope_scaling: expected None or an attn_edu.rope_scaling.RopeScaling, got {kind}"
            )
        dense = tuple(self.dense_layers)
        if not all(isinstance(i, int) and 0 <= i < self.num_layers for i in dense):
            raise ValueError(
                f"dense_layers: expected layer indices from 0 to {self.num_layers - 1}, got {dense!r}"
            )
        object.__setattr__(self, "dense_layers", dense)
        self._set_layer_types()

    def _set_layer_types(self) -> None:
        types = self.layer_types
        if types is None:  # frozen: the default becomes an explicit tuple, once, here
            types = tuple(FULL if (i + 1) % 4 == 0 else LINEAR for i in range(self.num_layers))
        if isinstance(types, str) or not all(t in (LINEAR, FULL) for t in types):
            raise ValueError(f"layer_types: expected one of {LINEAR!r}, {FULL!r} per layer, got {types!r}")
        if len(types) != self.num_layers:
            raise ValueError(f"layer_types: expected num_layers={self.num_layers} entries, got {len(types)}")
        object.__setattr__(self, "layer_types", tuple(types))

    @property
    def rotary_dim(self) -> int:
        """How many coordinates of each attention head RoPE turns: ``int(head_dim · partial_rotary_factor)``."""
        return int(self.head_dim * self.partial_rotary_factor)


class Qwen3Next(RotaryDecoder):
    """Qwen3-Next: Gated DeltaNet and gated attention layers (3:1), zero-centred norms, experts with a shared one.

    One :class:`attn_edu.rope.RotaryEmbedding` (partial: ``config.rotary_dim`` of ``D``) serves every attention
    layer. Layer ``i`` is a :class:`attn_edu.blocks.PreNormDecoderBlock` whose ``attn`` is a
    :class:`attn_edu.delta_rule.GatedDeltaNet` or a :class:`attn_edu.multihead.MultiHeadAttention` with
    ``qk_norm=QKNorm(kind="rms", zero_centred=True)`` and ``output_gate=OutputGate(C, H·D)``, and whose ``ffn``
    is a :class:`attn_edu.moe.MoEFeedForward` of SwiGLU experts with a ``shared_expert`` (or a
    :class:`attn_edu.blocks.SwiGLUFeedForward` in ``dense_layers``). With ``kv_cache``, layer ``i`` uses
    ``kv_cache.layers[i]``: :func:`attn_edu.generation.new_cache` builds one.

    Shapes:
        input_ids ``(B, T)``; returns logits ``(B, T, V)``.

    Example:
        >>> import torch
        >>> model = Qwen3Next(Qwen3NextConfig(vocab_size=10, embed_dim=32, num_layers=4))
        >>> [type(block.attn).__name__ for block in model.blocks]
        ['GatedDeltaNet', 'GatedDeltaNet', 'GatedDeltaNet', 'MultiHeadAttention']
        >>> model(torch.tensor([[1, 2, 3]])).shape
        torch.Size([1, 3, 10])
    """

    def __init__(self, config: Qwen3NextConfig) -> None:
        super().__init__()
        if not isinstance(config, Qwen3NextConfig):
            raise ValueError(f"config: expected a Qwen3NextConfig, got {type(config).__name__}")
        self.config = c = config
        self.rotary = RotaryEmbedding(
            c.head_dim, base=c.rope_base, layout="half", scaling=c.rope_scaling, rotary_dim=c.rotary_dim
        )
        self.token_embedding = nn.Embedding(c.vocab_size, c.embed_dim)
        self.blocks = nn.ModuleList(self._block(i) for i in range(c.num_layers))
        self.final_norm = RMSNorm(c.embed_dim, eps=c.norm_eps, zero_centred=True)
        self.lm_head = nn.Linear(c.embed_dim, c.vocab_size, bias=False)
        init_normal_(self)  # the zero-centred gains stay 0 (gain 1)
        if c.tie_embeddings:
            self.lm_head.weight = self.token_embedding.weight

    def _mixer(self, i: int) -> nn.Module:
        c = self.config
        if c.layer_types[i] == LINEAR:
            return GatedDeltaNet(
                c.embed_dim,
                c.linear_num_heads,
                num_k_heads=c.linear_num_k_heads,
                k_dim=c.linear_k_dim,
                v_dim=c.linear_v_dim,
                conv_size=c.conv_size,
                chunk_size=c.chunk_size,
                eps=c.norm_eps,
            )
        return MultiHeadAttention(
            c.embed_dim,
            c.num_heads,
            num_kv_heads=c.num_kv_heads,
            head_dim=c.head_dim,
            bias=c.attention_bias,
            rotary=self.rotary,
            qk_norm=QKNorm(c.head_dim, kind="rms", eps=c.norm_eps, zero_centred=True),
            output_gate=OutputGate(c.embed_dim, c.num_heads * c.head_dim, bias=c.attention_bias),
        )

    def _ffn(self, i: int) -> nn.Module:
        c = self.config
        if i in c.dense_layers:
            return SwiGLUFeedForward(c.embed_dim, c.ffn_dim)
        return MoEFeedForward(
            c.embed_dim,
            c.expert_ffn_dim,
            c.num_experts,
            k=c.experts_per_token,
            expert=lambda: SwiGLUFeedForward(c.embed_dim, c.expert_ffn_dim),
            shared_expert=SwiGLUFeedForward(c.embed_dim, c.shared_expert_ffn_dim),
        )

    def _block(self, i: int) -> PreNormDecoderBlock:
        c = self.config
        norms = [RMSNorm(c.embed_dim, c.norm_eps, zero_centred=True) for _ in range(2)]
        return PreNormDecoderBlock(self._mixer(i), self._ffn(i), *norms)

    @classmethod
    def from_hf(cls, model: Any) -> Qwen3Next:
        """Build a :class:`Qwen3Next` from a Hugging Face ``Qwen3NextForCausalLM`` (see
        :func:`attn_edu.interop.qwen3_next_from_hf`)."""
        from attn_edu.interop import qwen3_next_from_hf

        return qwen3_next_from_hf(model)
