"""Fine-tuning MiniLM against frozen features: the word-order data are what they say, and the classifier
built from the encoder's top blocks computes exactly what the whole encoder computes before it trains."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch

from attn_edu.experiments import finetune
from attn_edu.pretrained import mean_pool
from tests.test_pretrained import needs_minilm


def test_documentation_sentences_are_plain_unique_and_of_the_stated_length() -> None:
    sentences = finetune.documentation_sentences()
    assert len(sentences) > 300 and len(set(sentences)) == len(sentences)
    for s in sentences:
        assert (
            finetune.MIN_WORDS <= len(s.split()) <= finetune.MAX_WORDS and s.endswith(".") and s[0].isupper()
        )


def test_shuffling_keeps_the_words_and_changes_their_order() -> None:
    rng = random.Random(3)
    for sentence in finetune.documentation_sentences()[:200]:
        shuffled = finetune.shuffle_words(sentence, rng)
        assert shuffled != sentence and shuffled.endswith(".")
        assert Counter(shuffled.removesuffix(".").split()) == Counter(sentence.removesuffix(".").split())
    with pytest.raises(ValueError, match="sentence"):
        finetune.shuffle_words("again again again.", rng)


def test_half_the_data_is_shuffled_and_the_test_sentences_are_not_trained_on() -> None:
    sentences = finetune.documentation_sentences()
    train, test = finetune.split_data(sentences, test_size=100)
    assert len(train.texts) + len(test.texts) == len(sentences) and len(test.texts) == 100
    for data in (train, test):
        assert abs(data.labels.float().mean().item() - 0.5) <= 0.01
        assert all(
            (text in sentences) == bool(label) for text, label in zip(data.texts, data.labels.tolist())
        )
    originals = lambda d: {t for t, l in zip(d.texts, d.labels.tolist()) if l}  # noqa: E731, E741
    assert not originals(train) & originals(test)
    with pytest.raises(ValueError, match="test_size"):
        finetune.split_data(sentences, test_size=len(sentences))


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("transformers")
    from attn_edu.pretrained import load_minilm

    return load_minilm()


@needs_minilm
def test_the_top_blocks_on_the_lower_states_compute_the_whole_encoder(minilm) -> None:
    model, tokenizer = minilm
    texts = ["Every name is bound to an object.", "The loop ends when the iterator is exhausted, as usual."]
    from attn_edu.pretrained import encode

    ids, mask = encode(tokenizer, texts)
    with torch.no_grad():
        whole = mean_pool(model(ids, attention_mask=mask), mask)  # (B, C)
    lower, lower_mask = finetune.encoder_states(model, tokenizer, texts, blocks=4)
    top, _ = finetune.encoder_states(model, tokenizer, texts)
    torch.testing.assert_close(
        finetune.continue_states(model, lower, lower_mask, first=4), top, atol=1e-5, rtol=1e-5
    )
    torch.testing.assert_close(mean_pool(top, lower_mask), whole, atol=1e-5, rtol=1e-5)
    classifier = finetune.SentenceClassifier(model, trained_blocks=2)
    frozen = finetune.SentenceClassifier(model, trained_blocks=0)
    frozen.head.load_state_dict(classifier.head.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(
            classifier(lower, lower_mask), frozen(top, lower_mask), atol=1e-4, rtol=1e-4
        )
    assert all(
        p.data_ptr() != q.data_ptr()
        for p, q in zip(classifier.blocks.parameters(), model.blocks[4:].parameters())
    )
    with pytest.raises(ValueError, match="trained_blocks"):
        finetune.SentenceClassifier(model, trained_blocks=7)
    with pytest.raises(ValueError, match="blocks"):
        finetune.encoder_states(model, tokenizer, texts, blocks=7)
    with pytest.raises(ValueError, match="hidden"):
        finetune.continue_states(model, lower[0], lower_mask, first=4)


def test_states_and_accuracy_in_chunks_of_similar_length_equal_one_padded_batch() -> None:
    """continue_states and accuracy run the rows in chunks of similar length, each cut to its longest text:
    at the real positions that is what the whole padded batch computes at once."""
    from attn_edu.masks import key_mask, padding_from_attention_mask
    from attn_edu.models import BERT, BertConfig

    torch.manual_seed(0)
    model = BERT(BertConfig(vocab_size=30, embed_dim=16, num_layers=2, num_heads=2, ffn_dim=32)).eval()
    B = 150  # more rows than one chunk
    lengths = torch.randint(1, 20, (B,))
    T = int(lengths.max())
    attention_mask = (torch.arange(T) < lengths[:, None]).long()  # (B, T), right padding
    hidden = torch.randn(B, T, 16)
    chunked = finetune.continue_states(model, hidden, attention_mask, first=0)
    whole = hidden
    mask = key_mask(padding_from_attention_mask(attention_mask, B, T))
    with torch.no_grad():
        for block in model.blocks:
            whole = block(whole, mask=mask)
    real = attention_mask.bool()
    torch.testing.assert_close(chunked[real], whole[real], atol=1e-5, rtol=1e-5)

    classifier = finetune.SentenceClassifier(model, trained_blocks=1)
    with torch.no_grad():
        logits = classifier(hidden, attention_mask)  # (B, 2) the whole padded batch at once
    predicted = logits.argmax(dim=-1)
    near_ties = int(((logits[:, 0] - logits[:, 1]).abs() < 1e-4).sum())  # may round either way
    assert finetune.accuracy(classifier, hidden, attention_mask, predicted) >= 1 - near_ties / B
    assert finetune.accuracy(classifier, hidden, attention_mask, 1 - predicted) <= near_ties / B


def test_the_shipped_record_holds_the_codes_settings() -> None:
    """Notebook 09 reads both classifiers from the record (finetune.measure); the seed-0 runs of the claim's seed
    sweep (tests/test_claims_finetune.py) measure them again and compare. Here: the settings are the code's."""
    record = finetune.read_record()
    settings = ("trained_blocks", "steps", "lr", "batch_size", "test_size")
    code = (finetune.TRAINED_BLOCKS, finetune.STEPS, finetune.LR, finetune.BATCH_SIZE, finetune.TEST_SIZE)
    assert tuple(record[k] for k in settings) == code
    frozen = (finetune.FROZEN_STEPS, finetune.FROZEN_LR, finetune.FROZEN_BATCH_SIZE)
    assert tuple(record["frozen"][k] for k in ("steps", "lr", "batch_size")) == frozen
    assert len(record["losses"]) == record["steps"] and len(record["frozen"]["losses"]) == frozen[0]


def test_the_command_reports_the_record(capsys) -> None:
    assert finetune.main(["report"]) == 0
    out = capsys.readouterr().out
    record = finetune.read_record()
    assert f"test accuracy {record['test_accuracy']:.3f}" in out
    assert f"frozen features: test accuracy {record['frozen']['test_accuracy']:.3f}" in out
