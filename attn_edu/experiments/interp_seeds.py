"""Notebook 13's attention-only model, trained from three seeds: the run it reads, and the runs it compares.

    model, result = train_seed(seed)      the notebook's recipe (section 1), from one seed
    runs = load_seeds()                   {seed: (model, result)} for the shipped seeds, 0, 1 and 2

The recipe: :class:`~attn_edu.models.attention_only.AttentionOnlyTransformer` (``V = 64``, ``C = 64``, 4 heads, 2
layers) initialised after ``torch.manual_seed(seed)``, then AdamW at learning rate ``1e-2`` for 200 steps of 32
sequences from :func:`~attn_edu.data.induction_task` (``n`` random tokens repeated once, ``n`` from 8 to 24),
the batches drawn from a generator seeded with ``seed``. Notebook 13 reads its findings off seed 0 (and can train
it again in its first section); to tell the findings that hold for every model from the numbers that move with
the seed, it compares seeds 1 and 2. All three ship here so that the notebook spends its time on reading the
models rather than on training them (each takes a few seconds on one CPU thread:
``python -m attn_edu.experiments.interp_seeds train`` writes them again, ``... report`` prints what the files hold).

The weights (float32, ~0.6 MB) are ``attn_edu/weights/interp_seeds.safetensors``, one model per prefix
``seed0.``, ``seed1.``, ``seed2.``; ``interp_seeds.json`` records the config, the recipe, the command and every
training loss. A run retrained on another machine follows the same first steps and then drifts apart (training
amplifies the last bits of float sums), so the shipped runs are one sample of the recipe, not its only outcome.
"""

from __future__ import annotations

import argparse
import platform
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import torch

from attn_edu.data import TaskBatch, induction_task
from attn_edu.experiments import cli, shipped
from attn_edu.models.attention_only import AttentionOnlyConfig, AttentionOnlyTransformer
from attn_edu.train import TrainResult, train

CONFIG = AttentionOnlyConfig(vocab_size=64, embed_dim=64, num_heads=4, num_layers=2)  # as in notebook 13
STEPS, BATCH_SIZE, LR = 200, 32, 1e-2  # AdamW at a constant learning rate
SEEDS = (0, 1, 2)  # the shipped seeds: 0 is the run notebook 13 reads its findings off
NAME = "interp_seeds"  # the files' stem in attn_edu/weights/


def training_batch(generator: torch.Generator) -> TaskBatch:
    """One batch of the recipe: 32 rows of ``n`` random tokens repeated once, a new ``n`` from 8 to 24."""
    return induction_task(BATCH_SIZE, vocab_size=CONFIG.vocab_size, generator=generator)


def train_seed(seed: int, *, steps: int = STEPS) -> tuple[AttentionOnlyTransformer, TrainResult]:
    """Notebook 13's model trained from ``seed``: initial weights after ``torch.manual_seed(seed)``, batches from a
    generator seeded with ``seed``. Returns the model (in ``eval()`` mode) and the run.

    Example:
        >>> model, result = train_seed(1, steps=3)
        >>> len(result.losses), model.config.num_layers
        (3, 2)
    """
    torch.manual_seed(seed)  # the initial weights
    model = AttentionOnlyTransformer(CONFIG)
    return model, train(model, training_batch, steps=steps, lr=LR, seed=seed, progress=False)


def load_seeds(
    directory: str | Path | None = None,
) -> dict[int, tuple[AttentionOnlyTransformer, TrainResult]]:
    """The shipped runs, ``{seed: (model, result)}``: each model in ``eval()`` mode, each result with the losses
    and the time of its training.

    Example:
        >>> runs = load_seeds()
        >>> sorted(runs), len(runs[1][1].losses)
        ([0, 1, 2], 200)
    """
    record = shipped.read_record(NAME, directory)
    if AttentionOnlyConfig(**record["config"]) != CONFIG:
        raise ValueError(f"directory: the stored config differs from this version's: {record['config']}")
    tensors = shipped.read_weights(NAME, directory)
    runs = {}
    for seed in record["seeds"]:
        run = record["runs"][str(seed)]
        model = shipped.load_into(AttentionOnlyTransformer(CONFIG), tensors, prefix=f"seed{seed}.")
        runs[int(seed)] = (
            model,
            TrainResult(losses=run["losses"], seconds=run["seconds"], steps=len(run["losses"])),
        )
    return runs


def _train_command(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)  # the notebook's setting: tensors this small run fastest on one thread
    models, runs = {}, {}
    for seed in args.seeds:
        model, result = train_seed(seed, steps=args.steps)
        models[f"seed{seed}."] = model
        runs[str(seed)] = {"seconds": round(result.seconds, 2), "losses": result.losses}
        print(
            f"seed {seed}: {args.steps} steps in {result.seconds:.1f} s, final loss {result.final_loss():.3f}"
        )
    seeds = " ".join(map(str, args.seeds))
    record = {
        "command": f"python -m attn_edu.experiments.interp_seeds train --seeds {seeds} --steps {args.steps}",
        "config": asdict(CONFIG),
        "steps": args.steps,
        "batch_size": BATCH_SIZE,
        "lr": LR,
        "seeds": list(args.seeds),
        "runs": runs,
        "environment": {"python": platform.python_version(), "torch": torch.__version__, "threads": 1},
    }
    print("wrote", shipped.save(NAME, models, record, args.out))


def _report_command(args: argparse.Namespace) -> None:
    record = shipped.read_record(NAME, args.dir)
    print(f"{NAME}: {record['command']}")
    for seed, (_, result) in load_seeds(args.dir).items():
        print(
            f"seed {seed}: {result.steps} steps in {result.seconds:.1f} s, final loss {result.final_loss():.3f}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m attn_edu.experiments.interp_seeds train [--seeds 1 2] [--steps N] [--out DIR]`` or
    ``... report [--dir DIR]``."""
    parser, train_parser = cli.command_parser(
        NAME,
        __doc__,
        train_help="train the seeds and write the two files",
        report_help="the runs of the stored models",
        seeds=SEEDS,
    )
    train_parser.add_argument("--steps", type=int, default=STEPS)
    return cli.run(parser, argv, _train_command, _report_command)


if __name__ == "__main__":
    sys.exit(main())
