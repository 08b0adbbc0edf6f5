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
    found = interp_seeds.load_findings(tmp_path)  # measured on the model the command trained
    assert list(found) == [3] and found[3]["training loss, last 10 steps"] == fresh.final_loss()
    assert not (tmp_path / "interp_probes.json").exists()  # probes only on seed 0's model


def differences(a, b, tol: float, where: str = "") -> list[str]:
    """Where two findings disagree: numbers more than ``tol`` apart, anything else (heads, keys) not equal."""
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return [f"{where}: keys {sorted(a)} vs {sorted(b)}"]
        return [d for k in a for d in differences(a[k], b[k], tol, f"{where}/{k}")]
    if isinstance(a, (list, tuple)) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, tol, f"{where}[{i}]")]
    if isinstance(a, float) and isinstance(b, float):
        return [] if abs(a - b) <= tol else [f"{where}: {a} vs {b}"]
    return [] if a == b else [f"{where}: {a!r} vs {b!r}"]


@pytest.mark.slow
def test_the_shipped_findings_are_what_findings_measures_on_the_shipped_runs() -> None:
    """Notebook 13 reads every model's findings from the record: measured again on the shipped weights, they
    agree to rounding (forward passes only: nothing here amplifies it), the heads named exactly."""
    shipped_findings = interp_seeds.load_findings()
    runs = interp_seeds.load_seeds()
    assert sorted(shipped_findings) == sorted(runs)
    for seed, (model, result) in runs.items():
        here = interp_seeds.findings(model, result)
        assert not differences(here, shipped_findings[seed], 1e-5), (
            seed,
            differences(here, shipped_findings[seed], 1e-5),
        )


@pytest.mark.slow
def test_the_shipped_probes_are_what_fit_probes_trains_on_seed_0() -> None:
    """The six probes notebook 13 loads are fit_probes's on seed 0's model, to rounding, with the accuracies that
    the record states (at most two of the 1,920 test positions apart: a near tie may round either way)."""
    record = shipped.read_record("interp_probes")
    model = interp_seeds.load_seeds()[0][0]
    probes, accuracy = interp_seeds.fit_probes(model)
    loaded = interp_seeds.load_probes()
    assert list(loaded) == list(probes) == [tuple(key) for key in record["probes"]]
    for key, probe in probes.items():
        for name, tensor in probe.state_dict().items():
            torch.testing.assert_close(loaded[key].state_dict()[name], tensor, atol=1e-4, rtol=1e-3)
    for key, shipped_accuracy in zip(probes, record["test_accuracy"]):
        assert abs(accuracy[key] - shipped_accuracy) <= 2 / 1920, key


def test_a_record_of_another_config_is_refused(tmp_path) -> None:
    interp_seeds.main(["train", "--seeds", "3", "--steps", "1", "--out", str(tmp_path)])
    path = tmp_path / "interp_seeds.json"
    record = json.loads(path.read_text())
    record["config"]["embed_dim"] = 32
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match="directory: the stored config differs"):
        interp_seeds.load_seeds(tmp_path)
