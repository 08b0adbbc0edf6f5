"""Two ways 2025 models stop a head from having to attend somewhere: a learned sink and an output gate.

A softmax row must sum to 1, so a head with nothing useful to read still reads something. Trained softmax
models park that weight on the first token, which then collects most of the attention of many heads: the
*attention sink* (Xiao et al., 2024, "Efficient Streaming Language Models with Attention Sinks", §3.1).
Two 2025 models remove the need for it, each with a few parameters per layer:

- **Learned sink logits** (gpt-oss, OpenAI 2025, model card §2.1): each head ``h`` gets one logit ``s_h``
  added to its softmax's denominator, from a key that carries no value. A head can then read *less* than a
  whole unit of value, down to nothing. :class:`SinkAttention` owns the ``(H,)`` logits and is plugged into
  :class:`attn_edu.multihead.MultiHeadAttention` as its ``attention_fn``; the arithmetic is
  :func:`attn_edu.attention.scaled_dot_product_attention`'s ``sinks=``.
- **A sigmoid output gate** (Qiu et al., 2025, "Gated Attention for Large Language Models", §2; Qwen3-Next):
  each head's output is multiplied, element by element, by ``sigmoid(W_g x)`` computed from the same input
  token. A head can then switch its own output off for a token, whatever its softmax did.
  :class:`OutputGate` is plugged into :class:`attn_edu.multihead.MultiHeadAttention` as ``output_gate=``.

Both are checked against transformers' own layers (``tests/test_gating.py``): gpt-oss's eager attention and
``Qwen3NextAttention`` on the same weights.
"""

from __future__ import annotations

import torch
from torch import nn

from attn_edu._validate import check_floating, check_positive_int, check_shape
from attn_edu.attention import scaled_dot_product_attention


class SinkAttention(nn.Module):
    """The reference attention with one learned sink logit per head (gpt-oss), as a pluggable ``attention_fn``.

    Called like every attention function of the course, ``fn(q, k, v, mask=None, *, is_causal=False,
    scale=None, score_bias=None)``; it passes its own ``sinks`` parameter to
    :func:`attn_edu.attention.scaled_dot_product_attention`. Given to :class:`MultiHeadAttention` as
    ``attention_fn=``, it becomes a submodule: the logits train with the model and are saved with it
    (``attention_fn.sinks``). They start at ``init`` (gpt-oss's are learned from 0; a very negative start is a
    model without sinks).

    Shapes:
        q ``(B, H, T, D)``, k ``(B, H, S, D)``, v ``(B, H, S, Dv)``; returns ``(B, H, T, Dv)``.

    Example:
        >>> attend = SinkAttention(num_heads=2)
        >>> q, k, v = torch.randn(3, 1, 2, 4, 8).unbind(0)
        >>> out = attend(q, k, v, is_causal=True)
        >>> out.shape, [p.shape for p in attend.parameters()]
        (torch.Size([1, 2, 4, 8]), [torch.Size([2])])
    """

    def __init__(self, num_heads: int, *, init: float = 0.0) -> None:
        super().__init__()
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.sinks = nn.Parameter(torch.full((num_heads,), float(init)))  # (H,) one logit per head

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None = None,
        *,
        is_causal: bool = False,
        scale: float | None = None,
        score_bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        sinks = self.sinks.to(q.dtype)  # the logits follow the activations' dtype, as the weights do
        return scaled_dot_product_attention(
            q, k, v, mask, is_causal=is_causal, scale=scale, score_bias=score_bias, sinks=sinks
        )  # (B, H, T, Dv)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}"


class OutputGate(nn.Module):
    """Gated attention's output gate: ``heads ⊙ sigmoid(W_g x)``, one gate per head and coordinate.

    ``W_g`` maps the layer's input ``x`` (the query tokens) to ``H·D`` gates, one for each coordinate of
    the concatenated head outputs, before the output projection (Qiu et al., 2025, §2, the "G1" position:
    after the attention, elementwise, head-specific; Qwen3-Next computes it in the same matrix as the
    queries). At 0 the gate closes the head for that token; at 1 it passes it unchanged.

    Shapes:
        x ``(B, T, C)``, heads ``(B, T, H·D)``; returns ``(B, T, H·D)``.

    Example:
        >>> gate = OutputGate(embed_dim=8, inner_dim=6)
        >>> x, heads = torch.randn(2, 5, 8), torch.randn(2, 5, 6)
        >>> out = gate(x, heads)
        >>> out.shape, bool((out.abs() <= heads.abs()).all())      # a gate only shrinks
        (torch.Size([2, 5, 6]), True)
    """

    def __init__(self, embed_dim: int, inner_dim: int, *, bias: bool = False) -> None:
        super().__init__()
        check_positive_int("embed_dim", embed_dim)
        check_positive_int("inner_dim", inner_dim)
        self.proj = nn.Linear(embed_dim, inner_dim, bias=bias)

    def forward(self, x: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
        gates = self.gates(x)  # (B, T, H·D)
        B, T, HD = gates.shape
        check_shape("heads", heads, "B T HD", B=B, T=T, HD=HD)
        return heads * gates  # (B, T, H·D)

    def gates(self, x: torch.Tensor) -> torch.Tensor:
        """The gate values ``sigmoid(W_g x)`` themselves, in (0, 1): how open each head is for each token.

        Shapes:
            x ``(B, T, C)``; returns ``(B, T, H·D)``.
        """
        check_floating("x", x)
        check_shape("x", x, "B T C", C=self.proj.in_features)
        return torch.sigmoid(self.proj(x))  # (B, T, H·D)


__all__ = ["OutputGate", "SinkAttention"]
