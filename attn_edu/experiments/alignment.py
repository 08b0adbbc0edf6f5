"""Attention that aligns: a tiny translator learns which English word each French word comes from.

Bahdanau, Cho and Bengio (2014, "Neural Machine Translation by Jointly Learning to Align and Translate",
§3.1 and Fig. 3) let the decoder of a translator score every source word at every output step. Nobody
told it which word translates which, yet the trained weights lined the two sentences up: a diagonal
where the word orders agree, a crossing where French orders the words otherwise (their Fig. 3a:
"European Economic Area" → "zone économique européenne", in reverse). This module reproduces that
picture in a few CPU seconds, without the recurrent network.

The task, word for word with one reordering (:func:`translate_words`): English sentences
``det [adj] noun verb [det [adj] noun]`` of 3 to 7 words become French, each word replaced by its entry
in :data:`LEXICON` and each adjective moved behind its noun, as French does with colours::

    the black cat sees a dog      →  le chat noir voit un chien
    0   1     2   3    4 5           0  2    1    3    4  5      (the English word each French word translates)

Every noun is masculine, so determiners and adjectives agree without any further rule. A sentence's
translation has as many words as the sentence. Six adjective-noun pairs (:data:`HELD_OUT_PAIRS`) never
occur in training; the test sentences (:func:`held_out_batch`) each contain at least one.

The model (:class:`Translator`): the encoder gives source word ``s`` the key ``e(w_s) + p(s)`` (word
embedding plus the sinusoidal position of Vaswani et al., 2017, §3.5) and the value ``e(w_s)``; the
decoder's query at output step ``t`` is ``f(y_{t-1}) + p(t)``, the previous French word (teacher forcing)
plus the output position. One cross-attention, with a score module passed in (:class:`AdditiveScore`,
Bahdanau's, or :class:`DotProductScore`, the transformer's) and a padding mask over the keys, gives a
context vector per step; a linear read-out without bias turns it into the next French word.

Deviations from the paper, on purpose: no RNN on either side (Bahdanau's annotations come from a
bidirectional RNN and its queries from the decoder's RNN state), so a key knows only its word and its
position and a query only the previous word and the step. The values are the word embeddings alone and
the read-out has no bias: the model can write a word only by reading it through the weights, which is
what makes the weights an alignment. The word embeddings start small (:data:`WORD_INIT_STD`), so that
the positions steer the first steps: with PyTorch's N(0, 1), the dot-product translator of seed 1
learned to write "un" without looking at "a" (alignment 0.80 on the test sentences; 1.00 with 0.3).

Notebook 01 section 8 trains the additive translator from three seeds and shows seed 0's weights on two
example sentences along the way. :func:`measure` does exactly that, and its record ships (no weights: the
notebook needs only the scores and the snapshots): ``python -m attn_edu.experiments.alignment train`` writes
``attn_edu/weights/alignment.json`` (about 5 s on one core), ``... report`` prints it, and :func:`read_record`
is what the notebook reads (its ``RETRAIN = True`` calls :func:`measure` instead).

Shapes:
    source, target, alignment ``(B, S)`` (a translation is as long as its source, ``T == S``);
    lengths ``(B,)``; logits ``(B, T, V)``; attention weights ``(B, T, S)``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from attn_edu._validate import check_positive_int, check_shape, check_token_ids
from attn_edu.experiments import cli, shipped
from attn_edu.masks import padding_mask
from attn_edu.objectives import IGNORE_INDEX  # -100: alignment and loss skip padded positions
from attn_edu.positional import sinusoidal_encoding
from attn_edu.retrieval import AdditiveScore, DotProductScore, pool_weights
from attn_edu.train import train

# --- the task: English to French word order -----------------------------------------------------

LEXICON: dict[str, dict[str, str]] = {  # word class -> {English: French}
    "determiner": {"the": "le", "a": "un"},
    "adjective": {"black": "noir", "white": "blanc", "red": "rouge", "green": "vert", "grey": "gris"},
    "noun": {
        "cat": "chat",
        "dog": "chien",
        "bird": "oiseau",
        "wolf": "loup",
        "fox": "renard",
        "horse": "cheval",
    },
    "transitive": {"sees": "voit", "likes": "aime", "follows": "suit"},  # take an object
    "intransitive": {"sleeps": "dort", "runs": "court"},  # end the sentence
}
PAD_ID, BOS_ID = 0, 1  # <pad> fills short sentences; <bos> is the decoder's "previous word" at step 0
SPECIALS = ("<pad>", "<bos>")
SOURCE_WORDS = SPECIALS + tuple(en for words in LEXICON.values() for en in words)  # id -> English word
TARGET_WORDS = SPECIALS + tuple(fr for words in LEXICON.values() for fr in words.values())  # id -> French
MAX_WORDS = 7  # det adj noun verb det adj noun
WORD_INIT_STD = 0.3  # initial spread of the word embeddings (Translator explains why not 1)
HELD_OUT_PAIRS = frozenset(  # never in a training sentence; every test sentence has one
    {
        ("black", "cat"),
        ("white", "dog"),
        ("red", "bird"),
        ("green", "wolf"),
        ("grey", "fox"),
        ("black", "horse"),
    }
)

_FRENCH = {en: fr for words in LEXICON.values() for en, fr in words.items()}


def translate_words(words: Sequence[str]) -> tuple[list[str], list[int]]:
    """The reference translation: each word from :data:`LEXICON`, each adjective moved behind its noun.

    Returns the French words and the alignment: for each French word, the index of the English word it
    translates (a permutation of ``0 .. len(words) - 1``).

    Example:
        >>> translate_words("the black cat sees a dog".split())
        (['le', 'chat', 'noir', 'voit', 'un', 'chien'], [0, 2, 1, 3, 4, 5])
    """
    unknown = [w for w in words if w not in _FRENCH]
    if isinstance(words, str) or unknown or not words:
        got = repr(words) if isinstance(words, str) or not words else f"unknown words {unknown}"
        raise ValueError(f"words: expected a non-empty list of words from LEXICON, got {got}")
    order = list(range(len(words)))
    for i in range(len(words) - 1):
        if words[i] in LEXICON["adjective"] and words[i + 1] in LEXICON["noun"]:
            order[i], order[i + 1] = i + 1, i  # adjective noun -> noun adjective
    return [_FRENCH[words[i]] for i in order], order


@dataclass(frozen=True)
class TranslationBatch:
    """Sentences padded to one length ``S``, their translations, and which source word each translates."""

    source: torch.Tensor  # (B, S) English ids (SOURCE_WORDS), PAD_ID after the sentence
    lengths: torch.Tensor  # (B,) words per sentence
    target: torch.Tensor  # (B, S) French ids (TARGET_WORDS), PAD_ID after the translation
    alignment: torch.Tensor  # (B, S) source position of each French word, IGNORE_INDEX at padding


def encode(sentences: Sequence[str]) -> TranslationBatch:
    """A batch from English sentences (words separated by spaces), padded to the longest.

    Example:
        >>> batch = encode(["a grey fox runs", "the cat sees a white dog"])
        >>> batch.lengths.tolist(), batch.alignment[0].tolist()
        ([4, 6], [0, 2, 1, 3, -100, -100])
    """
    if isinstance(sentences, str) or not sentences:
        raise ValueError(f"sentences: expected a non-empty list of sentences, got {sentences!r}")
    pairs = [(s.split(), *translate_words(s.split())) for s in sentences]
    S = max(len(english) for english, _, _ in pairs)
    source, target = torch.full((2, len(pairs), S), PAD_ID)  # (B, S) each
    alignment = torch.full((len(pairs), S), IGNORE_INDEX)  # (B, S)
    for b, (english, french, order) in enumerate(pairs):
        n = len(english)
        source[b, :n] = torch.tensor([SOURCE_WORDS.index(w) for w in english])
        target[b, :n] = torch.tensor([TARGET_WORDS.index(w) for w in french])
        alignment[b, :n] = torch.tensor(order)
    return TranslationBatch(source, torch.tensor([len(e) for e, _, _ in pairs]), target, alignment)


def decode(ids: torch.Tensor, words: Sequence[str] = SOURCE_WORDS) -> list[str]:
    """The words of one sentence ``(S,)`` of ids, padding dropped.

    Example:
        >>> decode(encode(["the cat runs"]).target[0], TARGET_WORDS)
        ['le', 'chat', 'court']
    """
    return [words[i] for i in ids.tolist() if i != PAD_ID]


def _ids(word_class: str) -> torch.Tensor:
    return torch.tensor([SOURCE_WORDS.index(w) for w in LEXICON[word_class]])


# Sentences are drawn as 7 slots in English order: det adj noun verb det adj noun (some left out).
_FRENCH_SLOTS = [0, 2, 1, 3, 4, 6, 5]  # the same slots in French order: the adjective after its noun
_FRENCH_ID = torch.tensor(  # English id -> French id
    [TARGET_WORDS.index(_FRENCH[w]) if w in _FRENCH else PAD_ID for w in SOURCE_WORDS]
)
_HELD_OUT = torch.tensor(  # (adjectives, nouns): True for a held-out pair
    [[(a, n) in HELD_OUT_PAIRS for n in LEXICON["noun"]] for a in LEXICON["adjective"]]
)


def _draw(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n`` random sentences as slots: ids ``(n, 7)``, which slots are present ``(n, 7)``, held-out ``(n,)``."""
    pick = {
        c: torch.randint(len(LEXICON[c]), (n, 2), generator=generator)
        for c in ("determiner", "adjective", "noun")
    }
    verb = torch.randint(len(LEXICON["transitive"]) + len(LEXICON["intransitive"]), (n,), generator=generator)
    has_adjective = torch.rand(n, 2, generator=generator) < 0.5  # (n, 2): subject's, object's
    has_object = verb < len(LEXICON["transitive"])  # (n,)
    verbs = torch.cat([_ids("transitive"), _ids("intransitive")])
    det, adj, noun = (_ids(c)[pick[c]] for c in ("determiner", "adjective", "noun"))  # (n, 2) each
    slots = torch.stack([det[:, 0], adj[:, 0], noun[:, 0], verbs[verb], det[:, 1], adj[:, 1], noun[:, 1]], 1)
    always = torch.ones(n, dtype=torch.bool)
    obj_adjective = has_adjective[:, 1] & has_object
    present = torch.stack(
        [always, has_adjective[:, 0], always, always, has_object, obj_adjective, has_object], 1
    )
    pairs = _HELD_OUT[pick["adjective"], pick["noun"]]  # (n, 2)
    held_out = (pairs[:, 0] & has_adjective[:, 0]) | (pairs[:, 1] & obj_adjective)  # (n,)
    return slots, present, held_out


