"""Induction heads in two seconds: a two-layer attention-only model trained on repeated random sequences.

The task (:func:`attn_edu.data.induction_task`) is random tokens ``x_1 .. x_n x_1 .. x_n`` with a new length
``n`` in every batch: in the second copy the next token is whatever followed the previous occurrence of the
current token. Solving it takes two cooperating heads (Olsson et al., 2022, "In-context Learning and Induction
Heads", section 2): a **previous-token head** in layer 0 that writes "my predecessor was A" into each position,
and an **induction head** in layer 1 that finds the key whose predecessor is its own token and copies the token
found there.

:func:`train_induction_model` trains :class:`~attn_edu.models.attention_only.AttentionOnlyTransformer` with the
settings of notebook 05 (sections 6 and 7) and probes layer 1's best :func:`~attn_edu.interp.induction_score`
on :func:`held_out_repeats` every :data:`PROBE_EVERY` steps. :func:`score_heads` scores every head for the four
patterns of :data:`PATTERNS`, :func:`chance_scores` gives what uniform causal attention scores, and
:func:`score_table` lays both out for printing.

Notebook 05 reads three runs of it, seeds 0, 1 and 2 (:data:`SEEDS`); together they take about ten seconds, so
:func:`train_runs` computed them once and they ship: ``induction_heads.json`` holds every run's losses and
induction scores by step, ``induction_heads.safetensors`` the weights of seed 0's model (float32, 0.2 MB), the
only model whose heads the notebook reads. :func:`load_runs` reads them back;
``python -m attn_edu.experiments.induction_heads train`` trains and writes them again, ``... report`` prints
what they hold.

Shapes:
    ids ``(B, T)``; weights one ``(B, H, T, S)`` per layer; scores ``(L, H, P)`` with ``P = len(PATTERNS)``.
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import nn

from attn_edu._validate import check_positive_int
from attn_edu.data import TaskBatch, induction_task, repeated_sequences
from attn_edu.experiments import cli, shipped
from attn_edu.interp import current_token_score, first_token_score, induction_score, previous_token_score
from attn_edu.masks import causal_mask
from attn_edu.models.attention_only import AttentionOnlyConfig, AttentionOnlyTransformer
from attn_edu.train import TrainResult, train

VOCAB = 32  # V: guessing scores log V = 3.47 nats
PERIOD = 8  # n of the held-out sequences: 8 tokens, then the same 8 again
STEPS = 200  # optimizer steps (about 2 s on one CPU thread)
LR = 3e-3  # AdamW learning rate
PROBE_EVERY = 5  # steps between two measurements of the induction score
CONFIG = AttentionOnlyConfig(vocab_size=VOCAB, max_seq_len=32, embed_dim=64, num_heads=4, num_layers=2)

PATTERNS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {  # name: weights (B, H, T, S) -> (H,)
    "previous": previous_token_score,  # key t - 1
    "first": first_token_score,  # key 0
    "induction": lambda weights: induction_score(weights, PERIOD),  # key t - PERIOD + 1
    "current": current_token_score,  # key t
}


def held_out_repeats() -> TaskBatch:
    """The 16 held-out sequences of :data:`PERIOD` distinct random tokens repeated twice (seed 1).

    Example:
        >>> held_out_repeats().input_ids.shape
        torch.Size([16, 16])
    """
    return repeated_sequences(16, PERIOD, vocab_size=VOCAB, generator=torch.Generator().manual_seed(1))


def training_batches(generator: torch.Generator) -> TaskBatch:
    """One training batch: 32 sequences of 6 to 16 random tokens, each repeated twice."""
    return induction_task(32, vocab_size=VOCAB, min_length=6, max_length=16, generator=generator)


@dataclass
class InductionRun:
    """A trained model, its untrained copy, the training run and the probe's measurements."""

    model: AttentionOnlyTransformer | None  # after training (None: a loaded run whose weights do not ship)
    untrained: AttentionOnlyTransformer  # the same initial weights, never trained
    result: TrainResult  # losses per step and wall-clock time
    induction_by_step: dict[int, float] = field(default_factory=dict)  # step: layer 1's best induction score


