"""Two small language models trained on real text: the Python documentation, one character per token.

    text   = corpus()                        attn_edu.corpus: the pydoc topics, split and tokenized
    model  = GPT(config) trained on random windows of ids (attn_edu.train.train: AdamW, seeded)
    loss   = validation_loss(model, ...)     nats per character on the held-out text

The trained weights ship with the package (``attn_edu/weights/text_gpt.safetensors``, with the config,
the tokenizer and the measured losses in ``text_gpt.json``) and load with :func:`load_text_gpt`;
``python -m attn_edu.experiments.text_gpt train`` makes them again, ``... report`` prints
the losses beside the unigram and bigram baselines of :func:`attn_edu.corpus.baselines` and a sample.

Measured on Python 3.11's corpus (two CPU cores, the default 1,200 steps): validation loss 1.297
nats/char (1.87 bits) for seed 0, the committed model; 1.288–1.302 over seeds 0, 1, 2. The bigram
scores 2.323, the unigram 3.238.

A second model, ``text_llama`` (``--model llama``), is a Llama-style decoder (RoPE, RMSNorm, SwiGLU, two
key/value heads) with Mistral's **sliding window** of 128 characters, trained on windows of 256: no
position table bounds it, and its rolling KV cache holds 128 characters per layer however long it
writes, so it can generate a thousand characters (``attn_edu.bench kv_cache --model text``).

A third, ``text_gpt_draft`` (``--model draft --steps 3000``), is the GPT shrunk to one block of width 64 with the
same tokenizer: the draft that guesses ahead for the GPT in speculative decoding (validation loss 1.457 nats/char;
``python -m attn_edu.bench speculative`` measures the pair).

Shapes:
    encoded text ``(N,)``; training windows ``(B, T)``; logits ``(B, T, V)``.
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from attn_edu._validate import check_positive_int, check_shape, check_tensor
from attn_edu.attention import fused_attention
from attn_edu.corpus import CharTokenizer, baselines, corpus, corpus_sha256, split_corpus
from attn_edu.data import TaskBatch
from attn_edu.experiments import cli, shipped
from attn_edu.generation import generate
from attn_edu.models import GPT, GPTConfig, Llama, LlamaConfig
from attn_edu.train import TrainResult, train

WEIGHTS_FILE = "text_gpt.safetensors"
RECORD_FILE = "text_gpt.json"

# The committed model: 4 blocks of width 128, a 128-character context, tied embeddings (~0.8 M
# parameters, 3.3 MB in float32). vocab_size is set from the tokenizer.
DEFAULT_CONFIG = GPTConfig(
    vocab_size=104, max_seq_len=128, embed_dim=128, num_layers=4, num_heads=4, ffn_dim=512
)
DEFAULT_STEPS = 1200  # 4.5-6.5 minutes on two CPU cores (~12 passes over the training text)
DEFAULT_BATCH_SIZE = 32  # windows per step: 32 · 128 = 4,096 characters
DEFAULT_LR = 1e-3  # AdamW, constant (the shipped weights were trained so); 2e-3 and up stall for longer

# The sliding-window model: about as many weights as the GPT, trained on the same 4,096 characters a
# step (16 windows of 256), each token attending to the 128 before it and itself.
LLAMA_CONFIG = LlamaConfig(
    vocab_size=104, embed_dim=128, num_layers=4, num_heads=4, num_kv_heads=2, ffn_dim=352,
    tie_embeddings=True, sliding_window=128,
)  # fmt: skip
LLAMA_CONTEXT, LLAMA_BATCH_SIZE = 256, 16
# The draft for speculative decoding (notebook 10): one block of width 64 (0.065 M parameters against the
# GPT's 0.82 M), the same tokenizer and context, trained on the same windows (3,000 steps); float16 weights.
DRAFT_CONFIG = GPTConfig(
    vocab_size=104, max_seq_len=128, embed_dim=64, num_layers=1, num_heads=2, ffn_dim=256
)
TextModel = GPT | Llama
MODELS = {"gpt": "text_gpt", "llama": "text_llama", "draft": "text_gpt_draft"}  # --model: the files' stem


# --- the validation loss --------------------------------------------------------------------------


@torch.no_grad()
def validation_loss(
    model: TextModel,
    tokenizer: CharTokenizer,
    text: str | None = None,
    *,
    context: int | None = None,
    batch_size: int = 64,
) -> float:
    """Mean next-character cross-entropy over the whole validation split, in nats per character.

    The split is cut into windows of ``context`` characters (default: a GPT's ``max_seq_len``; a
    model without a position table must be given one) that overlap by one character, so
    that every validation character after the first is predicted exactly once, from the characters
    before it in its window (0 to ``T - 1`` of them; a sliding window with full context would
    score lower, at ``T`` times the cost). Deterministic: no sampling, the model in ``eval()``
    mode, logits in float32.

    Example:
        >>> tok = CharTokenizer("ab")
        >>> model = GPT(GPTConfig(vocab_size=tok.vocab_size, max_seq_len=8, embed_dim=8, num_heads=2, ffn_dim=16))
        >>> loss = validation_loss(model, tok, "ab" * 50)
        >>> abs(loss - math.log(3)) < 0.1               # untrained: about uniform over V = 3
        True
    """
    check_positive_int("batch_size", batch_size)
    if model.config.vocab_size != tokenizer.vocab_size:
        raise ValueError(
            f"tokenizer: its vocab_size {tokenizer.vocab_size} differs from the model's "
            f"{model.config.vocab_size}"
        )
    ids = tokenizer.encode(split_corpus(text)[1])  # (M,)
    if len(ids) < 2:
        raise ValueError(f"text: its validation split needs at least 2 characters, got {len(ids)}")
    T = _context(model.config, context)
    starts = list(range(0, len(ids) - 1, T - 1))  # window i predicts ids[s + 1 .. s + T - 1]
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        full = [s for s in starts if s + T <= len(ids)]
        for i in range(0, len(full), batch_size):
            offsets = torch.tensor(full[i : i + batch_size])  # (B,)
            windows = ids[offsets[:, None] + torch.arange(T)]  # (B, T)
            total += _summed_loss(model, windows)
            count += windows.numel() - len(offsets)
        for s in starts[len(full) :]:  # the last, shorter window
            windows = ids[None, s:]  # (1, T')
            total += _summed_loss(model, windows)
            count += windows.shape[1] - 1
    finally:
        model.train(was_training)
    return total / count


def _context(config: GPTConfig | LlamaConfig, context: int | None) -> int:
    """The window length: ``context``, else the model's position table; a Llama has none."""
    if context is not None:
        return check_positive_int("context", context)
    table = getattr(config, "max_seq_len", None)
    if table is None:
        raise ValueError(f"context: a {type(config).__name__} has no position table; give the window length")
    return table


