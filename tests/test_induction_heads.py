"""The induction-heads experiment of notebook 05: its scores are the interp scores, its chance levels are those of
uniform causal attention worked out by hand, and its run probes the model it trains."""

from __future__ import annotations

import json

import pytest
import torch

from attn_edu.experiments.induction_heads import (
    PATTERNS,
    PERIOD,
    STEPS,
    VOCAB,
    chance_scores,
    held_out_repeats,
    load_runs,
    loss_halving_step,
    score_heads,
    score_table,
    train_induction_model,
    write_runs,
)
from attn_edu.interp import current_token_score, first_token_score, induction_score, previous_token_score


def test_score_heads_stacks_the_interp_scores_layer_by_layer() -> None:
    g = torch.Generator().manual_seed(0)
    layers = [torch.softmax(torch.randn(3, 2, 2 * PERIOD, 2 * PERIOD, generator=g), dim=-1) for _ in range(2)]
    scores = score_heads(layers)
    assert scores.shape == (2, 2, len(PATTERNS))
    for layer, w in enumerate(layers):
        expected = [
            previous_token_score(w),
            first_token_score(w),
            induction_score(w, PERIOD),
            current_token_score(w),
        ]
        torch.testing.assert_close(scores[layer], torch.stack(expected, dim=-1))


def test_chance_scores_are_those_of_uniform_causal_attention() -> None:
    T = 2 * PERIOD
    share = [1 / (t + 1) for t in range(T)]  # uniform causal attention: query t spreads over t + 1 keys
    expected = {
        "previous": sum(share[1:]) / (T - 1),
        "first": sum(share) / T,
        "induction": sum(share[PERIOD:]) / (T - PERIOD),
        "current": sum(share) / T,
    }
    chance = chance_scores()
    for name, value in zip(PATTERNS, chance.tolist()):
        assert value == pytest.approx(expected[name], rel=1e-6), name


def test_loss_halving_step_is_the_first_window_whose_mean_falls_below_half_of_log_v() -> None:
    half = 0.5 * torch.log(torch.tensor(float(VOCAB))).item()
    losses = [2 * half] * 30 + [0.0] * 30
    # the mean of 10 steps ending at step s holds s - 30 zeros: below half once more than 5 are zeros
    assert loss_halving_step(losses) == 36
    assert loss_halving_step(losses, window=1) == 31
    with pytest.raises(ValueError, match=r"losses: the mean of 10 steps never falls"):
        loss_halving_step([2 * half] * 20)


def test_score_table_has_a_row_per_head_and_the_chance_row() -> None:
    scores = torch.rand(2, 3, len(PATTERNS))
    lines = score_table(scores, torch.full((len(PATTERNS),), 0.5), scores).splitlines()
    assert all(name in lines[0] for name in PATTERNS)
    assert lines[1].startswith("chance") and lines[-1].startswith("best untrained")
    assert len(lines) == 2 + 2 * 3 + 1
    assert lines[2 + 3 + 1].startswith("layer 1 head 1")


def test_a_short_run_probes_every_fifth_step_and_keeps_the_untrained_copy() -> None:
    run = train_induction_model(0, steps=10)
    assert sorted(run.induction_by_step) == [5, 10] and len(run.result.losses) == 10
    assert all(0.0 <= score <= 1.0 for score in run.induction_by_step.values())
    again = train_induction_model(0, steps=1)
    for (name, a), b in zip(run.untrained.state_dict().items(), again.untrained.state_dict().values()):
        assert torch.equal(a, b), name  # the same seed starts from the same weights
    trained, untrained = run.model.state_dict(), run.untrained.state_dict()
    assert any(not torch.equal(trained[name], untrained[name]) for name in trained)
    assert STEPS == 200 and held_out_repeats().input_ids.shape == (16, 2 * PERIOD)


def test_written_runs_load_back_with_the_weights_of_the_chosen_seeds_only(tmp_path) -> None:
    runs = {seed: train_induction_model(seed, steps=5) for seed in (3, 4)}
    write_runs(runs, tmp_path, model_seeds=(3,))
    loaded = load_runs(tmp_path)
    assert sorted(loaded) == [3, 4] and loaded[4].model is None
    for seed, run in runs.items():
        assert loaded[seed].result.losses == run.result.losses  # floats survive the JSON round trip
        assert loaded[seed].induction_by_step == run.induction_by_step
        for name, tensor in run.untrained.state_dict().items():
            assert torch.equal(loaded[seed].untrained.state_dict()[name], tensor), name
    for name, tensor in runs[3].model.state_dict().items():
        assert torch.equal(loaded[3].model.state_dict()[name], tensor), name
    record = tmp_path / "induction_heads.json"
    stored = json.loads(record.read_text())
    stored["config"]["num_heads"] = 2
    record.write_text(json.dumps(stored))
    with pytest.raises(ValueError, match="directory: the stored config differs"):
        load_runs(tmp_path)
