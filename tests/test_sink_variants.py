"""The four-way sink experiment: the variants differ only in their attention, and the streaming test reads a
text as the full forward pass does when its cache keeps everything."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attn_edu.differential import DifferentialAttention
from attn_edu.experiments import sink_variants as sv
from attn_edu.gating import OutputGate, SinkAttention
from attn_edu.models import LlamaConfig

TINY = LlamaConfig(vocab_size=11, embed_dim=16, num_layers=2, num_heads=4, num_kv_heads=2, ffn_dim=32)


def test_the_variants_change_only_the_attention() -> None:
    models = {variant: sv.build(variant, TINY) for variant in sv.VARIANTS}
    counts = {variant: sum(p.numel() for p in model.parameters()) for variant, model in models.items()}
    L, C, H, D = TINY.num_layers, TINY.embed_dim, TINY.num_heads, TINY.head_dim
    assert counts["sinks"] - counts["softmax"] == L * H  # one logit per head and layer
    assert counts["gate"] - counts["softmax"] == L * C * H * D  # one gate projection per layer
    assert counts["differential"] - counts["softmax"] == L * 4 * D  # λ's four vectors per layer
    sinks = [block.attn.attention_fn for block in models["sinks"].blocks]
    assert all(isinstance(s, SinkAttention) for s in sinks) and sinks[0] is not sinks[1]  # one per layer
    assert all(isinstance(b.attn.output_gate, OutputGate) for b in models["gate"].blocks)
    assert all(isinstance(b.attn, DifferentialAttention) for b in models["differential"].blocks)
    with pytest.raises(ValueError, match="variant: expected one of"):
        sv.build("sigmoid", TINY)


def test_windows_start_with_the_bos_token() -> None:
    windows = sv.with_bos(torch.arange(6).view(2, 3), 9)
    assert windows.tolist() == [[9, 0, 1, 2], [9, 3, 4, 5]]


@pytest.mark.parametrize("variant", ["softmax", "sinks", "gate"])
def test_streaming_with_everything_kept_scores_the_text_as_the_full_forward_pass(variant: str) -> None:
    torch.manual_seed(0)
    model = sv.build(variant, TINY).eval()
    if variant == "sinks":  # logits away from their start, so that the sink changes the answer
        with torch.no_grad():
            model.blocks[0].attn.attention_fn.sinks.fill_(1.0)
    text = torch.randint(11, (2, 13), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(text)[:, :-1]  # (B, N - 1, V)
    per_token = F.cross_entropy(logits.transpose(1, 2), text[:, 1:], reduction="none")  # (B, N - 1)
    expected = [chunk.mean().item() for chunk in per_token.tensor_split(3, dim=1)]
    everything = sv.stream_losses(model, text, n_sink=None, window=None, bins=3)
    roomy = sv.stream_losses(model, text, n_sink=2, window=20, bins=3)  # never full: nothing is evicted
    assert everything["losses"] == pytest.approx(expected, abs=1e-5)
    assert roomy["losses"] == pytest.approx(expected, abs=1e-5)
    tight = sv.stream_losses(model, text, n_sink=2, window=3, bins=3)  # evicts: the last stretches differ
    assert tight["losses"][0] == pytest.approx(expected[0], abs=1e-5) and tight["losses"] != pytest.approx(
        expected
    )
    assert tight["cache_bytes"] < everything["cache_bytes"]


def test_every_shipped_run_is_the_recorded_one() -> None:
    """Every variant and seed ships; each, re-measured from its weights, gives its recorded first-token mass."""
    from attn_edu.sinks import sink_profile

    runs, record = sv.load(), sv.read_record()
    assert set(record["runs"]) == {f"{variant}/{seed}" for variant in sv.VARIANTS for seed in sv.SEEDS}
    assert {f"{variant}/{seed}" for variant, seed in runs} == set(record["shipped"]) == set(sv.SHIPPED)
    windows = sv.held_out_windows(32)
    for (variant, seed), model in runs.items():
        mass = sink_profile(model, windows)["mass"]  # (L, H)
        expected = torch.tensor(record["runs"][f"{variant}/{seed}"]["first_token_mass"])
        torch.testing.assert_close(mass, expected, atol=1e-4, rtol=0, msg=f"{variant}/{seed}")
    assert all(len(run["train_losses"]) == record["recipe"]["steps"] for run in record["runs"].values())
    assert list(sv.load(runs=["gate/1"])) == [("gate", 1)]
    with pytest.raises(ValueError, match="runs: 'gate/7' is not among the shipped runs"):
        sv.load(runs=["gate/7"])
