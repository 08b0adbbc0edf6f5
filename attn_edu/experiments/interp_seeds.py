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

Two measurements of the shipped models ship beside them, written by the same command, so that the notebook spends
no time on loops of forward passes or on fitting:

    found = load_findings()               {seed: findings(model, result)}: what the notebook's claims rest on
    probes = load_probes()                {(stream, task): nn.Linear}: fit_probes(seed 0's model), the probes

``interp_findings.json`` holds :func:`findings` of every shipped run (seconds of pruning curves per model);
``interp_probes.safetensors`` and ``.json`` hold the six linear probes that :func:`fit_probes` trains on seed 0's
residual streams (the first optimizer of a process costs seconds to start), and their test accuracies.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import torch
from torch import nn

from attn_edu.data import TaskBatch, induction_task, repeated_sequences
from attn_edu.experiments import cli, shipped
from attn_edu.interp import ablation_effects, head_ablation, induction_score, previous_token_score
from attn_edu.models.attention_only import AttentionOnlyConfig, AttentionOnlyTransformer
from attn_edu.objectives import causal_lm_loss
from attn_edu.probes import control_labels, fit_probe, probe_accuracy, residual_streams
from attn_edu.train import TrainResult, lm_loss, train

CONFIG = AttentionOnlyConfig(vocab_size=64, embed_dim=64, num_heads=4, num_layers=2)  # as in notebook 13
STEPS, BATCH_SIZE, LR = 200, 32, 1e-2  # AdamW at a constant learning rate
SEEDS = (0, 1, 2)  # the shipped seeds: 0 is the run notebook 13 reads its findings off
NAME = "interp_seeds"  # the files' stem in attn_edu/weights/
FINDINGS, PROBES = "interp_findings", "interp_probes"  # the stems of the two measurements' files
P = 16  # the period of the notebook's evaluation batch (section 2): 16 random tokens, then the same 16


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


# --- the findings: what notebook 13's claims rest on, per model ------------------------------------------


def evaluation_batch() -> TaskBatch:
    """Notebook 13's evaluation batch (section 2): 32 rows of :data:`P` random tokens, then the same again."""
    return repeated_sequences(32, P, vocab_size=CONFIG.vocab_size, generator=torch.Generator().manual_seed(1))


@torch.no_grad()
def repeat_loss(model: nn.Module, batch: TaskBatch, head_mask: torch.Tensor | None = None) -> float:
    """Loss on the scored tokens (the second copy) of ``batch``; ``head_mask`` ``(L, H)`` gates the heads."""
    return causal_lm_loss(model(batch.input_ids, head_mask=head_mask), batch.labels).item()


def pruning_curve(model: nn.Module, batch: TaskBatch, order: Sequence[int]) -> list[float]:
    """Loss after removing 0, 1, ..., L*H heads in the given order of flat indices (layer * H + head)."""
    L, H = CONFIG.num_layers, CONFIG.num_heads
    mask = torch.ones(L * H)  # (L*H,)
    losses = [repeat_loss(model, batch)]
    for index in order:
        mask[index] = 0.0
        losses.append(repeat_loss(model, batch, mask.view(L, H)))
    return losses


def greedy_order(model: nn.Module, batch: TaskBatch) -> list[int]:
    """At every step remove the head whose removal, given the heads already gone, raises the loss least."""
    L, H = CONFIG.num_layers, CONFIG.num_heads
    mask, order = torch.ones(L * H), []
    for _ in range(L * H):
        left = [i for i in range(L * H) if mask[i] == 1]
        trial = {
            i: repeat_loss(model, batch, torch.where(torch.arange(L * H) == i, 0.0, mask).view(L, H))
            for i in left
        }
        best = min(left, key=trial.get)
        mask[best] = 0.0
        order.append(best)
    return order


def pruning_curves(
    model: nn.Module, batch: TaskBatch, effects: torch.Tensor, sharpness: torch.Tensor
) -> dict[str, list[float]]:
    """The four orders of notebook 13's pruning section, each as the losses after 0, 1, ..., L*H removals:
    by single-head ablation effect, by looks (least sharp first), the mean of 6 random orders, and greedy.

    Shapes:
        effects ``(L, H)``, sharpness ``(L, H)``.
    """
    g = torch.Generator().manual_seed(0)
    heads = effects.numel()
    random_orders = [torch.randperm(heads, generator=g).tolist() for _ in range(6)]
    return {
        "by effect": pruning_curve(model, batch, torch.argsort(effects.flatten(), stable=True).tolist()),
        "by looks (least sharp first)": pruning_curve(
            model, batch, torch.argsort(sharpness.flatten(), stable=True).tolist()
        ),
        "random (mean of 6)": torch.tensor([pruning_curve(model, batch, o) for o in random_orders])
        .mean(0)
        .tolist(),
        "greedy": pruning_curve(model, batch, greedy_order(model, batch)),
    }


def findings(model: nn.Module, result: TrainResult, batch: TaskBatch | None = None) -> dict:
    """The measurements behind notebook 13's claims, for one trained model, on ``batch`` (default
    :func:`evaluation_batch`): the numbers that its optional section on seeds compares across models."""
    batch = evaluation_batch() if batch is None else batch
    ids = batch.input_ids  # (B, 2P)
    with torch.no_grad():
        _, (w0, w1) = model(ids, need_weights=True)  # two layers of (B, H, T, S)
    sharpness = torch.stack([w0.amax(-1).mean((0, 2)), w1.amax(-1).mean((0, 2))])  # (L, H)
    effects = ablation_effects(model, batch, lm_loss)  # (L, H)
    with torch.no_grad(), head_ablation(model, [(1, h) for h in range(CONFIG.num_heads)]):
        without_layer_1 = lm_loss(model, batch).item()
    previous = previous_token_score(w0)  # (H,) layer 0
    H = CONFIG.num_heads
    return {
        "training loss, last 10 steps": result.final_loss(),
        "loss on the second copy": repeat_loss(model, batch),
        "layer-1 induction score, lowest": induction_score(w1, P).min().item(),
        "layer-0 induction score, highest": induction_score(w0, P).max().item(),
        "loss without the layer-1 heads": without_layer_1,
        "sharpness, layer 1 lowest - layer 0 highest": (sharpness[1].min() - sharpness[0].max()).item(),
        "one layer-1 head ablated, largest |effect|": effects[1].abs().max().item(),
        "most important head, effect": effects.max().item(),
        "most important head / largest layer-1 effect": (effects.max() / effects[1].abs().max()).item(),
        "most important head, layer": int(effects.argmax()) // H,
        "most important head": divmod(int(effects.argmax()), H),
        "previous-token heads (score > 0.25)": [(0, h) for h in range(H) if previous[h] > 0.25],
        "pruning": pruning_curves(model, batch, effects, sharpness),  # ~120 forward passes
    }


def load_findings(directory: str | Path | None = None) -> dict[int, dict]:
    """The shipped :func:`findings` of every shipped run, ``{seed: findings}`` (heads as ``(layer, head)``)."""
    record = shipped.read_record(FINDINGS, directory)
    found = {}
    for seed, f in record["findings"].items():
        f = dict(f)
        f["most important head"] = tuple(f["most important head"])
        f["previous-token heads (score > 0.25)"] = [
            tuple(h) for h in f["previous-token heads (score > 0.25)"]
        ]
        found[int(seed)] = f
    return found


# --- the probes: linear maps that read the previous token from seed 0's residual streams ------------------

STREAMS = ("embeddings", "after layer 0", "after layer 1")  # the residual streams the probes read
FIRST_COPY = slice(1, 16)  # positions 1-15 of the first copy: the previous token is random there
TRAIN_ROWS, TEST_ROWS = slice(0, 128), slice(128, 256)  # fit on 128 sequences, test on the 128 others


def probe_tasks() -> tuple[TaskBatch, dict[str, torch.Tensor]]:
    """Notebook 13's probe data: 256 rows of 16 random tokens, then the same 16, and the labels of the two tasks
    at :data:`FIRST_COPY`, ``(B, 15)`` each: the previous token, and a random label per token type (the control
    task of Hewitt & Liang, 2019)."""
    batch = induction_task(
        256,
        vocab_size=CONFIG.vocab_size,
        min_length=16,
        max_length=16,
        generator=torch.Generator().manual_seed(11),
    )
    ids = batch.input_ids  # (B, 32)
    tasks = {
        "previous token": ids[:, 0:15],  # (B, 15): the label of position t is token t - 1
        "control (random label per type)": control_labels(ids[:, FIRST_COPY], CONFIG.vocab_size),  # (B, 15)
    }
    return batch, tasks


def fit_probes(model: nn.Module) -> tuple[dict[tuple[str, str], nn.Linear], dict[tuple[str, str], float]]:
    """One linear probe per (stream, task), fitted (:func:`~attn_edu.probes.fit_probe`) on the training rows of
    :func:`probe_tasks` in ``model``'s residual streams; and each probe's accuracy on the test rows."""
    batch, tasks = probe_tasks()
    probes, accuracy = {}, {}
    for name, stream in zip(STREAMS, residual_streams(model, batch.input_ids)):
        features = stream[:, FIRST_COPY]  # (B, 15, C)
        for task, labels in tasks.items():
            probe = fit_probe(
                features[TRAIN_ROWS].flatten(0, 1), labels[TRAIN_ROWS].flatten(), CONFIG.vocab_size
            )
            probes[name, task] = probe
            accuracy[name, task] = probe_accuracy(
                probe, features[TEST_ROWS].flatten(0, 1), labels[TEST_ROWS].flatten()
            )
    return probes, accuracy


def load_probes(directory: str | Path | None = None) -> dict[tuple[str, str], nn.Linear]:
    """The shipped probes of :func:`fit_probes` on seed 0's model, ``{(stream, task): nn.Linear}``."""
    record = shipped.read_record(PROBES, directory)
    tensors = shipped.read_weights(PROBES, directory)
    C, V = CONFIG.embed_dim, CONFIG.vocab_size
    return {
        (stream, task): shipped.load_into(nn.Linear(C, V), tensors, prefix=f"probe{i}.")
        for i, (stream, task) in enumerate(record["probes"])
    }


def write_measurements(out: str | Path | None = None) -> None:
    """Measure the runs stored in ``out`` (default: the package's weights) and write their findings and, when
    seed 0 is among them, its probes, beside them."""
    runs = load_seeds(out)
    environment = shipped.environment(1)
    found = {str(seed): findings(model, result) for seed, (model, result) in runs.items()}
    command = f"python -m attn_edu.experiments.{NAME} train"
    shipped.save_record(FINDINGS, {"command": command, "findings": found, "environment": environment}, out)
    if 0 in runs:
        probes, accuracy = fit_probes(runs[0][0])
        record = {
            "command": command,
            "seed": 0,
            "probes": [list(key) for key in probes],
            "test_accuracy": [accuracy[key] for key in probes],
            "environment": environment,
        }
        models = {f"probe{i}.": probe for i, probe in enumerate(probes.values())}
        print("wrote", shipped.save(PROBES, models, record, out))


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
        "environment": shipped.environment(1),
    }
    print("wrote", shipped.save(NAME, models, record, args.out))
    write_measurements(args.out)


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
