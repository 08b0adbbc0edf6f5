"""Multi-head latent attention (MLA): cache one small latent per token instead of every head's keys and values.

    c      = RMSNorm(x W^DKV)                 (B, T, d_c)   the latent, shared by every head
    k_nope = c W^UK_h,  v = c W^UV_h          per head: keys without position, values
    k_rope = RoPE(x W^KR)                     (B, T, d_R)   one rotary key, shared by every head
    q      = [q_nope, RoPE(q_rope)]           per head, from x (or from a low-rank latent of x)
    out    = Concat_h softmax(q·[k_nope, k_rope] / sqrt(d_nope + d_R)) v  W^O

(DeepSeek-AI, 2024, "DeepSeek-V2", §2.1.) A decoder must cache, per token and layer, only ``c`` and
``k_rope``: ``d_c + d_R`` numbers (DeepSeek-V2: 512 + 64 = 576), where multi-head attention caches
``2 · H · D`` (128 heads of 128: 32,768), 57 times more. GQA shrinks the cache by sharing heads; MLA shrinks
it by a low rank, and keeps every head its own keys.

Two ways to compute the same attention from the cache (``absorb=``):

- **Expanded** (``absorb=False``): rebuild every head's keys and values from the cached latents
  (``c W^UK_h``, ``c W^UV_h``) and run ordinary multi-head attention. Simple, but each step rebuilds
  ``S`` keys per head.
- **Absorbed** (``absorb=True``): ``q_nope · (c W^UK_h) = (q_nope W^UK_hᵀ) · c``, so fold ``W^UK_h`` into
  the query once and score against the latents themselves; likewise ``Σ p (c W^UV_h) = (Σ p c) W^UV_h``.
  What is left is **multi-query attention** with one shared key ``[c, k_rope]`` of ``d_c + d_R`` dims and
  one shared value ``c``: every head reads the same cache, as in MQA, yet each has its own projection.

The decoupled rotary part exists because RoPE sits between ``q`` and ``k``: a rotation that depends on the
position cannot be folded into ``W^UK`` once for all tokens, so position travels in a separate small key.
The same module matches Hugging Face's ``DeepseekV3Attention`` (:func:`attn_edu.interop.mla_from_hf`).

Shapes:
    x ``(B, T, C)``; the cache layer holds ``c`` as its keys ``(B, 1, S, d_c)`` and ``k_rope`` as its
    values ``(B, 1, S, d_R)`` (one :class:`attn_edu.kv_cache.KVCacheLayer`, as Hugging Face does).
"""

from __future__ import annotations

import torch
from torch import nn

from attn_edu._validate import check_floating, check_positive_int, check_shape
from attn_edu.attention import scaled_dot_product_attention
from attn_edu.blocks import RMSNorm
from attn_edu.multihead import SupportsKVCache, merge_heads, split_heads
from attn_edu.rope import RotaryEmbedding


