"""Tiny synthetic tasks, generated in code, that small models learn in seconds on a CPU.

Each task returns a :class:`TaskBatch`: token ids ``(B, T)`` and labels ``(B, T)`` aligned with them,
holding the token wherever the model is scored and ``-100`` elsewhere (the prompt). Feed both to
:func:`attn_edu.objectives.causal_lm_loss`, which shifts them: position ``t`` predicts token ``t + 1``.

- copy, reverse, sort:  ``<bos> x_1 .. x_n <sep> f(x)_1 .. f(x)_n``, scored on ``f(x)``;
- modular addition:     ``<bos> a b <sep> (a + b) mod p``, scored on the answer (Power et al., 2022);
- repeated sequences:   ``x_1 .. x_n x_1 .. x_n``, scored on the second copy after its first token, the
  task on which induction heads appear (Olsson et al., 2022; Elhage et al., 2021); train on
  :func:`induction_task`, which varies ``n``;
- key-value lookup:     a table of (key, value) pairs and a key, answered by its value
  (:func:`key_value_lookup`, a :class:`LookupBatch` rather than a token sequence).

One hand-written set for a real model: :func:`paraphrase_triples`, sentences for a paraphrase test of a
pretrained sentence encoder (notebook 13).

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


@dataclass(frozen=True)
class LookupBatch:
    """One batch of key-value lookups: a small table per row, a key to look up, and its value."""

    keys: torch.Tensor  # (B, S) key ids, all different within a row
    values: torch.Tensor  # (B, S) value ids, stored next to the keys
    query: torch.Tensor  # (B,) one of the row's keys
    target: torch.Tensor  # (B,) the value stored with it


def key_value_lookup(
    batch_size: int,
    num_pairs: int,
    *,
    num_keys: int,
    num_values: int,
    generator: torch.Generator | None = None,
) -> LookupBatch:
    """Tables of ``num_pairs`` (key, value) pairs and one key to look up in each: return its value.

    The associative recall task (Graves et al., 2014, section 4.3; Ba et al., 2016, section 4.1): the only
    way to answer is to find the query among the stored keys by its *content* (positions carry nothing:
    the pairs are in random order) and read the value next to it. That is attention as a soft database
    lookup (notebook 01), and it needs sharp attention: a query that spreads its weight over the table
    reads a blend of values. Keys are drawn without replacement, so each query matches exactly one pair;
    values are drawn with replacement.

    Shapes:
        returns keys and values ``(B, S)`` with ``S = num_pairs``, query and target ``(B,)``.

    Example:
        >>> batch = key_value_lookup(2, 4, num_keys=10, num_values=5, generator=torch.Generator().manual_seed(0))
        >>> batch.keys.shape, batch.query.shape
        (torch.Size([2, 4]), torch.Size([2]))
        >>> row = batch.keys[0].tolist().index(int(batch.query[0]))   # where the query's key is stored
        >>> int(batch.values[0, row]) == int(batch.target[0])
        True
    """
    check_positive_int("batch_size", batch_size)
    check_positive_int("num_pairs", num_pairs)
    check_positive_int("num_keys", num_keys)
    check_positive_int("num_values", num_values)
    if num_pairs > num_keys:
        raise ValueError(f"num_pairs: distinct keys need num_pairs <= num_keys={num_keys}, got {num_pairs}")
    noise = torch.rand(batch_size, num_keys, generator=generator)  # (B, num_keys)
    keys = noise.argsort(dim=1)[:, :num_pairs]  # (B, S): a random permutation per row, cut to S keys
    values = torch.randint(num_values, (batch_size, num_pairs), generator=generator)  # (B, S)
    row = torch.randint(num_pairs, (batch_size,), generator=generator)  # (B,) which pair is asked for
    batch = torch.arange(batch_size)
    return LookupBatch(keys, values, keys[batch, row], values[batch, row])


# Sentence triples for a paraphrase test on a real sentence encoder (notebook 13). Written for this course.
_PARAPHRASE_TRIPLES: tuple[tuple[str, str, str], ...] = (
    ("The dog bit the man.", "The man was bitten by the dog.", "The dog bit the ball."),
    (
        "She sold her car to her brother.",
        "Her brother bought the car from her.",
        "She sold her house to a stranger.",
    ),
    (
        "The meeting was moved to Friday.",
        "They rescheduled the meeting for Friday.",
        "The piano was moved on Friday.",
    ),
    ("He forgot to lock the door.", "He left the door unlocked by mistake.", "He forgot to paint the door."),
    (
        "The train left before we arrived.",
        "We got to the station after the train had gone.",
        "The train was cleaned before we arrived.",
    ),
    (
        "The soup is too hot to eat.",
        "The soup has to cool down before anyone can eat it.",
        "The soup is too salty to eat.",
    ),
    ("Anna taught Ben to swim.", "Ben learned swimming from Anna.", "Anna taught Ben to cook."),
    (
        "I rarely drink coffee at night.",
        "I hardly ever have coffee in the evening.",
        "I rarely read the news at night.",
    ),
    (
        "The shop closes at six.",
        "The store shuts its doors at six o'clock.",
        "The shop sells six kinds of cheese.",
    ),
    (
        "The cat is sleeping under the table.",
        "Beneath the table, the cat is asleep.",
        "The cat is eating under the table.",
    ),
    ("My sister is older than me.", "I am younger than my sister.", "My sister is richer than me."),
    (
        "The company hired ten new engineers.",
        "Ten engineers joined the firm as new employees.",
        "The company bought ten new trucks.",
    ),
    (
        "The bridge was closed because of the storm.",
        "The storm forced them to shut the bridge.",
        "The bridge was painted because of the rust.",
    ),
    (
        "Tom lent Maria fifty euros.",
        "Maria borrowed fifty euros from Tom.",
        "Tom paid Maria fifty euros for her bike.",
    ),
    (
        "The children played outside all afternoon.",
        "The kids spent the whole afternoon playing outdoors.",
        "The children studied maths all afternoon.",
    ),
    (
        "The flight was delayed by two hours.",
        "The plane took off two hours late.",
        "The flight attendant worked for two hours.",
    ),
    (
        "She quit her job last spring.",
        "Last spring she resigned from her position.",
        "She planted her garden last spring.",
    ),
    (
        "The teacher praised the student.",
        "The student was complimented by the teacher.",
        "The teacher phoned the student.",
    ),
    (
        "It is raining, so the match is off.",
        "The game has been called off because of the rain.",
        "It is raining, so the roof is leaking.",
    ),
    (
        "The museum is free on Sundays.",
        "On Sundays you can visit the museum without paying.",
        "The museum is crowded on Sundays.",
    ),
    ("He cannot stand loud music.", "He hates noisy music.", "He cannot play loud music."),
    ("The printer is out of paper.", "There is no paper left in the printer.", "The printer is out of ink."),
    ("The police caught the thief.", "The thief was arrested by the police.", "The police lost the thief."),
    (
        "My phone battery died during the call.",
        "The call ended when my phone ran out of power.",
        "My phone screen cracked during the call.",
    ),
    (
        "The baby finally fell asleep.",
        "At last the infant went to sleep.",
        "The baby finally ate her dinner.",
    ),
    (
        "The river flooded the village.",
        "Water from the river covered the village.",
        "The river divides the village.",
    ),
    (
        "Sam arrived late to the party.",
        "Sam got to the party after it had started.",
        "Sam brought a cake to the party.",
    ),
    ("Only members may use the pool.", "The pool is reserved for members.", "Only members may use the gym."),
    (
        "The parcel arrived a day early.",
        "The package was delivered one day ahead of schedule.",
        "The parcel was damaged a day ago.",
    ),
    ("Lisa is afraid of spiders.", "Spiders frighten Lisa.", "Lisa is fond of spiders."),
    (
        "The price of bread went up.",
        "Bread has become more expensive.",
        "The smell of bread filled the room.",
    ),
    (
        "He apologised to his neighbour.",
        "He told his neighbour that he was sorry.",
        "He waved to his neighbour.",
    ),
    (
        "The library lends books for three weeks.",
        "You can borrow a book from the library for three weeks.",
        "The library was closed for three weeks.",
    ),
    (
        "Most of the guests left early.",
        "The majority of the visitors went home early.",
        "Most of the guests ate fish.",
    ),
    (
        "The car would not start this morning.",
        "This morning the engine refused to turn over.",
        "The car was washed this morning.",
    ),
    (
        "The doctor told him to rest.",
        "He was advised by the doctor to take it easy.",
        "The doctor told him a joke.",
    ),
    (
        "We walked home because the bus was full.",
        "The bus was packed, so we went home on foot.",
        "We walked home because the night was warm.",
    ),
    (
        "The glass fell off the shelf and broke.",
        "The glass dropped from the shelf and shattered.",
        "The glass stood on the shelf and sparkled.",
    ),
    (
        "The winter here is long and dark.",
        "Winters in this place last a long time and get little light.",
        "The road here is long and narrow.",
    ),
    (
        "She answered every question correctly.",
        "She got all of the questions right.",
        "She asked every question politely.",
    ),
    ("The movie was boring.", "The film was dull.", "The movie was in French."),
    (
        "The lake freezes in January.",
        "In January the lake turns to ice.",
        "The lake is stocked with trout in January.",
    ),
    (
        "The nurse helped the old man stand up.",
        "The elderly man got to his feet with the nurse's help.",
        "The nurse helped the old man write a letter.",
    ),
    (
        "Paul is taller than his father.",
        "Paul's father is shorter than him.",
        "Paul is talking to his father.",
    ),
    ("Nobody came to the meeting.", "The meeting had no attendees.", "Nobody spoke at the meeting."),
    (
        "The exam was easier than expected.",
        "The test turned out to be less difficult than we thought.",
        "The exam was longer than expected.",
    ),
    ("The mechanic fixed my bike.", "My bicycle was repaired by the mechanic.", "The mechanic sold my bike."),
    (
        "I will call you after lunch.",
        "Once I have eaten lunch, I will phone you.",
        "I will cook for you after lunch.",
    ),
    ("The garden needs water.", "The plants in the garden are thirsty.", "The garden needs a fence."),
    (
        "The kitchen is next to the living room.",
        "The living room is beside the kitchen.",
        "The kitchen is bigger than the living room.",
    ),
)


def paraphrase_triples() -> tuple[tuple[str, str, str], ...]:
    """Fifty ``(anchor, paraphrase, distractor)`` sentence triples, written for this course.

    The paraphrase says what the anchor says in other words; the distractor keeps the anchor's frame and
    most of its words but changes one or two of them, and with them the meaning ("The dog bit the man." /
    "The man was bitten by the dog." / "The dog bit the ball."). A sentence encoder passes a triple when
    the paraphrase is closer to the anchor than the distractor is. In every triple the distractor shares
    at least as many of the anchor's words as the paraphrase does (in 37 of 50, more), so a model that
    only counted shared words would fail the test. Distractors that swap roles ("The man bit the dog.") are left out:
    they keep every word, and mean-pooled embeddings barely see the difference (notebook 13 shows it).

    Example:
        >>> anchor, paraphrase, distractor = paraphrase_triples()[0]
        >>> len(paraphrase_triples()), distractor
        (50, 'The dog bit the ball.')
    """
    return _PARAPHRASE_TRIPLES
