"""Reading a 2026 model from its published configuration: which attention each layer runs, and what it keeps.

A model card and its ``config.json`` name the attention in the model's own fields: gpt-oss lists ``layer_types``,
Qwen3-Next gives a ``full_attention_interval``, Gemma 3 a ``sliding_window_pattern``, Kimi Linear the 1-based
numbers of its ``kda_layers`` and ``full_attn_layers``, DeepSeek-V3.2 a latent rank and an indexer. This module
reads each of those spellings into the course's four kinds of layer, and counts what each layer keeps while a
sequence is decoded:

==========  =====================================================  ============================================
kind        what the layer keeps for one sequence of T tokens       taught in
==========  =====================================================  ============================================
full        K and V of every token: ``2 · H_kv · D · T`` numbers     notebooks 05 (GQA) and 10 (the cache)
sliding     K and V of the last W tokens: ``2 · H_kv · D · min(T, W)``  notebooks 04, 10 and 11 (the window)
mla         one latent and one rotary key a token, plus the indexer's  notebook 10 (MLA), notebook 11 (selection)
            key where the model selects keys: ``(d_c + d_R + d_I) · T``
linear      a state of ``H · Dk · Dv`` numbers and the short           notebook 11 (the delta rule)
            convolution's last ``K - 1`` inputs, whatever T is
==========  =====================================================  ============================================

:data:`PUBLISHED` holds five 2025 models' published configurations, and Llama-3-8B's as the 2024 baseline, the
fields that matter here spelled as each model's ``config.json`` spells them, with the sources they come from. :func:`layer_kinds` reads a configuration,
:func:`layer_cache_bytes` and :func:`cache_bytes` count, :func:`cache_table` compares the five at a length.
Every count assumes one number format for all (``dtype_bytes``; 2 for bfloat16): a serving engine may store some
of it in 8 bits (DeepSeek-V3.2's indexer keys are FP8 in its own inference code), which the table does not.

Example:
    >>> layer_kinds(PUBLISHED["Qwen3-Next-80B-A3B"].config)[:4]
    ['linear', 'linear', 'linear', 'full']
    >>> cache_bytes(PUBLISHED["gpt-oss-20b"].config, 131072) / 2**30  # GiB at 128k tokens, bfloat16
    3.0029296875
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from attn_edu._validate import check_positive_int

# The course's kinds of layer; exercise 14.1 codes them 0, 1, 2, 3.
KINDS = ("full", "sliding", "linear", "mla")


@dataclass(frozen=True)
class Published:
    """One model's published configuration (the attention's fields, spelled as its ``config.json`` spells
    them) and where each number comes from."""

    config: dict[str, Any]
    sources: tuple[str, ...]
    choices: tuple[tuple[str, str], ...] = ()  # (the attention choice, the notebook that teaches it)


def _alternating(n: int) -> list[str]:
    return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]


PUBLISHED: dict[str, Published] = {
    "gpt-oss-20b": Published(
        {
            "model_type": "gpt_oss",
            "num_hidden_layers": 24,
            "layer_types": _alternating(24),  # the file lists all 24: sliding, full, sliding, ...
            "num_attention_heads": 64,
            "num_key_value_heads": 8,
            "head_dim": 64,
            "sliding_window": 128,
            "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096},
            "num_local_experts": 32,
            "num_experts_per_tok": 4,
        },
        (
            "https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json",
            "OpenAI, gpt-oss-120b & gpt-oss-20b Model Card (2025), arXiv:2508.10925, section 2.1",
        ),
        (
            ("grouped-query attention, 64 query / 8 KV heads", "05"),
            ("a 128-token sliding window in every other layer", "04, 11"),
            ("a learned sink logit per head", "08, 12"),
            ("RoPE stretched by YaRN, x32 over 4,096", "07"),
            ("a mixture of 32 experts, 4 per token", "11"),
        ),
    ),
    "Qwen3-Next-80B-A3B": Published(
        {
            "model_type": "qwen3_next",
            "num_hidden_layers": 48,
            "full_attention_interval": 4,  # layers 4, 8, ..., 48 (counting from 1) attend; the rest are linear
            "num_attention_heads": 16,
            "num_key_value_heads": 2,
            "head_dim": 256,
            "partial_rotary_factor": 0.25,
            "linear_num_key_heads": 16,
            "linear_num_value_heads": 32,
            "linear_key_head_dim": 128,
            "linear_value_head_dim": 128,
            "linear_conv_kernel_dim": 4,
            "num_experts": 512,
            "num_experts_per_tok": 10,
        },
        (
            "https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct/blob/main/config.json",
            "Qwen Team, Qwen3-Next model card (2025), https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct",
        ),
        (
            ("Gated DeltaNet in 3 of every 4 layers", "11"),
            ("gated attention (a sigmoid gate on each head's output)", "08"),
            ("grouped-query attention, 16 query / 2 KV heads of 256", "05"),
            ("QK-norm (zero-centred RMSNorm)", "03, 08"),
            ("RoPE on a quarter of each head", "07"),
            ("512 experts, 10 per token, and a shared expert", "11"),
        ),
    ),
    "DeepSeek-V3.2": Published(
        {
            "model_type": "deepseek_v32",
            "num_hidden_layers": 61,
            "num_attention_heads": 128,
            "q_lora_rank": 1536,
            "kv_lora_rank": 512,
            "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64,
            "v_head_dim": 128,
            "index_n_heads": 64,
            "index_head_dim": 128,
            "index_topk": 2048,
            "n_routed_experts": 256,
            "num_experts_per_tok": 8,
        },
        (
            "https://huggingface.co/deepseek-ai/DeepSeek-V3.2-Exp/blob/main/config.json",
            "DeepSeek-AI, DeepSeek-V3.2-Exp: Boosting Long-Context Efficiency with DeepSeek Sparse Attention (2025)",
        ),
        (
            ("multi-head latent attention: a 512 latent + 64 rotary key cached", "10"),
            ("DeepSeek Sparse Attention: an indexer picks 2,048 keys a query", "11"),
            ("RoPE on a 64-wide slice only (decoupled)", "07, 10"),
            ("256 experts, 8 per token, and a shared expert", "11"),
        ),
    ),
    "Gemma-3-27B": Published(
        {
            "model_type": "gemma3_text",
            "num_hidden_layers": 62,
            "sliding_window_pattern": 6,  # five sliding layers, then one global
            "num_attention_heads": 32,
            "num_key_value_heads": 16,
            "head_dim": 128,
            "sliding_window": 1024,
        },
        (
            "https://huggingface.co/google/gemma-3-27b-it/blob/main/config.json",
            "Gemma Team, Gemma 3 Technical Report (2025), arXiv:2503.19786, section 2.1 (5 local : 1 global, "
            "local span 1024)",
        ),
        (
            ("five 1,024-token sliding layers to each global layer", "04, 11"),
            ("grouped-query attention, 32 query / 16 KV heads", "05"),
            ("QK-norm in place of soft-capping", "03"),
            ("RoPE base 10k on local layers, 1M on global ones", "07"),
        ),
    ),
    "Kimi-Linear-48B-A3B": Published(
        {
            "model_type": "kimi_linear",
            "num_hidden_layers": 27,
            "num_attention_heads": 32,
            "kv_lora_rank": 512,
            "qk_rope_head_dim": 64,
            "linear_attn_config": {
                "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26],
                "full_attn_layers": [4, 8, 12, 16, 20, 24, 27],  # counted from 1
                "num_heads": 32,
                "head_dim": 128,
                "short_conv_kernel_size": 4,
            },
            "num_experts": 256,
            "num_experts_per_tok": 8,
        },
        (
            "https://huggingface.co/moonshotai/Kimi-Linear-48B-A3B-Instruct/blob/main/config.json",
            "Kimi Team, Kimi Linear: An Expressive, Efficient Attention Architecture (2025), arXiv:2510.26692",
        ),
        (
            ("Kimi Delta Attention (a gated delta rule) in 3 of every 4 layers", "11"),
            ("multi-head latent attention in the others, with no position encoding", "06, 10"),
            ("256 experts, 8 per token, and a shared expert", "11"),
        ),
    ),
    # the 2024 baseline, notebook 10's example: every layer full attention
    "Llama-3-8B (2024)": Published(
        {
            "model_type": "llama",
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,  # the file gives hidden_size 4096 / 32 heads
        },
        ("https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json",),
        (("grouped-query attention, 32 query / 8 KV heads, in every layer", "05, 10"),),
    ),
}


def _config(config: Mapping[str, Any] | str) -> Mapping[str, Any]:
    """A configuration as a mapping: ``config.json``'s text is parsed, a mapping is taken as it is."""
    if isinstance(config, str):
        config = json.loads(config)
    if not isinstance(config, Mapping):
        raise TypeError(f"config: expected a mapping or a config.json's text, got {type(config).__name__}")
    return config


