"""Synthetic tasks hold what they claim, and the training loop learns, repeats and reports."""

from __future__ import annotations

import re

import pytest
import torch

from attn_edu.data import (
    ToyVocab,
    copy_task,
    induction_task,
    modular_addition,
    paraphrase_triples,
    repeated_sequences,
    reverse_task,
    sort_task,
)
from attn_edu.models import GPT, GPTConfig
from attn_edu.objectives import causal_lm_loss
from attn_edu.train import TrainResult, lm_loss, steepest_fall, train

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

VOCAB = ToyVocab(num_symbols=10)


def split(batch, vocab: ToyVocab = VOCAB):
    """Prompt and answer symbols of a ``<bos> prompt <sep> answer`` batch."""
    ids = batch.input_ids
    sep = (ids == vocab.sep_id).int().argmax(dim=1)
    assert (sep == sep[0]).all()
    s = int(sep[0])
    assert (ids[:, 0] == vocab.bos_id).all()
    return ids[:, 1:s] - len(vocab.specials), ids[:, s + 1 :] - len(vocab.specials), s


@pytest.mark.parametrize(
    "task, rule",
    [
        (copy_task, lambda x: x),
        (reverse_task, lambda x: x.flip(1)),
        (sort_task, lambda x: x.sort(dim=1).values),
    ],
)
def test_prompt_answer_tasks(task, rule):
    batch = task(16, 7, VOCAB, generator=torch.Generator().manual_seed(0))
    assert batch.input_ids.shape == batch.labels.shape == (16, 16)
    prompt, answer, sep = split(batch)
    assert torch.equal(answer, rule(prompt))
    assert ((prompt >= 0) & (prompt < VOCAB.num_symbols)).all()
    assert (batch.labels[:, : sep + 1] == -100).all()  # nothing scored before the answer
    assert torch.equal(batch.labels[:, sep + 1 :], batch.input_ids[:, sep + 1 :])


def test_modular_addition():
    batch, vocab = modular_addition(64, 11, generator=torch.Generator().manual_seed(0))
    assert vocab.num_symbols == 11
    ab, c, _ = split(batch, vocab)
    assert torch.equal(c[:, 0], ab.sum(1) % 11)
    assert (batch.labels[:, :-1] == -100).all() and torch.equal(batch.labels[:, -1], batch.input_ids[:, -1])


@pytest.mark.parametrize("distinct", [True, False])
def test_repeated_sequences(distinct):
    batch = repeated_sequences(
        8, 12, vocab_size=20, repeats=3, distinct=distinct, generator=torch.Generator().manual_seed(0)
    )
    ids, labels = batch.input_ids, batch.labels
    assert ids.shape == (8, 36)
    assert torch.equal(ids[:, :12], ids[:, 12:24]) and torch.equal(ids[:, :12], ids[:, 24:])
    if distinct:
        assert all(len(set(row)) == 12 for row in ids[:, :12].tolist())
    scored = labels != -100
    # Scored: every repeat except its first token, whose arrival nothing announces.
    expected = torch.ones(36, dtype=torch.bool)
    expected[:13] = False
    expected[24] = False
    assert torch.equal(scored[0], expected)
    assert torch.equal(labels[scored], ids[scored])


def test_induction_task_varies_the_length():
    g = torch.Generator().manual_seed(0)
    lengths = {
        induction_task(2, vocab_size=64, min_length=5, max_length=9, generator=g).input_ids.shape[1] // 2
        for _ in range(40)
    }
    assert lengths == {5, 6, 7, 8, 9}


def test_vocab_decode_and_tasks_are_seeded():
    assert VOCAB.decode(torch.tensor([1, 4, 13, 2, 0])) == "<bos> 0 9 <sep> <pad>"
    a = copy_task(3, 5, VOCAB, generator=torch.Generator().manual_seed(1))
    b = copy_task(3, 5, VOCAB, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a.input_ids, b.input_ids)


