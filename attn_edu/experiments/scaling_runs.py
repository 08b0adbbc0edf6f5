"""Notebook 03's trainings, shipped: one attention head learning a key-value lookup (``attn_edu.models.lookup``),
trained with three score scales (1/√d_k, 1 and μP's 1/d_k) and, for its optional section, unscaled with QK-norm at
two initial gains, from the same three seeds each.

    python -m attn_edu.experiments.scaling_runs train      (about 12 s on one core)
    python -m attn_edu.experiments.scaling_runs report

:func:`attn_edu.models.lookup.train_lookup` trains every run; the record (``attn_edu/weights/scaling_runs.json``,
no weights: the notebook reads only the curves) keeps each run's loss and attention entropy at every step and its
training time. :func:`load_runs` returns them as the :class:`~attn_edu.models.lookup.LookupRun` a training would,
and :func:`retrain_gap` trains each set-up's first steps again to hold the record to today's code. Notebook 03
loads the runs (its ``RETRAIN = True`` trains them there instead).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attn_edu.experiments.cli import command_parser, run
from attn_edu.experiments.shipped import read_record, save_record
from attn_edu.models.lookup import LookupConfig, LookupRun, train_lookup

NAME = "scaling_runs"
D_K, STEPS, SEEDS = 256, 150, (0, 1, 2)
# Each set-up's LookupConfig settings beside head_dim = D_K (scale None is 1/√d_k).
SETUPS: dict[str, dict[str, Any]] = {
    "1/√d_k": {"scale": None},
    "1 (unscaled)": {"scale": 1.0},
    "1/d_k (μP)": {"scale": 1 / D_K},
    "1, QK-norm": {"scale": 1.0, "qk_norm": "layer", "qk_gain": 1.0},
    "1, QK-norm, γ = d_k^(-1/4)": {"scale": 1.0, "qk_norm": "layer", "qk_gain": D_K**-0.25},
}


def config(name: str) -> LookupConfig:
    """The model of set-up ``name`` (a key of :data:`SETUPS`)."""
    if name not in SETUPS:
        raise ValueError(f"name: expected one of {list(SETUPS)}, got {name!r}")
    return LookupConfig(head_dim=D_K, **SETUPS[name])


def train_runs(
    names: Sequence[str] = tuple(SETUPS), seeds: Sequence[int] = SEEDS, steps: int = STEPS
) -> dict[str, list[LookupRun]]:
    """Train every set-up of ``names`` from every seed: ``{name: [run per seed]}``."""
    return {name: [train_lookup(config(name), seed=seed, steps=steps) for seed in seeds] for name in names}


def load_runs(
    names: Sequence[str] = tuple(SETUPS), directory: str | Path | None = None
) -> dict[str, list[LookupRun]]:
    """The shipped runs of ``names``, as :func:`train_runs` returned them when the record was made."""
    record = read_record(NAME, directory)
    missing = [name for name in names if name not in record["runs"]]
    if missing:
        raise ValueError(f"names: {missing} are not in the record; it holds {list(record['runs'])}")
    return {name: [LookupRun(**fields) for fields in record["runs"][name]] for name in names}


def retrain_gap(runs: dict[str, list[LookupRun]], steps: int = 10) -> float:
    """The largest ``|loss|`` difference between the first ``steps`` steps of each set-up's first seed in ``runs``
    and a training of those steps now (the same seed gives the same weights and batches, and the learning rate is
    constant, so the first steps of a long run are those of a short one)."""
    gap = 0.0
    for name, seeded in runs.items():
        again = train_lookup(config(name), seed=SEEDS[0], steps=steps)
        gap = max(gap, *(abs(a - b) for a, b in zip(again.losses, seeded[0].losses[:steps], strict=True)))
    return gap


def _train_command(args: argparse.Namespace) -> None:
    runs = train_runs(seeds=args.seeds)
    record = {
        "command": f"python -m attn_edu.experiments.{NAME} train",
        "d_k": D_K,
        "steps": STEPS,
        "seeds": list(args.seeds),
        "setups": {name: {k: v for k, v in s.items()} for name, s in SETUPS.items()},
        "runs": {name: [vars(r) for r in seeded] for name, seeded in runs.items()},
    }
    path = save_record(NAME, record, args.out)
    print(f"wrote {path}")


def _report_command(args: argparse.Namespace) -> None:
    runs = load_runs(directory=args.dir)
    for name, seeded in runs.items():
        finals = ", ".join(f"{run.final()[0]:.3f}" for run in seeded)
        print(f"{name:<28} final loss per seed: {finals}")


def main(argv: Sequence[str] | None = None) -> int:
    parser, _ = command_parser(
        NAME,
        __doc__,
        train_help="train every run and write the record",
        report_help="print the record",
        seeds=SEEDS,
    )
    return run(parser, argv, _train_command, _report_command)


if __name__ == "__main__":
    raise SystemExit(main())
