"""The smallest language model around a stack of blocks: enough to train one block type against another.

    logits = lm_head(final_norm(block_N(... block_1(token_embedding + position_embedding))))

Notebook 08 trains it with pre-norm and post-norm blocks (and without skips) on a toy task, from the same
initial weights: the blocks are the only difference. Unlike :class:`attn_edu.models.GPT` it uses PyTorch's
default initialisation and unshared input and output embeddings, so nothing but the block type is tuned.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from attn_edu._validate import check_positive_int, check_token_ids
from attn_edu.blocks import FeedForward, PostNormDecoderBlock, PostNormEncoderBlock
from attn_edu.multihead import MultiHeadAttention


class ToyDecoder(nn.Module):
    """Token and position embeddings, ``depth`` causal blocks of ``block_type``, and a linear head.

    Each block gets a :class:`~attn_edu.multihead.MultiHeadAttention` of ``heads`` heads, a GELU
    :class:`~attn_edu.blocks.FeedForward` of width ``4 * dim`` and two norms made by ``norm(dim)``. A pre-norm
    stack ends in one more norm before the head, as GPT-2 does (Radford et al., 2019, §2.3); a post-norm stack
    needs none, since its last block already ends in one. ``residual=False`` builds the blocks without their
    skip connections.

    Args:
        block_type: a decoder block class, :class:`~attn_edu.blocks.PreNormDecoderBlock` or
            :class:`~attn_edu.blocks.PostNormDecoderBlock`.
        vocab_size: V, the number of token ids.
        dim: C, the width of the residual stream.
        heads: H, attention heads per block.
        depth: the number of blocks.
        max_len: rows of the learned position table: the longest input.
        norm: builds one norm from the width (``nn.LayerNorm``, :class:`~attn_edu.blocks.RMSNorm`, or
            ``lambda C: nn.Identity()`` for none).
        residual: keep the skip connections.

    Shapes:
        input_ids ``(B, T)`` ints in ``0 .. V-1`` with ``T <= max_len``; returns logits ``(B, T, V)``.

    Example:
        >>> from attn_edu.blocks import PreNormDecoderBlock
        >>> model = ToyDecoder(PreNormDecoderBlock, vocab_size=10, dim=8, heads=2, depth=2)
        >>> model(torch.tensor([[1, 2, 3]])).shape  # (B, T, V)
        torch.Size([1, 3, 10])
        >>> post_norm = ToyDecoder(PostNormDecoderBlock, vocab_size=10)
        >>> type(model.final_norm).__name__, type(post_norm.final_norm).__name__   # only pre-norm adds one
        ('LayerNorm', 'Identity')
    """

    def __init__(
        self,
        block_type: type[nn.Module],
        *,
        vocab_size: int,
        dim: int = 32,
        heads: int = 4,
        depth: int = 4,
        max_len: int = 16,
        norm: Callable[[int], nn.Module] = nn.LayerNorm,
        residual: bool = True,
    ) -> None:
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("dim", dim), ("heads", heads), ("depth", depth)):
            check_positive_int(name, value)
        check_positive_int("max_len", max_len)
        self.vocab_size = vocab_size
        self.token_embedding = nn.Embedding(vocab_size, dim)
        self.position_embedding = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList(
            block_type(
                MultiHeadAttention(dim, heads),
                FeedForward(dim, 4 * dim, activation="gelu"),
                norm(dim),
                norm(dim),
                residual=residual,
            )
            for _ in range(depth)
        )
        post_norm = issubclass(block_type, (PostNormDecoderBlock, PostNormEncoderBlock))
        self.final_norm = nn.Identity() if post_norm else norm(dim)
        self.lm_head = nn.Linear(dim, vocab_size)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        B, T = check_token_ids("input_ids", input_ids, self.vocab_size).values()
        if T > self.position_embedding.num_embeddings:
            raise ValueError(
                f"input_ids: expected T <= max_len={self.position_embedding.num_embeddings}, got T={T}"
            )
        positions = torch.arange(T, device=input_ids.device)  # (T,)
        x = self.token_embedding(input_ids) + self.position_embedding(positions)  # (B, T, C)
        for block in self.blocks:
            x = block(x)  # (B, T, C)
        return self.lm_head(self.final_norm(x))  # (B, T, V)