def _summed_loss(model: TextModel, windows: torch.Tensor) -> float:
    """Summed cross-entropy of windows ``(B, T)``: position ``t`` predicts token ``t + 1``."""
    logits = model(windows)[:, :-1].float()  # (B, T-1, V) in float32
    return F.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten(), reduction="sum").item()


# --- training -------------------------------------------------------------------------------------


def random_windows(
    ids: torch.Tensor, batch_size: int, length: int, *, generator: torch.Generator | None = None
) -> TaskBatch:
    """``batch_size`` windows of ``length`` consecutive ids, starting at uniformly random places.

    Every position is scored (``labels == input_ids``): :func:`attn_edu.objectives.causal_lm_loss`
    shifts them, so each window gives ``length - 1`` next-character predictions.

    Shapes:
        ids ``(N,)``; returns input_ids and labels ``(B, T)`` with ``T = length``.

    Example:
        >>> batch = random_windows(torch.arange(100), 2, 5, generator=torch.Generator().manual_seed(0))
        >>> batch.input_ids.shape, bool((batch.input_ids.diff(dim=1) == 1).all())
        (torch.Size([2, 5]), True)
    """
    check_tensor("ids", ids)
    N = check_shape("ids", ids, "N")["N"]
    check_positive_int("batch_size", batch_size)
    check_positive_int("length", length)
    if length > N:
        raise ValueError(f"length: expected at most the {N} ids given, got {length}")
    starts = torch.randint(N - length + 1, (batch_size,), generator=generator)  # (B,)
    windows = ids[starts[:, None] + torch.arange(length)]  # (B, T)
    return TaskBatch(windows, windows)


