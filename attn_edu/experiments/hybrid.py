"""Attention, Gated DeltaNet, Qwen3-Next's 3:1 hybrid of the two, and cross-layer KV sharing, trained alike on the
Python documentation: what each way of cutting the decode memory costs in loss.

Four decoders of four layers, the same in everything but their token mixers (:data:`VARIANTS`):

    "attention"   A A A A   every layer softmax attention (full, causal, RoPE, GQA)
    "hybrid"      L L L A   three Gated DeltaNet layers, then one attention layer: Qwen3-Next's ratio
    "linear"      L L L L   every layer Gated DeltaNet (:class:`attn_edu.delta_rule.GatedDeltaNet`)
    "shared"      A S A S   attention, every second layer reading the keys and values of the layer below
                            (CLA2, :class:`attn_edu.kv_sharing.SharedKVAttention`): half the KV cache

The rest is :mod:`attn_edu.experiments.sink_variants`' decoder and recipe (RMSNorm, SwiGLU, tied embeddings, a
beginning-of-text token before 127 characters, AdamW at 1e-3 for 1,000 steps of 32 windows), so the held-out
losses compare with its runs. Measured per run (:func:`measure`): the held-out loss in nats per character, and
what decoding costs: the bytes the decode memory holds after 128 and after 1,024 tokens (an attention layer's
KV cache grows by ``2 · H_kv · D`` values a token; a DeltaNet layer's state stays ``H · Dk · Dv``). Once per
variant, on an idle machine (:func:`time_decoding`): the milliseconds per generated token with 128 and with
4,096 tokens before it, on one thread.

A recall task beside the text (:func:`train_recall`, :func:`recall_scores`): the same four patterns, smaller,
trained from scratch to copy a random sequence (notebook 13's induction task), and scored on copies of 8 to 32
tokens; ``train --task recall`` runs it (about 25 minutes on one thread; no weights ship, the record keeps
every run's losses and scores).

The record (``hybrid.json``) and the float16 weights of every text run ship with the package.
``python -m attn_edu.experiments.hybrid train --threads 1`` trains and measures them again (about 55 minutes
on one CPU thread; the runs are independent, so two commands with different ``--variants`` or ``--seeds`` can
share two cores), ``... report`` prints the table.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from attn_edu.attention import fused_attention, scaled_dot_product_attention
from attn_edu.blocks import init_normal_
from attn_edu.corpus import split_corpus
from attn_edu.data import TaskBatch, induction_task, repeated_sequences
from attn_edu.delta_rule import GatedDeltaNet
from attn_edu.experiments import cli, shipped
from attn_edu.experiments import sink_variants as recipe
from attn_edu.experiments.text_gpt import random_windows
from attn_edu.generation import new_cache
from attn_edu.kv_sharing import SharedKVAttention
from attn_edu.models import Llama, LlamaConfig
from attn_edu.objectives import IGNORE_INDEX, causal_lm_loss
from attn_edu.report import spread
from attn_edu.train import train

NAME = "hybrid"  # the files' stem in attn_edu/weights/
# A: attention, L: Gated DeltaNet, S: attention with the keys and values of the layer below (cross-layer sharing)
VARIANTS = {"attention": "AAAA", "hybrid": "LLLA", "linear": "LLLL", "shared": "ASAS"}
SEEDS = (0, 1, 2)
SHIPPED = tuple(f"{variant}/{seed}" for variant in VARIANTS for seed in SEEDS)  # the runs whose weights ship
CONFIG = replace(recipe.CONFIG, num_layers=4)  # sink_variants' decoder, one layer deeper for the 3:1 ratio
# Gated DeltaNet with the attention's head count: 2 query/key heads of 24 serve 4 value heads of 24, as Qwen3-Next
# pairs 16 key heads with 32 value heads. Chunks of 32 train fastest here.
DELTA = {"num_heads": 4, "num_k_heads": 2, "k_dim": 24, "v_dim": 24, "chunk_size": 32}
MEMORY_AT = (128, 1024)  # tokens read before the decode memory is weighed
TIME_AT = (128, 4096)  # tokens before the timed decode steps


def build(variant: str, config: LlamaConfig = CONFIG, delta: dict[str, int] | None = None) -> Llama:
    """The decoder with ``variant``'s layer pattern, freshly initialised (normal, std 0.02, as every model here);
    its DeltaNet layers take ``delta`` (default :data:`DELTA`).

    Example:
        >>> [type(block.attn).__name__ for block in build("hybrid").blocks]
        ['GatedDeltaNet', 'GatedDeltaNet', 'GatedDeltaNet', 'MultiHeadAttention']
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant: expected one of {tuple(VARIANTS)}, got {variant!r}")
    pattern = VARIANTS[variant]
    if len(pattern) != config.num_layers:
        raise ValueError(f"config: {variant!r} has {len(pattern)} layers, the config {config.num_layers}")
    model = Llama(config)
    for i, (block, kind) in enumerate(zip(model.blocks, pattern)):
        if kind == "L":
            block.attn = GatedDeltaNet(config.embed_dim, **(DELTA if delta is None else delta))
        elif kind == "S":
            block.attn = SharedKVAttention(block.attn, source=model.blocks[i - 1].attn)
    return init_normal_(model)


