"""Notebook 08's toy decoders that sort digits: pre-norm against post-norm, and the runs of its optional sections.

    model, run = train_decoder(PreNormDecoderBlock, lr=1e-2, seed=0)   one run of section 6's recipe
    record = measure()                                                  the optional sections' 12 runs (~10 s)
    record = read_record()                                              the same runs, shipped
    models, runs = load_section_6()                                     section 6's 12 runs, shipped with weights

The recipe (section 6): :class:`~attn_edu.models.ToyDecoder` (``C = 32``, 4 heads, ``depth`` causal blocks)
initialised after ``torch.manual_seed(seed)``, trained with AdamW for 60 steps without clipping on batches of 16
sequences of 5 digits and their sorted copies (:func:`~attn_edu.data.sort_task`), drawn from a generator seeded
with ``seed``. Section 6's twelve runs (:func:`section_6`: both block types at ``1e-2`` and ``3e-2`` from every seed)
ship with their float16 weights and losses (:func:`load_section_6`). The optional sections add twelve more, read
from the record ``attn_edu/weights/norm_placement.json`` (every run's losses). The notebook re-runs the first steps
of one run of each kind to show that the record is this code's:

* ``no_skip``: pre-norm at ``1e-2`` without skip connections (``residual=False``), at 1 and at 4 blocks;
* ``scheduled``: post-norm at a peak rate of ``3e-2`` with a cosine decay, with no warm-up and with 20 steps.

``python -m attn_edu.experiments.norm_placement train`` trains all 24 again and writes the two files (one CPU thread,
the notebook's setting); ``... report`` prints their final losses.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import torch

from attn_edu.blocks import PostNormDecoderBlock, PreNormDecoderBlock
from attn_edu.data import TaskBatch, ToyVocab, sort_task
from attn_edu.experiments import cli, shipped
from attn_edu.models import ToyDecoder
from attn_edu.train import TrainResult, train

VOCAB = ToyVocab(num_symbols=10)
STEPS, SEEDS = 60, (0, 1, 2)
NAME = "norm_placement"  # the record's stem in attn_edu/weights/
NO_SKIP_DEPTHS = (1, 4)
SCHEDULES = {"cosine decay only": 0, "20 warm-up steps, then cosine": 20}  # name -> warm-up steps
BLOCK_TYPES = {"pre-norm": PreNormDecoderBlock, "post-norm": PostNormDecoderBlock}  # section 6
LRS = (1e-2, 3e-2)


def sort_batches(generator: torch.Generator) -> TaskBatch:
    """16 sequences of 5 digits and their sorted copies."""
    return sort_task(16, 5, VOCAB, generator=generator)


def train_decoder(
    block_type: type,
    *,
    lr: float,
    seed: int,
    depth: int = 4,
    residual: bool = True,
    warmup_steps: int = 0,
    schedule: str = "constant",
    steps: int = STEPS,
) -> tuple[ToyDecoder, TrainResult]:
    """One run of section 6's recipe with ``block_type`` blocks; returns the model and the run.

    Example:
        >>> model, run = train_decoder(PreNormDecoderBlock, lr=1e-2, seed=0, steps=2)
        >>> len(run.losses), len(model.blocks)
        (2, 4)
    """
    torch.manual_seed(seed)  # the initial weights: the same for every block type
    model = ToyDecoder(block_type, vocab_size=VOCAB.size, depth=depth, residual=residual)
    run = train(
        model,
        sort_batches,
        steps=steps,
        lr=lr,
        seed=seed,
        grad_clip=None,
        progress=False,
        warmup_steps=warmup_steps,
        schedule=schedule,
    )
    return model, run


def no_skip_run(depth: int, seed: int, *, steps: int = STEPS) -> TrainResult:
    """Pre-norm at ``1e-2`` without skip connections, ``depth`` blocks."""
    return train_decoder(PreNormDecoderBlock, lr=1e-2, seed=seed, depth=depth, residual=False, steps=steps)[1]


def scheduled_run(warmup_steps: int, seed: int, *, steps: int = STEPS) -> TrainResult:
    """Post-norm at a peak rate of ``3e-2``, ``warmup_steps`` of linear warm-up, then a cosine decay to 0."""
    return train_decoder(
        PostNormDecoderBlock, lr=3e-2, seed=seed, warmup_steps=warmup_steps, schedule="cosine", steps=steps
    )[1]


def measure() -> dict[str, Any]:
    """The optional sections' twelve runs, every loss of each (JSON-ready)."""
    return {
        "command": f"python -m attn_edu.experiments.{NAME} train",
        "steps": STEPS,
        "seeds": list(SEEDS),
        "no_skip": {
            str(depth): [no_skip_run(depth, seed).losses for seed in SEEDS] for depth in NO_SKIP_DEPTHS
        },
        "scheduled": {
            name: [scheduled_run(warmup, seed).losses for seed in SEEDS] for name, warmup in SCHEDULES.items()
        },
        "environment": shipped.environment(1),
    }


