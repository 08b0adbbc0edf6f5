"""Speculative decoding: greedy output equal to the target's own, token for token; sampled output distributed as
the target's (a chi-square test over every pair of first two tokens, which fails when the rejected token is
resampled from the target's distribution instead of the residual); the caches cut back to what was accepted."""

from __future__ import annotations

import math

import pytest
import torch

from attn_edu import generation
from attn_edu.generation import SpeculativeStats, generate, next_token_probs, speculative_generate
from attn_edu.kv_cache import KVCache
from attn_edu.models import GPT, GPTConfig, Llama, LlamaConfig


def _pair(vocab: int = 16, *, std: float = 0.5, draft_std: float = 0.5) -> tuple[GPT, GPT]:
    """A target and a smaller, different draft over the same vocabulary, random but far from uniform."""
    torch.manual_seed(0)
    target = GPT(
        GPTConfig(vocab_size=vocab, max_seq_len=96, embed_dim=32, num_layers=2, num_heads=4, ffn_dim=64)
    )
    draft = GPT(
        GPTConfig(vocab_size=vocab, max_seq_len=96, embed_dim=16, num_layers=1, num_heads=2, ffn_dim=32)
    )
    for model, spread in ((target, std), (draft, draft_std)):
        for p in model.parameters():
            torch.nn.init.normal_(p, std=spread)
    return target.eval(), draft.eval()


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_greedy_speculation_returns_the_targets_own_greedy_tokens(gamma: int) -> None:
    target, draft = _pair()
    prompt = torch.tensor([[1, 5, 2]])
    stats = SpeculativeStats()
    fast = speculative_generate(target, draft, prompt, 40, gamma=gamma, stats=stats)
    assert torch.equal(fast, generate(target, prompt, 40))
    assert stats.new_tokens == 40 and stats.accepted <= stats.proposed
    # every round adds the accepted guesses and one token of the target's
    assert stats.accepted + stats.rounds >= 40 and stats.target_calls == stats.rounds
    assert stats.rounds < 40 or stats.accepted == 0


def test_a_draft_equal_to_the_target_is_always_accepted() -> None:
    target, _ = _pair()
    stats = SpeculativeStats()
    out = speculative_generate(target, target, torch.tensor([[3]]), 20, gamma=4, stats=stats)
    assert torch.equal(out, generate(target, torch.tensor([[3]]), 20))
    assert stats.acceptance_rate == 1.0 and stats.target_calls == 4  # 5 tokens a round: 4 rounds for 20


def _joint_counts(target: GPT, draft: GPT, prompt: torch.Tensor, samples: int, vocab: int) -> torch.Tensor:
    counts = torch.zeros(vocab, vocab)
    g = torch.Generator().manual_seed(1)
    for _ in range(samples):
        out = speculative_generate(
            target, draft, prompt, 2, gamma=1, temperature=1.0, generator=g
        )  # both paths
        counts[out[0, -2], out[0, -1]] += 1
    return counts


def _chi_square(counts: torch.Tensor, expected_probs: torch.Tensor) -> float:
    expected = expected_probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.mark.slow
def test_sampled_tokens_follow_the_targets_distribution_and_need_the_residual(monkeypatch) -> None:  # noqa: ANN001
    vocab = 5
    target, draft = _pair(vocab, std=0.2, draft_std=0.8)  # a draft sharper than the target: many rejections
    prompt = torch.tensor([[2, 0]])
    with torch.no_grad():  # the target's exact distribution over its first two tokens: V x V cells
        first = next_token_probs(target(prompt)[0, -1])  # (V,)
        after = torch.stack(
            [next_token_probs(target(torch.tensor([[2, 0, x]]))[0, -1]) for x in range(vocab)]
        )
    exact = first[:, None] * after  # (V, V)
    q_first = next_token_probs(draft(prompt)[0, -1])
    assert (first - q_first).abs().sum() > 0.3  # the draft is wrong often enough for rejections to matter
    dof = vocab * vocab - 1
    bound = dof + 6 * math.sqrt(2 * dof)  # the chi-square's mean plus six standard deviations
    right = _chi_square(_joint_counts(target, draft, prompt, 700, vocab), exact)
    assert right < bound, (right, bound)
    # Resample a rejected token from p itself instead of the residual: p's mass where the draft overshoots is
    # counted twice, and the test sees it.
    monkeypatch.setattr(generation, "residual_distribution", lambda p, q: p)
    wrong = _chi_square(_joint_counts(target, draft, prompt, 700, vocab), exact)
    assert wrong > bound, (wrong, bound)


def test_crop_keeps_the_first_tokens_and_refuses_what_it_cannot_cut() -> None:
    cache = KVCache(2)
    for layer in cache.layers:
        layer.update(torch.arange(10.0).view(1, 1, 5, 2), torch.arange(10.0).view(1, 1, 5, 2))
    cache.crop(3)
    assert cache.seq_len == 3 and cache.layers[0].k.shape == (1, 1, 3, 2)
    k_all, _ = cache.layers[0].update(torch.full((1, 1, 1, 2), -1.0), torch.full((1, 1, 1, 2), -1.0))
    assert k_all[0, 0, :, 0].tolist() == [0.0, 2.0, 4.0, -1.0]
    with pytest.raises(ValueError, match="length: expected an int from 0 to seq_len = 4"):
        cache.crop(5)
    with pytest.raises(ValueError, match="only a full cache"):
        KVCache(1, window=4).crop(0)


def test_bad_calls_name_the_argument() -> None:
    target, draft = _pair()
    with pytest.raises(ValueError, match=r"input_ids: speculative decoding here runs one sequence"):
        speculative_generate(target, draft, torch.zeros(2, 3, dtype=torch.long), 4)
    with pytest.raises(ValueError, match="gamma"):
        speculative_generate(target, draft, torch.zeros(1, 3, dtype=torch.long), 4, gamma=0)
    windowed = Llama(
        LlamaConfig(vocab_size=16, embed_dim=16, num_layers=1, num_heads=2, ffn_dim=32, sliding_window=4)
    )
    with pytest.raises(ValueError, match="only a full cache"):
        speculative_generate(windowed, windowed, torch.zeros(1, 6, dtype=torch.long), 4)
