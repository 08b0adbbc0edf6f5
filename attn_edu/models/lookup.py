"""A one-head key-value lookup: the smallest model whose attention has to be sharp (notebook 03).

    x_s = LayerNorm(key_embedding(key_s))           the stored keys                  (B, S, C)
    x_q = LayerNorm(key_embedding(query))           the key asked for                (B, 1, C)
    m_s = value_embedding(value_s)                  what is stored with each key     (B, S, C)
    logits = unembed(Attention(x_q, x_s, m_s))      one head of size D = d_k         (B, V)

Trained on :func:`attn_edu.data.key_value_lookup`, it must find the query among the stored keys by content
and read the value stored there: attention as the soft database lookup of notebook 01. The query and the
stored keys share one embedding and one LayerNorm (a key is the same token whether stored or asked for).

The projections are initialised so that the premise of the ``1/√d_k`` argument holds at step 0: the
LayerNorm gives each token unit-variance features, and ``W^Q``, ``W^K`` have entries of variance ``1/C``,
so every coordinate of ``q`` and ``k`` has unit variance and ``q·k`` has variance ``D`` (notebook 03,
section 1). With ``D = 256`` the unscaled scores start with a standard deviation of 16.

:func:`train_lookup` trains one such model and records, at every step, the loss and the mean entropy of the
attention weights (:func:`attn_edu.attention.attention_entropy`).

Shapes:
    keys, values ``(B, S)``; query ``(B,)``; logits ``(B, V)``; weights ``(B, S)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from attn_edu._validate import check_positive_int, check_scale, check_shape, check_token_ids
from attn_edu.attention import attention_entropy
from attn_edu.data import LookupBatch, key_value_lookup
from attn_edu.multihead import MultiHeadAttention
from attn_edu.qk_norm import QKNorm
from attn_edu.train import train


@dataclass(frozen=True)
class LookupConfig:
    """Sizes of a :class:`KeyValueLookup`, and how its scores are scaled."""

    num_keys: int = 64  # distinct key tokens
    num_values: int = 64  # V: distinct value tokens, the classes the model predicts
    embed_dim: int = 32  # C: width of the token embeddings
    head_dim: int = 256  # D = d_k: size of q, k (and v)
    scale: float | None = None  # multiplies q·k before the softmax; None means 1/sqrt(D)
    qk_norm: Literal["layer", "rms"] | None = None  # normalise q and k per head (QKNorm), or not
    qk_gain: float = 1.0  # initial gain of both QK-norms (D ** -0.25 puts 1/sqrt(D) into them)

    def __post_init__(self) -> None:
        for name in ("num_keys", "num_values", "embed_dim", "head_dim"):
            check_positive_int(name, getattr(self, name))
        check_scale(self.scale, self.head_dim)
        if self.qk_norm not in (None, "layer", "rms"):
            raise ValueError(f"qk_norm: expected None, 'layer' or 'rms', got {self.qk_norm!r}")


class KeyValueLookup(nn.Module):
    """One attention head that looks a key up in a table of (key, value) pairs and predicts the value.

    Shapes:
        keys, values ``(B, S)`` ids; query ``(B,)`` ids; returns logits ``(B, V)``, and with
        ``need_weights=True`` also the attention weights ``(B, S)`` of the query over the stored keys.

    Example:
        >>> model = KeyValueLookup(LookupConfig(num_keys=10, num_values=5, embed_dim=8, head_dim=16))
        >>> keys, values = torch.tensor([[3, 7, 1]]), torch.tensor([[0, 4, 2]])
        >>> logits, weights = model(keys, values, torch.tensor([7]), need_weights=True)
        >>> logits.shape, weights.shape                  # (B, V), (B, S)
        (torch.Size([1, 5]), torch.Size([1, 3]))
    """

    def __init__(self, config: LookupConfig) -> None:
        super().__init__()
        if not isinstance(config, LookupConfig):
            raise ValueError(f"config: expected a LookupConfig, got {type(config).__name__}")
        self.config = c = config
        self.key_embedding = nn.Embedding(c.num_keys, c.embed_dim)
        self.value_embedding = nn.Embedding(c.num_values, c.embed_dim)
        self.key_norm = nn.LayerNorm(c.embed_dim)
        qk_norm = None if c.qk_norm is None else QKNorm(c.head_dim, kind=c.qk_norm, gain=c.qk_gain)
        self.attn = MultiHeadAttention(
            c.embed_dim, 1, head_dim=c.head_dim, bias=False, scale=c.scale, qk_norm=qk_norm
        )
        self.unembed = nn.Linear(c.embed_dim, c.num_values, bias=False)
        # Entries of variance 1/C: unit-variance tokens in, unit-variance coordinates of q and k out.
        for proj in (self.attn.q_proj, self.attn.k_proj):
            nn.init.normal_(proj.weight, std=1 / math.sqrt(c.embed_dim))

    def forward(
        self, keys: torch.Tensor, values: torch.Tensor, query: torch.Tensor, *, need_weights: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        B, S = check_token_ids("keys", keys, c.num_keys).values()
        check_token_ids("values", values, c.num_values)
        check_shape("values", values, "B S", B=B, S=S)
        check_shape("query", query, "B", B=B)
        check_token_ids("query", query[:, None], c.num_keys)  # (B, 1): one id per row
        stored = self.key_norm(self.key_embedding(keys))  # (B, S, C)
        asked = self.key_norm(self.key_embedding(query[:, None]))  # (B, 1, C)
        memory = self.value_embedding(values)  # (B, S, C)
        out = self.attn(asked, stored, memory, need_weights=need_weights)  # (B, 1, C) [, (B, 1, 1, S)]
        if not need_weights:
            return self.unembed(out[:, 0])  # (B, V)
        out, weights = out
        return self.unembed(out[:, 0]), weights[:, 0, 0]  # (B, V), (B, S)


@dataclass(frozen=True)
class LookupRun:
    """What :func:`train_lookup` recorded: one number per training step."""

    losses: list[float]  # cross-entropy of the answer on the step's batch (nats; log V = guessing)
    entropies: list[float]  # mean entropy of the query's attention weights over the S keys (nats)
    seconds: float  # wall-clock time of the training loop (TrainResult.seconds)

    def final(self, window: int = 10) -> tuple[float, float]:
        """Mean loss and mean entropy over the last ``window`` steps."""
        return sum(self.losses[-window:]) / window, sum(self.entropies[-window:]) / window

    def first_step_below(self, level: float, *, curve: str = "losses", window: int = 10) -> int | None:
        """The first step (0-based) at which the mean of ``curve`` over the last ``window`` steps is below
        ``level``; ``None`` if it never is. One step's value is noisy; the running mean is not.

        Example:
            >>> run = LookupRun(losses=[4.0, 3.0, 0.5, 0.1], entropies=[2.0, 1.0, 0.2, 0.0], seconds=0.0)
            >>> run.first_step_below(1.0, window=2), run.first_step_below(0.5, curve="entropies", window=1)
            (3, 2)
        """
        values = {"losses": self.losses, "entropies": self.entropies}.get(curve)
        if values is None:
            raise ValueError(f"curve: expected 'losses' or 'entropies', got {curve!r}")
        check_positive_int("window", window)
        for step in range(len(values)):
            recent = values[max(0, step - window + 1) : step + 1]
            if sum(recent) / len(recent) < level:
                return step
        return None


def lookup_loss(model: KeyValueLookup, batch: LookupBatch) -> torch.Tensor:
    """Cross-entropy of the stored value, predicted from the table and the query."""
    logits = model(batch.keys, batch.values, batch.query)  # (B, V)
    return F.cross_entropy(logits, batch.target)


def train_lookup(
    config: LookupConfig,
    *,
    seed: int = 0,
    steps: int = 150,
    lr: float = 1e-2,
    batch_size: int = 32,
    num_pairs: int = 16,
    threads: int | None = 1,
) -> LookupRun:
    """Train a fresh :class:`KeyValueLookup` with :func:`attn_edu.train.train`; record loss and entropy.

    ``seed`` fixes the initial weights and the batches, so two configs trained with one seed start from
    the same weights (wherever their parameters coincide) and see the same tables. AdamW, gradients
    clipped at norm 1, weight decay 0.01, a constant learning rate.

    ``threads`` (default 1) is the number of CPU threads while training: this model is tiny, so one thread
    is the fastest, and a run then gives the same numbers whatever the machine's thread count. During the
    run, denormal floats are flushed to zero (``torch.set_flush_denormal``, restored to off afterwards): a
    saturated softmax makes many ``exp`` results denormal, which made unscaled runs three to five times
    slower here.

    Example:
        >>> run = train_lookup(LookupConfig(embed_dim=8, head_dim=16), steps=3, batch_size=4, num_pairs=4)
        >>> len(run.losses), len(run.entropies)
        (3, 3)
    """
    check_positive_int("steps", steps)
    check_positive_int("batch_size", batch_size)
    check_positive_int("num_pairs", num_pairs)
    if num_pairs > config.num_keys:
        raise ValueError(f"num_pairs: expected at most num_keys={config.num_keys}, got {num_pairs}")
    entropies: list[float] = []

    def batches(generator: torch.Generator) -> LookupBatch:
        return key_value_lookup(
            batch_size, num_pairs, num_keys=config.num_keys, num_values=config.num_values, generator=generator
        )

    def loss_and_entropy(model: nn.Module, batch: LookupBatch) -> torch.Tensor:
        logits, weights = model(batch.keys, batch.values, batch.query, need_weights=True)  # (B, V), (B, S)
        entropies.append(attention_entropy(weights.detach()).mean().item())
        return F.cross_entropy(logits, batch.target)

    previous_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(check_positive_int("threads", threads))
    torch.set_flush_denormal(True)
    try:
        torch.manual_seed(seed)
        model = KeyValueLookup(config)
        result = train(
            model, batches, steps=steps, lr=lr, seed=seed, progress=False, loss_fn=loss_and_entropy
        )
    finally:
        torch.set_flush_denormal(False)
        torch.set_num_threads(previous_threads)
    return LookupRun(losses=result.losses, entropies=entropies, seconds=result.seconds)
