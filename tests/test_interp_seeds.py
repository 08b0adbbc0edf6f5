"""The shipped seeds of notebook 13 are runs of the notebook's recipe, and the files round-trip through the command."""

from __future__ import annotations

import json
import math

import pytest
import torch

from attn_edu.data import repeated_sequences
from attn_edu.experiments import interp_seeds, shipped
from attn_edu.interp import induction_score
from attn_edu.train import lm_loss

pytestmark = pytest.mark.usefixtures("one_thread")


def test_each_shipped_run_starts_as_a_fresh_run_of_the_recipe() -> None:
    """The first steps of a run repeat to the last bits on one machine and stay close on any other; later steps
    drift apart (training amplifies rounding), so the first ten losses are the fingerprint of the recipe."""
    runs = interp_seeds.load_seeds()
    assert sorted(runs) == list(interp_seeds.SEEDS)
    for seed, (_, shipped_run) in runs.items():
        _, fresh = interp_seeds.train_seed(seed, steps=10)
        assert fresh.losses == pytest.approx(shipped_run.losses[:10], rel=1e-3), seed
        assert shipped_run.steps == interp_seeds.STEPS


def test_the_shipped_models_copy_with_induction_heads_in_layer_1() -> None:
    batch = repeated_sequences(32, 16, vocab_size=64, generator=torch.Generator().manual_seed(1))
    for seed, (model, result) in interp_seeds.load_seeds().items():
        with torch.no_grad():
            _, (_, w1) = model(batch.input_ids, need_weights=True)
            loss = lm_loss(model, batch).item()
        assert result.final_loss() < math.log(64) / 4, seed
        assert loss < 0.5 and (induction_score(w1, 16) > 0.3).all(), (seed, loss)


def test_train_writes_what_load_seeds_and_report_read_back(tmp_path, capsys) -> None:
    assert interp_seeds.main(["train", "--seeds", "3", "--steps", "2", "--out", str(tmp_path)]) == 0
    runs = interp_seeds.load_seeds(tmp_path)
    model, fresh = interp_seeds.train_seed(3, steps=2)
    assert list(runs) == [3] and runs[3][1].losses == fresh.losses
    for name, tensor in model.state_dict().items():
        assert torch.equal(runs[3][0].state_dict()[name], tensor), name
    record = shipped.read_record("interp_seeds", tmp_path)
    assert record["command"].endswith("train --seeds 3 --steps 2") and record["config"]["vocab_size"] == 64
    assert interp_seeds.main(["report", "--dir", str(tmp_path)]) == 0
    assert "seed 3: 2 steps" in capsys.readouterr().out


def test_a_record_of_another_config_is_refused(tmp_path) -> None:
    interp_seeds.main(["train", "--seeds", "3", "--steps", "1", "--out", str(tmp_path)])
    path = tmp_path / "interp_seeds.json"
    record = json.loads(path.read_text())
    record["config"]["embed_dim"] = 32
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match="directory: the stored config differs"):
        interp_seeds.load_seeds(tmp_path)
