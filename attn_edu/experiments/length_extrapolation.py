"""Does a position scheme carry over to longer inputs? A lag task trained at one length, tested at four times it.

The task needs position and nothing else: at every position ``t >= lag`` output the token that came
``lag`` positions earlier, in a sequence of tokens drawn uniformly at random. Words cannot help (every
token is equally likely everywhere); only *where* a key sits can point at the right one.

The model, :class:`LagModel`, is one causal attention layer between a token embedding and a linear
read-out, with no MLP, and one of six kinds of position information (:data:`SCHEMES`):

- ``"nope"``: none at all (Haviv et al., 2022; Kazemnejad et al., 2023). The causal mask is the only
  thing that differs from position to position: query ``t`` sees ``t + 1`` keys.
- ``"sinusoidal"`` (Vaswani et al., 2017, §3.5) and ``"learned"`` (BERT, GPT-2): absolute vectors added
  to the token embeddings; the learned table has ``train_length`` rows and cannot run past them.
- ``"shaw"`` (Shaw et al., 2018), ``"t5"`` (Raffel et al., 2020, §2.1) and ``"alibi"`` (Press et al.,
  2022): relative schemes inside the attention, from :mod:`attn_edu.positional`.

Train each with :func:`train_lag_model` on sequences of ``train_length`` tokens and measure
:func:`accuracy_by_position` on longer ones (every scheme from several seeds at once:
:func:`run_length_test`). :func:`bag_of_words_accuracy` is the best that a model
which sees the earlier tokens only as a bag (a multiset) can do, for comparison. Notebook 06, section 6.

The 18 models of notebook 06 (six schemes, seeds 0, 1, 2) ship with the package, with a record of their
accuracies: :func:`load_length_test` loads and scores them. ``python -m attn_edu.experiments.length_extrapolation
train`` trains them again (about 10 s), ``... report`` prints the record.

Shapes:
    ids ``(B, T)`` token ids in ``0 .. V − 1``; logits ``(B, T, V)``; accuracies ``(T,)``.
"""

from __future__ import annotations

import argparse
import platform
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from attn_edu._validate import check_positive_int, check_token_ids
from attn_edu.attention import scaled_dot_product_attention
from attn_edu.experiments import cli, shipped
from attn_edu.positional import (
    LearnedPositionalEmbedding,
    ShawRelativePosition,
    T5RelativeBias,
    alibi_bias,
    shaw_attention,
    sinusoidal_encoding,
)
from attn_edu.train import TrainResult, train

SCHEMES = ("nope", "sinusoidal", "learned", "shaw", "t5", "alibi")
NAME = "length_extrapolation"  # the files' stem in attn_edu/weights/
SEEDS, STEPS, TEST_FACTOR = (0, 1, 2), 150, 4  # notebook 06's runs: the ones that ship


@dataclass(frozen=True)
class LagConfig:
    """The task and the model of the experiment (the defaults are notebook 06's)."""

    vocab_size: int = 16  # V: tokens drawn uniformly at random, so guessing scores 1/V
    lag: int = 3  # the answer at position t is the token at position t - lag
    train_length: int = 16  # T of every training sequence; the learned table's rows
    embed_dim: int = 32  # C
    num_heads: int = 4  # H, each of C / H dimensions (ALiBi: slopes 1/4, 1/16, 1/64, 1/256)
    shaw_max_distance: int = 4  # Shaw et al.'s clipping distance k: distances -k .. k
    t5_num_buckets: int = 8  # T5 buckets, all for the past (a causal model)
    t5_max_distance: int = 8  # from here on every distance shares the last bucket (< train_length)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "lag", "train_length", "embed_dim", "num_heads"):
            check_positive_int(name, getattr(self, name))
        if self.embed_dim % self.num_heads:
            raise ValueError(
                f"embed_dim: expected a multiple of num_heads={self.num_heads}, got {self.embed_dim}"
            )
        if self.lag >= self.train_length:
            raise ValueError(f"lag: expected fewer than train_length={self.train_length}, got {self.lag}")


def lag_batch(
    generator: torch.Generator, length: int, batch_size: int = 64, *, vocab_size: int = 16
) -> torch.Tensor:
    """A batch of uniformly random token sequences: the lag task's input (its answer is the input, shifted).

    Shapes:
        returns ``(B, T)`` int64 with ``B = batch_size``, ``T = length``.

    Example:
        >>> lag_batch(torch.Generator().manual_seed(0), 5, 2, vocab_size=4).shape
        torch.Size([2, 5])
    """
    check_positive_int("length", length)
    check_positive_int("batch_size", batch_size)
    check_positive_int("vocab_size", vocab_size)
    return torch.randint(0, vocab_size, (batch_size, length), generator=generator)  # (B, T)


