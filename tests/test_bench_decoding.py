"""The decoding benchmarks of notebook 10: speculative decoding (``attn_edu.bench.speculative``) and the quantised
cache (``attn_edu.bench.kv_quant``), on tiny models, and their records as shipped."""

from __future__ import annotations

import math

import pytest
import torch

from attn_edu.bench import kv_quant as quant_bench
from attn_edu.bench import speculative as spec_bench
from attn_edu.experiments import shipped
from attn_edu.models import GPT, GPTConfig


def _tiny(seed: int, layers: int = 2) -> GPT:
    torch.manual_seed(seed)
    config = GPTConfig(
        vocab_size=12, max_seq_len=64, embed_dim=16, num_layers=layers, num_heads=2, ffn_dim=32
    )
    return GPT(config).eval()


def test_the_predicted_tokens_per_pass_match_a_simulation_of_independent_guesses() -> None:
    """Equation 1 of Leviathan et al. against rounds drawn at random: keep guesses while a coin says so, then one
    token more (the resampled or the bonus one)."""
    g = torch.Generator().manual_seed(0)
    for alpha, gamma in [(0.3, 2), (0.7, 4), (0.9, 8)]:
        kept = torch.rand(200_000, gamma, generator=g) < alpha  # (rounds, gamma)
        tokens = kept.int().cumprod(dim=1).sum(dim=1) + 1  # guesses kept before the first rejection, + 1
        predicted = spec_bench.expected_tokens_per_pass(alpha, gamma)
        assert abs(tokens.float().mean().item() - predicted) < 0.02, (alpha, gamma, predicted)


def test_a_draft_equal_to_the_target_is_always_accepted_and_greedy_equals_the_target() -> None:
    target = _tiny(0)
    prompts = [torch.randint(12, (1, 6), generator=torch.Generator().manual_seed(i)) for i in range(2)]
    record = spec_bench.measure(target, target, prompts, 12, [3], temperatures=(0.0,), runs=1, threads=1)
    assert [r["gamma"] for r in record["rows"]] == [1, 3]  # gamma = 1 always: the alpha of the predictions
    row = record["rows"][1]
    assert row["accepted_share"] == 1.0 and row["same_as_target"] is True
    assert row["tokens_per_target_pass"] == pytest.approx(12 / math.ceil(12 / 4))  # 4 tokens a pass, 3 passes
    assert 0.5 < record["setup"]["draft_cost"] < 2  # the same model: the same cost, give or take the timer


def test_a_weaker_draft_still_gives_the_target_greedy_tokens_at_more_passes() -> None:
    target, draft = _tiny(0), _tiny(1, layers=1)
    prompts = [torch.randint(12, (1, 6), generator=torch.Generator().manual_seed(5))]
    record = spec_bench.measure(target, draft, prompts, 16, [4], temperatures=(0.0,), runs=1, threads=1)
    one, four = record["rows"]
    assert one["same_as_target"] is True and four["same_as_target"] is True and four["accepted_share"] < 1
    assert 1 <= one["tokens_per_target_pass"] <= four["tokens_per_target_pass"] < 5
    # at gamma = 1 the prediction is the measurement itself: 1 + alpha tokens a pass
    assert one["predicted_tokens_per_pass"] == pytest.approx(1 + one["accepted_share"])


def test_the_float_row_of_the_cache_table_is_the_full_forward_loss() -> None:
    model = _tiny(0)
    windows = torch.randint(12, (3, 33), generator=torch.Generator().manual_seed(2))
    rows = quant_bench.measure(model, windows)
    with torch.no_grad():
        logits = model(windows)[:, :-1]
    full = torch.nn.functional.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten()).item()
    assert rows[0]["cache"] == "float32" and rows[0]["loss"] == pytest.approx(full, abs=1e-5)
    kib = {(r["cache"], r["group_size"]): r["kib"] for r in rows}
    assert kib["int4", 32] < kib["int8", 32] < kib["float32", None]  # fewer bits, fewer bytes
    assert all(abs(r["loss"] - full) < 0.05 for r in rows)


@pytest.mark.parametrize("name", [spec_bench.RECORD, quant_bench.RECORD])
def test_the_shipped_records_hold_what_notebook_10_reads(name: str) -> None:
    record = shipped.read_record(name)
    if name == spec_bench.RECORD:
        rows = record["rows"]
        assert {r["temperature"] for r in rows} == {0.0, 1.0} and all(r["speedup"] > 0 for r in rows)
        assert all(r["same_as_target"] for r in rows if r["temperature"] == 0)
        for r in rows:  # a pass gives at least one token and at most gamma + 1
            assert 1 <= r["tokens_per_target_pass"] <= r["gamma"] + 1
    else:
        losses = {(r["cache"], r["group_size"]): r["loss"] for r in record["rows"]}
        assert max(losses.values()) - losses["float32", None] < 0.01  # 8 and 4 bits cost under 0.01 nats
        kib = [r["kib"] for r in record["rows"]]  # float32, int8 g32, int4 g32, int4 g16
        assert kib == sorted(kib, reverse=True), kib
