"""QK-norm: normalise each head's queries and keys before their dot product, so their size cannot grow.

Dehghani et al. (2023, ViT-22B, section 2) found attention logits growing without bound at 8B parameters until
the weights were one-hot and training diverged; Wortsman et al. (2023, section 3.1) reproduce the instability
and the cure in small models. Qwen 3, OLMo 2 and Gemma 3 normalise q and k with an RMSNorm; Qwen3-Next with a
zero-centred one (its gain is ``1 + w``). :class:`QKNorm` is passed to
:class:`attn_edu.multihead.MultiHeadAttention` as ``qk_norm=``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from attn_edu._validate import check_floating, check_positive_int, check_shape


class QKNorm(nn.Module):
    """Normalise each head's queries and keys over their ``D`` coordinates, before the dot product (QK-norm).

        q ← γ_q ⊙ (q − mean(q)) / √(var(q) + ε),        k ← γ_k ⊙ (k − mean(k)) / √(var(k) + ε)

    ``kind="layer"`` is the LayerNorm of ViT-22B (Dehghani et al., 2023, section 2, "QK normalization": at 8B
    parameters their attention logits grew until the weights were one-hot and the loss diverged; normalising q
    and k stopped it; Wortsman et al., 2023, section 3.1, reproduce the instability and the cure in small
    models). ``kind="rms"`` is the RMSNorm of Qwen 3 and OLMo 2 (no mean subtracted). Either way every
    coordinate of q and k has unit variance (times the gain) at every step of training, not only at
    initialisation: the premise of the ``1/sqrt(D)`` argument, enforced. Those models keep the ``1/sqrt(D)``
    scale as well; QK-norm bounds the scores, it does not shrink them: normalised q and k still give ``q·k``
    a variance of about ``D``. As in ViT-22B the norms have a gain and no bias, and one gain vector of size
    ``D`` serves all heads (as in Qwen 3).

    ``gain`` is both gains' initial value. With ``D ** -0.25`` the two gains multiply every score by
    ``1/sqrt(D)``: a model with ``scale=1.0`` then starts with the scores of the scaled one, and the
    temperature becomes a learned parameter (notebook 03 trains both).

    ``zero_centred=True`` stores each gain as ``w = γ - 1`` and scales by ``1 + w``, as Qwen3-Next does
    (its norms, :class:`attn_edu.blocks.RMSNorm`'s ``zero_centred``, all do): weight decay then pulls the
    gains towards 1 instead of 0.

    Pass it to :class:`MultiHeadAttention` as ``qk_norm=``: it is called as ``q, k = qk_norm(q, k)`` right
    after the projections, before a rotary embedding and before the KV cache.

    Shapes:
        q ``(B, H, T, D)``, k ``(B, H_kv, S, D)`` (any leading dims); returns both, same shapes.

    Example:
        >>> norm = QKNorm(64)
        >>> q = 10 * torch.randn(2, 4, 5, 64)          # (B, H, T, D): far from unit variance
        >>> k = torch.randn(2, 1, 7, 64) + 3            # (B, H_kv, S, D): far from mean 0
        >>> q, k = norm(q, k)
        >>> [round(float(t.detach().var(dim=-1, unbiased=False).mean()), 3) for t in (q, k)]   # per head
        [1.0, 1.0]
    """

    def __init__(
        self,
        head_dim: int,
        *,
        kind: str = "layer",
        gain: float = 1.0,
        eps: float = 1e-6,
        zero_centred: bool = False,
    ) -> None:
        super().__init__()
        check_positive_int("head_dim", head_dim)
        if kind not in ("layer", "rms"):
            raise ValueError(f"kind: expected 'layer' (LayerNorm) or 'rms' (RMSNorm), got {kind!r}")
        if not (isinstance(gain, (int, float)) and math.isfinite(gain) and gain > 0):
            raise ValueError(f"gain: expected a finite number > 0, got {gain!r}")
        self.kind, self.zero_centred = kind, zero_centred

        def norm() -> nn.Module:
            made = (
                nn.LayerNorm(head_dim, eps=eps, bias=False)
                if kind == "layer"
                else nn.RMSNorm(head_dim, eps=eps)
            )
            nn.init.constant_(made.weight, gain - 1 if zero_centred else gain)
            return made

        self.q_norm, self.k_norm = norm(), norm()

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        D = self.q_norm.weight.shape[0]
        check_floating("q", q)
        check_floating("k", k)
        check_shape("q", q, "... D", D=D)
        check_shape("k", k, "... D", D=D)
        if not self.zero_centred:
            return self.q_norm(q), self.k_norm(k)  # (..., T, D), (..., S, D)
        return self._with_gain_plus_one(self.q_norm, q), self._with_gain_plus_one(self.k_norm, k)

    def _with_gain_plus_one(self, norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """``norm`` with the gain ``1 + w`` (float32, then back to ``x``'s dtype): the zero-centred form."""
        gain = 1 + norm.weight.float()  # (D,)
        if self.kind == "rms":
            return F.rms_norm(x.float(), gain.shape, gain, norm.eps).to(x.dtype)  # (..., D)
        return F.layer_norm(x.float(), gain.shape, gain, None, norm.eps).to(x.dtype)  # (..., D)

    def extra_repr(self) -> str:
        return "zero_centred=True" if self.zero_centred else ""