def train_text_gpt(
    config: GPTConfig | LlamaConfig | None = None,
    *,
    context: int | None = None,
    steps: int = DEFAULT_STEPS,
    batch_size: int = DEFAULT_BATCH_SIZE,
    lr: float = DEFAULT_LR,
    seed: int = 0,
    text: str | None = None,
    progress: bool = True,
) -> tuple[TextModel, CharTokenizer, TrainResult]:
    """Train a :class:`attn_edu.models.GPT` on the training split; return it, its tokenizer and the run.

    The tokenizer holds every character of the training split. ``config`` defaults to
    :data:`DEFAULT_CONFIG`; its ``vocab_size`` is set to the tokenizer's. A :class:`LlamaConfig`
    trains a :class:`attn_edu.models.Llama` instead, on windows of ``context`` characters (a GPT's
    windows default to its ``max_seq_len``). The seed fixes the initial
    weights and, through :func:`attn_edu.train.train`, the windows drawn: the same seed gives the
    same run on the same machine. Training runs with :func:`fused_attention`; the model returned
    holds the trained weights in a plain ``GPT(config)`` or ``Llama(config)`` (the reference attention).

    Example:
        >>> tiny = GPTConfig(max_seq_len=16, embed_dim=16, num_layers=1, num_heads=2, ffn_dim=32)
        >>> model, tok, run = train_text_gpt(tiny, steps=2, batch_size=2, text="hello world " * 20,
        ...                                  progress=False)
        >>> tok.chars, run.steps
        (' dehlorw', 2)
    """
    train_text, _ = split_corpus(text)
    tokenizer = CharTokenizer.from_text(train_text)
    config = replace(config or DEFAULT_CONFIG, vocab_size=tokenizer.vocab_size)
    ids = tokenizer.encode(train_text)  # (N,)
    architecture = Llama if isinstance(config, LlamaConfig) else GPT
    T = _context(config, context)  # read from the config: no model needed yet
    torch.manual_seed(seed)  # the initial weights
    trainee = architecture(config, attention_fn=fused_attention)
    result = train(
        trainee,
        lambda generator: random_windows(ids, batch_size, T, generator=generator),
        steps=steps,
        lr=lr,
        seed=seed,
        progress=progress,
    )
    model = architecture(config)  # the same weights behind the reference attention
    model.load_state_dict(trainee.state_dict())
    return model.eval(), tokenizer, result


# --- saving and loading ---------------------------------------------------------------------------


def _stem(name: str) -> str:
    """``name``, checked: one of the files' stems in :data:`MODELS`."""
    if name not in MODELS.values():
        raise ValueError(f"name: expected one of {sorted(MODELS.values())}, got {name!r}")
    return name


def _paths(directory: str | Path | None, name: str) -> tuple[Path, Path]:
    """``NAME.safetensors`` and ``NAME.json`` in ``directory`` (default: the package's weights folder)."""
    return shipped.paths(_stem(name), directory)


def save_text_gpt(
    model: TextModel,
    tokenizer: CharTokenizer,
    record: dict[str, Any],
    out: str | Path,
    *,
    name: str = "text_gpt",
    half: bool = False,
) -> Path:
    """Write ``NAME.safetensors`` (the weights, in float16 when ``half``) and ``NAME.json`` (architecture, config,
    tokenizer, record).

    With tied embeddings the output matrix *is* the token embedding, so only the embedding is
    stored (:mod:`attn_edu.experiments.shipped`); :func:`load_text_gpt` ties them again.
    """
    architecture = "llama" if isinstance(model, Llama) else "gpt"
    data = {"architecture": architecture, "config": asdict(model.config), "tokenizer": tokenizer.to_dict()}
    shipped.save(_stem(name), {"": model}, data | record, out, half=half)
    return Path(out)


def read_record(directory: str | Path | None = None, *, name: str = "text_gpt") -> dict[str, Any]:
    """The contents of ``NAME.json``: architecture, config, tokenizer, seed, command, corpus hash, losses."""
    return shipped.read_record(_stem(name), directory)


def load_text_gpt(
    directory: str | Path | None = None, *, name: str = "text_gpt"
) -> tuple[TextModel, CharTokenizer]:
    """A trained model (in ``eval()`` mode, float32) and its tokenizer, from the package's data.

    ``name="text_gpt"`` is the GPT; ``name="text_llama"`` the sliding-window Llama; ``name="text_gpt_draft"``
    the one-block GPT that drafts for it in speculative decoding.

    Example:
        >>> model, tok = load_text_gpt()
        >>> model.lm_head.weight is model.token_embedding.weight      # still tied
        True
        >>> load_text_gpt(name="text_llama")[0].config.sliding_window
        128
    """
    record = read_record(directory, name=name)
    is_llama = record.get("architecture", "gpt") == "llama"
    config = (LlamaConfig if is_llama else GPTConfig)(**record["config"])
    model: TextModel = Llama(config) if isinstance(config, LlamaConfig) else GPT(config)
    shipped.load_into(model, shipped.read_weights(name, directory))
    return model, CharTokenizer.from_dict(record["tokenizer"])


# --- the command ----------------------------------------------------------------------------------


