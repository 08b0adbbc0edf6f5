"""One small decoder trained four ways on the Python documentation, to see what each 2025 attention does to the sink.

    plain softmax attention                                        ("softmax")
    + one learned sink logit per head (gpt-oss)                    ("sinks",  attn_edu.gating.SinkAttention)
    + a sigmoid gate on each head's output (Qwen3-Next)            ("gate",   attn_edu.gating.OutputGate)
    differential attention (Ye et al., ICLR 2025)                  ("differential", attn_edu.differential)

Every variant is the same Llama-style decoder (:data:`CONFIG`: RoPE, RMSNorm, SwiGLU, two key/value heads, full
causal attention) with only its attention changed, trained by the same recipe from the same seeds: AdamW at a
constant ``1e-3`` on windows of the training split, each a beginning-of-text token (``BOS``, one id past the
characters) followed by 127 characters. A fixed first token is what real models see and where they grow their
sink (Xiao et al., 2024, §3.1; Gu et al., ICLR 2025, "When Attention Sink Emerges in Language Models").

Measured per run on held-out text (:func:`measure`): the loss in nats per character, each layer's and head's
mean attention on the first token (:func:`attn_edu.sinks.sink_profile`), and how much larger the residual
stream is at the first position than elsewhere (the "massive activation" of Sun et al., 2024). And StreamingLLM
(Xiao et al., 2024, §3.2; :func:`stream_losses`): the model reads held-out text eight times its training length
one character at a time through three caches of the same size: everything (RoPE then meets positions it never
trained on), only the latest 128 tokens, and the first 4 tokens plus the latest 124.

The record (:data:`NAME` ``.json``: config, recipe, every run's training losses and measurements) ships with the
package, and so do the float16 weights of every run (:data:`SHIPPED`; 7.6 MB), so that each measurement can be
made again from the weights (a test does); notebooks 08 and 10 run the plain softmax model of seed 0.
``python -m attn_edu.experiments.sink_variants train`` trains and measures them all again (about 35 minutes on
two CPU cores), ``... report`` prints the tables.
"""

from __future__ import annotations

import argparse
import platform
import sys
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from attn_edu._validate import check_positive_int, check_shape
from attn_edu.attention import fused_attention, scaled_dot_product_attention
from attn_edu.blocks import init_normal_
from attn_edu.corpus import CharTokenizer, split_corpus
from attn_edu.data import TaskBatch
from attn_edu.differential import DifferentialAttention
from attn_edu.experiments import cli, shipped
from attn_edu.experiments.text_gpt import random_windows
from attn_edu.gating import OutputGate, SinkAttention
from attn_edu.kv_cache import KVCache
from attn_edu.models import Llama, LlamaConfig
from attn_edu.objectives import causal_lm_loss
from attn_edu.sinks import sink_profile
from attn_edu.train import train

NAME = "sink_variants"  # the files' stem in attn_edu/weights/
VARIANTS = ("softmax", "sinks", "gate", "differential")
SEEDS = (0, 1, 2)
SHIPPED = tuple(f"{variant}/{seed}" for variant in VARIANTS for seed in SEEDS)  # the runs whose weights ship
# vocab_size is the tokenizer's characters + 1 (BOS); num_kv_heads is even so that differential attention pairs
# its key/value heads as DiffLlama does.
CONFIG = LlamaConfig(
    vocab_size=105, embed_dim=96, num_layers=3, num_heads=4, num_kv_heads=2, ffn_dim=256, tie_embeddings=True
)
CONTEXT = 128  # a training window: BOS + 127 characters
STEPS, BATCH_SIZE, LR = 1000, 32, 1e-3
STREAM_LENGTH = 8 * CONTEXT  # characters read one at a time by stream_losses: eight training lengths
CACHES = {
    "everything": (None, None),
    "latest 128": (0, 128),
    "first 4 + latest 124": (4, 124),
}  # (n_sink, window)


def tokenizer() -> CharTokenizer:
    """The characters of the training split (the text GPT's tokenizer); ``BOS`` is the id after them."""
    return CharTokenizer.from_text(split_corpus()[0])


def bos_id(tok: CharTokenizer) -> int:
    """The beginning-of-text token: one id past the characters."""
    return tok.vocab_size


def with_bos(windows: torch.Tensor, bos: int) -> torch.Tensor:
    """``windows`` ``(B, T)`` with ``bos`` in front: ``(B, T + 1)``."""
    check_shape("windows", windows, "B T")
    return torch.cat([torch.full_like(windows[:, :1], bos), windows], dim=1)  # (B, T + 1)


