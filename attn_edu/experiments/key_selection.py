"""Notebook 11's text GPT reading only some of its keys: what each selection costs in loss (measurements shipped).

    losses = measure()          {reader: nats per character}, the text GPT with every layer reading as ``reader``
    record = read_record()      the same, as shipped: attn_edu/weights/key_selection.json

The readers (:data:`READERS`) keep the trained weights and change only which keys each query reads: all of them
(the reference attention), the exact top 16 or 32 scores (:func:`~attn_edu.selection.topk_attention`), MoBA's
four best blocks of 8 (:func:`~attn_edu.selection.moba_attention`) or a causal window of 32
(:func:`~attn_edu.sparse.sliding_window_attention`). Each is set as every block's ``attention_fn`` and
:func:`~attn_edu.experiments.text_gpt.validation_loss` scores the model on the held-out text, as notebook 11
section 8 does. Five passes over the text take seconds on a CPU, so the notebook reads them from the record;
``python -m attn_edu.experiments.key_selection train`` measures them again and writes it (nothing is trained:
the weights are the text GPT's), ``... report`` prints it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from functools import partial

import torch

from attn_edu import sparse
from attn_edu.attention import scaled_dot_product_attention
from attn_edu.corpus import split_corpus
from attn_edu.experiments import cli, shipped
from attn_edu.experiments.text_gpt import load_text_gpt, validation_loss
from attn_edu.selection import moba_attention, topk_attention

NAME = "key_selection"  # the record's stem in attn_edu/weights/ (no weights: it measures the text GPT's)
READERS: dict[str, Callable[..., torch.Tensor]] = {  # name -> an attention function of the one signature
    "all keys": scaled_dot_product_attention,
    "top 16": partial(topk_attention, top_k=16),
    "top 32": partial(topk_attention, top_k=32),
    "MoBA, 4 blocks of 8": partial(moba_attention, block_size=8, top_k=4),
    "a window of 32": partial(sparse.sliding_window_attention, window=32),
}


def measure(readers: dict[str, Callable[..., torch.Tensor]] | None = None) -> dict[str, float]:
    """``{name: loss}``: the text GPT's held-out loss, nats per character, with every block reading through
    ``readers[name]`` (default :data:`READERS`); the model's own attention is put back at the end."""
    model, tok = load_text_gpt()
    held_out = split_corpus()[1]
    losses = {}
    try:
        for name, reader in (READERS if readers is None else readers).items():
            for block in model.blocks:
                block.attn.attention_fn = reader  # the same weights, reading fewer keys
            losses[name] = validation_loss(model, tok, held_out)
    finally:
        for block in model.blocks:
            block.attn.attention_fn = scaled_dot_product_attention
    return losses


def read_record(directory: str | None = None) -> dict:
    """The shipped record (``attn_edu/weights/key_selection.json``): ``losses``, ``{reader: nats per char}``."""
    return shipped.read_record(NAME, directory)


def _train_command(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)  # notebook 11's setting
    record = {
        "command": f"python -m attn_edu.experiments.{NAME} train",
        "losses": measure(),
        "environment": shipped.environment(1),
    }
    print("wrote", shipped.save_record(NAME, record, args.out))


def _report_command(args: argparse.Namespace) -> None:
    record = read_record(args.dir)
    print(f"{NAME}: {record['command']} (torch {record['environment']['torch']})")
    for name, loss in record["losses"].items():
        print(f"{name:<20} {loss:.3f} nats/char")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m attn_edu.experiments.key_selection train [--out DIR]`` or ``... report [--dir DIR]``."""
    parser, _ = cli.command_parser(
        NAME,
        __doc__,
        train_help="measure the readers again and write the record (nothing is trained)",
        report_help="what the record holds",
    )
    return cli.run(parser, argv, _train_command, _report_command)


if __name__ == "__main__":
    sys.exit(main())
