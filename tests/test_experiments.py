"""The experiments wing: each experiment has one name, every command keeps its shape, and the one weights store
ties the output head by one rule."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from attn_edu.experiments import multitask, rope_extension, shipped, text_gpt
from attn_edu.models import GPT, GPTConfig, Llama, LlamaConfig

ROOT = Path(__file__).resolve().parents[1]
TIED = GPTConfig(vocab_size=7, max_seq_len=8, embed_dim=8, num_layers=1, num_heads=2, ffn_dim=16)
UNTIED = LlamaConfig(vocab_size=7, embed_dim=8, num_layers=1, num_heads=2, num_kv_heads=1, ffn_dim=16)


def test_each_experiment_has_one_name() -> None:
    """No second module re-exports an experiment under an older name (attn_edu.text_gpt, ...)."""
    import attn_edu

    for name in ("text_gpt", "multitask", "rope_extension", "alignment", "length_extrapolation", "finetune"):
        assert not (ROOT / "attn_edu" / f"{name}.py").exists(), name
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"attn_edu.{name}")
        assert (
            not hasattr(attn_edu, name) or getattr(attn_edu, name).__name__ == f"attn_edu.experiments.{name}"
        )


@pytest.mark.parametrize(
    "module",
    [
        "attn_edu.experiments.text_gpt",
        "attn_edu.experiments.rope_extension",
        "attn_edu.experiments.length_extrapolation",
    ],
)
def test_help_exits_zero_and_names_the_new_module(module: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", module, "--help"], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "python -m attn_edu.experiments." in out.stdout and "{train,report}" in out.stdout


def _parsed(module, monkeypatch, argv: list[str]) -> argparse.Namespace:
    """The options ``module.main(argv)`` hands its command, without running it."""
    seen = []
    monkeypatch.setattr(module, "_train_command", seen.append)
    monkeypatch.setattr(module, "_report_command", seen.append)
    assert module.main(argv) == 0
    return seen[0]


def test_the_commands_keep_their_options_and_defaults(monkeypatch) -> None:
    args = _parsed(text_gpt, monkeypatch, ["train"])
    assert (args.model, args.steps, args.seed, args.out) == ("gpt", text_gpt.DEFAULT_STEPS, 0, None)
    assert _parsed(text_gpt, monkeypatch, ["report", "--model", "llama", "--dir", "d"]).dir == "d"
    args = _parsed(multitask, monkeypatch, ["train", "--model", "t5"])
    assert (args.seeds, args.steps, args.threads, args.out) == ([0, 1, 2], None, 2, None)
    assert _parsed(multitask, monkeypatch, ["report", "--model", "icl"]).model == "icl"
    args = _parsed(rope_extension, monkeypatch, ["train", "--seeds", "4", "--tune-steps", "3"])
    assert (args.seeds, args.steps, args.tune_steps, args.threads) == ([4], rope_extension.STEPS, 3, 2)
    assert _parsed(rope_extension, monkeypatch, ["report"]).dir is None
    with pytest.raises(SystemExit):
        multitask.main(["report"])  # --model is required there, as before


def test_a_tied_model_is_stored_without_its_output_head_and_comes_back_equal(tmp_path) -> None:
    torch.manual_seed(0)
    model = GPT(TIED)
    shipped.save("tiny", {"seed0.": model}, {"note": "tied"}, tmp_path)
    stored = load_file(str(tmp_path / "tiny.safetensors"))
    assert "seed0.lm_head.weight" not in stored and "seed0.token_embedding.weight" in stored
    loaded = shipped.load_into(GPT(TIED), shipped.read_weights("tiny", tmp_path), "seed0.")
    assert loaded.lm_head.weight is loaded.token_embedding.weight and not loaded.training
    for key, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], tensor), key
    assert shipped.read_record("tiny", tmp_path) == {"note": "tied"}


def test_an_untied_model_keeps_its_output_head_and_half_precision_rounds(tmp_path) -> None:
    torch.manual_seed(0)
    model = Llama(UNTIED)
    shipped.save("tiny", {"": model}, {}, tmp_path, half=True)
    stored = load_file(str(tmp_path / "tiny.safetensors"))
    assert "lm_head.weight" in stored and {t.dtype for t in stored.values()} == {torch.float16}
    loaded = shipped.load_into(Llama(UNTIED), shipped.read_weights("tiny", tmp_path))
    assert torch.equal(loaded.lm_head.weight, model.lm_head.weight.half().float())


def test_a_file_without_a_needed_tensor_is_refused_by_name(tmp_path) -> None:
    tensors = {k: v for k, v in Llama(UNTIED).state_dict().items() if k != "lm_head.weight"}
    with pytest.raises(ValueError, match=r"missing \['lm_head.weight'\]"):  # untied: the head is needed
        shipped.load_into(Llama(UNTIED), tensors)
    tensors = {k: v for k, v in GPT(TIED).state_dict().items() if k != "token_embedding.weight"}
    with pytest.raises(ValueError, match="token_embedding.weight"):
        shipped.load_into(GPT(TIED), tensors)
    with pytest.raises(ValueError, match=r"unexpected \['extra'\]"):
        shipped.load_into(GPT(TIED), {**GPT(TIED).state_dict(), "extra": torch.zeros(1)})


def test_the_shipped_files_load_through_the_store() -> None:
    folder = shipped.weights_folder()
    assert shipped.paths("text_gpt") == (folder / "text_gpt.safetensors", folder / "text_gpt.json")
    model, _ = text_gpt.load_text_gpt()
    assert model.lm_head.weight is model.token_embedding.weight
    assert "seed0.lm_head.weight" in shipped.read_weights("multitask_icl")  # an untied Llama keeps it
