"""Tiny synthetic tasks, generated in code, that small models learn in seconds on a CPU.

Each task returns a :class:`TaskBatch`: token ids ``(B, T)`` and labels ``(B, T)`` aligned with them,
holding the token wherever the model is scored and ``-100`` elsewhere (the prompt). Feed both to
:func:`attn_edu.objectives.causal_lm_loss`, which shifts them: position ``t`` predicts token ``t + 1``.

- copy, reverse, sort:  ``<bos> x_1 .. x_n <sep> f(x)_1 .. f(x)_n``, scored on ``f(x)``;
- modular addition:     ``<bos> a b <sep> (a + b) mod p``, scored on the answer (Power et al., 2022);
- repeated sequences:   ``x_1 .. x_n x_1 .. x_n``, scored on the second copy after its first token, the
  task on which induction heads appear (Olsson et al., 2022; Elhage et al., 2021); train on
  :func:`induction_task`, which varies ``n``.

Shapes:
    input_ids and labels ``(B, T)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attn_edu._validate import check_positive_int
from attn_edu.objectives import IGNORE_INDEX  # -100: a label the loss skips


@dataclass(frozen=True)
class ToyVocab:
    """A vocabulary of special tokens followed by ``num_symbols`` plain symbols ``0 .. num_symbols-1``.

    Example:
        >>> vocab = ToyVocab(num_symbols=10)
        >>> vocab.size, vocab.bos_id, vocab.symbol_id(0)
        (14, 1, 4)
        >>> vocab.decode(torch.tensor([1, 4, 5, 2, 5, 4]))
        '<bos> 0 1 <sep> 1 0'
    """

    num_symbols: int  # plain tokens (digits, letters...), ids after the specials
    specials: tuple[str, ...] = ("<pad>", "<bos>", "<sep>", "<eos>")  # ids 0, 1, 2, 3

    def __post_init__(self) -> None:
        check_positive_int("num_symbols", self.num_symbols)

    @property
    def size(self) -> int:
        """``V``: the number of distinct ids."""
        return len(self.specials) + self.num_symbols

    def special_id(self, name: str) -> int:
        """The id of a special token such as ``"<sep>"``."""
        if name not in self.specials:
            raise ValueError(f"name: expected one of {self.specials}, got {name!r}")
        return self.specials.index(name)

    @property
    def pad_id(self) -> int:
        return self.special_id("<pad>")

    @property
    def bos_id(self) -> int:
        return self.special_id("<bos>")

    @property
    def sep_id(self) -> int:
        return self.special_id("<sep>")

    def symbol_id(self, symbol: int | torch.Tensor) -> int | torch.Tensor:
        """Token id of plain symbol ``symbol`` (works elementwise on tensors)."""
        return symbol + len(self.specials)

    def decode(self, ids: torch.Tensor) -> str:
        """Readable text for a 1-D tensor of ids: special names and symbol numbers."""
        offset = len(self.specials)
        return " ".join(self.specials[i] if i < offset else str(i - offset) for i in ids.tolist())


@dataclass(frozen=True)
class TaskBatch:
    """One batch of a synthetic task: ids and the aligned labels (``-100`` where nothing is scored)."""

    input_ids: torch.Tensor  # (B, T) token ids
    labels: torch.Tensor  # (B, T) the token where scored, -100 elsewhere


def _prompt_answer(vocab: ToyVocab, prompt: torch.Tensor, answer: torch.Tensor) -> TaskBatch:
    """``<bos> prompt <sep> answer``, scored on the answer. prompt and answer hold symbol numbers."""
    B = prompt.shape[0]
    bos = torch.full((B, 1), vocab.bos_id)  # (B, 1)
    sep = torch.full((B, 1), vocab.sep_id)  # (B, 1)
    ids = torch.cat([bos, vocab.symbol_id(prompt), sep, vocab.symbol_id(answer)], dim=1)  # (B, T)
    labels = ids.clone()
    labels[:, : ids.shape[1] - answer.shape[1]] = IGNORE_INDEX  # score only the answer
    return TaskBatch(ids, labels)


def _random_symbols(
    batch_size: int, length: int, vocab: ToyVocab, generator: torch.Generator | None
) -> torch.Tensor:
    check_positive_int("batch_size", batch_size)
    check_positive_int("length", length)
    return torch.randint(vocab.num_symbols, (batch_size, length), generator=generator)  # (B, n)


def copy_task(
    batch_size: int, length: int, vocab: ToyVocab, *, generator: torch.Generator | None = None
) -> TaskBatch:
    """Repeat the prompt after ``<sep>``: the answer token ``i`` is prompt token ``i``.

    Shapes:
        returns ids and labels ``(B, 2·length + 2)``.

    Example:
        >>> vocab = ToyVocab(num_symbols=5)
        >>> batch = copy_task(1, 3, vocab, generator=torch.Generator().manual_seed(0))
        >>> vocab.decode(batch.input_ids[0])
        '<bos> 4 4 3 <sep> 4 4 3'
    """
    x = _random_symbols(batch_size, length, vocab, generator)  # (B, n)
    return _prompt_answer(vocab, x, x)


def reverse_task(
    batch_size: int, length: int, vocab: ToyVocab, *, generator: torch.Generator | None = None
) -> TaskBatch:
    """Write the prompt backwards after ``<sep>``.

    Example:
        >>> vocab = ToyVocab(num_symbols=5)
        >>> vocab.decode(reverse_task(1, 3, vocab, generator=torch.Generator().manual_seed(0)).input_ids[0])
        '<bos> 4 4 3 <sep> 3 4 4'
    """
    x = _random_symbols(batch_size, length, vocab, generator)  # (B, n)
    return _prompt_answer(vocab, x, x.flip(1))


def sort_task(
    batch_size: int, length: int, vocab: ToyVocab, *, generator: torch.Generator | None = None
) -> TaskBatch:
    """Write the prompt in increasing order after ``<sep>``.

    Example:
        >>> vocab = ToyVocab(num_symbols=5)
        >>> vocab.decode(sort_task(1, 3, vocab, generator=torch.Generator().manual_seed(0)).input_ids[0])
        '<bos> 4 4 3 <sep> 3 4 4'
    """
    x = _random_symbols(batch_size, length, vocab, generator)  # (B, n)
    return _prompt_answer(vocab, x, x.sort(dim=1).values)


def modular_addition(
    batch_size: int, modulus: int, *, generator: torch.Generator | None = None
) -> tuple[TaskBatch, ToyVocab]:
    """``<bos> a b <sep> c`` with ``c = (a + b) mod p``; the symbols are the numbers ``0 .. p-1``.

    Returns the batch and its vocabulary (``p`` symbols). Grokking appears on this task with a
    held-out split (Power et al., 2022); here every batch is fresh.

    Example:
        >>> batch, vocab = modular_addition(2, 7, generator=torch.Generator().manual_seed(0))
        >>> a, b, c = (vocab.decode(batch.input_ids[0]).split()[i] for i in (1, 2, 4))
        >>> (int(a) + int(b)) % 7 == int(c)
        True
    """
    check_positive_int("modulus", modulus)
    vocab = ToyVocab(num_symbols=modulus)
    ab = _random_symbols(batch_size, 2, vocab, generator)  # (B, 2)
    c = ab.sum(dim=1, keepdim=True) % modulus  # (B, 1)
    return _prompt_answer(vocab, ab, c), vocab


def repeated_sequences(
    batch_size: int,
    length: int,
    *,
    vocab_size: int,
    repeats: int = 2,
    distinct: bool = True,
    generator: torch.Generator | None = None,
) -> TaskBatch:
    """Random tokens, repeated: ``x_1 .. x_n x_1 .. x_n``. The second copy is predictable by copying.

    On the first copy the best a model can do is guess (loss ``log V``). From the second token of the
    second copy on, "find the previous occurrence of the current token and predict what came after it"
    gives the answer: the algorithm of an induction head (Olsson et al., 2022). The first token of
    each copy after the first is not scored: nothing before it says a repeat is starting.
    With ``distinct=True`` the ``n`` tokens of a row are all different (needs ``n <= V``), so each
    token has exactly one previous occurrence. No special tokens: every id is a plain token.

    Shapes:
        returns ids and labels ``(B, repeats · length)``.

    Example:
        >>> batch = repeated_sequences(1, 4, vocab_size=10, generator=torch.Generator().manual_seed(0))
        >>> batch.input_ids[0, :4].tolist() == batch.input_ids[0, 4:].tolist()
        True
        >>> (batch.labels[0] != -100).int().tolist()
        [0, 0, 0, 0, 0, 1, 1, 1]
    """
    check_positive_int("batch_size", batch_size)
    check_positive_int("length", length)
    check_positive_int("vocab_size", vocab_size)
    check_positive_int("repeats", repeats)
    if distinct:
        if length > vocab_size:
            raise ValueError(f"length: distinct tokens need length <= vocab_size={vocab_size}, got {length}")
        # A random permutation per row, cut to `length`: all tokens of a row differ.
        noise = torch.rand(batch_size, vocab_size, generator=generator)  # (B, V)
        x = noise.argsort(dim=1)[:, :length]  # (B, n)
    else:
        x = torch.randint(vocab_size, (batch_size, length), generator=generator)  # (B, n)
    ids = x.repeat(1, repeats)  # (B, repeats·n)
    labels = ids.clone()
    labels[:, : length + 1] = IGNORE_INDEX  # first copy and the first token of the second
    labels[:, length::length] = IGNORE_INDEX  # the first token of every later copy
    return TaskBatch(ids, labels)


def induction_task(
    batch_size: int,
    *,
    vocab_size: int,
    min_length: int = 8,
    max_length: int = 24,
    generator: torch.Generator | None = None,
) -> TaskBatch:
    """:func:`repeated_sequences` with a random length ``n`` in ``min_length .. max_length`` per batch.

    Why vary it: with one fixed period ``n`` a single layer can solve the task by *position* alone
    (query ``t`` attends key ``t − n + 1``, learned from the position embeddings), and no induction
    circuit forms. When ``n`` changes from batch to batch, the only way to find the previous
    occurrence is by content, which takes two layers: the induction mechanism.

    Shapes:
        returns ids and labels ``(B, 2·n)``.

    Example:
        >>> batch = induction_task(2, vocab_size=64, generator=torch.Generator().manual_seed(0))
        >>> n = batch.input_ids.shape[1] // 2
        >>> 8 <= n <= 24 and torch.equal(batch.input_ids[:, :n], batch.input_ids[:, n:])
        True
    """
    check_positive_int("min_length", min_length)
    check_positive_int("max_length", max_length)
    if min_length > max_length:
        raise ValueError(f"min_length: expected <= max_length={max_length}, got {min_length}")
    length = int(torch.randint(min_length, max_length + 1, (1,), generator=generator))
    return repeated_sequences(batch_size, length, vocab_size=vocab_size, generator=generator)