def _compact(
    slots: torch.Tensor, present: torch.Tensor, order: list[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Write the present slots, taken in ``order``, side by side: ids ``(n, 7)`` and each slot's position."""
    slots, present = slots[:, order], present[:, order]  # (n, 7)
    position = present.long().cumsum(1) - 1  # (n, 7): where each present slot lands
    position = position.masked_fill(~present, MAX_WORDS)  # (n, 7): absent slots go to a spare column
    ids = torch.full((len(slots), MAX_WORDS + 1), PAD_ID).scatter(1, position, slots)  # (n, 8)
    return ids[:, :MAX_WORDS], position  # (n, 7), (n, 7)


def sample_batch(batch_size: int, *, generator: torch.Generator, held_out: bool = False) -> TranslationBatch:
    """Random sentences with their translations: training sentences, or (``held_out=True``) test ones.

    Each sentence: a determiner, an adjective half of the time, a noun, one of five verbs; after one of
    the three transitive verbs, an object built the same way. Training sentences contain no pair of
    :data:`HELD_OUT_PAIRS`; held-out sentences contain at least one. Padded to the longest sentence.

    Example:
        >>> batch = sample_batch(8, generator=torch.Generator().manual_seed(0))
        >>> english, french = decode(batch.source[0]), decode(batch.target[0], TARGET_WORDS)
        >>> translate_words(english)[0] == french
        True
    """
    check_positive_int("batch_size", batch_size)
    slots, present = [], []
    while sum(len(s) for s in slots) < batch_size:  # rejection sampling; about 1 in 5 is held out
        s, p, h = _draw(2 * batch_size, generator)
        keep = h if held_out else ~h
        slots.append(s[keep])
        present.append(p[keep])
    slots, present = torch.cat(slots)[:batch_size], torch.cat(present)[:batch_size]  # (B, 7)
    source, english_position = _compact(slots, present, list(range(MAX_WORDS)))  # (B, 7) each
    target, french_position = _compact(_FRENCH_ID[slots], present, _FRENCH_SLOTS)  # (B, 7) each
    alignment = torch.full((batch_size, MAX_WORDS + 1), IGNORE_INDEX)  # (B, 8)
    alignment.scatter_(1, french_position, english_position[:, _FRENCH_SLOTS])  # French pos <- English pos
    lengths = present.sum(1)  # (B,)
    S = int(lengths.max())
    return TranslationBatch(source[:, :S], lengths, target[:, :S], alignment[:, :S])


def held_out_batch(size: int = 500, *, seed: int = 1234) -> TranslationBatch:
    """The test set: ``size`` sentences, each with a held-out adjective-noun pair, drawn from ``seed``."""
    return sample_batch(size, generator=torch.Generator().manual_seed(seed), held_out=True)


# --- the model: one cross-attention, no RNN ------------------------------------------------------


def decoder_input(target: torch.Tensor) -> torch.Tensor:
    """Teacher forcing: the decoder reads ``<bos>`` and then the right French words, one step behind.

    Shapes:
        target ``(B, T)``; returns ``(B, T)``.

    Example:
        >>> decoder_input(torch.tensor([[5, 6, 7]]))
        tensor([[1, 5, 6]])
    """
    bos = torch.full_like(target[:, :1], BOS_ID)  # (B, 1)
    return torch.cat([bos, target[:, :-1]], dim=1)  # (B, T)


class Translator(nn.Module):
    """Embeddings, one cross-attention with the given score, and a linear read-out (see the module docstring).

    ``score(queries, keys)`` returns ``(B, T, S)`` scores: :class:`~attn_edu.retrieval.AdditiveScore` or
    :class:`~attn_edu.retrieval.DotProductScore` (:func:`new_translator` builds either). Padded keys
    are hidden by a boolean mask (True = may attend) from :func:`attn_edu.masks.padding_mask`, so they get
    weight exactly 0. ``forward`` returns the attention weights with the logits: the model keeps no copy.

    Shapes:
        source ``(B, S)``, lengths ``(B,)``, decoder_input ``(B, T)``; returns logits ``(B, T, V)`` and
        weights ``(B, T, S)``.

    Example:
        >>> batch = encode(["the cat runs", "a grey fox sees a dog"])
        >>> logits, weights = new_translator("dot")(batch.source, batch.lengths, decoder_input(batch.target))
        >>> logits.shape, weights.shape
        (torch.Size([2, 6, 20]), torch.Size([2, 6, 6]))
    """

    def __init__(self, score: nn.Module, *, embed_dim: int = 48, max_len: int = MAX_WORDS) -> None:
        super().__init__()
        self.source_embedding = nn.Embedding(len(SOURCE_WORDS), embed_dim)  # e(w): values, and keys with p(s)
        self.target_embedding = nn.Embedding(len(TARGET_WORDS), embed_dim)  # f(y): queries, with p(t)
        self.register_buffer("positions", sinusoidal_encoding(max_len, embed_dim), persistent=False)  # p
        for table in (self.source_embedding, self.target_embedding):
            # N(0, 0.3²) instead of PyTorch's N(0, 1): the positions (entries in [-1, 1]) then count as
            # much as the words in the first steps, and training learns where to look as it learns what
            nn.init.normal_(table.weight, std=WORD_INIT_STD)
        self.score = score
        self.readout = nn.Linear(embed_dim, len(TARGET_WORDS), bias=False)

    def forward(
        self, source: torch.Tensor, lengths: torch.Tensor, decoder_input: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        B, S = check_token_ids("source", source, len(SOURCE_WORDS)).values()
        T = check_token_ids("decoder_input", decoder_input, len(TARGET_WORDS))["T"]
        check_shape("decoder_input", decoder_input, "B T", B=B)
        check_shape("lengths", lengths, "B", B=B)
        if max(S, T) > len(self.positions):
            raise ValueError(
                f"source, decoder_input: expected at most {len(self.positions)} words, got S={S}, T={T}"
            )
        if lengths.is_floating_point() or not bool(((lengths >= 1) & (lengths <= S)).all()):
            raise ValueError(f"lengths: expected integers from 1 to S={S}, got {lengths.tolist()}")
        words = self.source_embedding(source)  # (B, S, C): the values
        keys = words + self.positions[:S]  # (B, S, C)
        queries = self.target_embedding(decoder_input) + self.positions[:T]  # (B, T, C)
        visible = padding_mask(lengths, S)[:, None, :]  # (B, 1, S): every step sees the real words only
        weights = pool_weights(self.score(queries, keys), visible)  # (B, T, S)
        context = weights @ words  # (B, T, C)
        return self.readout(context), weights  # (B, T, V), (B, T, S)


Scorer = Literal["additive", "dot"]


def new_translator(scorer: Scorer, *, embed_dim: int = 48, hidden_dim: int = 48, seed: int = 0) -> Translator:
    """A freshly initialised :class:`Translator` (seeded) with Bahdanau's additive score or the dot product.

    Example:
        >>> [sum(p.numel() for p in new_translator(s).parameters()) for s in ("additive", "dot")]
        [7536, 7488]
    """
    check_positive_int("embed_dim", embed_dim)
    check_positive_int("hidden_dim", hidden_dim)
    scores = {"additive": AdditiveScore, "dot": DotProductScore}
    if scorer not in scores:
        raise ValueError(f"scorer: expected 'additive' or 'dot', got {scorer!r}")
    torch.manual_seed(seed)
    return Translator(scores[scorer](embed_dim, embed_dim, hidden_dim), embed_dim=embed_dim)


def translation_loss(model: Translator, batch: TranslationBatch) -> torch.Tensor:
    """Cross-entropy of the next French word under teacher forcing, padded positions left out."""
    logits, _ = model(batch.source, batch.lengths, decoder_input(batch.target))  # (B, T, V)
    labels = batch.target.masked_fill(batch.alignment == IGNORE_INDEX, IGNORE_INDEX)  # (B, T)
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)


# --- measuring: does the model align, does it translate ----------------------------------------


def alignment_accuracy(weights: torch.Tensor, alignment: torch.Tensor) -> float:
    """Fraction of French words whose largest attention weight is on the English word they translate.

    Shapes:
        weights ``(B, T, S)``, alignment ``(B, T)`` (``IGNORE_INDEX`` at padding: not counted).

    Example:
        >>> alignment_accuracy(torch.eye(3)[None], torch.tensor([[0, 2, 1]]))
        0.3333333432674408
    """
    B, T, S = check_shape("weights", weights, "B T S").values()
    check_shape("alignment", alignment, "B T", B=B, T=T)
    real = alignment != IGNORE_INDEX  # (B, T)
    hits = (weights.argmax(dim=-1) == alignment) & real  # (B, T)
    return float(hits.sum() / real.sum())


def chance_alignment(alignment: torch.Tensor) -> float:
    """The alignment accuracy of a model that points at a random real word: ``1 / length``, per French word."""
    real = alignment != IGNORE_INDEX  # (B, T)
    lengths = real.sum(dim=1, keepdim=True).expand_as(real)  # (B, T)
    return float((1 / lengths[real]).mean())


@torch.no_grad()
def greedy_translate(model: Translator, source: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Translate without the right answers: each step reads the word the model itself wrote before.

    Shapes:
        source ``(B, S)``, lengths ``(B,)``; returns French ids ``(B, S)``, ``PAD_ID`` after each sentence.
    """
    written = torch.full_like(source, PAD_ID)  # (B, S)
    for t in range(source.shape[1]):
        logits, _ = model(source, lengths, decoder_input(written))  # (B, S, V); step t reads written[:, t-1]
        written[:, t] = logits[:, t].argmax(dim=-1)
    return written.masked_fill(~padding_mask(lengths, source.shape[1]), PAD_ID)  # (B, S)


@torch.no_grad()
def evaluate(model: Translator, batch: TranslationBatch) -> dict[str, float]:
    """``alignment``: :func:`alignment_accuracy` under teacher forcing; ``translation``: fraction of
    sentences whose greedy translation is right word for word; ``chance``: :func:`chance_alignment`."""
    _, weights = model(batch.source, batch.lengths, decoder_input(batch.target))  # (B, T, S)
    translated = greedy_translate(model, batch.source, batch.lengths)  # (B, S)
    return {
        "alignment": alignment_accuracy(weights, batch.alignment),
        "translation": float((translated == batch.target).all(dim=1).float().mean()),
        "chance": chance_alignment(batch.alignment),
    }


# --- training, with snapshots of the alignment --------------------------------------------------


@dataclass(frozen=True)
class AlignmentRun:
    """A trained translator, its losses, and the attention it gave one example along the way."""

    model: Translator  # trained, in eval() mode
    losses: list[float]  # the training loss at every step
    seconds: float  # wall-clock time of the training loop
    snapshots: dict[int, torch.Tensor]  # step -> weights (B, T, S) on the example, after that many updates


def train_translator(
    scorer: Scorer,
    *,
    steps: int = 200,
    seed: int = 0,
    batch_size: int = 64,
    lr: float = 1e-2,
    example: TranslationBatch | None = None,
    snapshot_steps: Sequence[int] = (),
) -> AlignmentRun:
    """Train a :func:`new_translator` on :func:`sample_batch` sentences with :func:`attn_edu.train.train`.

    ``seed`` fixes the initial weights and the training sentences. With an ``example`` batch, the weights
    it receives are recorded after each number of updates in ``snapshot_steps`` (0: before training).
    200 AdamW steps of 64 sentences take about a second on one CPU core.

    Example:
        >>> run = train_translator("additive", steps=3, example=encode(["the cat runs"]), snapshot_steps=(0, 3))
        >>> len(run.losses), sorted(run.snapshots), run.snapshots[3].shape
        (3, [0, 3], torch.Size([1, 3, 3]))
    """
    check_positive_int("steps", steps)
    if example is None and snapshot_steps:
        raise ValueError("example: expected a TranslationBatch to record snapshots on, got None")
    if any(not 0 <= k <= steps for k in snapshot_steps):
        raise ValueError(f"snapshot_steps: expected steps from 0 to {steps}, got {list(snapshot_steps)}")
    model = new_translator(scorer, seed=seed)
    snapshots: dict[int, torch.Tensor] = {}

    updates = 0  # optimizer steps taken so far

    def snapshot() -> None:
        if example is not None and updates in snapshot_steps:
            with torch.no_grad():
                snapshots[updates] = model(example.source, example.lengths, decoder_input(example.target))[1]

    def loss_and_snapshot(model: Translator, batch: TranslationBatch) -> torch.Tensor:
        nonlocal updates
        snapshot()  # train() calls the loss once per step, before that step's update
        updates += 1
        return translation_loss(model, batch)

    start = time.perf_counter()
    result = train(
        model,
        lambda generator: sample_batch(batch_size, generator=generator),
        steps=steps,
        lr=lr,
        seed=seed,
        progress=False,
        loss_fn=loss_and_snapshot,
    )
    snapshot()  # updates == steps
    return AlignmentRun(model, result.losses, time.perf_counter() - start, snapshots)


# --- notebook 01's runs, shipped as a record ------------------------------------------------------

NAME = "alignment"  # the record's stem in attn_edu/weights/ (no weights: the notebook reads scores and snapshots)
SCORER: Scorer = "additive"  # Bahdanau's score, as in notebook 01 section 8
SEEDS = (0, 1, 2)  # the first one's snapshots ship
STEPS = 200  # train_translator's default, written out
SNAPSHOT_STEPS = (0, 15, 30, STEPS)  # the first seed keeps the example's weights after these updates
EXAMPLE = ("a grey fox runs", "the black cat sees a white dog")  # notebook 01's two example sentences
TEST_SIZE = 500  # held_out_batch(TEST_SIZE): the sentences every seed is tested on
LOSS_DIGITS = 6  # significant digits of the losses in the record (the scores and snapshots are kept whole)


def measure_seed(seed: int, *, snapshots: bool = False, test: TranslationBatch | None = None) -> dict:
    """One seed of the record: the additive translator trained as notebook 01 trains it, tested on ``test``
    (default :func:`held_out_batch` of :data:`TEST_SIZE`): ``{"seed", "scores", "seconds", "losses"}``, and with
    ``snapshots`` its weights on :data:`EXAMPLE` after each of :data:`SNAPSHOT_STEPS` updates, ``(K, B, T, S)``
    as nested lists, under ``"snapshots"``."""
    example = encode(list(EXAMPLE))
    steps = SNAPSHOT_STEPS if snapshots else ()
    run = train_translator(SCORER, steps=STEPS, seed=seed, example=example, snapshot_steps=steps)
    result = {
        "seed": seed,
        "scores": evaluate(run.model, held_out_batch(TEST_SIZE) if test is None else test),
        "seconds": run.seconds,
        "losses": [float(f"{loss:.{LOSS_DIGITS}g}") for loss in run.losses],
    }
    if snapshots:
        result["snapshots"] = torch.stack([run.snapshots[k] for k in SNAPSHOT_STEPS]).tolist()  # (K, B, T, S)
    return result


def measure(seeds: Sequence[int] = SEEDS) -> dict:
    """Notebook 01 section 8's three trainings, as the record holds them: each seed's :func:`measure_seed`
    under ``"runs"``, the first seed's snapshots under ``"snapshots"`` (``(K, B, T, S)`` nested lists, K =
    ``len(SNAPSHOT_STEPS)``), and the settings."""
    if not seeds:
        raise ValueError("seeds: expected at least one seed, got none")
    test = held_out_batch(TEST_SIZE)
    runs = [measure_seed(seed, snapshots=i == 0, test=test) for i, seed in enumerate(seeds)]
    return {
        "scorer": SCORER,
        "steps": STEPS,
        "test_size": TEST_SIZE,
        "example": list(EXAMPLE),
        "snapshot_steps": list(SNAPSHOT_STEPS),
        "snapshots": runs[0].pop("snapshots"),
        "runs": runs,
    }


def read_record(directory: str | None = None) -> dict:
    """The shipped record (``attn_edu/weights/alignment.json``), as :func:`measure` returned it, with the
    command that wrote it and its environment."""
    return shipped.read_record(NAME, directory)


def _report_command(args: argparse.Namespace) -> None:
    record = read_record(args.dir)
    print(f"{NAME}: {record['command']} (torch {record['environment']['torch']})")
    for run in record["runs"]:
        scores = ", ".join(f"{name} {value:.3f}" for name, value in run["scores"].items())
        print(f"seed {run['seed']}: {scores}; loss {run['losses'][0]:.3f} -> {run['losses'][-1]:.4f}")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m attn_edu.experiments.alignment train [--seeds ...] [--out DIR]`` or ``... report``."""
    parser, _ = cli.command_parser(
        NAME,
        __doc__,
        train_help="train notebook 01's translators and write the record (no weights)",
        report_help="what the record holds",
        seeds=SEEDS,
        threads=1,
    )
    return cli.run(parser, argv, cli.record_command(NAME, measure), _report_command)


if __name__ == "__main__":
    sys.exit(main())
