"""Notebook 08's optional sections read twelve toy-decoder runs from a record: the record holds runs of the code's
recipe (their first steps repeat a fresh run's), and the command writes and reports it."""

from __future__ import annotations

import pytest
import torch

from attn_edu.experiments import norm_placement

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_record_holds_runs_of_the_recipe() -> None:
    record = norm_placement.read_record()
    assert record["steps"] == norm_placement.STEPS and record["seeds"] == list(norm_placement.SEEDS)
    assert set(record["no_skip"]) == {str(d) for d in norm_placement.NO_SKIP_DEPTHS}
    assert set(record["scheduled"]) == set(norm_placement.SCHEDULES)
    fresh = norm_placement.no_skip_run(1, seed=2, steps=10).losses
    assert fresh == pytest.approx(record["no_skip"]["1"][2][:10], rel=1e-4)
    fresh = norm_placement.scheduled_run(0, seed=0).losses  # the schedule spans the whole run: all 60 steps
    assert fresh[:10] == pytest.approx(record["scheduled"]["cosine decay only"][0][:10], rel=1e-4)


def test_final_loss_is_the_mean_of_the_last_ten_steps() -> None:
    assert norm_placement.final_loss([5.0] * 50 + [1.0] * 10) == 1.0
    assert norm_placement.final_loss([3.0, 1.0]) == 2.0


def test_section_6_ships_runs_of_the_recipe() -> None:
    """Notebook 08 loads section 6's twelve runs: their losses are a fresh run's, step for step, and their float16
    weights are that run's final weights."""
    models, runs = norm_placement.load_section_6()
    expected = {
        (name, lr, seed)
        for name in norm_placement.BLOCK_TYPES
        for lr in norm_placement.LRS
        for seed in norm_placement.SEEDS
    }
    assert set(models) == set(runs) == expected
    model, fresh = norm_placement.train_decoder(norm_placement.BLOCK_TYPES["pre-norm"], lr=3e-2, seed=1)
    assert fresh.losses == pytest.approx(runs["pre-norm", 3e-2, 1].losses, rel=1e-4)
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(models["pre-norm", 3e-2, 1].state_dict()[name], tensor.half().float())
    assert runs["post-norm", 3e-2, 0].final_loss() > 1.8 > 1.5 > runs["pre-norm", 3e-2, 0].final_loss()


def test_the_command_writes_what_report_reads(tmp_path, capsys, monkeypatch) -> None:
    record = norm_placement.read_record()
    models, runs = norm_placement.load_section_6()
    shipped_runs = {f"{n}/{lr:g}/{s}": (models[n, lr, s], runs[n, lr, s]) for n, lr, s in models}
    monkeypatch.setattr(
        norm_placement, "measure", lambda: {k: v for k, v in record.items() if k != "section_6"}
    )
    monkeypatch.setattr(norm_placement, "section_6", lambda: shipped_runs)
    assert norm_placement.main(["train", "--out", str(tmp_path)]) == 0
    assert norm_placement.read_record(str(tmp_path)) == record
    again, _ = norm_placement.load_section_6(str(tmp_path))
    assert all(
        torch.equal(again[k].blocks[0].attn.q_proj.weight, models[k].blocks[0].attn.q_proj.weight)
        for k in models
    )
    assert norm_placement.main(["report", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "no_skip 4: final losses 2.3" in out and "section_6 post-norm/0.03/0: final loss 2.3" in out
