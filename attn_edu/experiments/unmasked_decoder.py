"""Notebook 04's decoder trained without its causal mask: it learns to copy the next token, then cannot generate.

    record = measure()          three seeds, each a one-layer GPT trained with the mask and one trained without
    record = read_record()      the same, as shipped: attn_edu/weights/unmasked_decoder.json (no weights)

Each seed trains two copies of one small :class:`~attn_edu.models.GPT` (:data:`CONFIG`) from the same initial
weights on windows of :data:`WINDOW` characters of the Python documentation (:func:`attn_edu.corpus.split_corpus`,
:func:`~attn_edu.experiments.text_gpt.random_windows`), :data:`STEPS` AdamW steps with
:func:`attn_edu.train.train`: one reads through the reference attention, which honours the causal mask, the other
through :func:`peeking`, which ignores it, so that query ``t`` also sees key ``t + 1``, the very token it must
predict. Both are then scored on the same held-out windows twice: as trained, and with the same weights behind
causal attention, the future hidden as in generation (:func:`held_out_losses`). The record keeps each run's
training losses and those two held-out losses; notebook 04 reads it (its ``RETRAIN = True`` calls
:func:`measure`). ``python -m attn_edu.experiments.unmasked_decoder train`` trains them again and writes it (about
25 s on one core), ``... report`` prints it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import torch

from attn_edu.attention import scaled_dot_product_attention
from attn_edu.corpus import CharTokenizer, split_corpus
from attn_edu.data import TaskBatch
from attn_edu.experiments import cli, shipped
from attn_edu.experiments.text_gpt import random_windows
from attn_edu.models import GPT, GPTConfig
from attn_edu.train import lm_loss, train

NAME = "unmasked_decoder"  # the record's stem in attn_edu/weights/ (no weights: notebook 04 reads losses)
SEEDS = (0, 1, 2)
# GPTConfig's settings, less the vocabulary size (the corpus's characters)
CONFIG = {"max_seq_len": 32, "embed_dim": 32, "num_layers": 1, "num_heads": 2, "ffn_dim": 64}
WINDOW = 32  # characters per training and held-out window
BATCH_SIZE = 16  # training windows per step
STEPS = 300  # AdamW steps
LR = 1e-2  # the learning rate
HELD_OUT_ROWS, HELD_OUT_SEED = 64, 1  # the held-out windows: how many, and the seed that draws them
LOSS_DIGITS = 6  # significant digits of the training losses in the record (held-out losses: kept whole)


def peeking(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention that ignores the causal mask: every query sees every key, the next token included.

    The one signature of every attention function; ``is_causal`` is accepted and dropped, ``mask`` (padding,
    say) still applies.

    Shapes:
        q ``(B, H, T, D)``, k and v ``(B, H, S, D)``; returns ``(B, H, T, D)``.
    """
    return scaled_dot_product_attention(q, k, v, mask, scale=scale)


ATTENTION = {"with the mask": scaled_dot_product_attention, "without it": peeking}  # name -> attention_fn


def held_out_losses(model: GPT, held_out: TaskBatch) -> tuple[float, float]:
    """``model``'s loss on the held-out batch as trained, and with the same weights behind causal attention (the
    future hidden, as in generation), in nats per character."""
    generating = GPT(model.config)  # the reference attention, which honours the causal mask
    generating.load_state_dict(model.state_dict())
    with torch.no_grad():
        return lm_loss(model.eval(), held_out).item(), lm_loss(generating.eval(), held_out).item()


def train_seed(seed: int) -> dict:
    """One seed of the record: ``{"seed", name: {"as trained", "future hidden", "losses"}}`` for each name of
    :data:`ATTENTION`, the two models starting from the same weights and reading the same batches."""
    train_text, held_out_text = split_corpus()
    tokenizer = CharTokenizer.from_text(train_text)
    ids, held_out = tokenizer.encode(train_text), tokenizer.encode(held_out_text)  # (N,) each
    config = GPTConfig(vocab_size=tokenizer.vocab_size, **CONFIG)
    held_out_batch = random_windows(
        held_out, HELD_OUT_ROWS, WINDOW, generator=torch.Generator().manual_seed(HELD_OUT_SEED)
    )  # (64, 32)
    result: dict = {"seed": seed}
    for name, attention_fn in ATTENTION.items():
        torch.manual_seed(seed)  # the same initial weights for both
        model = GPT(config, attention_fn=attention_fn)
        run = train(
            model,
            lambda g: random_windows(ids, BATCH_SIZE, WINDOW, generator=g),
            steps=STEPS,
            lr=LR,
            seed=seed,
            progress=False,
        )
        as_trained, future_hidden = held_out_losses(model, held_out_batch)
        result[name] = {
            "as trained": as_trained,
            "future hidden": future_hidden,
            "losses": [float(f"{loss:.{LOSS_DIGITS}g}") for loss in run.losses],
        }
    return result


def measure(seeds: Sequence[int] = SEEDS) -> dict:
    """Every seed's :func:`train_seed` under ``"runs"``, with the settings and the vocabulary size ``V`` (a
    uniform guess scores ``log V``)."""
    if not seeds:
        raise ValueError("seeds: expected at least one seed, got none")
    return {
        "config": dict(CONFIG),
        "window": WINDOW,
        "batch_size": BATCH_SIZE,
        "steps": STEPS,
        "lr": LR,
        "held_out": {"rows": HELD_OUT_ROWS, "seed": HELD_OUT_SEED},
        "vocab_size": CharTokenizer.from_text(split_corpus()[0]).vocab_size,
        "runs": [train_seed(seed) for seed in seeds],
    }


def read_record(directory: str | None = None) -> dict:
    """The shipped record (``attn_edu/weights/unmasked_decoder.json``), as :func:`measure` returned it, with the
    command that wrote it and its environment."""
    return shipped.read_record(NAME, directory)


def _report_command(args: argparse.Namespace) -> None:
    record = read_record(args.dir)
    print(f"{NAME}: {record['command']} (torch {record['environment']['torch']})")
    for run in record["runs"]:
        for name in ATTENTION:
            losses = run[name]
            print(
                f"seed {run['seed']}, {name:<13}: held-out {losses['as trained']:.3f} as trained, "
                f"{losses['future hidden']:.3f} with the future hidden (nats/char)"
            )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m attn_edu.experiments.unmasked_decoder train [--seeds ...] [--out DIR]`` or ``... report``."""
    parser, _ = cli.command_parser(
        NAME,
        __doc__,
        train_help="train notebook 04's decoders with and without the mask and write the record (no weights)",
        report_help="what the record holds",
        seeds=SEEDS,
        threads=1,
    )
    return cli.run(parser, argv, cli.record_command(NAME, measure), _report_command)


if __name__ == "__main__":
    sys.exit(main())