def _field(config: Mapping[str, Any], name: str) -> Any:
    if name not in config:
        kind = config.get("model_type", "?")
        raise KeyError(f"config: a {kind} configuration needs the field {name!r}; it has {sorted(config)}")
    return config[name]


def _from_types(types: list[str]) -> list[str]:
    names = {"full_attention": "full", "sliding_attention": "sliding", "linear_attention": "linear"}
    unknown = sorted(set(types) - set(names))
    if unknown:
        raise ValueError(f"config: layer_types holds {unknown}; known: {sorted(names)}")
    return [names[t] for t in types]


def layer_kinds(config: Mapping[str, Any] | str) -> list[str]:
    """Each layer's kind (:data:`KINDS`), read from a configuration as its ``config.json`` spells it.

    Known spellings (``model_type``): ``gpt_oss`` (a ``layer_types`` list), ``qwen3_next`` (layer ``i`` attends
    when ``(i + 1) % full_attention_interval == 0``, counting from 0), ``gemma3_text`` (layer ``i`` is global
    when ``(i + 1) % sliding_window_pattern == 0``), ``kimi_linear`` (1-based layer numbers), ``deepseek_v32``
    (every layer MLA) and ``llama`` (every layer full). Any of them that lists ``layer_types`` is read from that
    list.
    """
    config = _config(config)
    model_type = _field(config, "model_type")
    n = check_positive_int("num_hidden_layers", _field(config, "num_hidden_layers"))
    if model_type == "deepseek_v32":
        return ["mla"] * n
    if model_type == "llama":
        return ["full"] * n
    if model_type == "kimi_linear":
        linear = _field(config, "linear_attn_config")
        kinds = [None] * n
        for kind, key in (("mla", "full_attn_layers"), ("linear", "kda_layers")):
            for number in _field(linear, key):
                if not 1 <= number <= n:
                    raise ValueError(f"config: {key} numbers layers from 1 to {n}, got {number}")
                kinds[number - 1] = kind
        missing = [i + 1 for i, kind in enumerate(kinds) if kind is None]
        if missing:
            raise ValueError(
                f"config: layers {missing} (from 1) are in neither kda_layers nor full_attn_layers"
            )
        return kinds
    if config.get("layer_types") is not None:
        kinds = _from_types(list(config["layer_types"]))
        if len(kinds) != n:
            raise ValueError(f"config: layer_types lists {len(kinds)} layers, num_hidden_layers is {n}")
        return kinds
    if model_type == "qwen3_next":
        every = check_positive_int("full_attention_interval", _field(config, "full_attention_interval"))
        return ["full" if (i + 1) % every == 0 else "linear" for i in range(n)]
    if model_type == "gemma3_text":
        every = check_positive_int("sliding_window_pattern", _field(config, "sliding_window_pattern"))
        return ["full" if (i + 1) % every == 0 else "sliding" for i in range(n)]
    known = "gpt_oss, qwen3_next, gemma3_text, kimi_linear, deepseek_v32, llama"
    raise ValueError(f"config: model_type {model_type!r} is not one this reader knows ({known})")