class MultiHeadLatentAttention(nn.Module):
    """Causal self-attention whose cache holds a low-rank latent and one shared rotary key per token.

    Args:
        embed_dim: model width ``C``.
        num_heads: heads ``H``.
        kv_rank: ``d_c``, the width of the cached latent (DeepSeek-V2/V3: 512).
        nope_dim: per-head query/key dims without position (DeepSeek: 128).
        rope_dim: ``d_R``, the rotary dims of each query and of the shared key (DeepSeek: 64).
        v_dim: per-head value dims (DeepSeek: 128).
        q_rank: width of the query's own low-rank latent (DeepSeek-V2/V3: 1536); ``None`` projects
            queries from ``x`` directly (DeepSeek-V2-Lite).
        rope_base: RoPE's base θ.
        rope_layout: which coordinates pair up in RoPE; DeepSeek's checkpoints are ``"interleaved"``.
        norm_eps: the RMSNorms' epsilon (on the latents).

    Example:
        >>> mla = MultiHeadLatentAttention(32, 4, kv_rank=8, nope_dim=6, rope_dim=4, v_dim=5)
        >>> x = torch.randn(2, 7, 32)
        >>> torch.allclose(mla(x), mla(x, absorb=True), atol=1e-5)    # two forms, one attention
        True
        >>> mla.cache_numbers_per_token(), 2 * 4 * (6 + 4)              # MLA against MHA's k and v
        (12, 80)
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        kv_rank: int,
        nope_dim: int,
        rope_dim: int,
        v_dim: int,
        q_rank: int | None = None,
        rope_base: float = 10000.0,
        rope_layout: str = "interleaved",
        norm_eps: float = 1e-6,
    ) -> None:
        super().__init__()
        for name, value in [
            ("embed_dim", embed_dim),
            ("num_heads", num_heads),
            ("kv_rank", kv_rank),
            ("nope_dim", nope_dim),
            ("rope_dim", rope_dim),
            ("v_dim", v_dim),
        ]:
            check_positive_int(name, value)
        if rope_dim % 2:
            raise ValueError(
                f"rope_dim: RoPE rotates pairs of coordinates, so it must be even, got {rope_dim}"
            )
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.kv_rank, self.nope_dim, self.rope_dim, self.v_dim = kv_rank, nope_dim, rope_dim, v_dim
        self.q_rank = None if q_rank is None else check_positive_int("q_rank", q_rank)
        q_width = num_heads * (nope_dim + rope_dim)
        if self.q_rank is None:
            self.q_proj = nn.Linear(embed_dim, q_width, bias=False)
        else:  # the query's own bottleneck: saves activation memory in training, not cache
            self.q_down = nn.Linear(embed_dim, self.q_rank, bias=False)
            self.q_norm = RMSNorm(self.q_rank, eps=norm_eps)
            self.q_up = nn.Linear(self.q_rank, q_width, bias=False)
        self.kv_down = nn.Linear(embed_dim, kv_rank + rope_dim, bias=False)  # W^DKV and W^KR side by side
        self.kv_norm = RMSNorm(kv_rank, eps=norm_eps)
        self.kv_up = nn.Linear(kv_rank, num_heads * (nope_dim + v_dim), bias=False)  # W^UK_h, W^UV_h per head
        self.out_proj = nn.Linear(num_heads * v_dim, embed_dim, bias=False)
        self.rotary = RotaryEmbedding(rope_dim, base=rope_base, layout=rope_layout)
        self.scale = (nope_dim + rope_dim) ** -0.5  # the query's full width, as in the paper

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, kv_rank={self.kv_rank}, "
            f"nope_dim={self.nope_dim}, rope_dim={self.rope_dim}, v_dim={self.v_dim}, q_rank={self.q_rank}"
        )

    def cache_numbers_per_token(self) -> int:
        """Numbers a cache stores per token for this layer: ``d_c + d_R``."""
        return self.kv_rank + self.rope_dim

    def up_projections(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``W^UK`` ``(H, nope_dim, d_c)`` and ``W^UV`` ``(H, v_dim, d_c)``, the per-head blocks of ``kv_up``."""
        blocks = self.kv_up.weight.view(self.num_heads, self.nope_dim + self.v_dim, self.kv_rank)
        return blocks[:, : self.nope_dim], blocks[:, self.nope_dim :]

    def forward(
        self, x: torch.Tensor, *, kv_cache: SupportsKVCache | None = None, absorb: bool = False
    ) -> torch.Tensor:
        """Causal self-attention over the cached tokens and ``x``; ``absorb`` picks the form (same result)."""
        check_floating("x", x)
        B, T, C = check_shape("x", x, "B T C", C=self.embed_dim).values()
        H = self.num_heads
        if self.q_rank is None:
            q = self.q_proj(x)  # (B, T, H·(nope + rope))
        else:
            q = self.q_up(self.q_norm(self.q_down(x)))  # (B, T, H·(nope + rope))
        q = split_heads(q, H)  # (B, H, T, nope + rope)
        q_nope, q_rope = q.split([self.nope_dim, self.rope_dim], dim=-1)  # (B, H, T, nope), (B, H, T, rope)

        latent, k_rope = self.kv_down(x).split(
            [self.kv_rank, self.rope_dim], dim=-1
        )  # (B, T, d_c), (B, T, rope)
        c = self.kv_norm(latent)[:, None]  # (B, 1, T, d_c): one "head", shared by all
        k_rope = k_rope[:, None]  # (B, 1, T, rope)
        offset = 0 if kv_cache is None else int(kv_cache.seq_len)
        q_rope, k_rope = self.rotary(q_rope, k_rope, offset=offset)  # rotate before caching, as RoPE does
        if kv_cache is not None:
            c, k_rope = kv_cache.update(c, k_rope)  # (B, 1, S, d_c), (B, 1, S, rope)
        S = c.shape[2]
        W_uk, W_uv = self.up_projections()  # (H, nope, d_c), (H, v, d_c)

        if absorb:
            # q_nope · (c W_ukᵀ) = (q_nope W_uk) · c: score the latents directly, one shared key per token.
            q_latent = torch.einsum("bhtn,hnr->bhtr", q_nope, W_uk)  # (B, H, T, d_c)
            query = torch.cat([q_latent, q_rope], dim=-1)  # (B, H, T, d_c + rope)
            key = torch.cat([c, k_rope], dim=-1).expand(B, H, S, -1)  # (B, H, S, d_c + rope), no copy
            mixed = scaled_dot_product_attention(
                query, key, c.expand(B, H, S, -1), is_causal=True, scale=self.scale
            )  # (B, H, T, d_c): the weighted sum of latents
            heads = torch.einsum("bhtr,hvr->bhtv", mixed, W_uv)  # (B, H, T, v)
        else:
            # Rebuild every head's keys and values from the latents, then plain multi-head attention.
            k_nope = torch.einsum("bxsr,hnr->bhsn", c, W_uk)  # (B, H, S, nope)
            values = torch.einsum("bxsr,hvr->bhsv", c, W_uv)  # (B, H, S, v)
            keys = torch.cat([k_nope, k_rope.expand(B, H, S, -1)], dim=-1)  # (B, H, S, nope + rope)
            query = torch.cat([q_nope, q_rope], dim=-1)  # (B, H, T, nope + rope)
            heads = scaled_dot_product_attention(query, keys, values, is_causal=True, scale=self.scale)
        return self.out_proj(merge_heads(heads))  # (B, T, C)


def mla_cache_bytes(
    *, num_layers: int, kv_rank: int, rope_dim: int, seq_len: int, batch_size: int = 1, dtype_bytes: int = 2
) -> int:
    """Memory an MLA cache needs: ``layers × (d_c + d_R) × S × bytes × B`` (no factor 2: no separate V).

    Example:
        >>> mla_cache_bytes(num_layers=60, kv_rank=512, rope_dim=64, seq_len=4096) / 2**20   # DeepSeek-V2
        270.0
    """
    for name, value in [
        ("num_layers", num_layers),
        ("kv_rank", kv_rank),
        ("rope_dim", rope_dim),
        ("seq_len", seq_len),
        ("batch_size", batch_size),
        ("dtype_bytes", dtype_bytes),
    ]:
        check_positive_int(name, value)
    return num_layers * (kv_rank + rope_dim) * seq_len * dtype_bytes * batch_size