def train_induction_model(
    seed: int = 0, *, steps: int = STEPS, held_out: TaskBatch | None = None
) -> InductionRun:
    """Train the two-layer attention-only model from ``seed``, probing layer 1's best induction score.

    Every :data:`PROBE_EVERY` steps the probe runs the model on ``held_out`` (default :func:`held_out_repeats`)
    and stores the highest :func:`~attn_edu.interp.induction_score` of layer 1's heads.

    Example:
        >>> run = train_induction_model(0, steps=10)
        >>> sorted(run.induction_by_step), len(run.result.losses)
        ([5, 10], 10)
    """
    check_positive_int("steps", steps)
    held_out = held_out_repeats() if held_out is None else held_out
    torch.manual_seed(seed)
    model = AttentionOnlyTransformer(CONFIG)
    untrained = copy.deepcopy(model)
    run = InductionRun(model, untrained, TrainResult([], 0.0, 0))

    def probe(step: int, model: nn.Module) -> None:
        if step % PROBE_EVERY == 0:
            _, weights = model(held_out.input_ids, need_weights=True)  # layers x (B, H, T, S)
            run.induction_by_step[step] = induction_score(weights[1], PERIOD).max().item()

    run.result = train(model, training_batches, steps=steps, lr=LR, seed=seed, progress=False, on_step=probe)
    return run


def loss_halving_step(losses: Sequence[float], window: int = 10) -> int:
    """The first step ``s`` (counted from 1) at which the mean loss of steps ``s - window + 1 .. s`` falls below
    half of the guessing loss ``log V``.

    Example:
        >>> loss_halving_step([3.5] * 20 + [0.1] * 20, window=10)
        26
    """
    check_positive_int("window", window)
    mean = torch.tensor([float(x) for x in losses]).unfold(0, window, 1).mean(dim=1)  # (steps - window + 1,)
    below = (mean < 0.5 * math.log(VOCAB)).nonzero()
    if len(below) == 0:
        raise ValueError(f"losses: the mean of {window} steps never falls below half of log V")
    return window + int(below[0])


def score_heads(weights_by_layer: Sequence[torch.Tensor]) -> torch.Tensor:
    """Every head's score for every pattern of :data:`PATTERNS`.

    Shapes:
        weights_by_layer: one ``(B, H, T, S)`` per layer; returns ``(L, H, P)``.

    Example:
        >>> score_heads([torch.eye(16).expand(1, 2, 16, 16)])[0, :, 3]  # all weight on the own token
        tensor([1., 1.])
    """
    return torch.stack([torch.stack([fn(w) for fn in PATTERNS.values()], dim=-1) for w in weights_by_layer])


def chance_scores(length: int = 2 * PERIOD) -> torch.Tensor:
    """What uniform causal attention over ``length`` tokens scores for each pattern: ``(P,)``.

    Example:
        >>> {name: round(score, 2) for name, score in zip(PATTERNS, chance_scores().tolist())}
        {'previous': 0.16, 'first': 0.21, 'induction': 0.08, 'current': 0.21}
    """
    allowed = causal_mask(length).float()  # (T, S)
    uniform = (allowed / allowed.sum(dim=-1, keepdim=True))[None, None]  # (1, 1, T, S)
    return score_heads([uniform])[0, 0]  # (P,)


def score_table(scores: torch.Tensor, chance: torch.Tensor, untrained: torch.Tensor | None = None) -> str:
    """The scores of :func:`score_heads` as a text table, two decimals: a chance row, one row per head, and the
    best untrained head if ``untrained`` scores are given.

    Example:
        >>> print(score_table(torch.zeros(1, 1, 4), torch.ones(4)))
                          previous   first  induction  current
        chance                1.00    1.00       1.00     1.00
        layer 0 head 0        0.00    0.00       0.00     0.00
    """
    widths = [max(8, len(name) + 2) for name in PATTERNS]

    def row(label: str, values: torch.Tensor) -> str:
        return f"{label:16}" + "".join(f"{v:{w}.2f}" for v, w in zip(values.tolist(), widths))

    lines = [f"{'':16}" + "".join(f"{name:>{w}}" for name, w in zip(PATTERNS, widths)), row("chance", chance)]
    for layer, heads in enumerate(scores):
        lines += [row(f"layer {layer} head {h}", head) for h, head in enumerate(heads)]
    if untrained is not None:
        lines.append(row("best untrained", untrained.amax(dim=(0, 1))))
    return "\n".join(lines)


# --- the three runs of notebook 05, shipped ------------------------------------------------------------

NAME = "induction_heads"  # the files' stem in attn_edu/weights/
SEEDS = (0, 1, 2)  # seed 0: notebook 05's sections 5 to 7; seeds 1 and 2: its first optional section
MODEL_SEEDS = (0,)  # the runs whose weights ship: the notebook reads the heads of seed 0's model only


def train_runs(seeds: Sequence[int] = SEEDS, *, steps: int = STEPS) -> dict[int, InductionRun]:
    """:func:`train_induction_model` from each seed: ``{seed: run}``, with the defaults the runs that ship.

    Example:
        >>> runs = train_runs((1, 2), steps=5)
        >>> sorted(runs), len(runs[2].result.losses)
        ([1, 2], 5)
    """
    return {seed: train_induction_model(seed, steps=steps) for seed in seeds}


