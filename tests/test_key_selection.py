"""Notebook 11 reads what reading only selected keys costs its text GPT from a record: the record is what
``key_selection.measure`` computes, and the command writes and reports it."""

from __future__ import annotations

import pytest

from attn_edu.experiments import key_selection

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.slow
def test_the_shipped_losses_are_what_measure_computes() -> None:
    record = key_selection.read_record()
    here = key_selection.measure()
    assert list(here) == list(record["losses"]) == list(key_selection.READERS)
    for name, loss in here.items():
        assert loss == pytest.approx(record["losses"][name], abs=1e-4), name  # the notebook prints 3 decimals


def test_measure_puts_the_models_attention_back_and_the_command_writes_what_report_reads(
    tmp_path, capsys, monkeypatch
) -> None:
    from attn_edu.experiments import text_gpt

    model, tok = text_gpt.load_text_gpt()
    monkeypatch.setattr(key_selection, "load_text_gpt", lambda: (model, tok))
    monkeypatch.setattr(key_selection, "split_corpus", lambda: ("", "the held-out text " * 40))
    readers = {"all keys": key_selection.READERS["all keys"], "top 16": key_selection.READERS["top 16"]}
    monkeypatch.setattr(key_selection, "READERS", readers)
    assert key_selection.main(["train", "--out", str(tmp_path)]) == 0
    assert all(
        block.attn.attention_fn is key_selection.scaled_dot_product_attention for block in model.blocks
    )
    record = key_selection.read_record(str(tmp_path))
    assert list(record["losses"]) == ["all keys", "top 16"] and record["command"].endswith(
        "key_selection train"
    )
    capsys.readouterr()
    assert key_selection.main(["report", "--dir", str(tmp_path)]) == 0
    assert f"top 16               {record['losses']['top 16']:.3f} nats/char" in capsys.readouterr().out
