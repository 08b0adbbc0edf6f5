"""Fine-tuning a pretrained encoder, against a classifier on its frozen features (notebook 09).

The task, from real text: is a sentence of the Python documentation as written, or are its words shuffled?
A bag of words cannot tell (both have the same words), so the task is about word order, like the
acceptability judgements of CoLA (Warstadt et al., 2019) that BERT is fine-tuned on.

- **Frozen features**: all-MiniLM-L6-v2 (:mod:`attn_edu.pretrained`) runs once; a linear classifier is
  trained on its mean-pooled sentence embeddings.
- **Fine-tuned**: the same, but the encoder's top blocks train too, from their pretrained weights.

To keep it seconds on a CPU, the blocks below the trained ones run once with no gradient
(:func:`encoder_states`), and their output is the input of the :class:`SentenceClassifier`; with
``trained_blocks=0`` it is the frozen-features classifier.

Both runs take about fifteen seconds of encoder passes and training, so :func:`measure` runs them and notebook 09
reads its result from the record ``attn_edu/weights/finetune.json`` (each run's losses and accuracies);
``python -m attn_edu.experiments.finetune train`` writes the record again, ``... report`` prints it.

Shapes:
    hidden states ``(B, T, C)``, attention mask ``(B, T)`` (1 = real token), labels ``(B,)``, logits ``(B, 2)``.
"""

from __future__ import annotations

import argparse
import copy
import random
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attn_edu._validate import check_positive_int, check_shape
from attn_edu.corpus import corpus
from attn_edu.experiments import cli, shipped
from attn_edu.masks import key_mask, padding_from_attention_mask
from attn_edu.models import BERT
from attn_edu.pretrained import encode, load_minilm, mean_pool
from attn_edu.train import TrainResult, train

SENTENCE = re.compile(r"[A-Z][A-Za-z0-9 ,;:'\"()\-]+\.")  # one plain sentence: a capital, words, a full stop
MIN_WORDS, MAX_WORDS = 6, 14  # 410 sentences of Python 3.11's corpus, at most 33 WordPiece tokens


def documentation_sentences(text: str | None = None) -> list[str]:
    """The plain sentences of 6 to 14 words in the corpus (default :func:`attn_edu.corpus.corpus`), sorted, unique."""
    text = corpus() if text is None else text
    pieces = (re.sub(r"\s+", " ", piece.strip()) for piece in re.split(r"(?<=[.?!])\s+", text))
    return sorted({p for p in pieces if MIN_WORDS <= len(p.split()) <= MAX_WORDS and SENTENCE.fullmatch(p)})


def shuffle_words(sentence: str, rng: random.Random) -> str:
    """The sentence's words in a random order different from the original (the full stop stays last).

    Example:
        >>> shuffle_words("Every name is bound to an object.", random.Random(0))
        'to is name Every an bound object.'
    """
    words = sentence.removesuffix(".").split()
    if len(set(words)) < 2:
        raise ValueError(f"sentence: expected at least two different words, got {sentence!r}")
    while True:
        order = words[:]
        rng.shuffle(order)
        if order != words:
            return " ".join(order) + "."


@dataclass(frozen=True)
class WordOrderData:
    """Sentences, half of them with shuffled words, and their labels (1 = as written, 0 = shuffled)."""

    texts: list[str]
    labels: torch.Tensor  # (B,) long


def word_order_data(sentences: list[str], *, seed: int = 0) -> WordOrderData:
    """Every second sentence shuffled (:func:`shuffle_words`), the others as written."""
    rng = random.Random(seed)
    texts = [s if i % 2 == 0 else shuffle_words(s, rng) for i, s in enumerate(sentences)]
    return WordOrderData(texts, torch.tensor([1 - i % 2 for i in range(len(sentences))]))


