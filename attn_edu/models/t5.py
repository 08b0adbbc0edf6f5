"""A T5-style encoder-decoder (Raffel et al., 2020, "Exploring the Limits of Transfer Learning").

    memory = encoder(input_ids)              pre-norm encoder blocks, bidirectional, relative bias
    x      = decoder(decoder_input_ids)      causal self-attention, cross-attention to memory, FFN
    logits = lm_head(final_norm(x) · C^-0.5) lm_head tied to the shared token embedding

T5's choices (Raffel et al., 2020, §2.1 and §3.1):

- Norms are RMSNorm (T5 calls it ``T5LayerNorm``: no mean subtraction, no bias), in pre-norm position.
- No position embeddings; each attention adds a learned scalar per head and *bucketed* relative
  distance (:class:`attn_edu.positional.T5RelativeBias`). The bias is computed once per stack (the
  checkpoint stores it in the first layer) and shared by all layers of that stack; the decoder's
  bias is unidirectional. Cross-attention has none.
- No ``1/sqrt(D)`` in the attention scores (``scale=1.0``): T5 folds it into the initialisation.
- ReLU feed-forward networks without biases (T5 v1.1's gated-GELU FFN is not covered here).
- Input and output embeddings are tied, and the decoder output is multiplied by ``C^-0.5`` before the
  tied ``lm_head`` (as Mesh TensorFlow and Hugging Face do; untied models skip the rescale).

Shapes:
    input_ids ``(B, S)`` (the encoder side), decoder_input_ids ``(B, T)``; logits ``(B, T, V)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from attn_edu._validate import (
    check_floating,
    check_head_dim,
    check_positive_int,
    check_shape,
    check_token_ids,
)
from attn_edu.attention import scaled_dot_product_attention
from attn_edu.blocks import CrossAttentionBlock, FeedForward, PreNormEncoderBlock, RMSNorm, init_normal_
from attn_edu.masks import key_mask, padding_from_attention_mask
from attn_edu.multihead import BiasedAttentionFn, MultiHeadAttention, require_score_bias
from attn_edu.positional import T5RelativeBias

if TYPE_CHECKING:
    from attn_edu.kv_cache import CrossKVCacheLayer, KVCache


@dataclass(frozen=True)
class T5Config:
    """Sizes of a T5-style model. The defaults are tiny; T5-small is ``T5Config(vocab_size=32128,
    embed_dim=512, num_layers=6, num_decoder_layers=6, num_heads=8, ffn_dim=2048)``."""

    vocab_size: int = 64  # V, shared by encoder and decoder (T5: 32128 SentencePiece tokens)
    embed_dim: int = 64  # C = H · D (T5-small: 512 = 8 heads of 64)
    num_layers: int = 2  # encoder blocks (T5-small: 6)
    num_decoder_layers: int = 2  # decoder blocks (T5: as many as the encoder)
    num_heads: int = 4  # H; D = C / H
    head_dim: int | None = None  # D when not C / H (Hugging Face's d_kv; T5-3B: 128 with C = 1024, H = 32)
    ffn_dim: int = 256  # hidden width of the ReLU feed-forward network (T5-small: 2048)
    num_buckets: int = 32  # relative-distance buckets of the position bias (T5: 32)
    max_distance: int = 128  # distances beyond this share the last bucket (T5: 128)
    norm_eps: float = 1e-6  # RMSNorm epsilon (T5: 1e-6)
    dropout: float = 0.0  # dropout on embeddings and sub-layer outputs (T5 pre-training: 0.1)
    tie_embeddings: bool = True  # lm_head = token embedding, with the C^-0.5 output rescale (T5: yes)

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "embed_dim",
            "num_layers",
            "num_decoder_layers",
            "num_heads",
            "ffn_dim",
            "num_buckets",
            "max_distance",
        ):
            check_positive_int(name, getattr(self, name))
        head_dim = check_head_dim(self.embed_dim, self.num_heads, self.head_dim)
        object.__setattr__(self, "head_dim", head_dim)  # frozen: None becomes C / H, once, here


def _attention(c: T5Config, attention_fn: BiasedAttentionFn) -> MultiHeadAttention:
    # scale=1.0: T5 does not divide scores by sqrt(D).
    return MultiHeadAttention(
        c.embed_dim, c.num_heads, head_dim=c.head_dim, bias=False, scale=1.0, attention_fn=attention_fn
    )


def _ffn(c: T5Config) -> FeedForward:
    return FeedForward(c.embed_dim, c.ffn_dim, activation="relu", bias=False)


def _norm(c: T5Config) -> RMSNorm:
    return RMSNorm(c.embed_dim, c.norm_eps)  # "T5LayerNorm": scale only, no mean, no bias


class T5(nn.Module):
    """T5-style encoder-decoder: read ``input_ids`` with the encoder, write ``decoder_input_ids``'
    continuation with the decoder.

    ``forward(input_ids, decoder_input_ids, attention_mask=None, *, kv_cache=None, encoder_output=None)``:
    ``attention_mask`` ``(B, S)`` marks real encoder tokens (1/True) and hides padding from both the
    encoder and the cross-attention. For step-by-step decoding, compute ``encoder_output =
    model.encode(input_ids, attention_mask)`` once and pass it with a
    :class:`attn_edu.kv_cache.KVCache` of ``num_decoder_layers`` layers; the decoder's self-attention
    then reads ``kv_cache.layers[i]``, and the relative bias places the new tokens after the
    ``kv_cache.seq_len`` cached ones; the cross-attention projects the keys/values of
    ``encoder_output`` at the first step into ``kv_cache.cross_layers[i]`` and reuses them at every later
    step. A cache belongs to one input: for another, start a new ``KVCache`` (or ``reset`` it); an
    ``encoder_output`` of another shape than the cached one is refused. ``attention_fn`` is handed to every
    attention layer and must accept ``score_bias=`` (the relative bias), as the default reference does.

    Shapes:
        input_ids ``(B, S)``, decoder_input_ids ``(B, T)``, attention_mask ``(B, S)``,
        encoder_output ``(B, S, C)``; returns logits ``(B, T, V)``.

    Example:
        >>> model = T5(T5Config(vocab_size=10, embed_dim=16, num_heads=2, ffn_dim=32))
        >>> model(torch.tensor([[1, 2, 3, 4]]), torch.tensor([[0, 5]])).shape     # (B, T, V)
        torch.Size([1, 2, 10])
    """

    def __init__(
        self, config: T5Config, *, attention_fn: BiasedAttentionFn = scaled_dot_product_attention
    ) -> None:
        super().__init__()
        if not isinstance(config, T5Config):
            raise ValueError(f"config: expected a T5Config, got {type(config).__name__}")
        require_score_bias(
            attention_fn, "T5"
        )  # its relative position bias: say so now, not at the first forward
        self.config = c = config
        self.token_embedding = nn.Embedding(c.vocab_size, c.embed_dim)  # shared by encoder and decoder
        self.embed_dropout = nn.Dropout(c.dropout)

        self.encoder_position_bias = T5RelativeBias(
            c.num_heads, bidirectional=True, num_buckets=c.num_buckets, max_distance=c.max_distance
        )
        self.encoder_blocks = nn.ModuleList(
            PreNormEncoderBlock(_attention(c, attention_fn), _ffn(c), _norm(c), _norm(c), dropout=c.dropout)
            for _ in range(c.num_layers)
        )
        self.encoder_norm = _norm(c)

        self.decoder_position_bias = T5RelativeBias(
            c.num_heads, bidirectional=False, num_buckets=c.num_buckets, max_distance=c.max_distance
        )
        self.decoder_blocks = nn.ModuleList(
            CrossAttentionBlock(
                _attention(c, attention_fn),
                _attention(c, attention_fn),
                _ffn(c),
                _norm(c),
                _norm(c),
                _norm(c),
                dropout=c.dropout,
            )  # self-attention, cross-attention, FFN, and a norm in front of each
            for _ in range(c.num_decoder_layers)
        )
        self.decoder_norm = _norm(c)
        self.lm_head = nn.Linear(c.embed_dim, c.vocab_size, bias=False)
        init_normal_(self)
        if c.tie_embeddings:
            self.lm_head.weight = self.token_embedding.weight

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Run the encoder: every input token, in context of all the (real) others.

        Shapes:
            input_ids ``(B, S)``, attention_mask ``(B, S)``; returns ``(B, S, C)``.
        """
        B, S = check_token_ids("input_ids", input_ids, self.config.vocab_size).values()
        return self._encode(input_ids, self._key_mask(attention_mask, B, S))

    @staticmethod
    def _key_mask(attention_mask: torch.Tensor | None, B: int, S: int) -> torch.Tensor | None:
        """The encoder's 0/1 padding ``(B, S)`` as a key mask ``(B, 1, 1, S)``: what its self-attention and the
        decoder's cross-attention may read. Converted once per forward, used by both."""
        return None if attention_mask is None else key_mask(padding_from_attention_mask(attention_mask, B, S))

    def _encode(self, input_ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        S = input_ids.shape[1]
        bias = self.encoder_position_bias(S, S)  # (1, H, S, S), shared by all encoder layers
        x = self.embed_dropout(self.token_embedding(input_ids))  # (B, S, C)
        for block in self.encoder_blocks:
            x = block(x, mask=mask, score_bias=bias)  # (B, S, C)
        return self.embed_dropout(self.encoder_norm(x))  # (B, S, C)

    def decode(
        self,
        decoder_input_ids: torch.Tensor,
        encoder_output: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        *,
        kv_cache: KVCache | None = None,
    ) -> torch.Tensor:
        """Run the decoder on ``decoder_input_ids`` given the encoder's output; return logits.

        Shapes:
            decoder_input_ids ``(B, T)``, encoder_output ``(B, S, C)``, attention_mask ``(B, S)``
            (the encoder's padding); returns ``(B, T, V)``.
        """
        c = self.config
        B = check_token_ids("decoder_input_ids", decoder_input_ids, c.vocab_size)["B"]
        check_floating("encoder_output", encoder_output)
        S = check_shape("encoder_output", encoder_output, "B S C", B=B, C=c.embed_dim)["S"]
        return self._decode(decoder_input_ids, encoder_output, self._key_mask(attention_mask, B, S), kv_cache)

    def _decode(
        self,
        decoder_input_ids: torch.Tensor,
        encoder_output: torch.Tensor,
        memory_mask: torch.Tensor | None,
        kv_cache: KVCache | None,
    ) -> torch.Tensor:
        c = self.config
        T = decoder_input_ids.shape[1]
        offset = 0 if kv_cache is None else int(kv_cache.seq_len)  # decoder tokens already cached
        # Bottom-right alignment: the T new queries are positions offset .. offset + T - 1.
        bias = self.decoder_position_bias(T, offset + T)  # (1, H, T, offset + T)
        x = self.embed_dropout(self.token_embedding(decoder_input_ids))  # (B, T, C)
        for i, block in enumerate(self.decoder_blocks):
            if kv_cache is None:
                memory_kv = block.cross_attn.project_kv(encoder_output)  # (B, H_kv, S, D) each
                layer_cache = None
            else:  # the encoder output's K and V, projected at the first step and read back afterwards
                memory_kv = self._memory_kv(block, encoder_output, kv_cache.cross_layers[i])
                layer_cache = kv_cache.layers[i]
            x = block(
                x, memory_kv, memory_mask=memory_mask, score_bias=bias, kv_cache=layer_cache
            )  # (B, T, C)
        x = self.embed_dropout(self.decoder_norm(x))  # (B, T, C)
        if c.tie_embeddings:
            # The tied matrix also serves as input embedding; the rescale keeps logits at a sane size.
            x = x * c.embed_dim**-0.5  # (B, T, C)
        return self.lm_head(x)  # (B, T, V)

    @staticmethod
    def _memory_kv(
        block: CrossAttentionBlock, encoder_output: torch.Tensor, cross_cache: CrossKVCacheLayer
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The cross-attention's k, v of the encoder output: projected at the first step, then read back."""
        if cross_cache.k is None:
            cross_cache.store(*block.cross_attn.project_kv(encoder_output))  # (B, H_kv, S, D) each
        B, S = encoder_output.shape[:2]
        if cross_cache.k.shape[0] != B or cross_cache.k.shape[2] != S:
            raise ValueError(
                f"kv_cache: holds cross-attention keys for {cross_cache.k.shape[0]} sequences of "
                f"{cross_cache.k.shape[2]} encoder tokens, but encoder_output is ({B}, {S}, C); "
                "a cache belongs to one input: start a new KVCache (or reset it)"
            )
        return cross_cache.k, cross_cache.v

    def forward(
        self,
        input_ids: torch.Tensor,
        decoder_input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        *,
        kv_cache: KVCache | None = None,
        encoder_output: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if encoder_output is None:
            B, S = check_token_ids("input_ids", input_ids, self.config.vocab_size).values()
            keys = self._key_mask(
                attention_mask, B, S
            )  # (B, 1, 1, S): for the encoder and the cross-attention
            encoder_output = self._encode(input_ids, keys)  # (B, S, C)
            B, T = check_token_ids("decoder_input_ids", decoder_input_ids, self.config.vocab_size).values()
            if B != encoder_output.shape[0]:
                raise ValueError(
                    f"decoder_input_ids: expected shape (B, T) with B={encoder_output.shape[0]} "
                    f"(the batch of input_ids), got {tuple(decoder_input_ids.shape)}"
                )
            return self._decode(decoder_input_ids, encoder_output, keys, kv_cache)  # (B, T, V)
        return self.decode(decoder_input_ids, encoder_output, attention_mask, kv_cache=kv_cache)  # (B, T, V)

    @classmethod
    def from_hf(cls, model: Any) -> T5:
        """Build a :class:`T5` from a Hugging Face ``T5ForConditionalGeneration`` (see
        :func:`attn_edu.interop.t5_from_hf`)."""
        from attn_edu.interop import t5_from_hf

        return t5_from_hf(model)
