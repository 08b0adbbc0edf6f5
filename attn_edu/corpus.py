"""Real English text that every Python ships, cut into characters: the course's corpus.

    text   = corpus()                        the pydoc topics every CPython ships (~465,000 characters)
    train, validation = split_corpus(text)   the last 10% of the characters is held out
    ids    = CharTokenizer.encode(train)     one id per character, id 0 for anything unknown
    baselines(tokenizer, text)               a unigram and a bigram model's loss, nats per character

The corpus is :mod:`pydoc_data.topics`, the text behind ``help("if")``: a dict of ~80 topics of
English prose, grammar rules and code examples. It is read at run time, never copied into the course.
The models trained on it are in :mod:`attn_edu.experiments.text_gpt`.

Two baselines say what a model learned beyond character statistics: a **unigram** model
(``p(x_t)``, how often each character occurs) and a **bigram** model (``p(x_t | x_{t-1})``, the
previous character only), both fitted on the training text with add-one (Laplace) smoothing
(Jurafsky & Martin, *Speech and Language Processing*, 3rd ed., §3.5). A loss in nats per character
divided by ``ln 2`` is in **bits per character**, the unit of text-compression benchmarks.

Shapes:
    encoded text ``(N,)``.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch

from attn_edu._validate import check_positive_int, check_shape

SEPARATOR = "\n\n"  # between two topics (each topic already ends with a newline)
VALIDATION_FRACTION = 0.1  # the last 10% of the characters is the validation split
UNKNOWN = "\ufffd"  # "�", Unicode's replacement character: what an unknown id decodes to


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


def held_out_windows(
    tokenizer: CharTokenizer, count: int, length: int, text: str | None = None
) -> torch.Tensor:
    """``count`` windows of ``length`` characters of the validation split, evenly spaced through it: the prompts
    and texts that the decoding benchmarks (speculative decoding, the quantised cache) read.

    Shapes:
        returns ``(count, length)`` int64.

    Example:
        >>> held_out_windows(CharTokenizer("ab"), 2, 3, "ab" * 100).tolist()
        [[1, 2, 1], [1, 2, 1]]
    """
    ids = tokenizer.encode(split_corpus(text)[1])  # (M,)
    if not 0 < length <= len(ids) or count < 1:
        raise ValueError(
            f"count, length: expected count >= 1 windows of 1 to {len(ids)} characters, got {count}, {length}"
        )
    step = (len(ids) - length) // count
    return torch.stack([ids[i * step : i * step + length] for i in range(count)])


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


# --- baselines ------------------------------------------------------------------------------------


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