def _attention_fn(model: Llama, fn: Any) -> None:
    for block in model.blocks:
        if not isinstance(block.attn, GatedDeltaNet):
            block.attn.attention_fn = fn


def train_variant(
    variant: str,
    seed: int,
    *,
    steps: int = recipe.STEPS,
    config: LlamaConfig = CONFIG,
    progress: bool = False,
) -> tuple[Llama, list[float], float]:
    """One run of the recipe: ``(model in eval() mode, training losses, seconds)``."""
    tok = recipe.tokenizer()
    ids, bos = tok.encode(split_corpus()[0]), recipe.bos_id(tok)
    torch.manual_seed(seed)  # the initial weights
    model = build(variant, config)
    _attention_fn(model, fused_attention)  # the same arithmetic, faster, while training

    def batch(generator: torch.Generator) -> TaskBatch:
        windows = random_windows(ids, recipe.BATCH_SIZE, recipe.CONTEXT - 1, generator=generator).input_ids
        windows = recipe.with_bos(windows, bos)
        return TaskBatch(windows, windows)

    result = train(model, batch, steps=steps, lr=recipe.LR, seed=seed, progress=progress)
    _attention_fn(model, scaled_dot_product_attention)  # the reference again
    return model.eval(), result.losses, result.seconds


@torch.no_grad()
def decode_bytes(model: Llama, tokens: int) -> int:
    """Bytes of the decode memory (:func:`attn_edu.generation.new_cache`) after reading ``tokens`` tokens of one
    sequence (random ids: the size does not depend on them)."""
    cache = new_cache(model)
    model(
        torch.randint(model.config.vocab_size, (1, tokens), generator=torch.Generator().manual_seed(0)),
        kv_cache=cache,
    )
    return cache.nbytes()


