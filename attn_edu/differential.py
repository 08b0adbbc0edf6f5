"""Differential attention: the difference of two softmax maps, so that attention both maps share cancels.

    DiffAttn(X) = (softmax(Q₁K₁ᵀ/√d) − λ · softmax(Q₂K₂ᵀ/√d)) V          (Ye et al., ICLR 2025, eq. 1)

A softmax map can never be zero, so every query spreads some weight over keys that do not matter (and most
of it over the first token: the attention sink). Two maps computed from different projections carry the same
kind of noise; subtracting the second, scaled by a learned ``λ``, cancels it, as a differential amplifier
cancels the noise common to its two inputs. Rows of the difference sum to ``1 − λ`` and may be negative.

``λ`` is re-parameterised so that it trains smoothly from a depth-dependent start:

    λ = exp(λ_q1 · λ_k1) − exp(λ_q2 · λ_k2) + λ_init,      λ_init = 0.8 − 0.6 · exp(−0.3 · layer)   (eq. 2)

Each head's output (of width ``2d``: the two maps share one value of twice the head size) is normalised on
its own (RMS, no gain) and multiplied by ``1 − λ_init`` (§2.2, "headwise normalisation").

:class:`DifferentialAttention` lays its heads out as transformers' ``DiffLlamaAttention`` does, and
:meth:`DifferentialAttention.from_hf` copies one: of ``H`` query heads, head ``i`` and head ``i + H/2`` give
the two maps of output head ``i``; of ``H_kv`` key/value heads, the value of output head ``i`` is kv head
``g`` and kv head ``g + H_kv/2`` side by side (``g`` the kv head of query head ``i`` under GQA).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

from attn_edu._validate import check_floating, check_positive_int, check_shape
from attn_edu.attention import attention_weights
from attn_edu.multihead import merge_heads, repeat_kv, split_heads


def lambda_init(layer: int) -> float:
    """The starting ``λ`` of the ``layer``-th layer (from 0): ``0.8 − 0.6 · exp(−0.3 · layer)`` (eq. 2).

    Example:
        >>> round(lambda_init(0), 3), round(lambda_init(11), 3)
        (0.2, 0.778)
    """
    if isinstance(layer, bool) or not isinstance(layer, int) or layer < 0:
        raise ValueError(f"layer: expected an int >= 0 (the layer's index from 0), got {layer!r}")
    return 0.8 - 0.6 * math.exp(-0.3 * layer)


def differential_attention(
    q1: torch.Tensor,
    k1: torch.Tensor,
    q2: torch.Tensor,
    k2: torch.Tensor,
    v: torch.Tensor,
    lam: torch.Tensor | float,
    mask: torch.Tensor | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """``(softmax(q1 k1ᵀ · scale) − λ · softmax(q2 k2ᵀ · scale)) v``: the two maps subtracted, then applied.

    Masks and ``is_causal`` follow :func:`attn_edu.attention.attention_weights` (bool, True = may attend,
    bottom-right causal), for both maps. ``lam`` is a number or a tensor broadcastable to the leading dims.

    Shapes:
        q1, q2 ``(..., T, D)``, k1, k2 ``(..., S, D)``, v ``(..., S, Dv)``; returns ``(..., T, Dv)``.

    Example:
        >>> q, k, v = torch.randn(3, 2, 4, 8).unbind(0)
        >>> out = differential_attention(q, k, q, k, v, 0.25)        # the same map twice: 0.75 of it
        >>> torch.allclose(out, 0.75 * torch.softmax(q @ k.mT / 8**0.5, -1) @ v, atol=1e-6)
        True
    """
    check_shape("q2", q2, "... T D", T=q1.shape[-2], D=q1.shape[-1])
    check_shape("k2", k2, "... S D", S=k1.shape[-2], D=k1.shape[-1])
    w1 = attention_weights(q1, k1, mask, is_causal=is_causal, scale=scale)  # (..., T, S)
    w2 = attention_weights(q2, k2, mask, is_causal=is_causal, scale=scale)  # (..., T, S)
    lam = torch.as_tensor(lam, dtype=w1.dtype, device=w1.device)
    return (w1 - lam[..., None, None] * w2) @ v  # (..., T, Dv)


class DifferentialAttention(nn.Module):
    """A differential-attention layer with ``num_heads // 2`` output heads, laid out as ``DiffLlamaAttention``.

    Args:
        embed_dim: model dimension ``C``.
        num_heads: query heads ``H`` (even): heads ``i`` and ``i + H/2`` make output head ``i``'s two maps.
        num_kv_heads: key/value heads ``H_kv`` (even, dividing ``H``; default ``H``).
        head_dim: ``D`` (default ``C / H``); each output head reads a value of width ``2D``.
        layer: the layer's index, for ``λ_init`` (:func:`lambda_init`).
        rotary: optional ``q, k = rotary(q, k, offset=0)``, e.g. :class:`attn_edu.rope.RotaryEmbedding`.
        bias: whether the four projections have a bias (DiffLlama: no).
        eps: the head normalisation's epsilon.

    Shapes:
        x ``(B, T, C)``, mask broadcastable to ``(B, H/2, T, T)``; returns ``(B, T, C)``.

    Example:
        >>> layer = DifferentialAttention(16, 4, num_kv_heads=2, layer=1)
        >>> layer(torch.randn(2, 5, 16), is_causal=True).shape
        torch.Size([2, 5, 16])
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        num_kv_heads: int | None = None,
        head_dim: int | None = None,
        layer: int = 0,
        rotary: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None,
        bias: bool = False,
        eps: float = 1e-6,
    ) -> None:
        super().__init__()
        check_positive_int("embed_dim", embed_dim)
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        for name, value in (("num_heads", num_heads), ("num_kv_heads", num_kv_heads)):
            if check_positive_int(name, value) % 2:
                raise ValueError(f"{name}: expected an even number (two maps per output head), got {value}")
        if num_heads % num_kv_heads:
            raise ValueError(f"num_kv_heads: must divide num_heads={num_heads}, got {num_kv_heads}")
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.head_dim = (
            embed_dim // num_heads if head_dim is None else check_positive_int("head_dim", head_dim)
        )
        self.lambda_init = lambda_init(layer)
        self.rotary, self.eps = rotary, eps
        D = self.head_dim
        self.q_proj = nn.Linear(embed_dim, num_heads * D, bias=bias)
        self.k_proj = nn.Linear(embed_dim, num_kv_heads * D, bias=bias)
        self.v_proj = nn.Linear(embed_dim, num_kv_heads * D, bias=bias)
        self.o_proj = nn.Linear(num_heads * D, embed_dim, bias=bias)
        # λ's four vectors (eq. 2), drawn as in the paper's code: N(0, 0.1²).
        self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2 = (
            nn.Parameter(torch.randn(D) * 0.1) for _ in range(4)
        )

    def lam(self) -> torch.Tensor:
        """The current ``λ`` (eq. 2): a 0-dim tensor, trained through its four vectors."""
        first = torch.exp((self.lambda_q1 * self.lambda_k1).sum().float())
        second = torch.exp((self.lambda_q2 * self.lambda_k2).sum().float())
        return first - second + self.lambda_init

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        is_causal: bool = False,
        need_weights: bool = False,
        score_bias: None = None,
        kv_cache: None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """The layer's output; with ``need_weights`` also each output head's difference map
        ``w1 − λ·w2`` ``(B, H/2, T, S)``. Called as a decoder block calls its attention; ``score_bias`` and
        ``kv_cache`` must stay None (this layer has neither)."""
        if score_bias is not None or kv_cache is not None:
            raise ValueError(
                "score_bias, kv_cache: differential attention takes neither here; leave them None"
            )
        q1, k1, q2, k2, v = self._project(x)
        lam = self.lam().to(x.dtype)
        heads = differential_attention(q1, k1, q2, k2, v, lam, mask, is_causal=is_causal)  # (B, H/2, T, 2D)
        heads = (1 - self.lambda_init) * F.rms_norm(
            heads, (2 * self.head_dim,), eps=self.eps
        )  # each head alone
        out = self.o_proj(merge_heads(heads))  # (B, T, C)
        if not need_weights:
            return out
        w1, w2 = (attention_weights(q, k, mask, is_causal=is_causal) for q, k in ((q1, k1), (q2, k2)))
        return out, w1 - lam * w2  # (B, T, C), (B, H/2, T, S)

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The two maps' queries and keys ``(B, H/2, T, D)`` each and the shared value ``(B, H/2, T, 2D)``."""
        check_floating("x", x)
        check_shape("x", x, "B T C", C=self.q_proj.in_features)
        H, half = self.num_heads, self.num_heads // 2
        q = split_heads(self.q_proj(x), H)  # (B, H, T, D)
        k = split_heads(self.k_proj(x), self.num_kv_heads)  # (B, H_kv, T, D)
        v = split_heads(self.v_proj(x), self.num_kv_heads)  # (B, H_kv, T, D)
        if self.rotary is not None:
            q, k = self.rotary(q, k, offset=0)
        groups = H // self.num_kv_heads
        k = repeat_kv(k, groups)  # (B, H, T, D)
        kv_half = self.num_kv_heads // 2
        v = torch.cat(
            [v[:, :kv_half], v[:, kv_half:]], dim=-1
        )  # (B, H_kv/2, T, 2D): kv heads g and g + H_kv/2
        v = repeat_kv(v, groups)  # (B, H/2, T, 2D)
        return q[:, :half], k[:, :half], q[:, half:], k[:, half:], v

    @classmethod
    def from_hf(cls, layer: nn.Module, rotary: Callable | None = None) -> DifferentialAttention:
        """Copy a transformers ``DiffLlamaAttention`` (weights, ``λ`` vectors, ``λ_init``, epsilon).

        ``rotary`` is the position embedding to use (the transformers layer receives its cos and sin from
        the model); ``attn_edu.rope.RotaryEmbedding(head_dim, base=...)`` matches Llama's.
        """
        config = layer.config
        ours = cls(
            config.hidden_size,
            config.num_attention_heads,
            num_kv_heads=config.num_key_value_heads,
            head_dim=layer.head_dim,
            rotary=rotary,
            bias=layer.q_proj.bias is not None,
            eps=layer.groupnorm.eps,
        )
        ours.lambda_init = float(layer.lambda_init)
        ours.load_state_dict({k: v for k, v in layer.state_dict().items() if not k.startswith("groupnorm")})
        return ours.to(layer.q_proj.weight.dtype)


__all__ = ["DifferentialAttention", "differential_attention", "lambda_init"]
