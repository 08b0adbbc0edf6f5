"""A BERT-style bidirectional encoder and its masked-language-model head (Devlin et al., 2019).

    x = LayerNorm(token_emb(ids) + position_emb(positions) + segment_emb(token_type_ids))
    x = PostNormEncoderBlock(x)  × num_layers            every token sees every (real) token
    hidden states = x                                     one vector per token, (B, T, C)

BERT kept the original Transformer's post-norm blocks (Devlin et al., 2019, §3: "almost identical
to the original implementation") and uses exact GELU. Each token sees the whole sentence, left
*and* right, which is why BERT cannot be trained to predict the next token; it is trained to fill
in masked tokens instead (:class:`BertMLM`, :func:`attn_edu.objectives.mlm_mask`).

Padding: ``attention_mask`` ``(B, T)`` marks real tokens with 1 (or True), as in Hugging Face.
Padded positions are hidden as *keys*; their own outputs are computed but meaningless.

Shapes:
    input_ids, attention_mask, token_type_ids ``(B, T)``; hidden states ``(B, T, C)``; MLM logits ``(B, T, V)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attn_edu._validate import check_positive_int, check_shape, check_token_ids
from attn_edu.attention import scaled_dot_product_attention
from attn_edu.blocks import FeedForward, PostNormEncoderBlock, init_normal_
from attn_edu.masks import key_mask, padding_from_attention_mask
from attn_edu.multihead import AttentionFn, MultiHeadAttention
from attn_edu.positional import LearnedPositionalEmbedding


@dataclass(frozen=True)
class BertConfig:
    """Sizes of a BERT-style encoder. The defaults are tiny; BERT-base is ``BertConfig(vocab_size=30522,
    max_seq_len=512, embed_dim=768, num_layers=12, num_heads=12, ffn_dim=3072)``."""

    vocab_size: int = 64  # V: WordPiece vocabulary (BERT: 30522, including [PAD] [CLS] [SEP] [MASK])
    max_seq_len: int = 64  # rows of the learned position table (BERT: 512)
    type_vocab_size: int = 2  # segments: sentence A / sentence B for next-sentence prediction
    embed_dim: int = 64  # C (BERT-base: 768, BERT-large: 1024)
    num_layers: int = 2  # encoder blocks (BERT-base: 12, BERT-large: 24)
    num_heads: int = 4  # H; D = C / H (BERT-base: 12 heads of 64)
    ffn_dim: int = 256  # hidden width of the feed-forward network (BERT: 4 C)
    norm_eps: float = 1e-12  # LayerNorm epsilon (BERT's TensorFlow code used 1e-12)
    dropout: float = 0.0  # dropout on embeddings and sub-layer outputs (BERT trained with 0.1)
    tie_embeddings: bool = True  # the MLM head's vocab_proj reuses the token embedding matrix (BERT: yes)

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "max_seq_len",
            "type_vocab_size",
            "embed_dim",
            "num_layers",
            "num_heads",
            "ffn_dim",
        ):
            check_positive_int(name, getattr(self, name))
        if self.embed_dim % self.num_heads:
            raise ValueError(f"num_heads: must divide embed_dim={self.embed_dim}, got {self.num_heads}")


class BERT(nn.Module):
    """BERT-style encoder: token + position + segment embeddings, then post-norm encoder blocks.

    Returns the final hidden states, one vector per token (no pooler: the ``tanh`` layer on the
    ``[CLS]`` vector that Hugging Face's ``BertModel`` adds for next-sentence prediction is left out).
    ``attention_fn`` is handed to every attention layer (default: the reference implementation).

    Shapes:
        input_ids ``(B, T)``; attention_mask ``(B, T)`` 1/True = real token, 0/False = padding;
        token_type_ids ``(B, T)`` (default all 0); returns ``(B, T, C)``.

    Example:
        >>> bert = BERT(BertConfig(vocab_size=10, embed_dim=16, num_heads=2, ffn_dim=32))
        >>> ids = torch.tensor([[1, 2, 3], [4, 5, 0]])
        >>> bert(ids, attention_mask=torch.tensor([[1, 1, 1], [1, 1, 0]])).shape    # (B, T, C)
        torch.Size([2, 3, 16])
    """

    def __init__(
        self, config: BertConfig, *, attention_fn: AttentionFn = scaled_dot_product_attention
    ) -> None:
        super().__init__()
        if not isinstance(config, BertConfig):
            raise ValueError(f"config: expected a BertConfig, got {type(config).__name__}")
        self.config = c = config
        self.token_embedding = nn.Embedding(c.vocab_size, c.embed_dim)
        self.position_embedding = LearnedPositionalEmbedding(c.max_seq_len, c.embed_dim)
        self.token_type_embedding = nn.Embedding(c.type_vocab_size, c.embed_dim)
        self.embed_norm = nn.LayerNorm(c.embed_dim, eps=c.norm_eps)
        self.embed_dropout = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(
            PostNormEncoderBlock(
                MultiHeadAttention(c.embed_dim, c.num_heads, attention_fn=attention_fn),
                FeedForward(c.embed_dim, c.ffn_dim, activation="gelu"),
                nn.LayerNorm(c.embed_dim, eps=c.norm_eps),
                nn.LayerNorm(c.embed_dim, eps=c.norm_eps),
                dropout=c.dropout,
            )
            for _ in range(c.num_layers)
        )
        init_normal_(self)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        B, T = check_token_ids("input_ids", input_ids, self.config.vocab_size).values()
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)  # (B, T): everything is sentence A
        check_token_ids("token_type_ids", token_type_ids, self.config.type_vocab_size)
        check_shape("token_type_ids", token_type_ids, "B T", B=B, T=T)
        mask = None if attention_mask is None else key_mask(padding_from_attention_mask(attention_mask, B, T))

        x = self.token_embedding(input_ids) + self.token_type_embedding(token_type_ids)  # (B, T, C)
        x = x + self.position_embedding(T)  # (B, T, C)
        x = self.embed_dropout(self.embed_norm(x))  # (B, T, C)
        for block in self.blocks:
            x = block(x, mask=mask)  # (B, T, C); mask (B, 1, 1, T) hides padded keys
        return x

    @classmethod
    def from_hf(cls, model: Any) -> BERT:
        """Build a :class:`BERT` with the weights of a Hugging Face ``BertModel`` (its pooler is dropped).

        The name mapping lives in :func:`attn_edu.interop.bert_from_hf`.
        """
        from attn_edu.interop import bert_from_hf

        return bert_from_hf(model)


class MaskedLMHead(nn.Module):
    """Turn BERT's hidden states into a distribution over the vocabulary at every position.

        logits = LayerNorm(GELU(h W_t + b_t)) Eᵀ + b

    A ``C x C`` ``transform``, GELU and LayerNorm, then ``vocab_proj`` whose weight is the token
    embedding ``E`` when tied, plus a per-token output bias (Hugging Face calls these two ``dense`` and
    ``decoder``; :mod:`attn_edu.interop` maps the names). The paper (Devlin et al., 2019, §3.1)
    only says "an output softmax over the vocabulary"; this layout is that of the released BERT code.

    Shapes:
        hidden ``(B, T, C)``; returns ``(B, T, V)``.
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        c = config
        self.transform = nn.Linear(c.embed_dim, c.embed_dim)
        self.activation = nn.GELU()
        self.norm = nn.LayerNorm(c.embed_dim, eps=c.norm_eps)
        self.vocab_proj = nn.Linear(c.embed_dim, c.vocab_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.activation(self.transform(hidden)))  # (B, T, C)
        return self.vocab_proj(h)  # (B, T, V)


class BertMLM(nn.Module):
    """A :class:`BERT` encoder plus a :class:`MaskedLMHead`: predicts the masked tokens.

    Train it with :func:`attn_edu.objectives.mlm_mask` (15% of tokens, 80/10/10) and
    :func:`attn_edu.objectives.mlm_loss`.

    Shapes:
        as :class:`BERT`; returns logits ``(B, T, V)``.

    Example:
        >>> model = BertMLM(BertConfig(vocab_size=10, embed_dim=16, num_heads=2, ffn_dim=32))
        >>> model(torch.tensor([[1, 2, 3]])).shape
        torch.Size([1, 3, 10])
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = BERT(config)
        self.head = init_normal_(MaskedLMHead(config))
        if config.tie_embeddings:
            self.head.vocab_proj.weight = self.bert.token_embedding.weight  # (V, C), shared

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        hidden = self.bert(input_ids, attention_mask, token_type_ids)  # (B, T, C)
        return self.head(hidden)  # (B, T, V)

    @classmethod
    def from_hf(cls, model: Any) -> BertMLM:
        """Build a :class:`BertMLM` from a Hugging Face ``BertForMaskedLM`` (see :mod:`attn_edu.interop`)."""
        from attn_edu.interop import bert_mlm_from_hf

        return bert_mlm_from_hf(model)