def test_data_errors():
    with pytest.raises(ValueError, match="length"):
        repeated_sequences(2, 30, vocab_size=20)
    with pytest.raises(ValueError, match="batch_size"):
        copy_task(0, 3, VOCAB)
    with pytest.raises(ValueError, match="num_symbols"):
        ToyVocab(num_symbols=0)
    with pytest.raises(ValueError, match="name"):
        VOCAB.special_id("<mask>")
    with pytest.raises(ValueError, match="min_length"):
        induction_task(2, vocab_size=64, min_length=10, max_length=5)


# ------------------------------------------------------------------------------------------ training


def tiny_gpt() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=VOCAB.size, max_seq_len=16, embed_dim=32, num_heads=2, ffn_dim=64))


def copy_batches(g: torch.Generator):
    return copy_task(32, 5, VOCAB, generator=g)


def test_training_learns_the_copy_task():
    model = tiny_gpt()
    result = train(model, copy_batches, steps=60, lr=1e-2, progress=False)
    assert isinstance(result, TrainResult) and result.steps == 60 and len(result.losses) == 60
    assert result.seconds > 0
    guessing = torch.log(torch.tensor(float(VOCAB.num_symbols))).item()  # 2.30: a uniform guess over symbols
    assert result.losses[0] > 0.8 * guessing
    assert result.final_loss() < 0.5 * guessing, result.final_loss()
    assert not model.training  # left in eval mode
    # Check on fresh data, with the loss computed by hand rather than by the loop.
    batch = copy_batches(torch.Generator().manual_seed(99))
    with torch.no_grad():
        assert causal_lm_loss(model(batch.input_ids), batch.labels) < 0.5 * guessing


def test_training_is_reproducible_with_a_seed():
    runs = [train(tiny_gpt(), copy_batches, steps=5, seed=3, progress=False).losses for _ in range(2)]
    assert runs[0] == runs[1]
    assert train(tiny_gpt(), copy_batches, steps=5, seed=4, progress=False).losses != runs[0]


def test_progress_bar_is_optional(capsys):
    train(tiny_gpt(), copy_batches, steps=2, progress=False)
    captured = capsys.readouterr()
    assert captured.out == captured.err == ""
    train(tiny_gpt(), copy_batches, steps=2, progress=True)
    assert "training" in capsys.readouterr().err


def test_custom_loss_fn_is_used():
    calls = []

    def loss_fn(model, batch):
        calls.append(batch.input_ids.shape)
        return lm_loss(model, batch)

    train(tiny_gpt(), copy_batches, steps=3, progress=False, loss_fn=loss_fn)
    assert calls == [(32, 12)] * 3


def test_on_step_sees_every_step_without_changing_the_run():
    plain = train(tiny_gpt(), copy_batches, steps=4, seed=3, progress=False)
    seen = []

    def probe(step, model):
        seen.append((step, model.training, torch.is_grad_enabled()))
        model(copy_batches(torch.Generator().manual_seed(99)).input_ids)  # a measurement on other data

    probed = train(tiny_gpt(), copy_batches, steps=4, seed=3, progress=False, on_step=probe)
    assert seen == [(step, True, False) for step in range(1, 5)]  # after each step, training mode, no graph
    assert probed.losses == plain.losses


def test_train_errors():
    with pytest.raises(ValueError, match="steps"):
        train(tiny_gpt(), copy_batches, steps=0)
    with pytest.raises(ValueError, match="lr"):
        train(tiny_gpt(), copy_batches, steps=1, lr=0.0)
    with pytest.raises(ValueError, match="weight_decay"):
        train(tiny_gpt(), copy_batches, steps=1, weight_decay=-1.0)


def _words(sentence: str) -> set[str]:
    return set(re.findall(r"[a-z']+", sentence.lower()))


