"""Autoregressive generation: pick a next token, append it, repeat; with or without a KV cache.

A decoder gives a distribution over the next token at every position; generation reads the last
one, chooses a token, feeds it back and repeats. Two independent choices:

- **How to choose.** ``temperature=0`` is greedy (always the argmax). Otherwise the logits are divided
  by the temperature, optionally cut to the ``top_k`` most likely tokens (Fan et al., 2018) or to the
  smallest set holding probability ``top_p`` (nucleus sampling, Holtzman et al., 2020, section 3.1),
  renormalised by the softmax, and sampled.
- **How to compute.** Without a cache every step re-runs the whole sequence. With a
  :class:`attn_edu.kv_cache.KVCache` the prompt is run once ("prefill") and every later step feeds only
  the newest token; the tokens are the same, the work per step no longer grows with the prefix.

Shapes:
    input_ids ``(B, T)``; logits ``(B, V)`` for the filtering helpers (any ``(..., V)`` works).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attn_edu._validate import check_floating, check_positive_int, check_shape, check_tensor
from attn_edu.delta_rule import DeltaStateLayer, GatedDeltaNet
from attn_edu.kv_cache import KVCache, KVCacheLayer, RollingKVCacheLayer
from attn_edu.multihead import MultiHeadAttention


def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Divide the logits by ``temperature``: below 1 sharpens the distribution, above 1 flattens it.

        p_i = exp(z_i / τ) / Σ_j exp(z_j / τ)

    Shapes:
        logits ``(..., V)``; returns ``(..., V)``.

    Example:
        >>> apply_temperature(torch.tensor([2.0, 1.0]), 0.5)
        tensor([4., 2.])
    """
    check_floating("logits", logits)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(
            f"temperature: expected a number > 0 (use 0 only in generate, for greedy), got {temperature!r}"
        )
    return logits / temperature


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the ``k`` largest logits and set the rest to ``-inf`` (their probability becomes 0).

    Ties with the ``k``-th largest value are all kept, so the support can exceed ``k`` on ties.

    Shapes:
        logits ``(..., V)``; returns ``(..., V)``.

    Example:
        >>> top_k_filter(torch.tensor([1.0, 3.0, 2.0]), 2)
        tensor([-inf, 3., 2.])
    """
    check_floating("logits", logits)
    check_positive_int("k", k)
    if k >= logits.shape[-1]:
        return logits
    kth_largest = logits.topk(k, dim=-1).values[..., -1:]  # (..., 1)
    return logits.masked_fill(logits < kth_largest, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Nucleus filtering: keep the most likely tokens until their probability reaches ``p``.

    Sort by probability; a token stays if the probability of the tokens ranked above it is still
    below ``p`` (Holtzman et al., 2020, section 3.1). The most likely token always stays, so the
    result is never empty; ``p = 1`` returns the logits unchanged.

    Shapes:
        logits ``(..., V)``; returns ``(..., V)``.

    Example:
        >>> logits = torch.tensor([0.5, 0.3, 0.2]).log()
        >>> top_p_filter(logits, 0.7).exp()          # 0.5 < 0.7, then 0.5 + 0.3 >= 0.7: stop
        tensor([0.5000, 0.3000, 0.0000])
    """
    check_floating("logits", logits)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
        raise ValueError(f"p: expected a probability in (0, 1], got {p!r}")
    if p >= 1:
        return logits
    sorted_logits, order = logits.sort(dim=-1, descending=True)  # (..., V)
    probs = sorted_logits.float().softmax(dim=-1)  # (..., V)
    mass_above = probs.cumsum(dim=-1) - probs  # (..., V): probability of the better-ranked tokens
    drop_sorted = mass_above >= p  # (..., V); rank 0 has mass_above 0 < p, so it always stays
    drop = drop_sorted.scatter(-1, order, drop_sorted)  # (..., V) back in vocabulary order
    return logits.masked_fill(drop, float("-inf"))