def _linear_sizes(config: Mapping[str, Any]) -> tuple[int, int]:
    """``(state numbers, convolution channels × (K - 1))`` of one linear layer."""
    if config["model_type"] == "kimi_linear":
        linear = config["linear_attn_config"]
        H, D, K = (_field(linear, k) for k in ("num_heads", "head_dim", "short_conv_kernel_size"))
        return H * D * D, 3 * H * D * (K - 1)  # KDA: q, k and v each pass their own short convolution
    H_k, H_v, D_k, D_v, K = (
        _field(config, k)
        for k in (
            "linear_num_key_heads",
            "linear_num_value_heads",
            "linear_key_head_dim",
            "linear_value_head_dim",
            "linear_conv_kernel_dim",
        )
    )
    return H_v * D_k * D_v, (2 * H_k * D_k + H_v * D_v) * (K - 1)  # q and k at H_k heads, v at H_v


def layer_cache_bytes(config: Mapping[str, Any] | str, seq_len: int, *, dtype_bytes: int = 2) -> list[int]:
    """Bytes each layer keeps for one sequence of ``seq_len`` tokens (the table in the module's docstring)."""
    config = _config(config)
    if not isinstance(seq_len, int) or isinstance(seq_len, bool) or seq_len < 0:
        raise ValueError(f"seq_len: expected an int >= 0, got {seq_len!r}")
    check_positive_int("dtype_bytes", dtype_bytes)
    kinds = layer_kinds(config)
    sizes = []
    for kind in kinds:
        if seq_len == 0:
            numbers = 0
        elif kind == "mla":
            per_token = _field(config, "kv_lora_rank") + _field(config, "qk_rope_head_dim")
            per_token += config.get("index_head_dim", 0)  # the indexer's key, where the model selects keys
            numbers = per_token * seq_len
        elif kind == "linear":
            numbers = sum(_linear_sizes(config))
        else:
            H_kv, D = _field(config, "num_key_value_heads"), _field(config, "head_dim")
            kept = seq_len if kind == "full" else min(seq_len, _field(config, "sliding_window"))
            numbers = 2 * H_kv * D * kept
        sizes.append(numbers * dtype_bytes)
    return sizes