def test_paraphrase_triples_are_distinct_sentences_whose_distractor_shares_words():
    triples = paraphrase_triples()
    assert 40 <= len(triples) <= 60
    for triple in triples:
        assert isinstance(triple, tuple) and len(triple) == 3, triple
        assert all(isinstance(s, str) and s[:1].isupper() and s.endswith(".") for s in triple), triple
    sentences = [s for triple in triples for s in triple]
    assert len(set(sentences)) == len(sentences), "a sentence appears twice"
    more = 0
    for anchor, paraphrase, distractor in triples:
        shared = _words(anchor) & _words(distractor)
        assert len(shared) >= 2 and _words(distractor) != _words(anchor), (anchor, distractor)
        # the design: counting shared words never favours the paraphrase
        assert len(shared) >= len(_words(anchor) & _words(paraphrase)), (anchor, paraphrase, distractor)
        more += len(shared) > len(_words(anchor) & _words(paraphrase))
    assert more > len(triples) // 2, f"only {more} distractors share more words than their paraphrase"
    assert paraphrase_triples() is triples  # one constant, not rebuilt per call


def test_the_learning_rate_warms_up_linearly_then_stays_or_follows_a_half_cosine_to_zero() -> None:
    from attn_edu.train import lr_factor

    steps, warmup = 50, 10
    constant = [lr_factor(s, steps, warmup_steps=warmup) for s in range(steps)]
    cosine = [lr_factor(s, steps, warmup_steps=warmup, schedule="cosine") for s in range(steps)]
    assert constant[:warmup] == cosine[:warmup] == [(s + 1) / warmup for s in range(warmup)]
    assert constant[warmup:] == [1.0] * (steps - warmup)
    assert cosine[warmup] == 1.0 and cosine[-1] == pytest.approx(0.0, abs=1e-12)
    assert all(a > b for a, b in zip(cosine[warmup:], cosine[warmup + 1 :]))  # strictly decreasing
    assert cosine[warmup + (steps - 1 - warmup) // 2] == pytest.approx(0.5, abs=0.05)  # half way down


def test_train_refuses_a_warm_up_as_long_as_the_run_and_an_unknown_schedule() -> None:
    model = torch.nn.Linear(2, 2)
    batches = lambda g: None  # noqa: E731  (never called)
    with pytest.raises(ValueError, match="warmup_steps"):
        train(model, batches, steps=5, warmup_steps=5, progress=False)
    with pytest.raises(ValueError, match="schedule"):
        train(model, batches, steps=5, schedule="linear", progress=False)


def test_steepest_fall_finds_the_drop_of_the_running_mean_a_brute_force_search_finds() -> None:
    g = torch.Generator().manual_seed(0)
    plateau, drop, after = (
        4.0 + 0.1 * torch.randn(60, generator=g),
        torch.linspace(4.0, 0.5, 15),
        torch.full((45,), 0.5),
    )
    losses = torch.cat([plateau, drop, after]).tolist()  # a plateau, a fall over 15 steps, then flat
    step, fall = steepest_fall(losses, window=10, span=20)

    def mean_at(s: int) -> float:  # the mean of steps s - 9 .. s, counted from 1
        return sum(losses[s - 10 : s]) / 10

    best = max(range(10, len(losses) - 20 + 1), key=lambda s: mean_at(s) - mean_at(s + 20))
    assert step == best and fall == pytest.approx(mean_at(best) - mean_at(best + 20))
    assert 55 <= step <= 65 and 3.0 < fall < 3.6  # it lands on the fall, which drops by 3.5 in all
    assert steepest_fall([2.0] * 40, window=5, span=5) == (5, 0.0)  # flat: no fall, the first step


def test_steepest_fall_refuses_a_curve_shorter_than_its_window_and_span() -> None:
    with pytest.raises(ValueError, match="losses: expected at least window \\+ span = 30 values, got 29"):
        steepest_fall([1.0] * 29, window=10, span=20)
    with pytest.raises(ValueError, match="span"):
        steepest_fall([1.0] * 50, span=0)