def split_data(sentences: list[str], *, test_size: int, seed: int = 0) -> tuple[WordOrderData, WordOrderData]:
    """A random training set and a test set of ``test_size`` other sentences."""
    check_positive_int("test_size", test_size)
    if test_size >= len(sentences):
        raise ValueError(f"test_size: expected fewer than the {len(sentences)} sentences, got {test_size}")
    order = sentences[:]
    random.Random(seed).shuffle(order)
    return word_order_data(order[test_size:], seed=seed), word_order_data(order[:test_size], seed=seed + 1)


def _length_chunks(attention_mask: torch.Tensor, size: int = 64) -> list[tuple[torch.Tensor, int]]:
    """Rows in chunks of ``size`` of similar length (shortest first), each with its longest length.

    A batch padded to its longest text computes every padding position too; chunks of similar length, each
    cut to its own longest text, skip most of them (the masked keys change nothing of the real positions).
    """
    lengths = attention_mask.sum(dim=1)  # (B,)
    order = torch.argsort(lengths, stable=True)
    return [(rows, int(lengths[rows].max())) for rows in order.split(size)]


@torch.no_grad()
def encoder_states(
    model: BERT, tokenizer: object, texts: list[str], *, blocks: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The hidden states after the first ``blocks`` blocks (default: all) of ``model``, and the attention mask.

    Shapes:
        returns hidden ``(B, T, C)`` and attention_mask ``(B, T)``, padded to the longest text.
    """
    input_ids, attention_mask = encode(tokenizer, texts)  # (B, T), (B, T)
    T = input_ids.shape[1]
    x = model.token_embedding(input_ids) + model.token_type_embedding(torch.zeros_like(input_ids))
    x = model.embed_norm(x + model.position_embedding(T))  # (B, T, C)
    return continue_states(model, x, attention_mask, first=0, last=blocks), attention_mask


@torch.no_grad()
def continue_states(
    model: BERT, hidden: torch.Tensor, attention_mask: torch.Tensor, *, first: int, last: int | None = None
) -> torch.Tensor:
    """Run blocks ``first .. last - 1`` (default: to the end) of ``model`` on hidden states from block ``first``.

    Shapes:
        hidden ``(B, T, C)``, attention_mask ``(B, T)``; returns ``(B, T, C)``.
    """
    last = len(model.blocks) if last is None else last
    if not 0 <= first <= last <= len(model.blocks):
        raise ValueError(
            f"blocks: expected 0 <= first <= last <= {len(model.blocks)}, got first={first}, last={last}"
        )
    sizes = check_shape("hidden", hidden, "B T C")
    check_shape("attention_mask", attention_mask, "B T", B=sizes["B"], T=sizes["T"])
    out = torch.zeros_like(hidden)  # the padding after each chunk's longest text stays 0
    for rows, length in _length_chunks(attention_mask):
        states = hidden[rows, :length]  # (b, t, C)
        mask = key_mask(padding_from_attention_mask(attention_mask[rows, :length], len(rows), length))
        for block in model.blocks[first:last]:
            states = block(states, mask=mask)
        out[rows, :length] = states
    return out


class SentenceClassifier(nn.Module):
    """The top ``trained_blocks`` blocks of a pretrained BERT (copied), mean pooling and a linear layer.

    Its input is :func:`encoder_states` with ``blocks = len(model.blocks) - trained_blocks``; with
    ``trained_blocks=0`` only the linear layer is left: a classifier on frozen features.
    """

    def __init__(self, model: BERT, trained_blocks: int, num_classes: int = 2) -> None:
        super().__init__()
        if not 0 <= trained_blocks <= len(model.blocks):
            raise ValueError(f"trained_blocks: expected 0 to {len(model.blocks)}, got {trained_blocks!r}")
        check_positive_int("num_classes", num_classes)
        first = len(model.blocks) - trained_blocks
        self.blocks = nn.ModuleList(copy.deepcopy(block) for block in model.blocks[first:])
        self.head = nn.Linear(model.config.embed_dim, num_classes)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        sizes = check_shape("hidden", hidden, "B T C")
        check_shape("attention_mask", attention_mask, "B T", B=sizes["B"], T=sizes["T"])
        mask = key_mask(padding_from_attention_mask(attention_mask, sizes["B"], sizes["T"]))
        for block in self.blocks:
            hidden = block(hidden, mask=mask)
        # mean_pool gives unit vectors; times 10 gives the linear layer logits of a useful size from the start
        return self.head(10 * mean_pool(hidden, attention_mask))  # (B, classes)


def fit(
    classifier: SentenceClassifier,
    hidden: torch.Tensor,
    attention_mask: torch.Tensor,
    labels: torch.Tensor,
    *,
    steps: int,
    lr: float,
    batch_size: int = 32,
    seed: int = 0,
) -> TrainResult:
    """Train ``classifier`` with AdamW on random batches of the rows (cross-entropy), cut to their longest text."""
    check_positive_int("batch_size", batch_size)

    def batches(generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        rows = torch.randint(len(labels), (batch_size,), generator=generator)
        length = int(attention_mask[rows].sum(dim=1).max())  # the padding after it changes nothing
        return hidden[rows, :length], attention_mask[rows, :length], labels[rows]

    def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return F.cross_entropy(model(batch[0], batch[1]), batch[2])

    return train(
        classifier, batches, steps=steps, lr=lr, weight_decay=0.0, seed=seed, progress=False, loss_fn=loss_fn
    )


@torch.no_grad()
def accuracy(
    classifier: SentenceClassifier, hidden: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor
) -> float:
    """Share of the rows whose most likely class is the label."""
    right = torch.zeros(len(labels), dtype=torch.bool)
    for rows, length in _length_chunks(attention_mask):
        logits = classifier(hidden[rows, :length], attention_mask[rows, :length])  # (b, classes)
        right[rows] = logits.argmax(dim=-1) == labels[rows]
    return right.float().mean().item()


# --- notebook 09's fine-tuning run, shipped as a record -------------------------------------------------

TRAINED_BLOCKS, STEPS, LR, BATCH_SIZE = 2, 30, 2e-4, 16  # notebook 09: the top two blocks, two passes
FROZEN_STEPS, FROZEN_LR, FROZEN_BATCH_SIZE = 200, 1e-2, 64  # the head on the frozen encoder's features
TEST_SIZE = 200  # sentences held out
NAME = "finetune"  # the record's stem in attn_edu/weights/ (no weights: two MiniLM blocks would be 7 MB)


def fine_tune(
    model: BERT,
    hidden: torch.Tensor,
    attention_mask: torch.Tensor,
    labels: torch.Tensor,
    *,
    steps: int = STEPS,
) -> tuple[SentenceClassifier, TrainResult]:
    """Notebook 09's fine-tuning run: the top :data:`TRAINED_BLOCKS` blocks and a head, from the head's initial
    weights after ``torch.manual_seed(0)``, :data:`STEPS` AdamW steps of :data:`BATCH_SIZE` sentences at
    :data:`LR`. ``hidden`` is :func:`encoder_states` with ``blocks = len(model.blocks) - TRAINED_BLOCKS``.

    Shapes:
        hidden ``(B, T, C)``, attention_mask ``(B, T)``, labels ``(B,)``.
    """
    torch.manual_seed(0)  # the head's initial weights
    tuned = SentenceClassifier(model, trained_blocks=TRAINED_BLOCKS)
    run = fit(tuned, hidden, attention_mask, labels, steps=steps, lr=LR, batch_size=BATCH_SIZE)
    return tuned, run


def frozen_head(
    model: BERT, hidden: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor
) -> tuple[SentenceClassifier, TrainResult]:
    """Notebook 09's classifier on frozen features: a head alone (``trained_blocks=0``), from its initial weights
    after ``torch.manual_seed(0)``, :data:`FROZEN_STEPS` AdamW steps of :data:`FROZEN_BATCH_SIZE` sentences at
    :data:`FROZEN_LR`. ``hidden`` is the final hidden states, :func:`encoder_states` with every block.

    Shapes:
        hidden ``(B, T, C)``, attention_mask ``(B, T)``, labels ``(B,)``.
    """
    torch.manual_seed(0)  # the head's initial weights
    frozen = SentenceClassifier(model, trained_blocks=0)
    run = fit(
        frozen, hidden, attention_mask, labels, steps=FROZEN_STEPS, lr=FROZEN_LR, batch_size=FROZEN_BATCH_SIZE
    )
    return frozen, run


def measure(model: BERT | None = None, tokenizer: object | None = None) -> dict:
    """Notebook 09's two classifiers, trained and tested: the record that :func:`read_record` reads.

    The data: :func:`split_data` of :func:`documentation_sentences`, :data:`TEST_SIZE` held out. Blocks 0 to 3
    of ``model`` (default: :func:`~attn_edu.pretrained.load_minilm`) run once, with no gradient; the fine-tuned
    classifier (:func:`fine_tune`) trains the top :data:`TRAINED_BLOCKS` on their output, and the frozen one
    (:func:`frozen_head`) reads the final hidden states, blocks 4 and 5 run once on the same output.
    """
    if model is None:
        model, tokenizer = load_minilm()
    train_data, test_data = split_data(documentation_sentences(), test_size=TEST_SIZE)
    first = len(model.blocks) - TRAINED_BLOCKS  # blocks 0 .. first - 1 stay frozen and run once
    lower = {
        name: encoder_states(model, tokenizer, data.texts, blocks=first)
        for name, data in [("train", train_data), ("test", test_data)]
    }
    final = {name: (continue_states(model, *lower[name], first=first), lower[name][1]) for name in lower}
    frozen, frozen_run = frozen_head(model, *final["train"], train_data.labels)
    tuned, run = fine_tune(model, *lower["train"], train_data.labels)
    return {
        "command": f"python -m attn_edu.experiments.{NAME} train",
        "trained_blocks": TRAINED_BLOCKS,
        "steps": STEPS,
        "lr": LR,
        "batch_size": BATCH_SIZE,
        "test_size": TEST_SIZE,
        "losses": run.losses,
        "test_accuracy": accuracy(tuned, *lower["test"], test_data.labels),
        "frozen": {
            "steps": FROZEN_STEPS,
            "lr": FROZEN_LR,
            "batch_size": FROZEN_BATCH_SIZE,
            "losses": frozen_run.losses,
            "train_accuracy": accuracy(frozen, *final["train"], train_data.labels),
            "test_accuracy": accuracy(frozen, *final["test"], test_data.labels),
        },
    }


def read_record(directory: str | None = None) -> dict:
    """The shipped record of the run (``attn_edu/weights/finetune.json``): its losses and test accuracy."""
    return shipped.read_record(NAME, directory)


def _train_command(args: argparse.Namespace) -> None:
    torch.set_num_threads(2)  # notebook 09's setting: for a 22M-parameter encoder two threads do help
    record = measure()
    record["environment"] = shipped.environment(2)
    path = shipped.save_record(NAME, record, args.out)
    frozen = record["frozen"]["test_accuracy"]
    print(f"{STEPS} steps, test accuracy {record['test_accuracy']:.3f} (frozen: {frozen:.3f}); wrote {path}")


def _report_command(args: argparse.Namespace) -> None:
    record = read_record(args.dir)
    print(f"{NAME}: {record['command']} (torch {record['environment']['torch']})")
    print(f"{record['steps']} steps, test accuracy {record['test_accuracy']:.3f}")
    print(f"frozen features: test accuracy {record['frozen']['test_accuracy']:.3f}")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m attn_edu.experiments.finetune train [--out DIR]`` or ``... report [--dir DIR]``."""
    parser, _ = cli.command_parser(
        NAME, __doc__, train_help="fine-tune again and write the record", report_help="what the record holds"
    )
    return cli.run(parser, argv, _train_command, _report_command)


if __name__ == "__main__":
    sys.exit(main())
