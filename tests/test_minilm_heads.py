"""The shipped record of notebook 13's MiniLM sweeps is what ``minilm_heads.measure`` computes, and agrees with itself.

The record is checked where the notebook does not re-measure it: other pruning points and orders, other heads,
other anchors, other layers. ``measure`` runs whole on a few triples, and the command writes what it reads back.
"""

from __future__ import annotations

import functools

import pytest
import torch

from attn_edu.experiments import minilm_heads
from attn_edu.interp import head_masks_in_order, leave_one_out, pruning_masks, uniform_attention

pytestmark = pytest.mark.usefixtures("one_thread")


@functools.cache
def study() -> minilm_heads.Study:
    return minilm_heads.Study.load()


@functools.cache
def record() -> dict:
    return minilm_heads.load_record()


def test_the_ranking_and_the_checked_heads_are_those_of_the_model_today() -> None:
    importance = study().importance()
    assert torch.tensor(record()["importance"]) == pytest.approx(importance, abs=1e-6)
    checked = minilm_heads.checked_heads(importance)
    assert checked == record()["exact"]["heads"]
    assert (
        len(set(checked)) == 8
        and checked[0] == int(importance.argmax())
        and checked[3] == int(importance.argmin())
    )


def test_exact_drops_pruning_points_and_random_orders_recompute() -> None:
    s, rec = study(), record()
    L, H = s.shape
    half_a, half_b = s.half_a, s.half_b
    head = rec["exact"]["heads"][5]  # one of the randomly chosen heads
    drop = s.margins(half_a).mean().item() - s.without([divmod(head, H)], half_a).mean().item()
    assert drop == pytest.approx(rec["exact"]["drops"][5], abs=1e-5)
    importance = torch.tensor(rec["importance"])
    by_importance = torch.tensor(rec["pruning"]["by_importance"])  # (7, 25)
    assert s.pruned(pruning_masks(importance), 36, half_b) == pytest.approx(by_importance[2], abs=1e-5)
    order = minilm_heads.random_orders(L * H)[1]
    random = torch.tensor(rec["pruning"]["random"])  # (3, 7, 25)
    assert s.pruned(head_masks_in_order(order, L, H), 63, half_b) == pytest.approx(random[1, 4], abs=1e-5)


def test_leave_one_out_and_uniform_attention_recompute() -> None:
    s, rec = study(), record()
    ids, mask = s.encode(s.triples)[0]
    with torch.no_grad():
        loo = leave_one_out(s.embed, ids[20:23], mask[20:23])  # (3, T)
    assert loo == pytest.approx(torch.tensor(rec["leave_one_out"][20:23]), abs=1e-5)
    moved = s.moved(uniform_attention, [2], ids, mask).mean().item()
    assert moved == pytest.approx(rec["replaced"]["moved"]["uniform"][2], abs=1e-5)


def test_the_record_keeps_what_the_definitions_imply() -> None:
    """Facts that follow from the definitions, whatever the numbers: hiding a pad token moves nothing and hiding a
    real one moves something; a replaced layer moves the embeddings by a cosine distance in (0, 2)."""
    rec = record()
    _, mask = study().encode(study().triples)[0]
    loo = torch.tensor(rec["leave_one_out"])  # (50, T)
    assert loo.shape == mask.shape and (loo[mask == 0] == 0).all() and (loo[mask == 1] > 0).all()
    for values in rec["replaced"]["moved"].values():
        assert len(values) == 6 and all(0 < v < 2 for v in values)


def test_measure_runs_whole_and_the_command_writes_what_report_reads(tmp_path, capsys, monkeypatch) -> None:
    small = minilm_heads.Study(study().model, study().tokenizer, study().triples[:4])  # halves of 2 triples
    got = minilm_heads.measure(small)
    assert torch.tensor(got["pruning"]["random"]).shape == (minilm_heads.RANDOM_ORDERS, 7, 2)
    assert len(got["exact"]["drops"]) == 8 and len(got["replaced"]["every_layer_margins"]["uniform"]) == 4
    monkeypatch.setattr(minilm_heads, "measure", lambda progress=False: got)
    assert minilm_heads.main(["train", "--out", str(tmp_path)]) == 0
    assert minilm_heads.load_record(str(tmp_path)) == got
    assert minilm_heads.main(["report", "--dir", str(tmp_path)]) == 0
    assert "passed, by importance" in capsys.readouterr().out