def next_token_probs(
    logits: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> torch.Tensor:
    """The distribution the next token is drawn from: temperature, then top-k, then top-p, then softmax.

        probs = softmax(top_p_filter(top_k_filter(logits / τ, top_k), top_p))

    The order is the one Hugging Face applies. ``temperature == 0`` is greedy: all the probability on
    the argmax (the first one on ties). ``top_k=None`` and ``top_p=None`` switch those filters off
    (``top_p=1`` keeps every token too). A filtered token gets exactly 0: its logit is ``-inf`` before
    the softmax. :func:`sample_next_token` draws from this distribution; notebook 10 plots it.

    Shapes:
        logits ``(..., V)``; returns ``(..., V)`` in float32, each row summing to 1.

    Example:
        >>> probs = next_token_probs(torch.tensor([2.0, 1.0, 0.0, -1.0]), top_k=2)
        >>> probs                                     # the two best tokens, renormalised
        tensor([0.7311, 0.2689, 0.0000, 0.0000])
        >>> next_token_probs(torch.tensor([0.0, 5.0, 1.0]), temperature=0.0)
        tensor([0., 1., 0.])
    """
    check_floating("logits", logits)
    V = check_shape("logits", logits, "... V")["V"]
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature < 0:
        raise ValueError(f"temperature: expected a number >= 0 (0 = greedy), got {temperature!r}")
    if temperature == 0:  # greedy ignores the filters (the argmax survives every one of them)
        return nn.functional.one_hot(logits.argmax(dim=-1), V).float()  # (..., V)
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k <= 0):
        raise ValueError(f"top_k: expected a positive int, or None for no top-k, got {top_k!r}")
    is_number = isinstance(top_p, (int, float)) and not isinstance(top_p, bool)
    if top_p is not None and not (is_number and 0 < top_p <= 1):
        raise ValueError(f"top_p: expected a probability in (0, 1], or None for no top-p, got {top_p!r}")
    logits = apply_temperature(logits.float(), temperature)  # (..., V)
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    return logits.softmax(dim=-1)  # (..., V), exactly 0 on filtered tokens


