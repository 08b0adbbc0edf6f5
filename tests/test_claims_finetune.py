"""Notebook 09's claim about fine-tuning, over five seeds: training MiniLM's top two blocks with the head beats
a head on the frozen encoder's features by more than 5 points of test accuracy on the word-order task
(measured here: +7.5 to +17 points, frozen 62-64%, fine-tuned 70-80%)."""

from __future__ import annotations

import pytest
import torch

from attn_edu.experiments import finetune
from tests.test_pretrained import needs_minilm

SEEDS = range(5)
# The notebook's settings (course/09_architectures.ipynb, the optional section on fine-tuning a real encoder).
TRAINED_BLOCKS, TUNE_STEPS, TUNE_LR, TUNE_BATCH = (
    finetune.TRAINED_BLOCKS,
    finetune.STEPS,
    finetune.LR,
    finetune.BATCH_SIZE,
)


@pytest.mark.slow
@needs_minilm
def test_fine_tuning_the_top_blocks_beats_frozen_features_for_every_seed() -> None:
    """Over five seeds; seed 0's two runs are also notebook 09's record (finetune.measure): measured again here,
    each starts with the record's losses (training amplifies rounding, so later steps may drift on another
    machine) and ends within three test sentences of its accuracies."""
    pytest.importorskip("transformers")
    from attn_edu.pretrained import load_minilm

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, tokenizer = load_minilm()
        train, test = finetune.split_data(finetune.documentation_sentences(), test_size=finetune.TEST_SIZE)
        first = len(model.blocks) - TRAINED_BLOCKS
        lower = {
            name: finetune.encoder_states(model, tokenizer, d.texts, blocks=first)
            for name, d in [("train", train), ("test", test)]
        }
        top = {
            name: (finetune.continue_states(model, *lower[name], first=first), lower[name][1])
            for name in lower
        }
        gaps, measured = {}, {}
        for seed in SEEDS:
            torch.manual_seed(seed)
            frozen = finetune.SentenceClassifier(model, trained_blocks=0)
            frozen_run = finetune.fit(
                frozen,
                *top["train"],
                train.labels,
                steps=finetune.FROZEN_STEPS,
                lr=finetune.FROZEN_LR,
                batch_size=finetune.FROZEN_BATCH_SIZE,
                seed=seed,
            )
            torch.manual_seed(seed)
            tuned = finetune.SentenceClassifier(model, trained_blocks=TRAINED_BLOCKS)
            run = finetune.fit(
                tuned,
                *lower["train"],
                train.labels,
                steps=TUNE_STEPS,
                lr=TUNE_LR,
                batch_size=TUNE_BATCH,
                seed=seed,
            )
            accuracies = {
                "test": finetune.accuracy(tuned, *lower["test"], test.labels),
                "frozen test": finetune.accuracy(frozen, *top["test"], test.labels),
            }
            gaps[seed] = accuracies["test"] - accuracies["frozen test"]
            if seed == 0:
                accuracies["frozen train"] = finetune.accuracy(frozen, *top["train"], train.labels)
                measured = {"losses": run.losses, "frozen losses": frozen_run.losses, **accuracies}
    finally:
        torch.set_num_threads(threads)
    assert all(gap > 0.05 for gap in gaps.values()), gaps
    record = finetune.read_record()
    assert measured["losses"][:5] == pytest.approx(record["losses"][:5], rel=1e-3)
    assert measured["frozen losses"][:50] == pytest.approx(record["frozen"]["losses"][:50], rel=1e-3)
    few = 3 / record["test_size"]  # three sentences of the test set
    for key, recorded in [
        ("test", record["test_accuracy"]),
        ("frozen test", record["frozen"]["test_accuracy"]),
        ("frozen train", record["frozen"]["train_accuracy"]),
    ]:
        assert abs(measured[key] - recorded) <= few, (key, measured[key], recorded)