def sample(
    model: TextModel,
    tokenizer: CharTokenizer,
    prompt: str,
    max_new_chars: int = 100,
    *,
    temperature: float = 0.0,
    seed: int = 0,
) -> str:
    """``prompt`` continued by :func:`attn_edu.generation.generate` (greedy when ``temperature == 0``).

    A GPT's learned position table has ``max_seq_len`` rows, so prompt plus continuation must fit
    in it; a sliding-window Llama writes as long as asked.
    """
    ids = tokenizer.encode(prompt)[None]  # (1, T)
    table = getattr(model.config, "max_seq_len", None)
    room = max_new_chars if table is None else table - ids.shape[1]
    if room < 1:
        raise ValueError(f"prompt: expected fewer than {table} characters, got {ids.shape[1]}")
    generator = torch.Generator().manual_seed(seed)
    out = generate(model, ids, min(max_new_chars, room), temperature=temperature, generator=generator)
    return tokenizer.decode(out[0, ids.shape[1] :])


def _print_losses(losses: dict[str, float]) -> None:
    for name, nats in losses.items():
        print(f"  {name:<8} {nats:.3f} nats/char   {nats / math.log(2):.3f} bits/char")


def _train_command(args: argparse.Namespace) -> None:
    text = corpus()
    llama = args.model == "llama"
    config, context, batch_size = (LLAMA_CONFIG, LLAMA_CONTEXT, LLAMA_BATCH_SIZE) if llama else (None, None, DEFAULT_BATCH_SIZE)  # fmt: skip
    config = DRAFT_CONFIG if args.model == "draft" else config
    model, tokenizer, result = train_text_gpt(
        config, context=context, steps=args.steps, batch_size=batch_size, seed=args.seed, text=text
    )
    val = validation_loss(model, tokenizer, text, context=context)
    base = baselines(tokenizer, text)
    flag = "" if args.model == "gpt" else f" --model {args.model}"
    record = {
        "command": f"python -m attn_edu.experiments.text_gpt train{flag} --steps {args.steps} --seed {args.seed}",
        "seed": args.seed,
        "steps": args.steps,
        **({"context": context} if llama else {}),
        "batch_size": batch_size,
        "lr": DEFAULT_LR,
        "train_seconds": round(result.seconds, 1),
        "final_train_loss": round(result.final_loss(50), 4),
        "validation_loss": round(val, 4),
        "baselines": {name: round(nats, 4) for name, nats in base.items()},
        "corpus_sha256": corpus_sha256(text),
        "corpus_chars": len(text),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    name = MODELS[args.model]
    save_text_gpt(
        model, tokenizer, record, args.out or shipped.weights_folder(), name=name, half=args.model == "draft"
    )
    files = " and ".join(str(path) for path in _paths(args.out, name))
    print(f"trained {args.steps} steps in {result.seconds:.0f} s; wrote {files}")
    _print_losses({"model": val, **base})


def _report_command(args: argparse.Namespace) -> None:
    name = MODELS[args.model]
    model, tokenizer = load_text_gpt(args.dir, name=name)
    record = read_record(args.dir, name=name)
    text = corpus()
    same = corpus_sha256(text) == record["corpus_sha256"]
    print(f"{name}: {record['command']}  ({record['steps']} steps, {record['train_seconds']} s)")
    print(f"corpus: pydoc_data.topics of Python {platform.python_version()}, {len(text):,} characters"
          f"{'' if same else ' (not the one trained on: Python ' + record['python'] + ')'}")  # fmt: skip
    print("validation loss:")
    loss = validation_loss(model, tokenizer, text, context=record.get("context"))
    _print_losses({"model": loss, **baselines(tokenizer, text)})
    prompt = 'The "while" statement\n*********************\n\n'  # a topic's title, as the docs write it
    for temperature in (0.0, 0.8):
        how = "greedy" if temperature == 0 else f"temperature {temperature}"
        print(f"\nsample ({how}):\n{prompt}{sample(model, tokenizer, prompt, temperature=temperature)}")


def _model_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", choices=sorted(MODELS), default="gpt")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m attn_edu.experiments.text_gpt train [--model gpt|llama|draft] [--steps N] [--seed S] [--out DIR]``
    or ``... report [--model gpt|llama|draft] [--dir DIR]``."""
    parser, train_parser = cli.command_parser(
        "text_gpt",
        __doc__,
        train_help="train the model and write its two files",
        report_help="losses, baselines and a sample of the trained model",
        shared=_model_option,
    )
    train_parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    train_parser.add_argument("--seed", type=int, default=0)
    return cli.run(parser, argv, _train_command, _report_command)


if __name__ == "__main__":
    sys.exit(main())
