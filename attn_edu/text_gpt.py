"""A small GPT trained on real text: the Python documentation, one character per token.

    text   = corpus()                        the pydoc topics every CPython ships (~465,000 characters)
    train, validation = split(text)          the last 10% of the characters is held out
    ids    = CharTokenizer.encode(train)     one id per character, id 0 for anything unknown
    model  = GPT(config) trained on random windows of ids (attn_edu.train.train: AdamW, seeded)
    loss   = validation_loss(model, ...)     nats per character on the held-out text

The corpus is :mod:`pydoc_data.topics`, the text behind ``help("if")``: a dict of ~80 topics of
English prose, grammar rules and code examples. It is read at run time, never copied into the course.
The trained weights ship with the package (``attn_edu/weights/text_gpt.safetensors``, with the config,
the tokenizer and the measured losses in ``text_gpt.json``) and load with :func:`load_text_gpt`;
``python -m attn_edu.text_gpt train`` makes them again, ``python -m attn_edu.text_gpt report`` prints
the losses beside two baselines and a generated sample.

Two baselines say what the model learned beyond character statistics: a **unigram** model
(``p(x_t)``, how often each character occurs) and a **bigram** model (``p(x_t | x_{t-1})``, the
previous character only), both fitted on the training text with add-one (Laplace) smoothing
(Jurafsky & Martin, *Speech and Language Processing*, 3rd ed., §3.5). A loss in nats per character
divided by ``ln 2`` is in **bits per character**, the unit of text-compression benchmarks.

Measured on Python 3.11's corpus (two CPU cores, the default 1,200 steps): validation loss 1.297
nats/char (1.87 bits) for seed 0, the committed model; 1.288–1.302 over seeds 0, 1, 2. The bigram
scores 2.323, the unigram 3.238.

Shapes:
    encoded text ``(N,)``; training windows ``(B, T)``; logits ``(B, T, V)``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, replace
from importlib import resources
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from attn_edu._validate import check_positive_int, check_qkv, check_shape, check_tensor
from attn_edu.data import TaskBatch
from attn_edu.generation import generate
from attn_edu.models import GPT, GPTConfig
from attn_edu.train import TrainResult, train

SEPARATOR = "\n\n"  # between two topics (each topic already ends with a newline)
VALIDATION_FRACTION = 0.1  # the last 10% of the characters is the validation split
UNKNOWN = "\ufffd"  # "�", Unicode's replacement character: what an unknown id decodes to
WEIGHTS_FILE = "text_gpt.safetensors"
RECORD_FILE = "text_gpt.json"

# The committed model: 4 blocks of width 128, a 128-character context, tied embeddings (~0.8 M
# parameters, 3.3 MB in float32). vocab_size is set from the tokenizer.
DEFAULT_CONFIG = GPTConfig(
    vocab_size=104, max_seq_len=128, embed_dim=128, num_layers=4, num_heads=4, ffn_dim=512
)
DEFAULT_STEPS = 1200  # 4.5-6.5 minutes on two CPU cores (~12 passes over the training text)
DEFAULT_BATCH_SIZE = 32  # windows per step: 32 · 128 = 4,096 characters
DEFAULT_LR = 1e-3  # AdamW, constant (attn_edu.train.train has no schedule); 2e-3 and up stall for longer


# --- the text -------------------------------------------------------------------------------------


def corpus() -> str:
    """The Python documentation's topics, joined in sorted-key order: the same string on every run.

    Each Python version ships its own ``pydoc_data.topics``; :func:`corpus_sha256` tells them apart.

    Example:
        >>> text = corpus()
        >>> len(text) > 100_000 and 'The "if" statement' in text
        True
    """
    from pydoc_data.topics import topics  # imported here: ~0.5 MB of strings, only when asked for

    return SEPARATOR.join(topics[key] for key in sorted(topics))


def corpus_sha256(text: str | None = None) -> str:
    """Hex SHA-256 of the UTF-8 bytes of ``text`` (default :func:`corpus`).

    Example:
        >>> corpus_sha256("abc")[:16]
        'ba7816bf8f01cfea'
    """
    return hashlib.sha256((corpus() if text is None else text).encode("utf-8")).hexdigest()


def split_corpus(text: str | None = None) -> tuple[str, str]:
    """``(train, validation)``: the validation split is the last 10% of the characters.

    Why a contiguous tail and not every 10th topic: the topics differ in length by a factor of
    a hundred, so a topic split would hold out 2% or 30% depending on which topics fall on it; a
    character cut holds out exactly 10%, and no training window crosses it (windows are drawn
    inside the training split). The cut falls inside the topic "typesmapping"; what follows it
    (mapping, sequence and method types, "while", "with", "yield"...) is the same kind of text.

    Example:
        >>> train_text, val_text = split_corpus("abcdefghij" * 10)
        >>> len(train_text), len(val_text)
        (90, 10)
    """
    text = corpus() if text is None else text
    cut = len(text) - int(len(text) * VALIDATION_FRACTION)
    return text[:cut], text[cut:]


# --- the tokenizer --------------------------------------------------------------------------------


class CharTokenizer:
    """One token per character: id 0 is reserved for any character outside the vocabulary.

    ``chars`` are the known characters, given ids ``1 .. len(chars)`` in the order given; so
    ``vocab_size = len(chars) + 1``. An unknown character (one from another Python version's text,
    or a learner's emoji) encodes to 0 and decodes to ``"\ufffd"`` (�) instead of raising.

    Shapes:
        ``encode`` returns ``(N,)`` int64 for a string of ``N`` characters.

    Example:
        >>> tok = CharTokenizer("abc")
        >>> tok.vocab_size
        4
        >>> tok.encode("cab!")
        tensor([3, 1, 2, 0])
        >>> tok.decode(tok.encode("cab!"))
        'cab\ufffd'
    """

    unknown_id = 0

    def __init__(self, chars: str | Sequence[str]) -> None:
        chars = list(chars)
        if not chars or any(not isinstance(c, str) or len(c) != 1 for c in chars):
            raise ValueError(f"chars: expected a non-empty sequence of single characters, got {chars!r:.80}")
        if len(set(chars)) != len(chars):
            duplicated = sorted({c for c in chars if chars.count(c) > 1})
            raise ValueError(f"chars: expected distinct characters, got duplicates {duplicated!r}")
        self.chars = "".join(chars)
        self._id = {c: i + 1 for i, c in enumerate(chars)}  # 0 stays free for "unknown"

    @classmethod
    def from_text(cls, text: str, *, min_count: int = 1) -> CharTokenizer:
        """The characters of ``text`` seen at least ``min_count`` times, sorted by code point.

        Example:
            >>> CharTokenizer.from_text("banana", min_count=2).chars
            'an'
        """
        check_positive_int("min_count", min_count)
        counts = Counter(text)
        return cls(sorted(c for c, n in counts.items() if n >= min_count))

    @property
    def vocab_size(self) -> int:
        """``V``: the known characters plus the unknown id."""
        return len(self.chars) + 1

    def __contains__(self, char: object) -> bool:
        return char in self._id

    def encode(self, text: str) -> torch.Tensor:
        """Ids ``(N,)`` of the ``N`` characters of ``text`` (0 for an unknown character)."""
        if not isinstance(text, str):
            raise ValueError(f"text: expected a str, got {type(text).__name__}")
        get = self._id.get
        return torch.tensor([get(c, self.unknown_id) for c in text], dtype=torch.long)  # (N,)

    def decode(self, ids: torch.Tensor | Sequence[int]) -> str:
        """The text of ids ``(N,)``; id 0 (or any id outside the vocabulary) becomes ``"\ufffd"``."""
        if isinstance(ids, torch.Tensor):
            check_shape("ids", ids, "N")
            ids = ids.tolist()
        known = self.chars
        return "".join(known[i - 1] if 0 < i <= len(known) else UNKNOWN for i in ids)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description; :meth:`from_dict` rebuilds the same tokenizer."""
        return {"kind": "characters", "unknown_id": self.unknown_id, "chars": self.chars}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CharTokenizer:
        """The tokenizer :meth:`to_dict` described.

        Example:
            >>> CharTokenizer.from_dict(CharTokenizer("xy").to_dict()).encode("yx")
            tensor([2, 1])
        """
        if data.get("kind") != "characters" or data.get("unknown_id") != cls.unknown_id:
            raise ValueError(f"data: expected a character tokenizer with unknown_id 0, got {data!r:.80}")
        return cls(data["chars"])


# --- baselines and the validation loss ------------------------------------------------------------


def baselines(
    tokenizer: CharTokenizer, text: str | None = None, *, smoothing: float = 1.0
) -> dict[str, float]:
    """Validation loss of a unigram and a bigram character model, in nats per character.

    Both are fitted on the training split of ``text`` (default :func:`corpus`) and scored on the
    validation characters that :func:`validation_loss` scores (every one but the first):

        unigram  p(b)     = (n_b + α) / (N + α V)
        bigram   p(b | a) = (n_ab + α) / (n_a + α V)        α = ``smoothing`` (1: add-one, Laplace)

    Example:
        >>> tok = CharTokenizer("ab")
        >>> losses = baselines(tok, "ab" * 50)       # the bigram sees the alternation; the unigram cannot
        >>> losses["bigram"] < 0.1 < losses["unigram"]
        True
    """
    if not smoothing > 0:
        raise ValueError(f"smoothing: expected a number > 0, got {smoothing!r}")
    train_text, val_text = split_corpus(text)
    train_ids, val_ids = tokenizer.encode(train_text), tokenizer.encode(val_text)  # (N,), (M,)
    V = tokenizer.vocab_size
    unigram = torch.bincount(train_ids, minlength=V).double() + smoothing  # (V,)
    unigram_logp = (unigram / unigram.sum()).log()  # (V,)
    pairs = train_ids[:-1] * V + train_ids[1:]  # (N-1,) one number per (previous, next) pair
    bigram = torch.bincount(pairs, minlength=V * V).double().view(V, V) + smoothing  # (V, V)
    bigram_logp = (bigram / bigram.sum(dim=1, keepdim=True)).log()  # (V, V), rows: previous char
    previous, target = val_ids[:-1], val_ids[1:]  # (M-1,)
    return {
        "unigram": -unigram_logp[target].mean().item(),
        "bigram": -bigram_logp[previous, target].mean().item(),
    }


@torch.no_grad()
def validation_loss(
    model: GPT, tokenizer: CharTokenizer, text: str | None = None, *, batch_size: int = 64
) -> float:
    """Mean next-character cross-entropy over the whole validation split, in nats per character.

    The split is cut into windows of the model's context ``T`` that overlap by one character, so
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
    T = model.config.max_seq_len
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


def _summed_loss(model: GPT, windows: torch.Tensor) -> float:
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


def fused_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """PyTorch's fused attention, for training only: the reference's result (up to rounding), faster.

    :func:`torch.nn.functional.scaled_dot_product_attention` never builds the ``(T, S)`` weights in
    Python; on two CPU cores it makes a training step of the default model ~1.4× faster. It is
    plugged in with ``GPT(config, attention_fn=fused_attention)`` (the one attention signature), and
    only where it agrees with :func:`attn_edu.attention.scaled_dot_product_attention`: no mask, and
    ``T == S`` when causal (PyTorch aligns ``is_causal`` top-left, the reference bottom-right; they
    differ once a KV cache makes ``S > T``). Evaluation and generation use the reference.

    Shapes:
        q ``(B, H, T, D)``, k and v ``(B, H, S, D)``; returns ``(B, H, T, D)``.

    Example:
        >>> from attn_edu.attention import scaled_dot_product_attention
        >>> q, k, v = torch.randn(3, 1, 2, 5, 4).unbind(0)
        >>> torch.allclose(fused_attention(q, k, v, is_causal=True),
        ...                scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-6)
        True
    """
    check_qkv(q, k, v)
    if mask is not None:
        raise ValueError("mask: fused_attention takes no mask (training windows need none); got a mask")
    if is_causal and q.shape[-2] != k.shape[-2]:
        raise ValueError(
            f"k: with is_causal, fused_attention needs S == T (PyTorch's causal mask is top-left "
            f"aligned); got T={q.shape[-2]}, S={k.shape[-2]}"
        )
    return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)  # (B, H, T, D)


def train_text_gpt(
    config: GPTConfig | None = None,
    *,
    steps: int = DEFAULT_STEPS,
    batch_size: int = DEFAULT_BATCH_SIZE,
    lr: float = DEFAULT_LR,
    seed: int = 0,
    text: str | None = None,
    progress: bool = True,
) -> tuple[GPT, CharTokenizer, TrainResult]:
    """Train a :class:`attn_edu.models.GPT` on the training split; return it, its tokenizer and the run.

    The tokenizer holds every character of the training split. ``config`` defaults to
    :data:`DEFAULT_CONFIG`; its ``vocab_size`` is set to the tokenizer's. The seed fixes the initial
    weights and, through :func:`attn_edu.train.train`, the windows drawn: the same seed gives the
    same run on the same machine. Training runs with :func:`fused_attention`; the model returned
    holds the trained weights in a plain ``GPT(config)`` (the reference attention).

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
    T = config.max_seq_len
    torch.manual_seed(seed)  # the initial weights
    trainee = GPT(config, attention_fn=fused_attention)
    result = train(
        trainee,
        lambda generator: random_windows(ids, batch_size, T, generator=generator),
        steps=steps,
        lr=lr,
        seed=seed,
        progress=progress,
    )
    model = GPT(config)  # the same weights behind the reference attention
    model.load_state_dict(trainee.state_dict())
    return model.eval(), tokenizer, result


# --- saving and loading ---------------------------------------------------------------------------


def _data_dir() -> Path:
    """The package's folder of trained weights, ``attn_edu/weights/``."""
    return Path(str(resources.files("attn_edu") / "weights"))


def save_text_gpt(model: GPT, tokenizer: CharTokenizer, record: dict[str, Any], out: str | Path) -> Path:
    """Write ``text_gpt.safetensors`` (the weights) and ``text_gpt.json`` (config, tokenizer, record).

    With tied embeddings the output matrix *is* the token embedding, so only the embedding is
    stored (safetensors refuses two names for one tensor); :func:`load_text_gpt` ties them again.
    """
    from safetensors.torch import save_file

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tied = model.config.tie_embeddings
    weights = {
        name: tensor.detach().contiguous()
        for name, tensor in model.state_dict().items()
        if not (tied and name == "lm_head.weight")
    }
    save_file(weights, str(out / WEIGHTS_FILE))
    data = {"config": asdict(model.config), "tokenizer": tokenizer.to_dict(), **record}
    (out / RECORD_FILE).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return out


def read_record(directory: str | Path | None = None) -> dict[str, Any]:
    """The contents of ``text_gpt.json``: config, tokenizer, seed, command, corpus hash, losses."""
    path = (_data_dir() if directory is None else Path(directory)) / RECORD_FILE
    return json.loads(path.read_text(encoding="utf-8"))


def load_text_gpt(directory: str | Path | None = None) -> tuple[GPT, CharTokenizer]:
    """The trained model (in ``eval()`` mode, float32) and its tokenizer, from the package's data.

    Example:
        >>> model, tok = load_text_gpt()
        >>> model.lm_head.weight is model.token_embedding.weight      # still tied
        True
    """
    from safetensors.torch import load_file

    record = read_record(directory)
    config = GPTConfig(**record["config"])
    model = GPT(config)
    weights = load_file(str((_data_dir() if directory is None else Path(directory)) / WEIGHTS_FILE))
    missing, unexpected = model.load_state_dict(
        {name: tensor.float() for name, tensor in weights.items()}, strict=False
    )
    expected_missing = ["lm_head.weight"] if config.tie_embeddings else []
    if missing != expected_missing or unexpected:
        raise ValueError(
            f"directory: weights do not fit the config: missing {missing}, unexpected {unexpected}"
        )
    return model.eval(), CharTokenizer.from_dict(record["tokenizer"])


# --- the command ----------------------------------------------------------------------------------


def sample(
    model: GPT,
    tokenizer: CharTokenizer,
    prompt: str,
    max_new_chars: int = 100,
    *,
    temperature: float = 0.0,
    seed: int = 0,
) -> str:
    """``prompt`` continued by :func:`attn_edu.generation.generate` (greedy when ``temperature == 0``).

    The learned position table has ``max_seq_len`` rows, so prompt plus continuation must fit in it.
    """
    ids = tokenizer.encode(prompt)[None]  # (1, T)
    room = model.config.max_seq_len - ids.shape[1]
    if room < 1:
        raise ValueError(
            f"prompt: expected fewer than {model.config.max_seq_len} characters, got {ids.shape[1]}"
        )
    generator = torch.Generator().manual_seed(seed)
    out = generate(model, ids, min(max_new_chars, room), temperature=temperature, generator=generator)
    return tokenizer.decode(out[0, ids.shape[1] :])


def _print_losses(losses: dict[str, float]) -> None:
    for name, nats in losses.items():
        print(f"  {name:<8} {nats:.3f} nats/char   {nats / math.log(2):.3f} bits/char")


def _train_command(args: argparse.Namespace) -> None:
    text = corpus()
    model, tokenizer, result = train_text_gpt(steps=args.steps, seed=args.seed, text=text)
    val = validation_loss(model, tokenizer, text)
    base = baselines(tokenizer, text)
    record = {
        "command": f"python -m attn_edu.text_gpt train --steps {args.steps} --seed {args.seed}",
        "seed": args.seed,
        "steps": args.steps,
        "batch_size": DEFAULT_BATCH_SIZE,
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
    out = save_text_gpt(model, tokenizer, record, args.out or _data_dir())
    print(
        f"trained {args.steps} steps in {result.seconds:.0f} s; wrote {out / WEIGHTS_FILE} and {RECORD_FILE}"
    )
    _print_losses({"model": val, **base})


def _report_command(args: argparse.Namespace) -> None:
    model, tokenizer = load_text_gpt(args.dir)
    record = read_record(args.dir)
    text = corpus()
    same = corpus_sha256(text) == record["corpus_sha256"]
    print(f"text_gpt: {record['command']}  ({record['steps']} steps, {record['train_seconds']} s)")
    print(f"corpus: pydoc_data.topics of Python {platform.python_version()}, {len(text):,} characters"
          f"{'' if same else ' (not the one trained on: Python ' + record['python'] + ')'}")  # fmt: skip
    print("validation loss:")
    _print_losses({"model": validation_loss(model, tokenizer, text), **baselines(tokenizer, text)})
    prompt = 'The "while" statement\n*********************\n\n'  # a topic's title, as the docs write it
    for temperature in (0.0, 0.8):
        how = "greedy" if temperature == 0 else f"temperature {temperature}"
        print(f"\nsample ({how}):\n{prompt}{sample(model, tokenizer, prompt, temperature=temperature)}")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m attn_edu.text_gpt train [--steps N] [--seed S] [--out DIR]`` or ``... report``."""
    parser = argparse.ArgumentParser(prog="python -m attn_edu.text_gpt", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    train_parser = commands.add_parser("train", help="train the model and write its two files")
    train_parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    train_parser.add_argument("--seed", type=int, default=0)
    train_parser.add_argument(
        "--out", default=None, help="folder for the files (default: the package's weights folder)"
    )
    report_parser = commands.add_parser("report", help="losses, baselines and a sample of the trained model")
    report_parser.add_argument(
        "--dir", default=None, help="folder of the files (default: the package's data)"
    )
    args = parser.parse_args(argv)
    (_train_command if args.command == "train" else _report_command)(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
