"""Notebook 08's optional sections read twelve toy-decoder runs from a record: the record holds runs of the code's
recipe (their first steps repeat a fresh run's), and the command writes and reports it."""

from __future__ import annotations

import pytest

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


def test_the_command_writes_what_report_reads(tmp_path, capsys, monkeypatch) -> None:
    record = norm_placement.read_record()
    monkeypatch.setattr(norm_placement, "measure", lambda: record)
    assert norm_placement.main(["train", "--out", str(tmp_path)]) == 0
    assert norm_placement.read_record(str(tmp_path)) == record
    assert norm_placement.main(["report", "--dir", str(tmp_path)]) == 0
    assert "no_skip 4: final losses 2.3" in capsys.readouterr().out