@torch.no_grad()
def decode_ms(model: Llama, context: int, *, steps: int = 32) -> float:
    """Milliseconds per generated token for one sequence with ``context`` tokens before it: the median of
    ``steps`` single-token steps after one prefill (wall time, on the threads torch has)."""
    cache = new_cache(model)
    ids = torch.randint(
        model.config.vocab_size, (1, context + steps), generator=torch.Generator().manual_seed(0)
    )
    model(ids[:, :context], kv_cache=cache)
    times = []
    for t in range(context, context + steps):
        start = time.perf_counter()
        model(ids[:, t : t + 1], kv_cache=cache)
        times.append(time.perf_counter() - start)
    return 1000 * sorted(times)[len(times) // 2]


def time_decoding(
    models: dict[tuple[str, int], Llama] | None = None, *, threads: int = 1, contexts: Sequence[int] = TIME_AT
) -> dict[str, Any]:
    """Milliseconds per generated token (:func:`decode_ms`, 64 steps) of each variant's seed-0 run at
    ``contexts`` tokens of context (default :data:`TIME_AT`), on ``threads`` threads: what the record's ``"ms_per_token"`` holds. The
    time depends on the layers, not on the weights, so one run per variant is timed, on an otherwise idle
    machine (never beside a training). One thread: for models this small a second one only adds overhead (5-8
    ms a token on two threads against 3.6-6.6 on one, measured here)."""
    models = load(runs=[f"{variant}/0" for variant in VARIANTS]) if models is None else models
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        timed = {
            variant: {str(n): round(decode_ms(models[variant, 0], n, steps=64), 3) for n in contexts}
            for variant in VARIANTS
        }
    finally:
        torch.set_num_threads(previous)
    return {"threads": threads, "machine": platform.processor() or platform.machine(), "ms": timed}


def held_out_loss(model: Llama, count: int | None = None) -> float:
    """Loss in nats per character on sink_variants' held-out windows (the first ``count`` of them, or all)."""
    return recipe.held_out_loss(model, recipe.held_out_windows(count))


def measure(model: Llama) -> dict[str, Any]:
    """Held-out loss (sink_variants' windows; also on the first 32 alone, which a test re-measures from the
    shipped weights) and decode bytes at :data:`MEMORY_AT`."""
    return {
        "loss": held_out_loss(model),
        "loss_first_32": held_out_loss(model, 32),
        "decode_bytes": {str(n): decode_bytes(model, n) for n in MEMORY_AT},
    }


# The recall task, where a fixed-size state is known to fail: n random distinct tokens, then the same n again
# (:func:`attn_edu.data.induction_task`, n from 8 to 24 per batch). The second copy is predictable only by finding
# each token's earlier occurrence, which an attention layer reads from its cache and a state must have kept.
# Smaller decoders than the text runs (64 wide, heads of 16), trained from scratch on the task alone.
RECALL_CONFIG = replace(CONFIG, vocab_size=64, embed_dim=64, head_dim=16, ffn_dim=128)
RECALL_DELTA = {**DELTA, "k_dim": 16, "v_dim": 16}
RECALL = {"steps": 1500, "lr": 3e-3, "batch_size": 32, "min_length": 8, "max_length": 24}
RECALL_AT = (8, 16, 24, 32)  # copy lengths measured; 32 is longer than any trained on


def train_recall(
    variant: str, seed: int, *, steps: int = RECALL["steps"], progress: bool = False
) -> tuple[Llama, list[float], float]:
    """One run of the recall task: ``(model in eval() mode, training losses, seconds)``."""
    torch.manual_seed(seed)  # the initial weights
    model = build(variant, RECALL_CONFIG, RECALL_DELTA)
    _attention_fn(model, fused_attention)

    def batch(generator: torch.Generator) -> TaskBatch:
        lengths = {k: RECALL[k] for k in ("min_length", "max_length")}
        return induction_task(
            RECALL["batch_size"], vocab_size=RECALL_CONFIG.vocab_size, generator=generator, **lengths
        )

    result = train(model, batch, steps=steps, lr=RECALL["lr"], seed=seed, progress=progress)
    _attention_fn(model, scaled_dot_product_attention)
    return model.eval(), result.losses, result.seconds


@torch.no_grad()
def recall_scores(model: Llama, *, count: int = 256, seed: int = 1234) -> dict[str, dict[str, float]]:
    """Per copy length ``n`` of :data:`RECALL_AT`, on ``count`` fresh sequences: the loss on the second copy
    (nats per token; guessing costs ``log 64 = 4.16``) and the share of its tokens predicted right (the argmax)."""
    generator = torch.Generator().manual_seed(seed)
    scores = {}
    for n in RECALL_AT:
        batch = repeated_sequences(count, n, vocab_size=RECALL_CONFIG.vocab_size, generator=generator)
        logits = model(batch.input_ids)
        scored = batch.labels[:, 1:] != IGNORE_INDEX  # (B, T-1): the second copy, as causal_lm_loss shifts it
        right = logits[:, :-1].argmax(-1) == batch.labels[:, 1:]
        scores[str(n)] = {
            "loss": round(causal_lm_loss(logits, batch.labels).item(), 4),
            "accuracy": round(right[scored].float().mean().item(), 4),
        }
    return scores


def recall_table(record: dict[str, Any] | None = None, what: str = "accuracy") -> str:
    """The recall runs (default: the shipped record's): per variant and copy length, ``what`` (``"accuracy"`` or
    ``"loss"``) on the second copy over the seeds, as median (min-max)."""
    runs = (read_record() if record is None else record)["recall"]["runs"]
    titles = {"accuracy": "share of the second copy predicted right", "loss": "loss on the second copy, nats"}
    if what not in titles:
        raise ValueError(f"what: expected 'accuracy' or 'loss', got {what!r}")
    title = titles[what]
    seeds = len({k.split("/")[1] for k in runs})
    lines = [f"{title}, median (min-max) over {seeds} seeds", f"{'variant':<10} "]
    lines[1] += " ".join(f"{f'n = {n}':>17}" for n in RECALL_AT)
    for variant in VARIANTS:
        keys = [k for k in runs if k.startswith(variant + "/")]
        cells = []
        for n in RECALL_AT:
            values = sorted(runs[k]["scores"][str(n)][what] for k in keys)
            cells.append(f"{values[len(values) // 2]:.2f} ({values[0]:.2f}-{values[-1]:.2f})")
        lines.append(f"{variant:<10} " + " ".join(f"{c:>17}" for c in cells))
    return "\n".join(lines)


def _recall_command(args: argparse.Namespace) -> None:
    """Train the recall runs; after each, write it into the record under ``"recall"`` (no weights ship). The record
    is read again before each write, so commands with different ``--variants`` can share two cores."""
    torch.set_num_threads(args.threads)
    steps = args.steps or RECALL["steps"]
    for variant in args.variants:
        for seed in args.seeds:
            model, losses, seconds = train_recall(variant, seed, steps=steps, progress=True)
            scores = recall_scores(model)
            print(f"recall {variant} seed {seed}: {scores} ({seconds:.0f} s)")
            record = read_record(args.out)
            runs = record.get("recall", {}).get("runs", {})
            runs[f"{variant}/{seed}"] = {
                "train_losses": [round(x, 4) for x in losses],
                "train_seconds": round(seconds, 1),
                "scores": scores,
            }
            record["recall"] = {
                "config": asdict(RECALL_CONFIG),
                "delta": RECALL_DELTA,
                "recipe": {**RECALL, "steps": steps},
                "command": "python -m attn_edu.experiments.hybrid train --task recall --threads 1",
                "threads": torch.get_num_threads(),
                "runs": dict(sorted(runs.items())),
            }
            shipped.save_record(NAME, record, args.out)


def load(
    directory: str | Path | None = None, runs: Sequence[str] | None = None
) -> dict[tuple[str, int], Llama]:
    """The shipped runs (or those of ``runs``, as ``"variant/seed"``), ``{(variant, seed): model}``, in ``eval()``
    mode, float32."""
    return shipped.load_runs(NAME, build, LlamaConfig, directory, runs)  # type: ignore[return-value]


def read_record(directory: str | Path | None = None) -> dict[str, Any]:
    """The record: config, recipe, command, and per run its training losses and measurements."""
    return shipped.read_record(NAME, directory)


def _train_command(args: argparse.Namespace) -> None:
    if args.task == "recall":
        return _recall_command(args)
    torch.set_num_threads(args.threads)
    runs: dict[str, Any] = {}
    models = {}
    for variant in args.variants:
        for seed in args.seeds:
            model, losses, seconds = train_variant(
                variant, seed, steps=args.steps or recipe.STEPS, progress=True
            )
            model.half().float()  # measure the weights that ship (float16)
            runs[f"{variant}/{seed}"] = {
                "train_losses": [round(x, 4) for x in losses],
                "train_seconds": round(seconds, 1),
                **measure(model),
            }
            models[f"{variant}/{seed}."] = model
            print(
                f"{variant} seed {seed}: held-out loss {runs[f'{variant}/{seed}']['loss']:.3f} ({seconds:.0f} s)"
            )
    record = {
        "config": asdict(CONFIG),
        "delta": DELTA,
        "variants": VARIANTS,
        "recipe": {
            "context": recipe.CONTEXT,
            "steps": args.steps or recipe.STEPS,
            "batch_size": recipe.BATCH_SIZE,
            "lr": recipe.LR,
        },
        "command": "python -m attn_edu.experiments.hybrid " + " ".join(sys.argv[1:]),
        "machine": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "runs": runs,
        "shipped": [key for key in SHIPPED if key in runs],
    }
    shipped.save(NAME, {k: m for k, m in models.items() if k[:-1] in SHIPPED}, record, args.out, half=True)


def table(record: dict[str, Any] | None = None) -> str:
    """The runs side by side (default: the shipped record): held-out loss over the seeds, the decode memory's
    bytes per token and its fixed bytes, and the mean milliseconds per generated token at :data:`TIME_AT`."""
    record = read_record() if record is None else record
    runs, timing = record["runs"], record.get("ms_per_token")
    lines = [
        f"{'variant':<10} {'held-out loss, nats/char':<36} {'bytes/token':>11} {'fixed bytes':>11}   ms/token at"
    ]
    lines[0] += " " + " and ".join(f"{n:,}" for n in TIME_AT)
    for variant in VARIANTS:
        keys = [k for k in runs if k.startswith(variant + "/")]
        if not keys:
            continue
        short, long = (runs[keys[0]]["decode_bytes"][str(n)] for n in MEMORY_AT)
        per_token = (long - short) // (MEMORY_AT[1] - MEMORY_AT[0])
        ms = [timing["ms"][variant][str(n)] for n in TIME_AT] if timing else []
        row = f"{variant:<10} {spread([runs[k]['loss'] for k in keys]):<36} {per_token:>11,} {short - per_token * MEMORY_AT[0]:>11,}"
        lines.append(row + "   " + " and ".join(f"{x:.2f}" for x in ms))
    return "\n".join(lines)


def _report_command(args: argparse.Namespace) -> None:
    print(table(read_record(args.dir)))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m attn_edu.experiments.hybrid train [--variants ...] [--seeds ...] [--steps N] [--out DIR]``
    or ``... report [--dir DIR]``."""
    parser, train_parser = cli.command_parser(
        NAME,
        __doc__,
        train_help="train and measure every variant and seed, and write the two files",
        report_help="the measurements of the stored runs",
        seeds=SEEDS,
        threads=2,
    )
    train_parser.add_argument(
        "--task", choices=["text", "recall"], default="text", help="recall: the copy task"
    )
    train_parser.add_argument("--steps", type=int, default=None, help="default: the task's recipe")
    train_parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    return cli.run(parser, argv, _train_command, _report_command)


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "VARIANTS",
    "build",
    "decode_bytes",
    "decode_ms",
    "held_out_loss",
    "load",
    "measure",
    "recall_scores",
    "recall_table",
    "table",
    "train_recall",
    "train_variant",
]