def build(variant: str, config: LlamaConfig = CONFIG) -> Llama:
    """The decoder with ``variant``'s attention in every layer, freshly initialised (normal, std 0.02).

    Example:
        >>> tiny = LlamaConfig(vocab_size=10, embed_dim=16, num_layers=2, num_heads=4, num_kv_heads=2, ffn_dim=32)
        >>> [type(build(v, tiny).blocks[1].attn).__name__ for v in ("gate", "differential")]
        ['MultiHeadAttention', 'DifferentialAttention']
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant: expected one of {VARIANTS}, got {variant!r}")
    model = Llama(config)
    C, H, D = config.embed_dim, config.num_heads, config.head_dim
    for layer, block in enumerate(model.blocks):
        if variant == "sinks":
            block.attn.attention_fn = SinkAttention(H)  # its (H,) logits start at 0, as gpt-oss's
        elif variant == "gate":
            block.attn.output_gate = OutputGate(C, H * D)
        elif variant == "differential":
            block.attn = DifferentialAttention(
                C, H, num_kv_heads=config.num_kv_heads, head_dim=D, layer=layer, rotary=model.rotary
            )
    init_normal_(model)  # the new projections drawn as the rest (the sink logits and λ vectors keep theirs)
    return model


def train_variant(
    variant: str, seed: int, *, steps: int = STEPS, config: LlamaConfig = CONFIG, progress: bool = False
) -> tuple[Llama, list[float], float]:
    """One run of the recipe: ``(model in eval() mode, training losses, seconds)``.

    Example:
        >>> tiny = LlamaConfig(vocab_size=105, embed_dim=16, num_layers=1, num_heads=2, num_kv_heads=2, ffn_dim=32)
        >>> model, losses, _ = train_variant("sinks", 0, steps=2, config=tiny)
        >>> len(losses), model.blocks[0].attn.attention_fn.sinks.shape
        (2, torch.Size([2]))
    """
    tok = tokenizer()
    ids, bos = tok.encode(split_corpus()[0]), bos_id(tok)
    torch.manual_seed(seed)  # the initial weights
    model = build(variant, config)
    if variant in ("softmax", "gate"):  # the same arithmetic, faster: torch's fused attention while training
        for block in model.blocks:
            block.attn.attention_fn = fused_attention

    def batch(generator: torch.Generator) -> TaskBatch:
        windows = with_bos(random_windows(ids, BATCH_SIZE, CONTEXT - 1, generator=generator).input_ids, bos)
        return TaskBatch(windows, windows)

    result = train(model, batch, steps=steps, lr=LR, seed=seed, progress=progress)
    if variant in ("softmax", "gate"):
        for block in model.blocks:
            block.attn.attention_fn = scaled_dot_product_attention  # the reference again
    return model.eval(), result.losses, result.seconds


def held_out_windows(count: int | None = None) -> torch.Tensor:
    """Consecutive held-out windows of 127 characters, each after ``BOS``: ``(N, 128)`` (the first ``count``)."""
    tok = tokenizer()
    ids = tok.encode(split_corpus()[1])  # (N,)
    n = len(ids) // (CONTEXT - 1) if count is None else check_positive_int("count", count)
    return with_bos(ids[: n * (CONTEXT - 1)].view(n, CONTEXT - 1), bos_id(tok))  # (n, 128)


@torch.no_grad()
def held_out_loss(model: Llama, windows: torch.Tensor, *, batch_size: int = 64) -> float:
    """Mean loss in nats per character over every next-character prediction of ``windows``."""
    total, count = 0.0, 0
    for part in windows.split(batch_size):
        n = part.shape[0] * (part.shape[1] - 1)
        total += causal_lm_loss(model(part), part).item() * n
        count += n
    return total / count


def measure(model: Llama) -> dict[str, Any]:
    """Held-out loss, first-token mass per layer and head, and the residual norm at the first position against
    the median elsewhere, per layer (on the first 32 held-out windows)."""
    profile = sink_profile(model, held_out_windows(32))
    norms = profile["norms"]  # (L + 1, T)
    return {
        "loss": held_out_loss(model, held_out_windows()),
        "first_token_mass": profile["mass"].tolist(),  # (L, H)
        "first_norm_ratio": (norms[:, 0] / norms[:, 1:].median(dim=1).values).tolist(),  # (L + 1,)
    }


@torch.no_grad()
def stream_losses(
    model: Llama, text_ids: torch.Tensor, *, n_sink: int | None, window: int | None, bins: int = 8
) -> dict[str, Any]:
    """StreamingLLM's test: read ``text_ids`` ``(B, N)`` one token at a time through a cache, scoring each next
    token. ``n_sink=None, window=None`` keeps everything; otherwise :class:`attn_edu.kv_cache.KVCache`'s
    streaming cache. Returns the mean loss in each of ``bins`` equal stretches of the text and the cache's bytes
    at the end.

    Example:
        >>> tiny = LlamaConfig(vocab_size=10, embed_dim=16, num_layers=1, num_heads=2, num_kv_heads=2, ffn_dim=32)
        >>> result = stream_losses(build("softmax", tiny), torch.randint(10, (2, 9)), n_sink=1, window=3, bins=2)
        >>> len(result["losses"]), result["cache_bytes"] == 2 * 1 * 2 * 4 * 8 * 2 * 4   # B·L·H_kv·(1+3)·D·(K,V)·4 B
        (2, True)
    """
    B, N = check_shape("text_ids", text_ids, "B N").values()
    streaming = n_sink is not None or window is not None
    cache = (
        KVCache(len(model.blocks), n_sink=n_sink, window=window) if streaming else KVCache(len(model.blocks))
    )
    losses = torch.empty(B, N - 1)
    for t in range(N - 1):
        logits = model(text_ids[:, t : t + 1], kv_cache=cache)[:, -1]  # (B, V)
        losses[:, t] = torch.nn.functional.cross_entropy(logits, text_ids[:, t + 1], reduction="none")
    per_bin = [chunk.mean().item() for chunk in losses.tensor_split(bins, dim=1)]
    return {"losses": per_bin, "cache_bytes": cache.nbytes()}


def stream_text(streams: int = 8) -> torch.Tensor:
    """``streams`` consecutive held-out stretches of :data:`STREAM_LENGTH` characters, each after ``BOS``."""
    tok = tokenizer()
    ids = tok.encode(split_corpus()[1])
    return with_bos(
        ids[: streams * STREAM_LENGTH].view(streams, STREAM_LENGTH), bos_id(tok)
    )  # (streams, N + 1)


# --- saving, loading, the command -----------------------------------------------------------------


def load(
    directory: str | Path | None = None, runs: Sequence[str] | None = None
) -> dict[tuple[str, int], Llama]:
    """The shipped runs (or only those of ``runs``, as ``"variant/seed"``), ``{(variant, seed): model}``, each in
    ``eval()`` mode, float32.

    Example:
        >>> list(load(runs=["softmax/0"]))
        [('softmax', 0)]
    """
    return shipped.load_runs(NAME, build, LlamaConfig, directory, runs)  # type: ignore[return-value]


def read_record(directory: str | Path | None = None) -> dict[str, Any]:
    """The record: config, recipe, command, and per run its training losses and measurements."""
    return shipped.read_record(NAME, directory)


def _train_command(args: argparse.Namespace) -> None:
    runs: dict[str, Any] = {}
    models = {}
    text = stream_text()
    for variant in args.variants:
        for seed in args.seeds:
            model, losses, seconds = train_variant(variant, seed, steps=args.steps, progress=True)
            model.half().float()  # measure the weights that ship (float16), not the ones before rounding
            entry = {
                "train_losses": [round(x, 4) for x in losses],
                "train_seconds": round(seconds, 1),
                **measure(model),
            }
            if variant != "differential":  # its layer keeps no cache
                entry["stream"] = {
                    name: stream_losses(model, text, n_sink=n_sink, window=window)
                    for name, (n_sink, window) in CACHES.items()
                }
            runs[f"{variant}/{seed}"] = entry
            if f"{variant}/{seed}" in SHIPPED:
                models[f"{variant}/{seed}."] = model
            print(f"{variant} seed {seed}: held-out loss {entry['loss']:.3f} ({seconds:.0f} s)", flush=True)
    record = {
        "config": asdict(replace(CONFIG)),
        "recipe": {
            "context": CONTEXT,
            "steps": args.steps,
            "batch_size": BATCH_SIZE,
            "lr": LR,
            "bos": "the last id, V - 1",
        },
        "command": "python -m attn_edu.experiments.sink_variants " + " ".join(sys.argv[1:]),
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "runs": runs,
        "shipped": [key for key in SHIPPED if key in runs],
    }
    shipped.save(NAME, models, record, args.out, half=True)


def _mean_spread(values: Sequence[float]) -> str:
    mean = sum(values) / len(values)
    return f"{mean:.3f} ({min(values):.3f}-{max(values):.3f})"


def _report_command(args: argparse.Namespace) -> None:
    record = read_record(args.dir)
    runs = record["runs"]
    print("variant        held-out loss          first-token mass, highest head   first-position norm ratio")
    for variant in VARIANTS:
        keys = [k for k in runs if k.startswith(variant + "/")]
        loss = _mean_spread([runs[k]["loss"] for k in keys])
        mass = _mean_spread([max(max(row) for row in runs[k]["first_token_mass"]) for k in keys])
        ratio = _mean_spread([max(runs[k]["first_norm_ratio"]) for k in keys])
        print(f"{variant:<14} {loss:<22} {mass:<32} {ratio}")
    print(f"\nStreaming {STREAM_LENGTH} characters (loss per eighth of the text, mean over seeds):")
    for variant in VARIANTS:
        keys = [k for k in runs if k.startswith(variant + "/") and "stream" in runs[k]]
        for name in CACHES if keys else ():
            curves = [runs[k]["stream"][name]["losses"] for k in keys]
            mean = [sum(c[i] for c in curves) / len(curves) for i in range(len(curves[0]))]
            print(f"{variant:<14} {name:<22}" + "".join(f"{x:7.2f}" for x in mean))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m attn_edu.experiments.sink_variants train [--variants ...] [--seeds ...] [--steps N] [--out DIR]``
    or ``... report [--dir DIR]``."""
    parser, train_parser = cli.command_parser(
        NAME,
        __doc__,
        train_help="train and measure every variant and seed, and write the two files",
        report_help="the measurements of the stored runs",
        seeds=SEEDS,
    )
    train_parser.add_argument("--steps", type=int, default=STEPS)
    train_parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    return cli.run(parser, argv, _train_command, _report_command)


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["VARIANTS", "build", "load", "measure", "stream_losses", "train_variant"]