def cache_bytes(
    config: Mapping[str, Any] | str, seq_len: int, *, batch_size: int = 1, dtype_bytes: int = 2
) -> int:
    """Bytes the whole model keeps while decoding ``batch_size`` sequences of ``seq_len`` tokens."""
    return check_positive_int("batch_size", batch_size) * sum(
        layer_cache_bytes(config, seq_len, dtype_bytes=dtype_bytes)
    )


@dataclass(frozen=True)
class CacheRow:
    """One model's line of :func:`cache_table`."""

    model: str
    layers: str  # e.g. "12 full + 12 sliding"
    bytes_per_token: int  # what one more token adds, past every window
    fixed_bytes: int  # what does not grow: windows full, linear states
    total_bytes: int  # at the table's length


def cache_table(seq_len: int = 131072, *, dtype_bytes: int = 2) -> list[CacheRow]:
    """The published models side by side at ``seq_len`` tokens (default 128k), one sequence."""
    rows = []
    for name, published in PUBLISHED.items():
        kinds = layer_kinds(published.config)
        counts = {kind: kinds.count(kind) for kind in KINDS if kind in kinds}
        total = cache_bytes(published.config, seq_len, dtype_bytes=dtype_bytes)
        growth = cache_bytes(published.config, seq_len + 1, dtype_bytes=dtype_bytes) - total
        layers = " + ".join(f"{count} {kind}" for kind, count in counts.items())
        rows.append(CacheRow(name, layers, growth, total - growth * seq_len, total))
    return rows


def tiny_twins(model_type: str, *, seed: int = 0) -> tuple[Any, Any]:
    """A tiny transformers model of the family (4 layers, width 64, the family's layout: gpt-oss alternating a
    window of 8 with full attention, Qwen3-Next three Gated DeltaNet layers to one attention layer) with random
    weights, and the course's model built from it by ``from_hf``: ``(hf_model, ours)``. Weights are drawn with a
    standard deviation of 0.2 (transformers' 0.02 leaves the logits near 0, where any two models agree).
    """
    import torch
    import transformers

    from attn_edu.models import GptOss, Qwen3Next

    transformers.logging.set_verbosity_error()  # not the notes that its kernels fall back to PyTorch on a CPU
    shared = dict(
        vocab_size=64,
        hidden_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_experts_per_tok=2,
        initializer_range=0.2,
    )
    torch.manual_seed(seed)
    if model_type == "gpt_oss":
        config = transformers.GptOssConfig(
            **shared, intermediate_size=48, num_local_experts=4, sliding_window=8
        )
        hf = transformers.GptOssForCausalLM(config).eval()
        return hf, GptOss.from_hf(hf).eval()
    if model_type == "qwen3_next":
        config = transformers.Qwen3NextConfig(
            **shared,
            intermediate_size=96,
            num_experts=4,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=48,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            linear_key_head_dim=16,
            linear_value_head_dim=8,
        )
        hf = transformers.Qwen3NextForCausalLM(config).eval()
        return hf, Qwen3Next.from_hf(hf).eval()
    raise ValueError(f"model_type: expected 'gpt_oss' or 'qwen3_next', got {model_type!r}")