def sample_next_token(
    logits: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Choose one token per row: argmax when ``temperature == 0``, else sample the filtered softmax.

    The distribution is :func:`next_token_probs` (temperature, then top-k, then top-p, the order
    Hugging Face applies them). Greedy reads its argmax without a draw, so ``generator`` is not advanced.

    Shapes:
        logits ``(B, V)``; returns ``(B,)`` token ids.

    Example:
        >>> logits = torch.tensor([[0.0, 5.0, 1.0]])
        >>> sample_next_token(logits, temperature=0.0)
        tensor([1])
        >>> sample_next_token(logits, top_k=1, generator=torch.Generator().manual_seed(0))
        tensor([1])
    """
    check_floating("logits", logits)
    check_shape("logits", logits, "B V")
    probs = next_token_probs(logits, temperature=temperature, top_k=top_k, top_p=top_p)  # (B, V)
    if temperature == 0:
        return probs.argmax(dim=-1)  # (B,) greedy: the token holding all the mass, no draw
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)


def count_layers(model: nn.Module) -> int:
    """How many cache layers a decoder needs: ``model.config.num_layers``, else its attention modules.

    Every decoder here keeps its layers' self-attentions as
    :class:`attn_edu.multihead.MultiHeadAttention` modules, one per layer.
    """
    layers = getattr(getattr(model, "config", None), "num_layers", None)  # every config here has it
    if isinstance(layers, int):
        return layers
    count = sum(isinstance(m, MultiHeadAttention) for m in model.modules())
    if count == 0:
        raise ValueError(
            f"model: cannot tell how many layers {type(model).__name__} has (no config.num_layers and "
            "no MultiHeadAttention modules); pass use_cache=False"
        )
    return count


@torch.no_grad()
def new_cache(model: nn.Module) -> KVCache:
    """The decode memory ``model`` needs: a :class:`attn_edu.kv_cache.KVCache` layer per attention layer (rolling,
    for a model whose ``config.sliding_window`` is set), and a fixed-size
    :class:`attn_edu.delta_rule.DeltaStateLayer` for each layer whose ``blocks[i].attn`` is a
    :class:`attn_edu.delta_rule.GatedDeltaNet` (a hybrid such as Qwen3-Next's). Where a layer's own
    :class:`attn_edu.multihead.MultiHeadAttention` has another ``window`` than the config's (gpt-oss alternates
    sliding and full layers), that layer gets the cache its window needs: rolling of that many slots, or a
    full one for ``window=None``.

    Example:
        >>> from attn_edu.models import Llama, LlamaConfig
        >>> model = Llama(LlamaConfig(vocab_size=10, embed_dim=16, num_layers=2, num_heads=2, ffn_dim=32))
        >>> model.blocks[0].attn = GatedDeltaNet(16, 2)
        >>> [type(layer).__name__ for layer in new_cache(model).layers]
        ['DeltaStateLayer', 'KVCacheLayer']
    """
    window = getattr(getattr(model, "config", None), "sliding_window", None)  # Mistral-like models
    cache = KVCache(count_layers(model), window=window)
    for i, block in enumerate(getattr(model, "blocks", ())):
        attn = getattr(block, "attn", None)
        if isinstance(attn, GatedDeltaNet):
            cache.layers[i] = DeltaStateLayer()
        elif isinstance(attn, MultiHeadAttention) and attn.window != window:  # a window per layer
            cache.layers[i] = KVCacheLayer() if attn.window is None else RollingKVCacheLayer(attn.window)
    return cache


def generate(
    model: nn.Module,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    *,
    use_cache: bool = True,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    eos_token_id: int | None = None,
) -> torch.Tensor:
    """Extend ``input_ids`` by up to ``max_new_tokens`` tokens chosen by :func:`sample_next_token`.

    ``model(input_ids)`` must return logits ``(B, T, V)``, and with ``use_cache=True`` accept
    ``kv_cache=`` (:class:`attn_edu.kv_cache.KVCache`): the prompt is run once, then only the newest
    token each step; for a model whose ``config.sliding_window`` is set, each layer's cache is a
    :class:`attn_edu.kv_cache.RollingKVCacheLayer` of that many slots. A row that has produced ``eos_token_id`` keeps producing it (Hugging Face pads
    with ``pad_token_id`` instead); generation stops early once every row has. The model runs in
    ``eval()`` mode (no dropout) and is put back in its previous mode afterwards.

    Shapes:
        input_ids ``(B, T)``; returns ``(B, T + N)`` with ``N <= max_new_tokens`` new tokens.

    Example:
        >>> class Echo(nn.Module):                      # a "model" that always predicts token 3
        ...     def forward(self, ids):
        ...         return torch.nn.functional.one_hot(torch.full_like(ids, 3), 5).float()
        >>> generate(Echo(), torch.tensor([[1, 2]]), 3, use_cache=False)
        tensor([[1, 2, 3, 3, 3]])
    """
    _check_ids("input_ids", input_ids)
    check_positive_int("max_new_tokens", max_new_tokens)
    cache = new_cache(model) if use_cache else None

    def logits_for(ids: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        return model(new, kv_cache=cache) if use_cache else model(ids)  # (B, T', V)

    with _eval_mode(model):
        return _extend(logits_for, input_ids, max_new_tokens, eos_token_id, temperature=temperature,
                       top_k=top_k, top_p=top_p, generator=generator)  # fmt: skip


@torch.no_grad()
def generate_seq2seq(
    model: nn.Module,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    *,
    attention_mask: torch.Tensor | None = None,
    decoder_start_token_id: int = 0,
    use_cache: bool = True,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    eos_token_id: int | None = None,
) -> torch.Tensor:
    """Write an output for each input with an encoder-decoder (:class:`attn_edu.models.T5`).

    The encoder reads ``input_ids`` once (``model.encode``); the decoder then starts from
    ``decoder_start_token_id`` (T5: 0, its padding token) and adds one token per step
    (``model.decode``), choosing as :func:`generate` does. With ``use_cache=True`` each step feeds only
    the newest token: the :class:`attn_edu.kv_cache.KVCache` holds the decoder's self-attention keys and
    values, and its ``cross_layers`` the cross-attention's, projected from the encoder output once.
    ``attention_mask`` ``(B, S)`` marks the real input tokens (1) and hides the padding.

    Shapes:
        input_ids ``(B, S)``, attention_mask ``(B, S)``; returns the decoder's tokens ``(B, 1 + N)``,
        starting with ``decoder_start_token_id``, as Hugging Face's ``generate`` returns them.

    Example:
        >>> from attn_edu.models import T5, T5Config
        >>> t5 = T5(T5Config(vocab_size=10, embed_dim=16, num_heads=2, ffn_dim=32))
        >>> generate_seq2seq(t5, torch.tensor([[4, 5, 6]]), 4).shape
        torch.Size([1, 5])
    """
    _check_ids("input_ids", input_ids)
    check_positive_int("max_new_tokens", max_new_tokens)
    for name in ("encode", "decode"):
        if not callable(getattr(model, name, None)):
            raise ValueError(
                f"model: an encoder-decoder needs .encode() and .decode() (as attn_edu.models.T5 has); "
                f"{type(model).__name__} has no {name}(); for a decoder-only model use generate()"
            )
    layers = getattr(getattr(model, "config", None), "num_decoder_layers", None)
    cache = KVCache(layers if isinstance(layers, int) else count_layers(model)) if use_cache else None
    start = torch.full((input_ids.shape[0], 1), decoder_start_token_id, dtype=input_ids.dtype)  # (B, 1)

    with _eval_mode(model):
        memory = model.encode(input_ids, attention_mask)  # (B, S, C): once for the whole output

        def logits_for(ids: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
            if use_cache:
                return model.decode(new, memory, attention_mask, kv_cache=cache)  # (B, 1, V)
            return model.decode(ids, memory, attention_mask)  # (B, T', V)

        return _extend(logits_for, start.to(input_ids.device), max_new_tokens, eos_token_id,
                       temperature=temperature, top_k=top_k, top_p=top_p, generator=generator)  # fmt: skip


@dataclass
class SpeculativeStats:
    """What one :func:`speculative_generate` call did."""

    rounds: int = 0  # draft-then-verify rounds
    proposed: int = 0  # tokens the draft proposed
    accepted: int = 0  # of those, tokens the target accepted
    target_calls: int = 0  # forward passes of the target, the prompt's included
    draft_calls: int = 0  # forward passes of the draft, the prompt's included
    new_tokens: int = 0  # tokens returned after the prompt

    @property
    def acceptance_rate(self) -> float:
        """Share of the proposed tokens that were accepted."""
        return self.accepted / self.proposed if self.proposed else 0.0


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Where a rejected draft token is resampled from: ``max(0, p - q)``, renormalised (Leviathan et al., 2023,
    Algorithm 1). Drawing from it after a rejection makes the accepted-or-resampled token exactly ``p``-distributed;
    where ``p <= q`` everywhere (so ``p == q``) nothing is ever rejected, and ``p`` itself is returned.

    Shapes:
        p, q ``(V,)``, the target's and the draft's distributions; returns ``(V,)``.

    Example:
        >>> residual_distribution(torch.tensor([0.5, 0.3, 0.2]), torch.tensor([0.2, 0.6, 0.2]))
        tensor([1., 0., 0.])
    """
    residual = (p - q).clamp(min=0)  # (V,)
    total = residual.sum()
    return residual / total if total > 0 else p


@torch.no_grad()
def speculative_generate(
    target: nn.Module,
    draft: nn.Module,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    *,
    gamma: int = 4,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    stats: SpeculativeStats | None = None,
) -> torch.Tensor:
    """Generate with the ``target`` model, ``draft`` guessing ``gamma`` tokens ahead that the target checks in one
    cached forward pass (speculative decoding: Leviathan, Kalman and Matias, ICML 2023; Chen et al., 2023).

    Each round the draft proposes ``x_1 .. x_gamma`` from its distributions ``q``; the target reads them all at once
    and gives its own ``p`` at every position. Token ``x_i`` is kept with probability ``min(1, p(x_i) / q(x_i))``;
    at the first rejection the token is drawn from :func:`residual_distribution` instead and the round ends; when
    all are kept the target's distribution after ``x_gamma`` gives one more. Every returned token is then
    distributed exactly as the target alone would sample it (greedy: the same tokens as
    :func:`generate`), while the target runs once per round instead of once per token. Both caches are cut back
    to the accepted tokens (:meth:`attn_edu.kv_cache.KVCache.crop`). ``temperature``, ``top_k`` and ``top_p``
    shape both models' distributions, as :func:`next_token_probs` does. ``stats`` (a :class:`SpeculativeStats`)
    receives the counts. One sequence at a time.

    Shapes:
        input_ids ``(1, T)``; returns ``(1, T + max_new_tokens)``.
    """
    _check_ids("input_ids", input_ids)
    check_positive_int("max_new_tokens", max_new_tokens)
    check_positive_int("gamma", gamma)
    if input_ids.shape[0] != 1:
        raise ValueError(
            f"input_ids: speculative decoding here runs one sequence, shape (1, T); got {tuple(input_ids.shape)}"
        )
    stats = SpeculativeStats() if stats is None else stats
    sampling = {"temperature": temperature, "top_k": top_k, "top_p": top_p}
    caches = {"target": new_cache(target), "draft": new_cache(draft)}

    def draw(probs: torch.Tensor) -> torch.Tensor:  # (V,) -> () a token id
        return probs.argmax() if temperature == 0 else torch.multinomial(probs, 1, generator=generator)[0]

    ids, start = input_ids, input_ids.shape[1]
    with _eval_mode(target), _eval_mode(draft):
        while ids.shape[1] < start + max_new_tokens:
            g = min(gamma, start + max_new_tokens - ids.shape[1])
            proposals, q = [], []  # g token ids, g distributions (V,)
            new = ids[:, caches["draft"].seq_len :]  # what the draft has not read yet: 1 or 2 tokens
            for _ in range(g):
                q.append(next_token_probs(draft(new, kv_cache=caches["draft"])[0, -1], **sampling))  # (V,)
                proposals.append(draw(q[-1]))
                new = proposals[-1].view(1, 1)
            stats.draft_calls += g
            read = ids.shape[1] - caches["target"].seq_len  # tokens of ids the target has not read
            block = torch.cat([ids[:, caches["target"].seq_len :], torch.stack(proposals).view(1, g)], dim=1)
            p = next_token_probs(
                target(block, kv_cache=caches["target"])[0, read - 1 :], **sampling
            )  # (g+1, V)
            stats.target_calls += 1
            kept = 0
            for i, token in enumerate(proposals):
                if temperature == 0:
                    keep = bool(p[i].argmax() == token)
                else:
                    ratio = (p[i, token] / q[i][token]).clamp(max=1.0)
                    keep = bool(torch.rand((), generator=generator) < ratio)
                if not keep:
                    break
                kept += 1
            last = draw(p[g]) if kept == g else draw(residual_distribution(p[kept], q[kept]))
            ids = torch.cat([ids, torch.stack([*proposals[:kept], last]).view(1, -1).to(ids.dtype)], dim=1)
            caches["target"].crop(ids.shape[1] - 1)  # keep what precedes the newest token
            caches["draft"].crop(min(caches["draft"].seq_len, ids.shape[1] - 1))
            stats.rounds += 1
            stats.proposed += g
            stats.accepted += kept
    ids = ids[:, : start + max_new_tokens]  # a round that kept every guess may add one token more
    stats.new_tokens = ids.shape[1] - start
    return ids


def _check_ids(name: str, ids: torch.Tensor) -> None:
    check_tensor(name, ids)
    check_shape(name, ids, "B T")
    if ids.is_floating_point() or ids.dtype == torch.bool:
        raise ValueError(f"{name}: expected integer token ids, got dtype {ids.dtype}")


@contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    """``eval()`` (no dropout) while generating; the previous mode afterwards."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def _extend(
    logits_for: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    ids: torch.Tensor,
    max_new_tokens: int,
    eos_token_id: int | None,
    **sampling: Any,
) -> torch.Tensor:
    """The generation loop: ``logits_for(all_ids, newest_ids)`` gives logits, the last position's
    distribution picks the next token, which is appended; rows that produced ``eos_token_id`` keep it."""
    B = ids.shape[0]
    new = ids  # what the model reads this step: the prompt (or start token), then one token
    finished = torch.zeros(B, dtype=torch.bool, device=ids.device)  # (B,)
    for _ in range(max_new_tokens):
        logits = logits_for(ids, new)  # (B, T', V)
        next_token = sample_next_token(logits[:, -1], **sampling)  # (B,)
        if eos_token_id is not None:
            next_token = next_token.masked_fill(finished, eos_token_id)
            finished |= next_token == eos_token_id
        ids = torch.cat([ids, next_token[:, None]], dim=1)  # (B, T + 1)
        new = next_token[:, None]  # (B, 1)
        if eos_token_id is not None and bool(finished.all()):
            break
    return ids
