"""Mixture of experts: route each token to a few feed-forward experts (notebook 11).

Not an attention trick, but the other way large models spend compute sparsely: a router scores the
experts for each token and only the top ``k`` run (Shazeer et al. 2017; Switch Transformer, Fedus et al.
2022). A load-balancing loss keeps the tokens spread over the experts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from attn_edu._validate import check_positive_int, check_shape


@dataclass(frozen=True)
class RoutingStats:
    """How a router spread the tokens over the experts, and the loss that keeps the spread even."""

    tokens_per_expert: torch.Tensor  # (E,) long: assignments each expert received (sums to N·k)
    fraction: torch.Tensor  # (E,) float: tokens_per_expert / (N·k), the f_i of Switch eq. 4
    mean_probability: torch.Tensor  # (E,) float: router probability averaged over tokens, P_i of eq. 5
    load_balancing_loss: torch.Tensor  # () float: E · Σ_i f_i · P_i; 1 when perfectly balanced


class TopKRouter(nn.Module):
    """Send each token to its ``k`` best-scoring experts, with softmax weights over those ``k``.

    ``logits = x W_g``; keep the top ``k`` per token; ``weights = softmax(top-k logits)``
    (Shazeer et al. 2017, eq. 3-5, without the tunable noise). The load-balancing loss is Switch's
    ``E · Σ_i f_i · P_i`` (Fedus et al. 2022, §2.2, eq. 4-6), with ``f_i`` counting all ``k``
    assignments per token; its gradient flows through ``P_i``, the mean router probability.
    Taking the softmax over all ``E`` logits, keeping the top ``k`` probabilities and dividing them by their
    sum gives the same weights (the common factor cancels): Qwen3-Next's router with ``norm_topk_prob``.
    ``bias=True`` gives ``W_g`` a bias, one learned offset per expert (gpt-oss's router, which also takes
    the softmax over the top ``k`` only; OpenAI, "gpt-oss-120b & gpt-oss-20b Model Card", 2025, §2.1).

    Shapes:
        x ``(N, C)`` (N tokens); returns weights ``(N, k)``, expert_index ``(N, k)`` and
        :class:`RoutingStats`.

    Example:
        >>> router = TopKRouter(8, num_experts=4, k=2)
        >>> weights, expert_index, stats = router(torch.randn(5, 8))
        >>> weights.shape, int(stats.tokens_per_expert.sum())      # every token counted k times
        (torch.Size([5, 2]), 10)
    """

    def __init__(self, dim: int, num_experts: int, *, k: int = 2, bias: bool = False) -> None:
        super().__init__()
        check_positive_int("dim", dim)
        check_positive_int("num_experts", num_experts)
        check_positive_int("k", k)
        if k > num_experts:
            raise ValueError(f"k: expected at most num_experts={num_experts}, got {k}")
        self.num_experts = num_experts
        self.k = k
        self.gate = nn.Linear(dim, num_experts, bias=bias)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, RoutingStats]:
        check_shape("x", x, "N C", C=self.gate.in_features)
        N, C = x.shape
        logits = self.gate(x)  # (N, E)
        top_logits, expert_index = logits.topk(self.k, dim=-1)  # (N, k), (N, k)
        weights = torch.softmax(top_logits.float(), dim=-1).to(x.dtype)  # (N, k), rows sum to 1

        tokens_per_expert = torch.bincount(expert_index.flatten(), minlength=self.num_experts)  # (E,)
        fraction = tokens_per_expert.float() / (N * self.k)  # (E,)
        mean_probability = torch.softmax(logits.float(), dim=-1).mean(dim=0)  # (E,)
        loss = self.num_experts * (fraction * mean_probability).sum()
        return weights, expert_index, RoutingStats(tokens_per_expert, fraction, mean_probability, loss)


@dataclass(frozen=True)
class ClampedSwiGLU:
    """gpt-oss's gated unit: SwiGLU with clamped inputs, a steeper Swish, and ``up + 1``.

        gate = min(gate, limit),   up = clamp(up, −limit, limit)
        hidden = gate · sigmoid(alpha · gate) · (up + 1)

    gpt-oss's experts use it in place of ``Swish(gate) · up`` (OpenAI, "gpt-oss-120b & gpt-oss-20b Model
    Card", 2025, §2.1, which describes it only as a SwiGLU with clamping and a residual connection). The
    clamps bound what one hidden unit can contribute; ``up + 1`` lets the gate's own Swish through when
    ``up`` is 0 (the "residual"); ``alpha = 1.702`` is the sigmoid approximation of GELU,
    ``GELU(x) ≈ x · sigmoid(1.702 x)`` (Hendrycks & Gimpel, 2016, §2), where plain SwiGLU has ``alpha = 1``.
    The formula is read from transformers' ``GptOssExperts``; the card gives no equation. Pass it to
    :class:`attn_edu.blocks.SwiGLUFeedForward` as ``unit=``.

    Shapes:
        gate, up ``(..., hidden)``; returns ``(..., hidden)``.

    Example:
        >>> unit = ClampedSwiGLU(limit=7.0, alpha=1.702)
        >>> unit(torch.tensor([100.0]), torch.tensor([-100.0]))   # 7 · sigmoid(1.702 · 7) · (−7 + 1)
        tensor([-41.9997])
    """

    limit: float = 7.0  # gate clamped to at most limit, up to [−limit, limit] (gpt-oss: 7.0)
    alpha: float = 1.702  # the Swish's slope, gate · sigmoid(alpha · gate) (gpt-oss: 1.702; SiLU: 1)

    def __post_init__(self) -> None:
        for name in ("limit", "alpha"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ValueError(f"{name}: expected a finite number > 0, got {value!r}")

    def __call__(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        gate = gate.clamp(max=self.limit)  # (..., hidden): only from above
        up = up.clamp(-self.limit, self.limit)  # (..., hidden)
        return gate * torch.sigmoid(self.alpha * gate) * (up + 1)  # (..., hidden)


class MoEFeedForward(nn.Module):
    """A feed-forward layer made of ``num_experts`` FFNs; each token runs through only ``k`` of them.

    ``y = Σ_{e in top-k(x)} weight_e(x) · FFN_e(x)``. Parameters grow with ``num_experts`` while the
    compute per token stays that of ``k`` FFNs (Shazeer et al. 2017; Fedus et al. 2022). Each expert
    is ``Linear(C, hidden) → GELU → Linear(hidden, C)`` unless ``expert`` builds another kind: called once
    per expert with no arguments, it returns a module mapping ``(n, C)`` to ``(n, C)`` (gpt-oss:
    ``lambda: SwiGLUFeedForward(C, hidden, bias=True, unit=ClampedSwiGLU())``, the FFN from
    :mod:`attn_edu.blocks`, with ``router_bias=True``: :class:`TopKRouter`'s ``bias``). No capacity limit:
    no token is dropped.

    ``shared_expert``, a module mapping ``(n, C)`` to ``(n, C)``, runs on *every* token beside the routed
    ones, scaled per token by a learned gate ``sigmoid(x w_s)`` (``shared_expert_gate``, one number per
    token): ``y = Σ_{e in top-k} weight_e · FFN_e(x) + sigmoid(x w_s) · FFN_shared(x)``. What every token
    needs is learned once there, so the routed experts can specialise (DeepSeekMoE, Dai et al. 2024, §3.2,
    whose shared experts are ungated; Qwen2-MoE and Qwen3-Next add the sigmoid gate).

    Shapes:
        x ``(B, T, C)``; returns ``(B, T, C)`` and :class:`RoutingStats` (add
        ``stats.load_balancing_loss`` times a small factor, e.g. 0.01, to the training loss).

    Example:
        >>> moe = MoEFeedForward(8, 16, num_experts=4, k=2)
        >>> y, stats = moe(torch.randn(2, 3, 8))
        >>> y.shape, stats.tokens_per_expert.shape
        (torch.Size([2, 3, 8]), torch.Size([4]))
    """

    def __init__(
        self,
        dim: int,
        hidden_dim: int,
        num_experts: int,
        *,
        k: int = 2,
        router_bias: bool = False,
        expert: Callable[[], nn.Module] | None = None,
        shared_expert: nn.Module | None = None,
    ) -> None:
        super().__init__()
        check_positive_int("hidden_dim", hidden_dim)
        if expert is not None and not callable(expert):
            raise ValueError(f"expert: expected None or a function that builds one expert, got {expert!r}")
        if shared_expert is not None and not isinstance(shared_expert, nn.Module):
            raise ValueError(
                f"shared_expert: expected None or an nn.Module, got {type(shared_expert).__name__}"
            )
        self.shared_expert = shared_expert
        if shared_expert is not None:
            self.shared_expert_gate = nn.Linear(dim, 1, bias=False)  # w_s: how much of it each token takes
        self.router = TopKRouter(dim, num_experts, k=k, bias=router_bias)
        if expert is None:

            def expert() -> nn.Module:
                return nn.Sequential(nn.Linear(dim, hidden_dim), nn.GELU(), nn.Linear(hidden_dim, dim))

        self.experts = nn.ModuleList(expert() for _ in range(num_experts))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, RoutingStats]:
        check_shape("x", x, "B T C", C=self.router.gate.in_features)
        B, T, C = x.shape
        tokens = x.reshape(B * T, C)  # (N, C)
        weights, expert_index, stats = self.router(tokens)  # (N, k), (N, k)
        out = torch.zeros_like(tokens)  # (N, C)
        for e, expert in enumerate(self.experts):
            token_ids, slot = torch.nonzero(expert_index == e, as_tuple=True)  # tokens routed to e
            if token_ids.numel() == 0:
                continue
            expert_out = expert(tokens[token_ids])  # (n_e, C): only this expert's tokens
            out.index_add_(0, token_ids, expert_out * weights[token_ids, slot, None])  # (N, C)
        if self.shared_expert is not None:  # every token, through its own gate
            gate = torch.sigmoid(self.shared_expert_gate(tokens))  # (N, 1)
            out = out + gate * self.shared_expert(tokens)  # (N, C)
        return out.reshape(B, T, C), stats  # (B, T, C)