def untrained_model(seed: int) -> AttentionOnlyTransformer:
    """The initial weights of the run from ``seed``, as :func:`train_induction_model` draws them, in ``eval()``
    mode; the global random generator is left as it was."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return AttentionOnlyTransformer(CONFIG).eval()


def load_runs(directory: str | Path | None = None) -> dict[int, InductionRun]:
    """The shipped runs, ``{seed: run}``: each with its losses, the time of its training and its induction score
    by step, and its untrained copy (:func:`untrained_model`); ``run.model`` is the trained model (in ``eval()``
    mode) where its weights ship (:data:`MODEL_SEEDS`), else ``None``.

    Example:
        >>> runs = load_runs()
        >>> sorted(runs), len(runs[1].result.losses), runs[1].model is None
        ([0, 1, 2], 200, True)
    """
    record = shipped.read_record(NAME, directory)
    if AttentionOnlyConfig(**record["config"]) != CONFIG:
        raise ValueError(f"directory: the stored config differs from this version's: {record['config']}")
    tensors = shipped.read_weights(NAME, directory) if record["model_seeds"] else {}
    runs = {}
    for seed, stored in record["runs"].items():
        seed = int(seed)
        model = None
        if seed in record["model_seeds"]:
            model = shipped.load_into(AttentionOnlyTransformer(CONFIG), tensors, prefix=f"seed{seed}.")
        losses = stored["losses"]
        runs[seed] = InductionRun(
            model,
            untrained_model(seed),
            TrainResult(losses=losses, seconds=stored["seconds"], steps=len(losses)),
            {int(step): score for step, score in stored["induction_by_step"].items()},
        )
    return runs


def write_runs(
    runs: dict[int, InductionRun], out: str | Path | None = None, *, model_seeds: Sequence[int] = MODEL_SEEDS
) -> Path:
    """Write the runs' record and the weights of those of ``model_seeds`` (default :data:`MODEL_SEEDS`) among
    them into ``out`` (default: the package's weights folder); return the record's path."""
    kept = [seed for seed in runs if seed in model_seeds]
    steps = {len(run.result.losses) for run in runs.values()}
    seeds = " ".join(map(str, runs))
    record = {
        "command": f"python -m attn_edu.experiments.{NAME} train --seeds {seeds} --steps {max(steps)}",
        "config": asdict(CONFIG),
        "steps": max(steps),
        "lr": LR,
        "probe_every": PROBE_EVERY,
        "model_seeds": kept,
        "runs": {
            str(seed): {
                "seconds": round(run.result.seconds, 2),
                "losses": run.result.losses,
                "induction_by_step": {str(step): score for step, score in run.induction_by_step.items()},
            }
            for seed, run in runs.items()
        },
        "environment": shipped.environment(1),
    }
    if not kept:
        return shipped.save_record(NAME, record, out)
    shipped.save(NAME, {f"seed{seed}.": runs[seed].model for seed in kept}, record, out)
    return shipped.paths(NAME, out)[1]


def _train_command(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)  # notebook 05's setting: tensors this small run fastest on one thread
    runs = train_runs(args.seeds, steps=args.steps)
    for seed, run in runs.items():
        print(
            f"seed {seed}: {args.steps} steps in {run.result.seconds:.1f} s, final loss {run.result.final_loss():.3f}"
        )
    print("wrote", write_runs(runs, args.out))


def _report_command(args: argparse.Namespace) -> None:
    record = shipped.read_record(NAME, args.dir)
    print(f"{NAME}: {record['command']} (torch {record['environment']['torch']})")
    for seed, run in load_runs(args.dir).items():
        last = max(run.induction_by_step)
        print(
            f"seed {seed}: {run.result.steps} steps in {run.result.seconds:.1f} s, final loss "
            f"{run.result.final_loss():.3f}, induction score {run.induction_by_step[last]:.2f} at step {last}, "
            f"weights {'shipped' if run.model is not None else 'not shipped'}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m attn_edu.experiments.induction_heads train [--seeds 0 1 2] [--steps N] [--out DIR]`` or
    ``... report [--dir DIR]``."""
    parser, train_parser = cli.command_parser(
        NAME,
        __doc__,
        train_help="train the seeds and write the record (and seed 0's weights)",
        report_help="what the stored runs hold",
        seeds=SEEDS,
    )
    train_parser.add_argument("--steps", type=int, default=STEPS)
    return cli.run(parser, argv, _train_command, _report_command)


if __name__ == "__main__":
    sys.exit(main())
