"""Reading past the trained length: a tiny RoPE language model trained on 64 characters, read on 256.

    model = Llama(CONFIG) trained on windows of L = 64 characters of the Python docs   (attn_edu.corpus)
    read  = with_scaling(model, scaling_for("YaRN"))    the same weights, RoPE stretched s = 4 times
    tuned = fine_tune(read, ids, seed)                   50 AdamW steps on windows of 4L = 256
    loss_by_position(model, windows)                     nats per character at every query position

Four ways to read 4L characters with a model trained on L: no scaling (RoPE as trained), position
interpolation (PI, Chen et al., 2023: every frequency divided by s), NTK-aware scaling ("bloc97", 2023:
the base raised to b·s^(D/(D−2))) and YaRN (Peng et al., 2023: fast pairs kept, slow pairs
interpolated, and the temperature 0.1 ln s + 1), each as it is and after a short fine-tune at 4L
(PI's paper fine-tunes for 1,000 steps, YaRN's for 400; our 50 steps read 2.5 % as many characters as
the pretraining). The models read character-level text because every position of it is scored, so
the loss can be read position by position, and the characters past L can help (words and names recur
within 256 characters).

Measured on the held-out tenth of Python 3.11's text (nats per character over the 16 positions before
L, 2L and 4L; the range over seeds 0, 1, 2): no scaling 1.34-1.38, 2.46-2.52, 3.41-3.64; PI 3.01-3.21
everywhere; NTK-aware 1.38-1.43, 1.42-1.46, 2.65-2.80; YaRN 1.48-1.64, 1.69-1.80, 1.80-1.88. After the
fine-tune, YaRN 1.37-1.41, 1.37-1.39, 1.46-1.48, the best at 4L; the bigram model scores 2.32.

Three models are trained, one per seed (``python -m attn_edu.experiments.rope_extension train``; on two CPU
cores 25-60 s a seed, under a second for each fine-tune); all fifteen ship in float16 in one file,
``attn_edu/weights/rope_extension.safetensors`` (~0.9 MB), with ``rope_extension.json``, the record of
the config, the tokenizer, the command and every loss of the table that ``... report`` prints.
:func:`load_models` returns them in float32; notebook 07 reads them.

Shapes:
    windows ``(N, T + 1)`` character ids; loss by position ``(T,)``; logits ``(B, T, V)``.
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
import torch.nn.functional as F

from attn_edu._validate import check_positive_int, check_shape, check_tensor
from attn_edu.attention import attention_entropy, fused_attention, scaled_dot_product_attention
from attn_edu.corpus import CharTokenizer, corpus, corpus_sha256, split_corpus
from attn_edu.experiments import cli, shipped
from attn_edu.experiments.text_gpt import random_windows
from attn_edu.interp import attention_maps
from attn_edu.models import Llama, LlamaConfig
from attn_edu.multihead import AttentionFn
from attn_edu.rope_scaling import RopeScaling
from attn_edu.train import TrainResult, train

CONTEXT = 64  # L: the training windows, in characters
FACTOR = 4  # s: the models are read at s·L = 256 characters
# ~30,000 parameters: D = 16 (8 rotating pairs), base 10,000; vocab_size is the tokenizer's.
CONFIG = LlamaConfig(
    vocab_size=104, embed_dim=32, num_layers=2, num_heads=2, num_kv_heads=2, ffn_dim=96, tie_embeddings=True
)
METHODS = ("none", "PI", "NTK", "YaRN")  # the four readings, in the order of the plots
LABELS = {"none": "no scaling", "PI": "PI", "NTK": "NTK-aware", "YaRN": "YaRN"}  # as notebook 07 names them
STEPS, BATCH_SIZE, LR = 2000, 32, 3e-3  # pretraining at L: AdamW, 50 warm-up steps, cosine decay
TUNE_STEPS, TUNE_BATCH_SIZE, TUNE_LR = 50, 8, 1e-3  # fine-tuning at 4L: 5 warm-up steps, cosine decay
SEEDS = (0, 1, 2)
WIDTH = 16  # the summaries average the 16 query positions before L, 2L and 4L
NAME = "rope_extension"  # the files' stem in attn_edu/weights/


# --- the four readings ----------------------------------------------------------------------------


def scaling_for(
    method: str, factor: float = FACTOR, *, attention_factor: float | None = None
) -> RopeScaling | None:
    """The :class:`~attn_edu.rope_scaling.RopeScaling` of ``method`` (``"none"``, ``"PI"``, ``"NTK"``, ``"YaRN"``).

    ``attention_factor`` overrides the factor on cos and sin (YaRN's own is ``0.1 ln s + 1``).

    Example:
        >>> scaling_for("none") is None, scaling_for("PI").kind, scaling_for("YaRN").original_max_positions
        (True, 'linear', 64)
    """
    kinds = {"PI": "linear", "NTK": "ntk", "YaRN": "yarn"}
    if method == "none":
        return None
    if method not in kinds:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    return RopeScaling(
        kinds[method], factor, original_max_positions=CONTEXT, attention_factor=attention_factor
    )


def with_scaling(
    model: Llama, scaling: RopeScaling | None, *, attention_fn: AttentionFn | None = None
) -> Llama:
    """A copy of ``model`` whose RoPE uses ``scaling``: the same weights (RoPE has none), other angles.

    The copy attends with ``attention_fn``, by default the one ``model`` uses. The global random state
    is left as it was (building a model draws initial weights).

    Example:
        >>> model = Llama(replace(CONFIG, vocab_size=10))
        >>> with_scaling(model, scaling_for("NTK")).rotary.inv_freq[-1] < model.rotary.inv_freq[-1]
        tensor(True)
    """
    if not isinstance(model, Llama):
        raise ValueError(f"model: expected an attn_edu.models.Llama, got {type(model).__name__}")
    if attention_fn is None:
        attention_fn = model.blocks[0].attn.attention_fn
    with torch.random.fork_rng(devices=[]):
        copy = Llama(replace(model.config, rope_scaling=scaling), attention_fn=attention_fn)
    copy.load_state_dict(model.state_dict())
    return copy.train(model.training)


# --- training ---------------------------------------------------------------------------------------


def train_base(
    seed: int, ids: torch.Tensor, vocab_size: int, *, steps: int = STEPS, progress: bool = False
) -> tuple[Llama, TrainResult]:
    """Pretrain a :data:`CONFIG` model on random windows of :data:`CONTEXT` ids, seeded by ``seed``.

    Training runs with :func:`attn_edu.attention.fused_attention`; the model returned holds the weights,
    rounded to float16 as they ship, behind the reference attention.

    Shapes:
        ids ``(N,)``: the encoded training text.
    """
    torch.manual_seed(seed)  # the initial weights
    trainee = Llama(replace(CONFIG, vocab_size=vocab_size), attention_fn=fused_attention)
    batches = lambda g: random_windows(ids, BATCH_SIZE, CONTEXT, generator=g)
    run = train(trainee, batches, steps=steps, lr=LR, seed=seed, progress=progress,
                warmup_steps=min(50, steps - 1), schedule="cosine")  # fmt: skip
    # .half().float() rounds every weight as the float16 file stores it; the copy that with_scaling
    # builds computes RoPE's frequencies (buffers, never saved) afresh, in full precision.
    stored = with_scaling(trainee.half().float(), None, attention_fn=scaled_dot_product_attention)
    return stored.eval(), run


def fine_tune(
    model: Llama, ids: torch.Tensor, seed: int, *, steps: int = TUNE_STEPS, progress: bool = False
) -> tuple[Llama, TrainResult]:
    """A copy of ``model`` (with its scaling) trained ``steps`` more steps on windows of ``FACTOR·CONTEXT``.

    Shapes:
        ids ``(N,)``: the encoded training text.
    """
    trainee = with_scaling(model, model.config.rope_scaling, attention_fn=fused_attention)
    run = train(trainee, lambda g: random_windows(ids, TUNE_BATCH_SIZE, FACTOR * CONTEXT, generator=g),
                steps=steps, lr=TUNE_LR, seed=seed, progress=progress, warmup_steps=min(5, steps - 1),
                schedule="cosine")  # fmt: skip
    stored = with_scaling(
        trainee.half().float(), model.config.rope_scaling, attention_fn=scaled_dot_product_attention
    )
    return stored.eval(), run


# --- measuring ----------------------------------------------------------------------------------------


def evaluation_windows(
    tokenizer: CharTokenizer, text: str | None = None, *, length: int = 256, count: int | None = None
) -> torch.Tensor:
    """Windows of ``length + 1`` characters of the validation split, side by side, none overlapping.

    A window predicts its characters ``1 .. length`` from the ones before them, so query position ``t``
    (0-based) has read ``t + 1`` characters. The split is the last tenth of :func:`attn_edu.corpus.corpus`.
    All the windows it holds, or ``count`` of them spread evenly over it.

    Shapes:
        returns ``(N, length + 1)`` with ``N = count`` or ``⌊validation characters / (length + 1)⌋``.

    Example:
        >>> tok = CharTokenizer("abc")
        >>> text = "abc" * 300                    # 90 validation characters: 9 windows of 10
        >>> evaluation_windows(tok, text, length=9).shape
        torch.Size([9, 10])
        >>> evaluation_windows(tok, text, length=9, count=3)[:, 0].tolist()   # windows 0, 4 and 8
        [1, 2, 3]
    """
    check_positive_int("length", length)
    ids = tokenizer.encode(split_corpus(text)[1])  # (M,)
    available = len(ids) // (length + 1)
    if available == 0:
        raise ValueError(f"length: the validation split holds {len(ids)} characters, fewer than {length + 1}")
    windows = ids[: available * (length + 1)].view(available, length + 1)  # (N, T + 1)
    if count is None:
        return windows
    check_positive_int("count", count)
    if count > available:
        raise ValueError(
            f"count: the validation split holds {available} windows of {length + 1}, got {count}"
        )
    return windows[torch.linspace(0, available - 1, count).round().long()]  # (count, T + 1)


@torch.no_grad()
def loss_by_position(model: Llama, windows: torch.Tensor, *, batch_size: int = 64) -> torch.Tensor:
    """Mean next-character cross-entropy at every query position, over the windows: nats per character.

    Entry ``t`` is the loss of predicting character ``t + 1`` of a window from characters ``0 .. t``:
    the query at position ``t`` attends to keys at relative distances ``0 .. t``.

    Shapes:
        windows ``(N, T + 1)``; returns ``(T,)`` float32.

    Example:
        >>> model = Llama(replace(CONFIG, vocab_size=5)).eval()
        >>> loss_by_position(model, torch.randint(5, (3, 9))).shape
        torch.Size([8])
    """
    check_tensor("windows", windows)
    N, T1 = check_shape("windows", windows, "N T").values()
    if T1 < 2:
        raise ValueError(f"windows: expected shape (N, T + 1) with T >= 1, got {tuple(windows.shape)}")
    total = torch.zeros(T1 - 1)
    for start in range(0, N, batch_size):
        chunk = windows[start : start + batch_size]  # (B, T + 1)
        logits = model(chunk[:, :-1]).float()  # (B, T, V)
        losses = F.cross_entropy(logits.transpose(1, 2), chunk[:, 1:], reduction="none")  # (B, T)
        total += losses.sum(dim=0)
    return total / N  # (T,)


def summary(losses: torch.Tensor) -> dict[str, float]:
    """The mean loss over the :data:`WIDTH` query positions before ``L``, ``2L`` and ``4L``.

    Shapes:
        losses ``(T,)`` with ``T >= 4L``.

    Example:
        >>> summary(torch.arange(256.0))
        {'L': 55.5, '2L': 119.5, '4L': 247.5}
    """
    check_shape("losses", losses, "T")
    if losses.shape[0] < FACTOR * CONTEXT:
        raise ValueError(f"losses: expected at least {FACTOR * CONTEXT} positions, got {losses.shape[0]}")
    return {name: losses[end - WIDTH : end].mean().item() for name, end in
            (("L", CONTEXT), ("2L", 2 * CONTEXT), ("4L", 4 * CONTEXT))}  # fmt: skip


@torch.no_grad()
def last_query_entropy(model: Llama, windows: torch.Tensor, *, last: int = WIDTH) -> float:
    """Mean entropy (nats) of the attention of the last ``last`` queries: every layer, head and window.

    Those queries see nearly the whole window; broad attention over many keys scores high, a head
    that looks at one key scores 0 (:func:`attn_edu.attention.attention_entropy`).

    Shapes:
        windows ``(N, T)`` with ``T >= last``.
    """
    check_tensor("windows", windows)
    T = check_shape("windows", windows, "N T")["T"]
    check_positive_int("last", last)
    if last > T:
        raise ValueError(f"last: expected at most the window length T={T}, got {last}")
    maps = attention_maps(model, windows)  # one (N, H, T, T) per layer
    return torch.stack([attention_entropy(w[..., -last:, :]).mean() for w in maps]).mean().item()


def entropy_by_length(
    model: Llama, windows: torch.Tensor, lengths: Sequence[int], *, attention_factor: float | None = None
) -> list[float]:
    """:func:`last_query_entropy` of ``model`` read with YaRN at ``s = T / L`` for each length ``T``.

    Each length gets just the interpolation it needs (``s = 1`` at ``T = L``: RoPE as trained), with
    YaRN's temperature (``attention_factor=None``) or without it (``attention_factor=1.0``).

    Shapes:
        windows ``(N, T_max)`` with ``T_max >= max(lengths)``; returns one float per length.
    """
    out = []
    for T in lengths:
        if not isinstance(T, int) or not CONTEXT <= T <= windows.shape[-1]:
            raise ValueError(f"lengths: expected ints from {CONTEXT} to {windows.shape[-1]}, got {T!r}")
        s = T / CONTEXT
        scaling = RopeScaling("yarn", s, original_max_positions=CONTEXT, attention_factor=attention_factor)
        out.append(last_query_entropy(with_scaling(model, scaling), windows[:, :T]))
    return out


# --- the stored models --------------------------------------------------------------------------------


def save_models(
    models: dict[str, dict[int, Llama]], tokenizer: CharTokenizer, record: dict[str, Any], out: str | Path
) -> Path:
    """Write every model (float16, keys ``seed{S}.{variant}.{name}``) into one file, and the record beside it.

    ``models`` maps ``"base"`` and each method of :data:`METHODS` (its fine-tuned models) to
    ``{seed: model}``.
    """
    config = next(iter(models["base"].values())).config
    data = {"config": asdict(config), "tokenizer": tokenizer.to_dict(), "seeds": sorted(models["base"])}
    by_prefix = {
        f"seed{seed}.{variant}.": model
        for variant, by_seed in models.items()
        for seed, model in by_seed.items()
    }
    return shipped.save(NAME, by_prefix, data | record, out, half=True)


def read_record(directory: str | Path | None = None) -> dict[str, Any]:
    """The record beside the weights: config, tokenizer, command, times and the losses of every model."""
    return shipped.read_record(NAME, directory)


def load_models(
    directory: str | Path | None = None, *, attention_fn: AttentionFn = scaled_dot_product_attention
) -> tuple[dict[str, dict[int, Llama]], CharTokenizer]:
    """The shipped models, float32 in ``eval()`` mode, and their tokenizer.

    Returns ``{"base": {seed: model}, "none": {...}, "PI": {...}, "NTK": {...}, "YaRN": {...}}``: the
    pretrained models (plain RoPE), then each method's fine-tuned models, built with that method's scaling.
    Every model attends with ``attention_fn``: the reference, or :func:`attn_edu.attention.fused_attention`,
    which equals it up to rounding and reads the 180 windows of 257 characters about five times faster.

    Example:
        >>> models, tokenizer = load_models()
        >>> sorted(models["base"]), models["YaRN"][0].config.rope_scaling.kind
        ([0, 1, 2], 'yarn')
    """
    record = read_record(directory)
    config = LlamaConfig(**record["config"])
    if replace(config, vocab_size=CONFIG.vocab_size) != CONFIG:
        raise ValueError(f"directory: the stored config differs from this version's: {record['config']}")
    tensors = shipped.read_weights(NAME, directory)
    models: dict[str, dict[int, Llama]] = {}
    for variant in ("base", *METHODS):
        scaling = None if variant == "base" else scaling_for(variant)
        models[variant] = {}
        for seed in record["seeds"]:
            with torch.random.fork_rng(devices=[]):
                model = Llama(replace(config, rope_scaling=scaling), attention_fn=attention_fn)
            models[variant][seed] = shipped.load_into(model, tensors, f"seed{seed}.{variant}.")
    return models, CharTokenizer.from_dict(record["tokenizer"])


def loss_curves(models: dict[str, dict[int, Llama]], windows: torch.Tensor) -> dict[str, torch.Tensor]:
    """:func:`loss_by_position` of every reading, one row per seed: ``{reading: (seeds, T)}``.

    The readings are each method applied to the pretrained models (``"PI"``), then each method's
    fine-tuned models (``"PI tuned"``), in the order of :data:`METHODS`.

    Shapes:
        windows ``(N, T + 1)``; returns ``(S, T)`` tensors, ``S`` seeds.
    """
    curves = {}
    for method in METHODS:
        readings = [with_scaling(base, scaling_for(method)) for base in models["base"].values()]
        curves[method] = torch.stack([loss_by_position(model, windows) for model in readings])  # (S, T)
    for method in METHODS:
        curves[f"{method} tuned"] = torch.stack(
            [loss_by_position(m, windows) for m in models[method].values()]
        )
    return curves


def measure(
    models: dict[str, dict[int, Llama]], windows: torch.Tensor
) -> dict[str, dict[str, dict[str, float]]]:
    """``{seed: {reading: summary}}``: the table of the record (string keys), from :func:`loss_curves`."""
    return table_of(loss_curves(models, windows), list(models["base"]))


def table_of(curves: dict[str, torch.Tensor], seeds: Sequence[int]) -> dict[str, dict[str, dict[str, float]]]:
    """``{seed: {reading: summary}}`` from :func:`loss_curves`' rows (one per seed, in ``seeds``' order)."""
    return {
        str(seed): {reading: summary(curve[i]) for reading, curve in curves.items()}
        for i, seed in enumerate(seeds)
    }


def shipped_curves(directory: str | Path | None = None) -> dict[str, torch.Tensor]:
    """:func:`loss_curves` of the shipped models on :func:`evaluation_windows` (the record's corpus), as the record
    keeps them, ``{reading: (seeds, T)}``: notebook 07 plots these and measures one reading again.

    Example:
        >>> curves = shipped_curves()
        >>> tuple(curves["YaRN tuned"].shape)
        (3, 256)
    """
    return {reading: torch.tensor(rows) for reading, rows in read_record(directory)["curves"].items()}


def record_curves(directory: str | Path | None = None) -> Path:
    """Measure :func:`loss_curves` of the models stored in ``directory`` (default: the shipped ones) on
    :func:`evaluation_windows` and keep them in their record, rounded to 5 decimals (what :func:`shipped_curves`
    reads)."""
    models, tokenizer = load_models(directory, attention_fn=fused_attention)
    curves = loss_curves(models, evaluation_windows(tokenizer, length=FACTOR * CONTEXT))
    record = read_record(directory)
    record["curves"] = {
        reading: [[round(x, 5) for x in row] for row in c.tolist()] for reading, c in curves.items()
    }
    return shipped.save_record(NAME, record, directory)


def record_gap(curves: dict[str, torch.Tensor], record: dict[str, Any] | None = None) -> float:
    """The largest ``|loss − recorded loss|`` over every seed, reading and place (``L``, ``2L``, ``4L``).

    ``curves`` are :func:`loss_curves` of the shipped models on :func:`evaluation_windows` (rows in the
    record's seed order); ``record`` defaults to the shipped one. Near 0 (float rounding) when the shipped
    weights and the corpus are the ones the record was made with; see :func:`record_tolerance`.

    Example:
        >>> curves = {"none": torch.ones(2, 256)}
        >>> record = {"losses": {"0": {"none": {"L": 1.0, "2L": 1.0, "4L": 1.0}},
        ...                      "1": {"none": {"L": 1.0, "2L": 1.25, "4L": 1.0}}}}
        >>> record_gap(curves, record)
        0.25
    """
    record = read_record() if record is None else record
    seeds = [int(seed) for seed in record["losses"]]
    measured = table_of(curves, seeds)
    return max(
        abs(value - record["losses"][seed][reading][where])
        for seed, row in measured.items()
        for reading, places in row.items()
        for where, value in places.items()
    )


def record_tolerance(record: dict[str, Any] | None = None) -> float:
    """How far :func:`record_gap` may go: 0.01 nats/char on the record's own corpus (the last bits of another
    CPU's sums), 0.15 on another Python's documentation, which the models were not trained on."""
    record = read_record() if record is None else record
    return 0.01 if corpus_sha256(corpus()) == record["corpus_sha256"] else 0.15


# --- the command ----------------------------------------------------------------------------------


def _print_table(table: dict[str, dict[str, dict[str, float]]]) -> None:
    print(f"{'seed':>4} {'reading':>11} {'at L':>7} {'at 2L':>7} {'at 4L':>7}   (nats/char)")
    for seed, row in table.items():
        for reading, losses in row.items():
            print(f"{seed:>4} {reading:>11} " + " ".join(f"{v:7.3f}" for v in losses.values()))


def _train_command(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    text = corpus()
    train_text, _ = split_corpus(text)
    tokenizer = CharTokenizer.from_text(train_text)
    ids = tokenizer.encode(train_text)  # (N,)
    models: dict[str, dict[int, Llama]] = {variant: {} for variant in ("base", *METHODS)}
    runs = {}
    start = time.perf_counter()
    for seed in args.seeds:
        base, run = train_base(seed, ids, tokenizer.vocab_size, steps=args.steps, progress=True)
        models["base"][seed] = base
        runs[str(seed)] = {"train_seconds": round(run.seconds, 1), "final_loss": round(run.final_loss(50), 4)}
        for method in METHODS:
            tuned, tune_run = fine_tune(
                with_scaling(base, scaling_for(method)), ids, seed, steps=args.tune_steps
            )
            models[method][seed] = tuned
            runs[str(seed)][f"{method}_tune_seconds"] = round(tune_run.seconds, 1)
        print(f"seed {seed}: {args.steps} steps in {run.seconds:.0f} s, final loss {run.final_loss(50):.3f}")
    seconds = time.perf_counter() - start
    table = measure(models, evaluation_windows(tokenizer, text, length=FACTOR * CONTEXT))
    _print_table(table)
    seeds = " ".join(map(str, args.seeds))
    record = {
        "command": f"python -m attn_edu.experiments.rope_extension train --seeds {seeds} --steps {args.steps} "
        f"--tune-steps {args.tune_steps} --threads {args.threads}",
        "context": CONTEXT,
        "factor": FACTOR,
        "steps": args.steps,
        "batch_size": BATCH_SIZE,
        "lr": LR,
        "tune_steps": args.tune_steps,
        "tune_batch_size": TUNE_BATCH_SIZE,
        "tune_lr": TUNE_LR,
        "seconds": round(seconds, 1),
        "runs": runs,
        "losses": table,
        "corpus_sha256": corpus_sha256(text),
        "environment": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": args.threads,
        },
    }
    print("wrote", save_models(models, tokenizer, record, args.out))
    print(
        "wrote", record_curves(args.out)
    )  # the shipped (float16) models' curves, as the notebook reads them


def _report_command(args: argparse.Namespace) -> None:
    models, tokenizer = load_models(args.dir, attention_fn=fused_attention)
    record = read_record(args.dir)
    print(f"{NAME}: {record['command']}  ({record['seconds']} s)")
    _print_table(measure(models, evaluation_windows(tokenizer, length=FACTOR * CONTEXT)))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m attn_edu.experiments.rope_extension train [--seeds 0 1 2] [--steps N] [--tune-steps N]
    [--out DIR]`` or ``... report [--dir DIR]``."""
    parser, train_parser = cli.command_parser(
        "rope_extension",
        __doc__,
        train_help="train, fine-tune and write the two files",
        report_help="the loss table of the stored models",
        seeds=SEEDS,
        threads=2,
    )
    train_parser.add_argument("--steps", type=int, default=STEPS)
    train_parser.add_argument("--tune-steps", type=int, default=TUNE_STEPS)
    return cli.run(parser, argv, _train_command, _report_command)


if __name__ == "__main__":
    sys.exit(main())