class LagModel(nn.Module):
    """Token embedding, one kind of position information, one causal attention layer, a linear read-out.

        x = embed(ids) [+ PE(t)]                        absolute schemes add a vector per position
        z = Attention(x W_Q, x W_K, x W_V)              relative schemes act inside, on the scores
        logits = z W_out                                (no residual, no MLP)

    ``scheme`` is one of :data:`SCHEMES`. Heads are split as in :mod:`attn_edu.multihead`; Shaw's distance
    vectors are shared by all heads (as in the paper), T5 and ALiBi give every head its own bias.

    Shapes:
        ``forward(ids)``: ids ``(B, T)``; returns logits ``(B, T, V)``.

    Example:
        >>> model = LagModel("alibi")
        >>> model(torch.zeros(2, 40, dtype=torch.long)).shape          # runs past the training length
        torch.Size([2, 40, 16])
    """

    def __init__(self, scheme: str, config: LagConfig | None = None) -> None:
        super().__init__()
        if scheme not in SCHEMES:
            raise ValueError(f"scheme: expected one of {SCHEMES}, got {scheme!r}")
        self.scheme = scheme
        self.config = config = config if config is not None else LagConfig()
        C, H = config.embed_dim, config.num_heads
        self.tokens = nn.Embedding(config.vocab_size, C)
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(C, C), nn.Linear(C, C), nn.Linear(C, C)
        self.readout = nn.Linear(C, config.vocab_size)
        if scheme == "learned":
            self.positions = LearnedPositionalEmbedding(config.train_length, C)
        elif scheme == "shaw":
            self.relative = ShawRelativePosition(max_distance=config.shaw_max_distance, head_dim=C // H)
        elif scheme == "t5":
            self.relative = T5RelativeBias(
                H, bidirectional=False, num_buckets=config.t5_num_buckets, max_distance=config.t5_max_distance
            )

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        sizes = check_token_ids("ids", ids, self.config.vocab_size)
        B, T = sizes["B"], sizes["T"]
        C, H = self.config.embed_dim, self.config.num_heads
        x = self.tokens(ids)  # (B, T, C)
        if self.scheme == "sinusoidal":
            x = x + sinusoidal_encoding(T, C).to(x.device)  # (B, T, C)
        elif self.scheme == "learned":
            x = x + self.positions(T)  # (B, T, C); past train_length: a ValueError
        q, k, v = (
            proj(x).view(B, T, H, C // H).transpose(1, 2) for proj in (self.q_proj, self.k_proj, self.v_proj)
        )
        # q, k, v: (B, H, T, D)
        if self.scheme == "shaw":
            out = shaw_attention(q, k, v, *self.relative(T, T), is_causal=True)  # (B, H, T, D)
        elif self.scheme == "t5":
            out = scaled_dot_product_attention(q, k, v, is_causal=True, score_bias=self.relative(T, T))
        elif self.scheme == "alibi":
            bias = alibi_bias(H, T).to(x.device)  # (H, T, S)
            out = scaled_dot_product_attention(q, k, v, is_causal=True, score_bias=bias)  # (B, H, T, D)
        else:
            out = scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D)
        out = out.transpose(1, 2).reshape(B, T, C)  # (B, T, C)
        return self.readout(out)  # (B, T, V)


def lag_loss(model: LagModel, ids: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the prediction at every position ``t >= lag`` against the token at ``t − lag``.

    Example:
        >>> ids = lag_batch(torch.Generator().manual_seed(0), 16)
        >>> lag_loss(LagModel("nope"), ids).shape
        torch.Size([])
    """
    lag, V = model.config.lag, model.config.vocab_size
    logits = model(ids)  # (B, T, V)
    return F.cross_entropy(logits[:, lag:].reshape(-1, V), ids[:, :-lag].reshape(-1))


def train_lag_model(
    scheme: str,
    *,
    seed: int = 0,
    steps: int = 150,
    lr: float = 1e-2,
    batch_size: int = 64,
    config: LagConfig | None = None,
) -> tuple[LagModel, TrainResult]:
    """A :class:`LagModel` initialised from ``seed`` and trained by :func:`attn_edu.train.train` (AdamW).

    Every batch is a fresh :func:`lag_batch` of ``config.train_length`` tokens, drawn from a generator
    seeded with ``seed``: the same arguments give the same run on one machine and thread count.

    Example:
        >>> model, result = train_lag_model("shaw", steps=2)
        >>> result.steps, model.training
        (2, False)
    """
    config = config if config is not None else LagConfig()
    check_positive_int("batch_size", batch_size)
    torch.manual_seed(seed)
    model = LagModel(scheme, config)

    def batches(generator: torch.Generator) -> torch.Tensor:
        return lag_batch(generator, config.train_length, batch_size, vocab_size=config.vocab_size)

    result = train(model, batches, steps=steps, lr=lr, loss_fn=lag_loss, seed=seed, progress=False)
    return model, result


@torch.no_grad()
def accuracy_by_position(
    model: LagModel, length: int, *, batch_size: int = 256, seed: int = 1234
) -> torch.Tensor:
    """The fraction of sequences in which the model's top token at position ``t`` is the token ``lag`` back.

    One fixed test batch of ``batch_size`` random sequences of ``length`` tokens (from ``seed``, never a
    training batch: training draws from its own generator). Positions ``0 .. lag − 1`` have no answer and
    get NaN, so that entry ``t`` of the result is position ``t``.

    Shapes:
        returns ``(T,)`` float32 with ``T = length``.

    Example:
        >>> acc = accuracy_by_position(LagModel("nope"), 8)
        >>> acc.shape, acc[:3].isnan().all().item()
        (torch.Size([8]), True)
    """
    check_positive_int("length", length)
    lag = model.config.lag
    ids = lag_batch(
        torch.Generator().manual_seed(seed), length, batch_size, vocab_size=model.config.vocab_size
    )  # (B, T)
    was_training = model.training
    model.eval()
    predicted = model(ids).argmax(-1)  # (B, T)
    model.train(was_training)
    accuracy = torch.full((length,), float("nan"))  # (T,)
    accuracy[lag:] = (predicted[:, lag:] == ids[:, :-lag]).float().mean(0)  # (T - lag,)
    return accuracy


def bag_of_words_accuracy(ids: torch.Tensor, lag: int, vocab_size: int) -> torch.Tensor:
    """The best expected accuracy at each position of a model that sees the earlier tokens only as a bag.

    Without positions, one attention layer sees the tokens before query ``t`` as a multiset: its output
    would not change if they were shuffled (notebook 06, section 1). Given that bag of ``t`` tokens
    ``x_0 .. x_(t−1)``, the token ``lag`` back is any one of them with equal chance, so the best guess is
    a most frequent token, right with probability ``(its count) / t``. This is that probability, averaged
    over the sequences of ``ids`` (exact for each bag, no sampling of guesses).

    Shapes:
        ids ``(B, T)``; returns ``(T,)`` float64, NaN at positions ``0 .. lag − 1``.

    Example:
        >>> bag_of_words_accuracy(torch.tensor([[0, 1, 0, 2, 2]]), lag=3, vocab_size=3)
        tensor([   nan,    nan,    nan, 0.6667, 0.5000], dtype=torch.float64)
    """
    T = check_token_ids("ids", ids, vocab_size)["T"]
    check_positive_int("lag", lag)
    counts = F.one_hot(ids, vocab_size).cumsum(1)  # (B, T, V): counts[:, t] = the bag of x_0 .. x_t
    best = counts.max(-1).values.double()  # (B, T): count of the most frequent token in x_0 .. x_t
    accuracy = torch.full((T,), float("nan"), dtype=torch.float64)  # (T,)
    t = torch.arange(lag, T)  # (T - lag,) positions with an answer
    accuracy[lag:] = (best[:, t - 1] / t).mean(0)  # the bag before position t holds t tokens
    return accuracy


def run_length_test(
    seeds: tuple[int, ...] = SEEDS,
    *,
    config: LagConfig | None = None,
    steps: int = STEPS,
    test_factor: int = TEST_FACTOR,
) -> tuple[dict[tuple[str, int], LagModel], dict[str, torch.Tensor]]:
    """Train every scheme of :data:`SCHEMES` from each seed and score it at every position of longer inputs.

    Each model is :func:`train_lag_model` ``(scheme, seed=seed, steps=steps, config=config)``, scored by
    :func:`accuracy_by_position` on sequences ``test_factor`` times the training length, except the learned
    table, scored on the training length (it has no rows past it). Runs on one thread (restored after):
    for tensors this small, one thread is several times faster than two.

    Shapes:
        returns ``models[scheme, seed]`` and ``accuracy[scheme]`` ``(len(seeds), T)`` with
        ``T = test_factor · train_length`` (``train_length`` for ``"learned"``), NaN before position ``lag``.

    Example:
        >>> models, accuracy = run_length_test((0,), steps=1)
        >>> len(models), tuple(accuracy["shaw"].shape), tuple(accuracy["learned"].shape)
        (6, (1, 64), (1, 16))
    """
    config = config if config is not None else LagConfig()
    check_positive_int("test_factor", test_factor)
    if not seeds:
        raise ValueError("seeds: expected at least one seed")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    models: dict[tuple[str, int], LagModel] = {}
    try:
        for seed in seeds:
            for scheme in SCHEMES:
                models[scheme, seed], _ = train_lag_model(scheme, seed=seed, steps=steps, config=config)
        return models, score(models, test_factor)
    finally:
        torch.set_num_threads(threads)


def score(models: dict[tuple[str, int], LagModel], test_factor: int = TEST_FACTOR) -> dict[str, torch.Tensor]:
    """:func:`accuracy_by_position` of every model on sequences ``test_factor`` times its training length (the
    learned table on the training length), one row per seed in the order of ``models``: ``{scheme: (seeds, T)}``."""
    runs: dict[str, list[torch.Tensor]] = {}
    for (scheme, _), model in models.items():
        length = model.config.train_length * (1 if scheme == "learned" else test_factor)
        runs.setdefault(scheme, []).append(accuracy_by_position(model, length))  # (length,)
    return {scheme: torch.stack(accs) for scheme, accs in runs.items()}


def load_length_test(
    directory: str | Path | None = None,
) -> tuple[dict[tuple[str, int], LagModel], dict[str, torch.Tensor]]:
    """Notebook 06's 18 shipped models, ``models[scheme, seed]`` in ``eval()`` mode, and their accuracies measured
    here from the weights (:func:`score`), as :func:`run_length_test` returns them.

    Example:
        >>> models, accuracy = load_length_test()
        >>> len(models), tuple(accuracy["t5"].shape)
        (18, (3, 64))
    """
    record = shipped.read_record(NAME, directory)
    config = LagConfig(**record["config"])
    tensors = shipped.read_weights(NAME, directory)
    models = {
        (scheme, seed): shipped.load_into(LagModel(scheme, config), tensors, prefix=f"{scheme}/{seed}.")
        for seed in record["seeds"]
        for scheme in SCHEMES
    }
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return models, score(models, record["test_factor"])  # type: ignore[arg-type]
    finally:
        torch.set_num_threads(threads)


def summary(accuracy: dict[str, torch.Tensor], config: LagConfig) -> dict[str, dict[str, list[float]]]:
    """Per scheme, each seed's mean accuracy inside the training length (after the lag) and beyond it."""
    lag, length = config.lag, config.train_length
    return {
        scheme: {
            "inside": [round(x, 4) for x in acc[:, lag:length].mean(1).tolist()],
            "beyond": [round(x, 4) for x in acc[:, length:].mean(1).tolist()]
            if acc.shape[1] > length
            else [],
        }
        for scheme, acc in accuracy.items()
    }


def _train_command(args: argparse.Namespace) -> None:
    config = LagConfig()
    models, accuracy = run_length_test(tuple(args.seeds), config=config, steps=args.steps)
    record = {
        "config": asdict(config),
        "seeds": list(args.seeds),
        "steps": args.steps,
        "test_factor": TEST_FACTOR,
        "command": "python -m attn_edu.experiments.length_extrapolation " + " ".join(sys.argv[1:]),
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "accuracy": summary(accuracy, config),
    }
    named = {f"{scheme}/{seed}.": model for (scheme, seed), model in models.items()}
    print(shipped.save(NAME, named, record, args.out))
    print(_table(record))


def _table(record: dict[str, Any]) -> str:
    lines = [f"{'scheme':<11} {'inside the training length':<28} beyond it (mean accuracy per seed)"]
    for scheme, acc in record["accuracy"].items():
        inside, beyond = (" ".join(f"{x:.2f}" for x in acc[k]) for k in ("inside", "beyond"))
        lines.append(f"{scheme:<11} {inside:<28} {beyond or '-'}")
    return "\n".join(lines)


def _report_command(args: argparse.Namespace) -> None:
    print(_table(shipped.read_record(NAME, args.dir)))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m attn_edu.experiments.length_extrapolation train [--seeds ...] [--steps N] [--out DIR]`` or
    ``... report [--dir DIR]``."""
    parser, train_parser = cli.command_parser(
        NAME,
        __doc__,
        train_help="train every scheme from every seed, score them, and write the two files",
        report_help="the accuracies of the shipped models",
        seeds=SEEDS,
    )
    train_parser.add_argument("--steps", type=int, default=STEPS)
    return cli.run(parser, argv, _train_command, _report_command)


if __name__ == "__main__":
    sys.exit(main())
