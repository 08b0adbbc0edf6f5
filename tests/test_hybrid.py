"""The hybrid experiment: four decoders that differ only in their token mixers, decoding through the memory each
needs (KV cache for attention layers, none for layers that share their keys and values, a fixed state for Gated
DeltaNet ones) as their full forward pass computes."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from attn_edu.delta_rule import DeltaStateLayer, GatedDeltaNet
from attn_edu.experiments import hybrid
from attn_edu.generation import generate, new_cache
from attn_edu.kv_cache import KVCacheLayer
from attn_edu.kv_sharing import SharedKVAttention
from attn_edu.multihead import MultiHeadAttention

TINY = replace(hybrid.CONFIG, vocab_size=11, embed_dim=24, ffn_dim=32)


def test_the_variants_differ_only_in_their_mixers() -> None:
    models = {variant: hybrid.build(variant, TINY) for variant in hybrid.VARIANTS}
    for variant, model in models.items():
        letter = {GatedDeltaNet: "L", SharedKVAttention: "S", MultiHeadAttention: "A"}
        assert "".join(letter[type(b.attn)] for b in model.blocks) == hybrid.VARIANTS[variant]
    rest = {
        variant: sum(p.numel() for name, p in model.named_parameters() if ".attn." not in name)
        for variant, model in models.items()
    }
    assert len(set(rest.values())) == 1  # embeddings, norms and feed-forwards are the same size
    with pytest.raises(ValueError, match="variant: expected one of"):
        hybrid.build("mamba", TINY)


@pytest.mark.parametrize("variant", list(hybrid.VARIANTS))
def test_decoding_through_the_cache_equals_the_full_pass(variant: str) -> None:
    torch.manual_seed(0)
    model = hybrid.build(variant, TINY).eval()
    ids = torch.randint(11, (2, 9), generator=torch.Generator().manual_seed(1))
    cache = new_cache(model)
    assert [type(layer) for layer in cache.layers] == [
        DeltaStateLayer if kind == "L" else KVCacheLayer for kind in hybrid.VARIANTS[variant]
    ]
    with torch.no_grad():
        full = model(ids)
        steps = [model(ids[:, :4], kv_cache=cache)] + [
            model(ids[:, t : t + 1], kv_cache=cache) for t in range(4, 9)
        ]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-5)
    greedy = generate(model, ids[:, :3], 6)
    torch.testing.assert_close(greedy, generate(model, ids[:, :3], 6, use_cache=False))


def test_decode_memory_grows_only_with_attention_layers() -> None:
    torch.manual_seed(0)
    H_kv, D = TINY.num_kv_heads, TINY.head_dim
    per_attention_layer = 2 * H_kv * D * 4  # K and V, float32, per token
    delta = hybrid.DELTA
    state = delta["num_heads"] * delta["k_dim"] * delta["v_dim"] * 4
    conv = GatedDeltaNet(TINY.embed_dim, **delta).conv_size - 1  # inputs the short convolution keeps
    conv_bytes = conv * (2 * delta["num_k_heads"] * delta["k_dim"] + delta["num_heads"] * delta["v_dim"]) * 4
    for variant, pattern in hybrid.VARIANTS.items():
        model = hybrid.build(variant, TINY).eval()
        small, large = hybrid.decode_bytes(model, 10), hybrid.decode_bytes(model, 30)
        attention, linear = pattern.count("A"), pattern.count("L")  # "S" layers keep nothing
        assert large - small == 20 * attention * per_attention_layer
        assert small == 10 * attention * per_attention_layer + linear * (state + conv_bytes)


def test_every_shipped_run_is_the_recorded_one() -> None:
    """Every variant and seed ships; each, measured again from its float16 weights, gives its recorded loss."""
    runs, record = hybrid.load(), hybrid.read_record()
    expected = {f"{variant}/{seed}" for variant in hybrid.VARIANTS for seed in hybrid.SEEDS}
    assert set(record["runs"]) == set(record["shipped"]) == expected
    assert {f"{variant}/{seed}" for variant, seed in runs} == expected
    for (variant, seed), model in runs.items():
        entry = record["runs"][f"{variant}/{seed}"]
        assert hybrid.held_out_loss(model, 32) == pytest.approx(entry["loss_first_32"], abs=1e-4)
        assert len(entry["train_losses"]) == record["recipe"]["steps"]
        assert entry["decode_bytes"] == {str(n): hybrid.decode_bytes(model, n) for n in hybrid.MEMORY_AT}


def test_time_decoding_times_each_variant_at_both_lengths() -> None:
    torch.manual_seed(0)
    models = {(variant, 0): hybrid.build(variant, TINY).eval() for variant in hybrid.VARIANTS}
    timing = hybrid.time_decoding(models, threads=1, contexts=(8, 16))
    assert timing["threads"] == 1 and set(timing["ms"]) == set(hybrid.VARIANTS)
    assert all(ms > 0 for per in timing["ms"].values() for ms in per.values())
    assert all(set(per) == {"8", "16"} for per in timing["ms"].values())


def test_recall_scores_an_exact_copier_perfect_and_a_guesser_at_chance() -> None:
    class Copier(torch.nn.Module):
        """Looks up the previous occurrence of each token and predicts what followed it: the induction rule."""

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            logits = torch.zeros(*ids.shape, hybrid.RECALL_CONFIG.vocab_size)
            for b, row in enumerate(ids.tolist()):
                for t, token in enumerate(row):
                    earlier = [s for s in range(t) if row[s] == token]
                    if earlier:
                        logits[b, t, row[earlier[-1] + 1]] = 30.0
            return logits

    class Guesser(torch.nn.Module):
        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return torch.zeros(*ids.shape, hybrid.RECALL_CONFIG.vocab_size)

    perfect, chance = hybrid.recall_scores(Copier(), count=8), hybrid.recall_scores(Guesser(), count=8)
    assert set(perfect) == {str(n) for n in hybrid.RECALL_AT}
    assert all(s["accuracy"] == 1.0 and s["loss"] < 1e-6 for s in perfect.values())
    log_v = torch.log(torch.tensor(float(hybrid.RECALL_CONFIG.vocab_size))).item()
    assert all(s["loss"] == pytest.approx(log_v, abs=1e-4) for s in chance.values())


def test_the_recorded_recall_runs_start_as_they_train_here_and_separate_the_mixers() -> None:
    """Every variant and seed is recorded for the full recipe; the first steps of one run, trained again, give the
    recorded losses; attention copies where all DeltaNet cannot (the claim notebook 11 makes, across seeds)."""
    recall = hybrid.read_record()["recall"]
    runs = recall["runs"]
    assert set(runs) == {f"{variant}/{seed}" for variant in hybrid.VARIANTS for seed in hybrid.SEEDS}
    assert all(len(run["train_losses"]) == hybrid.RECALL["steps"] for run in runs.values())
    _, losses, _ = hybrid.train_recall("hybrid", 1, steps=5)
    assert losses == pytest.approx(runs["hybrid/1"]["train_losses"][:5], abs=1e-3)
    at_24 = {key: run["scores"]["24"]["accuracy"] for key, run in runs.items()}
    assert min(at_24[f"attention/{s}"] for s in hybrid.SEEDS) > max(
        at_24[f"linear/{s}"] for s in hybrid.SEEDS
    )
    table = hybrid.recall_table().splitlines()
    assert len(table) == 2 + len(hybrid.VARIANTS) and "n = 32" in table[1] and "3 seeds" in table[0]