def section_6() -> dict[str, tuple[ToyDecoder, TrainResult]]:
    """Section 6's twelve runs, trained: ``{"post-norm/0.03/1": (model, run), ...}``; per seed both block types start
    from the same weights and see the same batches."""
    return {
        f"{name}/{lr:g}/{seed}": train_decoder(block_type, lr=lr, seed=seed)
        for name, block_type in BLOCK_TYPES.items()
        for lr in LRS
        for seed in SEEDS
    }


def load_section_6(
    directory: str | None = None,
) -> tuple[dict[tuple[str, float, int], ToyDecoder], dict[tuple[str, float, int], TrainResult]]:
    """The shipped runs of :func:`section_6`, keyed ``(block type, learning rate, seed)``: the models (float16
    weights, loaded in float32, ``eval()`` mode) and their recorded losses.

    Example:
        >>> models, runs = load_section_6()
        >>> len(models), round(runs["post-norm", 3e-2, 0].final_loss(), 1)
        (12, 2.3)
    """
    record = read_record(directory)
    tensors = shipped.read_weights(NAME, directory)
    models, runs = {}, {}
    for key, losses in record["section_6"].items():
        name, lr, seed = key.split("/")
        at = (name, float(lr), int(seed))
        model = ToyDecoder(BLOCK_TYPES[name], vocab_size=VOCAB.size)
        models[at] = shipped.load_into(model, tensors, prefix=f"{key}.")
        runs[at] = TrainResult(losses=list(losses), seconds=0.0, steps=len(losses))
    return models, runs


def final_loss(losses: Sequence[float]) -> float:
    """A run's final loss as :meth:`TrainResult.final_loss` gives it: the mean of its last 10 steps."""
    return TrainResult(losses=list(losses), seconds=0.0, steps=len(losses)).final_loss()


def read_record(directory: str | None = None) -> dict[str, Any]:
    """The shipped record of :func:`measure`."""
    return shipped.read_record(NAME, directory)


def _train_command(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)  # notebook 08's setting
    trained = section_6()
    record = {**measure(), "section_6": {key: run.losses for key, (_, run) in trained.items()}}
    path = shipped.save(
        NAME, {f"{key}.": model for key, (model, _) in trained.items()}, record, args.out, half=True
    )
    print("wrote", path)


def _report_command(args: argparse.Namespace) -> None:
    record = read_record(args.dir)
    print(f"{NAME}: {record['command']} (torch {record['environment']['torch']})")
    for key, losses in record["section_6"].items():
        print(f"section_6 {key}: final loss {final_loss(losses):.3f}")
    for group in ("no_skip", "scheduled"):
        for name, runs in record[group].items():
            print(f"{group} {name}: final losses", " ".join(f"{final_loss(losses):.3f}" for losses in runs))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m attn_edu.experiments.norm_placement train [--out DIR]`` or ``... report [--dir DIR]``."""
    parser, _ = cli.command_parser(
        NAME,
        __doc__,
        train_help="train the twelve runs and write the record",
        report_help="their final losses",
    )
    return cli.run(parser, argv, _train_command, _report_command)


if __name__ == "__main__":
    sys.exit(main())
