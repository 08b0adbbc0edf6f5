"""The one shape of an experiment's command: ``python -m attn_edu.experiments.NAME train|report [options]``.

    parser, train_parser = command_parser("multitask", __doc__, train_help=..., report_help=..., seeds=SEEDS)
    train_parser.add_argument("--steps", ...)                  what only this experiment has
    return run(parser, argv, _train_command, _report_command)

``train`` trains and writes the two files (``--out DIR``, default: the package's weights folder), ``report``
reads them back and prints what they hold (``--dir DIR``, the same default). ``--seeds`` and ``--threads`` are
the same wherever an experiment has them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

WEIGHTS = "the package's weights folder, attn_edu/weights/"


def command_parser(
    name: str,
    doc: str | None,
    *,
    train_help: str,
    report_help: str,
    shared: Callable[[argparse.ArgumentParser], object] | None = None,
    seeds: Sequence[int] | None = None,
    threads: int | None = None,
) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The parser of ``python -m attn_edu.experiments.NAME``, and its ``train`` subparser for the options of one
    experiment.

    ``doc``'s first line describes the command. ``shared`` adds the options that both ``train`` and ``report``
    take (such as ``--model``); ``seeds`` (the default seeds) gives ``train`` a ``--seeds S [S ...]`` option and
    ``threads`` (the default count) a ``--threads N`` option.

    Example:
        >>> parser, train_parser = command_parser("demo", "A demo.", train_help="t", report_help="r", seeds=(0, 1))
        >>> parser.parse_args(["train"]).seeds, parser.parse_args(["report", "--dir", "x"]).dir
        ([0, 1], 'x')
    """
    parser = argparse.ArgumentParser(
        prog=f"python -m attn_edu.experiments.{name}", description=(doc or name).splitlines()[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    train_parser = commands.add_parser("train", help=train_help)
    report_parser = commands.add_parser("report", help=report_help)
    if shared is not None:
        shared(train_parser)
        shared(report_parser)
    if seeds is not None:
        train_parser.add_argument("--seeds", type=int, nargs="+", default=list(seeds))
    if threads is not None:
        train_parser.add_argument("--threads", type=int, default=threads)
    train_parser.add_argument("--out", default=None, help=f"folder for the files (default: {WEIGHTS})")
    report_parser.add_argument("--dir", default=None, help=f"folder of the files (default: {WEIGHTS})")
    return parser, train_parser


def run(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    train: Callable[[argparse.Namespace], object],
    report: Callable[[argparse.Namespace], object],
) -> int:
    """Parse ``argv`` (default: the command line), call ``train`` or ``report`` with the options, return 0."""
    args = parser.parse_args(argv)
    (train if args.command == "train" else report)(args)
    return 0


def record_command(
    name: str, measure: Callable[[Sequence[int]], dict]
) -> Callable[[argparse.Namespace], None]:
    """The ``train`` command of an experiment that ships a record and no weights: on ``--threads`` threads,
    ``measure(--seeds)``, written as ``NAME.json`` (``--out``) after the command that made it and before its
    environment.

    Example:
        >>> train = record_command("demo", lambda seeds: {"seeds": list(seeds)})
        >>> callable(train)
        True
    """

    def train(args: argparse.Namespace) -> None:
        import torch

        from attn_edu.experiments import shipped

        torch.set_num_threads(args.threads)
        record = {
            "command": f"python -m attn_edu.experiments.{name} train",
            **measure(args.seeds),
            "environment": shipped.environment(args.threads),
        }
        print("wrote", shipped.save_record(name, record, args.out))

    return train
