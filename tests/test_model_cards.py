"""attn_edu.model_cards: each layer's kind read as transformers reads the same configuration, and the bytes it
counts equal to what the course's own caches hold after a prompt, on tiny gpt-oss and Qwen3-Next models whose
configurations come from transformers (``hf.config.to_dict()``, a real ``config.json``'s fields)."""

from __future__ import annotations

import json

import pytest
import torch

from attn_edu.generation import new_cache
from attn_edu.model_cards import KINDS, PUBLISHED, cache_bytes, cache_table, layer_cache_bytes, layer_kinds

transformers = pytest.importorskip("transformers")

# transformers' config class for each published model that lists layer_types, and what it calls our kinds
HF_CLASSES = {
    "gpt-oss-20b": ("GptOssConfig", {}),
    "Qwen3-Next-80B-A3B": ("Qwen3NextConfig", {}),
    "Gemma-3-27B": ("Gemma3TextConfig", {}),
    "Kimi-Linear-48B-A3B": ("KimiLinearConfig", {"full_attention": "mla"}),  # its attention layers are MLA
}


@pytest.mark.parametrize("name", sorted(HF_CLASSES))
def test_layer_kinds_agree_with_transformers_config_classes(name):
    """transformers turns each model's own spelling (an interval, a pattern, 1-based lists) into ``layer_types``."""
    class_name, renamed = HF_CLASSES[name]
    fields = {k: v for k, v in PUBLISHED[name].config.items() if k != "model_type"}
    hf = getattr(transformers, class_name)(**fields)
    names = {"full_attention": "full", "sliding_attention": "sliding", "linear_attention": "linear"} | renamed
    assert layer_kinds(PUBLISHED[name].config) == [names[t] for t in hf.layer_types]


def test_the_published_counts():
    """The layer counts the model cards state, and the cache of a plain full-attention layer by hand."""
    counts = {row.model: row.layers for row in cache_table()}
    assert counts == {
        "gpt-oss-20b": "12 full + 12 sliding",
        "Qwen3-Next-80B-A3B": "12 full + 36 linear",
        "DeepSeek-V3.2": "61 mla",
        "Gemma-3-27B": "10 full + 52 sliding",
        "Kimi-Linear-48B-A3B": "20 linear + 7 mla",
        "Llama-3-8B (2024)": "32 full",
    }
    # gpt-oss-20b's full layers: K and V, 8 heads of 64, two bytes each, per token, twelve layers
    assert {row.model: row.bytes_per_token for row in cache_table()}["gpt-oss-20b"] == 12 * 2 * 8 * 64 * 2


def test_what_grows_and_what_does_not():
    """Sliding layers stop growing at the window, linear layers never grow, full and MLA layers grow by a token."""
    gemma = PUBLISHED["Gemma-3-27B"].config
    kinds = layer_kinds(gemma)
    at_window, past = layer_cache_bytes(gemma, 1024), layer_cache_bytes(gemma, 5000)
    for kind, a, b in zip(kinds, at_window, past, strict=True):
        assert (a == b) == (kind == "sliding")
    qwen = PUBLISHED["Qwen3-Next-80B-A3B"].config
    for kind, a, b in zip(
        layer_kinds(qwen), layer_cache_bytes(qwen, 1), layer_cache_bytes(qwen, 9), strict=True
    ):
        assert (a == b) == (kind == "linear") and (b == 9 * a) == (kind == "full")
    assert cache_bytes(PUBLISHED["DeepSeek-V3.2"].config, 0) == 0
    assert cache_bytes(qwen, 7, batch_size=3) == 3 * cache_bytes(qwen, 7)


def test_text_of_a_config_json_reads_as_its_mapping():
    config = PUBLISHED["Kimi-Linear-48B-A3B"].config
    assert layer_kinds(json.dumps(config)) == layer_kinds(config)


def _course_cache_bytes(hf_model, ours_from_hf, length: int) -> list[int]:
    ours = ours_from_hf(hf_model)
    cache = new_cache(ours)
    ids = torch.randint(
        0, hf_model.config.vocab_size, (1, length), generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        ours(ids, kv_cache=cache)
    return [layer.nbytes() for layer in cache.layers]


@pytest.mark.parametrize("length", [8, 24])
def test_counted_bytes_equal_the_course_caches_gpt_oss(length):
    """Sliding layers (window 8) at and past their window, full layers growing. (Below the window the course's
    rolling cache already holds its W slots, allocated at the first token; the count says what is kept.)"""
    from attn_edu.models import GptOss
    from tests.test_gpt_oss import hf_gpt_oss

    hf = hf_gpt_oss()
    held = _course_cache_bytes(hf, GptOss.from_hf, length)
    assert held == layer_cache_bytes(hf.config.to_dict(), length, dtype_bytes=4)  # float32
    assert layer_kinds(hf.config.to_dict()) == ["sliding", "full"] * 2


@pytest.mark.parametrize("length", [3, 20])
def test_counted_bytes_equal_the_course_caches_qwen3_next(length):
    """Gated DeltaNet layers: the state and the convolution's last K - 1 inputs; the attention layer grows."""
    from attn_edu.models import Qwen3Next
    from tests.test_qwen3_next import hf_qwen3_next

    hf = hf_qwen3_next()
    held = _course_cache_bytes(hf, Qwen3Next.from_hf, length)
    assert held == layer_cache_bytes(hf.config.to_dict(), length, dtype_bytes=4)
    assert layer_kinds(hf.config.to_dict()) == ["linear", "linear", "linear", "full"]


def test_bad_configurations_are_named():
    with pytest.raises(ValueError, match="model_type 'mistral'"):
        layer_kinds({"model_type": "mistral", "num_hidden_layers": 2})
    with pytest.raises(KeyError, match="full_attention_interval"):
        layer_kinds({"model_type": "qwen3_next", "num_hidden_layers": 4})
    kimi = json.loads(json.dumps(PUBLISHED["Kimi-Linear-48B-A3B"].config))
    kimi["linear_attn_config"]["kda_layers"].remove(1)
    with pytest.raises(ValueError, match=r"layers \[1\] \(from 1\)"):
        layer_kinds(kimi)
    kimi["linear_attn_config"]["kda_layers"].append(0)  # a 0-based number where 1-based ones belong
    with pytest.raises(ValueError, match="from 1 to 27, got 0"):
        layer_kinds(kimi)
    with pytest.raises(ValueError, match="layer_types lists 3 layers"):
        layer_kinds({"model_type": "gpt_oss", "num_hidden_layers": 2, "layer_types": ["full_attention"] * 3})
    with pytest.raises(ValueError, match="seq_len"):
        cache_bytes(PUBLISHED["gpt-oss-20b"].config, -1)
    assert set(KINDS) >= {k for p in PUBLISHED.values() for k in layer_kinds(p.config)}
