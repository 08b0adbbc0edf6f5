"""Cross-layer KV sharing: a layer attends with the keys and values of a layer below it.

A decoder's KV cache holds, per token and per layer, ``2 · H_kv · D`` numbers. Grouped-query attention
(notebook 05) shares key/value heads between the query heads of one layer; cross-layer attention (CLA; Brandon
et al., 2024, "Reducing Transformer Key-Value Cache Size with Cross-Layer Attention") shares them between
layers. A *producing* layer projects, rotates and caches its keys and values as usual; each *sharing* layer
above it projects only queries and reads the producer's keys and values. Sharing layers have no key or value
projections and add nothing to the cache: with every second layer sharing (CLA2), the cache halves again on top
of GQA. Gemma 3n ships the same idea: its last ``num_kv_shared_layers`` layers reuse the keys and values of the
last layer before them of the same kind (transformers' ``Gemma3nTextAttention``, ``kv_sharing_modes``).

    producer (MultiHeadAttention, keep_kv=True)       q, k, v = x Wq, x Wk, x Wv; k, v -> cache; kept_kv = (k, v)
    sharing (SharedKVAttention)                       q = x' Wq'; attend(q, *producer.kept_kv)

The producer keeps the keys and values it attended with (:attr:`MultiHeadAttention.kept_kv`: rotated, every
cached token included), so a sharing layer sees exactly what its producer saw, with or without a cache.
:func:`share_kv` turns a decoder into CLA; :mod:`attn_edu.experiments.hybrid` trains one (its ``"shared"``
variant) beside the same decoder without sharing.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from attn_edu._validate import check_floating, check_positive_int, check_shape
from attn_edu.masks import combine_masks
from attn_edu.multihead import MultiHeadAttention, merge_heads, repeat_kv, split_heads
from attn_edu.sparse import sliding_window_mask


class SharedKVAttention(nn.Module):
    """Attention with its own queries and the keys and values of ``source``, a layer that runs before it.

    Built from ``attn``, the layer it replaces: its query and output projections (and output gate) are
    kept, its key and value projections dropped. Heads, scale, RoPE, window and ``attention_fn`` come from
    ``attn`` too; ``source`` must have the same ``H_kv`` and ``D``. ``source.keep_kv`` is switched on. The
    forward signature is :class:`MultiHeadAttention`'s self-attention one; ``kv_cache`` is accepted and left
    untouched (the producer's cache already holds these keys and values).

    Shapes:
        query ``(B, T, C)``; returns ``(B, T, C)``. The producer's keys and values are ``(B, H_kv, S, D)``, ``S ≥ T``
        (the last ``T`` of them are this call's tokens; queries are rotated to positions ``S − T .. S − 1``).

    Example:
        >>> torch.manual_seed(0)
        <torch._C.Generator object at ...>
        >>> low, high = MultiHeadAttention(8, 4, num_kv_heads=2), MultiHeadAttention(8, 4, num_kv_heads=2)
        >>> shared = SharedKVAttention(high, source=low)
        >>> x, y = torch.randn(1, 5, 8), torch.randn(1, 5, 8)
        >>> _ = low(x, is_causal=True)                                  # the producer runs first
        >>> k, v = low.project_kv(x)                                    # what it attended with (no RoPE here)
        >>> torch.allclose(shared(y, is_causal=True), high.attend(y, k, v, is_causal=True), atol=1e-6)
        True
        >>> sum(p.numel() for p in shared.parameters()) < sum(p.numel() for p in high.parameters())
        True
    """

    def __init__(self, attn: MultiHeadAttention, *, source: MultiHeadAttention) -> None:
        super().__init__()
        for name, layer in (("attn", attn), ("source", source)):
            if not isinstance(layer, MultiHeadAttention):
                raise ValueError(
                    f"{name}: expected an attn_edu.multihead.MultiHeadAttention, got {type(layer).__name__}"
                )
            if layer.qk_norm is not None:
                raise ValueError(f"{name}: a layer with qk_norm cannot share keys and values here")
        if (attn.num_kv_heads, attn.head_dim) != (source.num_kv_heads, source.head_dim):
            raise ValueError(
                "source: must have attn's key/value heads and head size, (H_kv, D) = "
                f"{(attn.num_kv_heads, attn.head_dim)}, got {(source.num_kv_heads, source.head_dim)}"
            )
        if attn.rotary is not None and not hasattr(attn.rotary, "rotate"):
            raise ValueError("attn: its rotary must rotate queries alone (attn_edu.rope.RotaryEmbedding)")
        self.embed_dim, self.num_heads, self.num_kv_heads = attn.embed_dim, attn.num_heads, attn.num_kv_heads
        self.head_dim, self.scale, self.window = attn.head_dim, attn.scale, attn.window
        self.attention_fn, self.rotary = attn.attention_fn, attn.rotary
        self.q_proj, self.out_proj, self.output_gate = attn.q_proj, attn.out_proj, attn.output_gate
        # A plain attribute, not a submodule: the producer's weights belong to its own layer.
        object.__setattr__(self, "source", source)
        source.keep_kv = True

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, keys and values from an earlier layer"
        )

    def forward(
        self,
        query: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        score_bias: torch.Tensor | None = None,
        kv_cache: object | None = None,
    ) -> torch.Tensor:
        check_floating("query", query)
        sizes = check_shape("query", query, "B T C", C=self.embed_dim)
        B, T = sizes["B"], sizes["T"]
        if self.source.kept_kv is None:
            raise RuntimeError(
                "source: has not run yet; the layer that produces the keys and values must run first"
            )
        k, v = self.source.kept_kv  # (B, H_kv, S, D): rotated, every cached token included
        S = check_shape("source.kept_kv[0]", k, "B H_kv S D", B=B, H_kv=self.num_kv_heads, D=self.head_dim)[
            "S"
        ]
        if S < T:
            raise ValueError(
                f"query: has {T} tokens, but the source layer's keys only {S}: run the source on them first"
            )
        q = split_heads(self.q_proj(query), self.num_heads)  # (B, H, T, D)
        if self.rotary is not None:
            q = self.rotary.rotate(q, offset=S - T)  # the last T positions, as the producer's keys are
        if self.window is not None:
            mask = combine_masks(mask, sliding_window_mask(T, S, window=self.window, device=query.device))
        n_rep = self.num_heads // self.num_kv_heads
        extra = {} if score_bias is None else {"score_bias": score_bias}
        heads = self.attention_fn(
            q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), mask, is_causal=is_causal, scale=self.scale, **extra
        )  # (B, H, T, D)
        merged = merge_heads(heads)  # (B, T, H·D)
        if self.output_gate is not None:
            merged = self.output_gate(query, merged)
        return self.out_proj(merged)  # (B, T, C)


def share_kv(model: nn.Module, every: int = 2) -> nn.Module:
    """Make ``model`` (a decoder with ``model.blocks[i].attn``) share keys and values across layers, in place: in
    each group of ``every`` consecutive layers the first produces them and the others read them (CLA-``every``).
    The sharing layers keep their query and output weights. Returns ``model``.

    Example:
        >>> from attn_edu.models import Llama, LlamaConfig
        >>> model = share_kv(Llama(LlamaConfig(vocab_size=10, embed_dim=16, num_layers=4, ffn_dim=32)))
        >>> [type(block.attn).__name__ for block in model.blocks]
        ['MultiHeadAttention', 'SharedKVAttention', 'MultiHeadAttention', 'SharedKVAttention']
    """
    check_positive_int("every", every)
    return share_kv_from(model, [i - i % every for i in range(len(model.blocks))])


def share_kv_from(model: nn.Module, sources: Sequence[int]) -> nn.Module:
    """Layer ``i`` of ``model`` reads the keys and values of layer ``sources[i]`` (itself: its own, as usual;
    an earlier layer: :class:`SharedKVAttention`), in place. Gemma 3n's pattern, for instance, is
    ``list(range(n - m)) + [n - m - 1] * m`` for its last ``m`` layers (one kind of layer). Returns ``model``."""
    blocks = model.blocks
    if len(sources) != len(blocks):
        raise ValueError(f"sources: expected one index per layer ({len(blocks)}), got {len(sources)}")
    for i, j in enumerate(sources):
        if not (isinstance(j, int) and 0 <= j <= i) or (j < i and sources[j] != j):
            raise ValueError(
                f"sources: layer {i} must read itself or an earlier layer that computes its own keys, got {j}"
            )
        if j < i:
            blocks[i].attn = SharedKVAttention(blocks[i].attn, source=blocks[j].attn)
    return model


__all__ = ["SharedKVAttention", "share_kv", "share_kv_from"]
