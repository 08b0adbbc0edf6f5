"""Checks for notebook 14's exercises: read a configuration as its ``config.json`` spells it.

14.1 lists each layer's kind, coded as :data:`attn_edu.model_cards.KINDS` orders them (0 full, 1 sliding,
2 linear, 3 MLA), from the text of a configuration in any of the five spellings notebook 14 reads; graded against
:func:`attn_edu.model_cards.layer_kinds`, which ``tests/test_model_cards.py`` holds to transformers' own config
classes. Its slips: an interval or a pattern counted from layer 0 (Qwen3-Next, Gemma 3), Kimi Linear's 1-based layer
numbers read as 0-based, its attention layers called full rather than MLA, DeepSeek's MLA called full, gpt-oss's
``layer_types`` ignored.
14.2 counts the bytes a model keeps for one sequence, graded against :func:`attn_edu.model_cards.cache_bytes`
(which the same tests hold to the bytes the course's caches hold). Its slips: keys without values, no window, every
layer windowed, the query heads for the key/value heads, the linear layers' convolution forgotten, their state
counted per token, the indexer's keys forgotten, numbers for bytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import torch

from attn_edu.grading.exercise import Case, Exercise, Mistake
from attn_edu.model_cards import KINDS, cache_bytes, layer_kinds


def _randint(g: torch.Generator, low: int, high: int) -> int:
    return int(torch.randint(low, high + 1, (1,), generator=g))


def _text(config: dict[str, Any]) -> str:
    return json.dumps(config, separators=(",", ":"))


def _codes(kinds: list[str]) -> torch.Tensor:
    return torch.tensor([KINDS.index(kind) for kind in kinds], dtype=torch.int64)  # (L,)


# ---------------------------------------------------------------------------------------------------------
# Configurations in the five spellings, small enough to read in a message


def _gpt_oss(g: torch.Generator, n: int) -> dict[str, Any]:
    types = [
        "sliding_attention" if bit else "full_attention" for bit in torch.randint(0, 2, (n,), generator=g)
    ]
    return {
        "model_type": "gpt_oss",
        "num_hidden_layers": n,
        "layer_types": types,
        "num_attention_heads": 8,
        "num_key_value_heads": _randint(g, 1, 4),
        "head_dim": 4 * _randint(g, 2, 8),
        "sliding_window": _randint(g, 4, 12),
    }


def _qwen3_next(g: torch.Generator, n: int, every: int) -> dict[str, Any]:
    return {
        "model_type": "qwen3_next",
        "num_hidden_layers": n,
        "full_attention_interval": every,
        "num_attention_heads": 8,
        "num_key_value_heads": _randint(g, 1, 2),
        "head_dim": 8 * _randint(g, 1, 4),
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 2 * _randint(g, 1, 3),
        "linear_key_head_dim": 4 * _randint(g, 1, 3),
        "linear_value_head_dim": 4 * _randint(g, 1, 3),
        "linear_conv_kernel_dim": _randint(g, 2, 4),
    }


def _gemma3(g: torch.Generator, n: int, pattern: int) -> dict[str, Any]:
    return {
        "model_type": "gemma3_text",
        "num_hidden_layers": n,
        "sliding_window_pattern": pattern,
        "num_attention_heads": 8,
        "num_key_value_heads": _randint(g, 1, 4),
        "head_dim": 8 * _randint(g, 1, 4),
        "sliding_window": _randint(g, 4, 16),
    }


def _kimi(g: torch.Generator, n: int, every: int, last_full: bool) -> dict[str, Any]:
    full = [i for i in range(1, n + 1) if (i % every == 0 and i < n) or (last_full and i == n)]
    return {
        "model_type": "kimi_linear",
        "num_hidden_layers": n,
        "num_attention_heads": 4,
        "kv_lora_rank": 16,
        "qk_rope_head_dim": 4,
        "linear_attn_config": {
            "kda_layers": [i for i in range(1, n + 1) if i not in full],
            "full_attn_layers": full,
            "num_heads": 2,
            "head_dim": 8,
            "short_conv_kernel_size": 4,
        },
    }


def _deepseek(g: torch.Generator, n: int) -> dict[str, Any]:
    return {
        "model_type": "deepseek_v32",
        "num_hidden_layers": n,
        "num_attention_heads": 8,
        "kv_lora_rank": 8 * _randint(g, 1, 4),
        "qk_rope_head_dim": 4 * _randint(g, 1, 2),
        "index_head_dim": 4 * _randint(g, 1, 4),
        "index_n_heads": 2,
        "index_topk": 16,
    }


# ---------------------------------------------------------------------------------------------------------
# 14.1 each layer's kind


def _kinds_cases(g: torch.Generator) -> list[Case]:
    configs = [
        _gpt_oss(g, _randint(g, 4, 9)),
        _qwen3_next(g, 8, 4),  # Qwen3-Next's own 3 : 1
        _qwen3_next(g, _randint(g, 5, 11), _randint(g, 2, 3)),
        _gemma3(g, 12, 6),  # Gemma 3's own 5 : 1
        _gemma3(g, _randint(g, 5, 11), _randint(g, 2, 4)),
        # Kimi Linear's own list ends with its last layer (27 of 27), where a 0-based reading raises IndexError;
        # here no list names the last layer, so that such a reading runs and its check can name the slip
        _kimi(g, 8, 4, last_full=False),
        _kimi(g, _randint(g, 7, 10), 3, last_full=False),
        _deepseek(g, _randint(g, 2, 6)),
    ]
    return [Case((_text(config),)) for config in configs]


def _kinds_reference(config_json: str) -> torch.Tensor:
    return _codes(layer_kinds(config_json))


def _kinds_variant(
    config_json: str,
    *,
    from_zero: bool = False,
    kimi_zero_based: bool = False,
    kimi_full: bool = False,
    deepseek_full: bool = False,
    types_ignored: bool = False,
) -> torch.Tensor:
    """The reading with one slip (the known mistakes below); every other spelling read as it should be."""
    config = json.loads(config_json)
    n, model_type = config["num_hidden_layers"], config["model_type"]
    kinds = layer_kinds(config)
    if from_zero and model_type in ("qwen3_next", "gemma3_text"):
        every = config.get("full_attention_interval") or config["sliding_window_pattern"]
        other = "linear" if model_type == "qwen3_next" else "sliding"
        kinds = ["full" if i % every == 0 else other for i in range(n)]
    if model_type == "kimi_linear" and (kimi_zero_based or kimi_full):
        full = config["linear_attn_config"]["full_attn_layers"]
        kinds = ["linear"] * n
        for number in full:
            kinds[number if kimi_zero_based else number - 1] = "full" if kimi_full else "mla"
    if deepseek_full and model_type == "deepseek_v32":
        kinds = ["full"] * n
    if types_ignored and model_type == "gpt_oss":
        kinds = ["full"] * n
    return _codes(kinds)


def _kinds_mistake(message: str, **slip: bool) -> Mistake:
    return Mistake(lambda config_json: _kinds_variant(config_json, **slip), message)


ATTENTION_KINDS = Exercise(
    exercise_id="14.1",
    title="each layer's kind (0 full, 1 sliding, 2 linear, 3 MLA) from the text of a config.json, shape (L,)",
    function_name="attention_kinds",
    arg_names=("config_json",),
    reference=_kinds_reference,
    make_cases=_kinds_cases,
    mistakes=(
        _kinds_mistake(
            "an interval or a pattern counted from layer 0: Qwen3-Next's full attention interval (4) and "
            "Gemma 3's sliding window pattern (6) end each group with its attention layer, so layer i "
            "(from 0) attends when i + 1 is a multiple of the interval, and layer 0 is linear (or "
            "sliding).",
            from_zero=True,
        ),
        _kinds_mistake(
            "Kimi Linear's kda_layers and full_attn_layers count from 1 (the checkpoint's own numbering): layer "
            "number k is index k - 1.",
            kimi_zero_based=True,
        ),
        _kinds_mistake(
            "Kimi Linear's full_attn_layers are multi-head latent attention (the fields kv_lora_rank and "
            "qk_rope_head_dim say so): code 3, not 0.",
            kimi_full=True,
        ),
        _kinds_mistake(
            "every DeepSeek-V3.2 layer is multi-head latent attention (kv_lora_rank), not full attention with "
            "its own heads' keys and values: code 3.",
            deepseek_full=True,
        ),
        _kinds_mistake(
            "gpt-oss lists each layer's kind in layer_types: read that list, 'sliding_attention' is code 1.",
            types_ignored=True,
        ),
    ),
    hints=(
        "json.loads the text, then branch on config['model_type']: each model spells its layout in its own field.",
        "gpt_oss: the layer_types list; qwen3_next: full_attention_interval; gemma3_text: sliding_window_pattern; "
        "kimi_linear: linear_attn_config's two lists of layer numbers; deepseek_v32: every layer is MLA.",
        "an interval of 4 makes layers 3, 7, 11, ... (from 0) attend: the last of each group of four. Kimi's "
        "numbers start at 1. Return torch.tensor(codes) of int64.",
    ),
    difficulty=3,
    minutes=40,
)


# ---------------------------------------------------------------------------------------------------------
# 14.2 the bytes a model keeps for one sequence


def _bytes_cases(g: torch.Generator) -> list[Case]:
    gpt, gemma = _gpt_oss(g, _randint(g, 4, 7)), _gemma3(g, 6, 3)
    window = gemma["sliding_window"]
    cases = [
        (gpt, _randint(g, 1, gpt["sliding_window"] - 1), 2),  # shorter than the window
        (gpt, gpt["sliding_window"] * 3 + 1, 2),  # past it
        (gemma, window, 4),  # exactly the window, float32
        (gemma, window + _randint(g, 1, 9), 2),
        (_qwen3_next(g, 8, 4), _randint(g, 5, 40), 2),
        (_qwen3_next(g, 6, 3), 1, 1),  # one token: the state is already whole
        (_deepseek(g, _randint(g, 2, 5)), _randint(g, 3, 30), 2),
    ]
    return [Case((_text(config), seq_len, dtype_bytes)) for config, seq_len, dtype_bytes in cases]


def _bytes_reference(config_json: str, seq_len: int, dtype_bytes: int) -> torch.Tensor:
    return torch.tensor(cache_bytes(config_json, seq_len, dtype_bytes=dtype_bytes), dtype=torch.int64)


def _bytes_variant(
    config_json: str,
    seq_len: int,
    dtype_bytes: int,
    *,
    kv: int = 2,
    window: Callable[[int, int, str], int] | None = None,
    heads: str = "num_key_value_heads",
    conv: bool = True,
    state_per_token: bool = False,
    indexer: bool = True,
    per_number: bool = False,
) -> torch.Tensor:
    """The count with one slip (the known mistakes below)."""
    config = json.loads(config_json)
    total = 0
    for kind in layer_kinds(config):
        if kind in ("full", "sliding"):
            kept = (window or (lambda T, W, k: T if k == "full" else min(T, W)))(
                seq_len, config.get("sliding_window", 0), kind
            )
            numbers = kv * config[heads] * config["head_dim"] * kept
        elif kind == "mla":
            per_token = config["kv_lora_rank"] + config["qk_rope_head_dim"]
            numbers = (per_token + (config.get("index_head_dim", 0) if indexer else 0)) * seq_len
        else:
            H_k, H_v = config["linear_num_key_heads"], config["linear_num_value_heads"]
            D_k, D_v, K = (
                config["linear_key_head_dim"],
                config["linear_value_head_dim"],
                config["linear_conv_kernel_dim"],
            )
            state = H_v * D_k * D_v * (seq_len if state_per_token else 1)
            numbers = state + ((2 * H_k * D_k + H_v * D_v) * (K - 1) if conv else 0)
        total += numbers * (1 if per_number else dtype_bytes)
    return torch.tensor(total, dtype=torch.int64)


def _bytes_mistake(message: str, **slip: Any) -> Mistake:
    return Mistake(lambda c, T, b: _bytes_variant(c, T, b, **slip), message)


CACHE_SIZE = Exercise(
    exercise_id="14.2",
    title="the bytes a model keeps while decoding one sequence of seq_len tokens, from the text of its config.json",
    function_name="cache_size",
    arg_names=("config_json", "seq_len", "dtype_bytes"),
    reference=_bytes_reference,
    make_cases=_bytes_cases,
    mistakes=(
        _bytes_mistake(
            "only the keys are counted: an attention layer caches K and V, two vectors of num_key_value_heads × "
            "head_dim numbers a token.",
            kv=1,
        ),
        _bytes_mistake(
            "the sliding layers keep every token: a layer with a window of W keeps only the last W tokens, "
            "min(seq_len, W) of them.",
            window=lambda T, W, kind: T,
        ),
        _bytes_mistake(
            "the full layers stop at the window too: only the sliding layers have one; a full layer keeps all "
            "seq_len tokens.",
            window=lambda T, W, kind: min(T, W),
        ),
        _bytes_mistake(
            "the query heads are counted: a grouped-query layer caches num_key_value_heads heads of K and V, "
            "shared by the query heads.",
            heads="num_attention_heads",
        ),
        _bytes_mistake(
            "the linear layers' short convolution is missing: each keeps its last K - 1 inputs, (2 · key heads · "
            "key dim + value heads · value dim) channels of them, beside the state.",
            conv=False,
        ),
        _bytes_mistake(
            "a linear layer's state is counted once per token: it is one (key dim × value dim) matrix per value "
            "head, whatever the length; reading a token updates it in place.",
            state_per_token=True,
        ),
        _bytes_mistake(
            "DeepSeek-V3.2's indexer keys are missing: besides its latent (kv_lora_rank) and rotary key "
            "(qk_rope_head_dim) each token keeps an index_head_dim key for the indexer that picks the keys.",
            indexer=False,
        ),
        _bytes_mistake(
            "that counts numbers, not bytes: multiply by dtype_bytes (2 for bfloat16, 4 for float32).",
            per_number=True,
        ),
    ),
    hints=(
        "find each layer's kind first (your attention_kinds from 14.1), then add up what each kind keeps.",
        "full: 2 · H_kv · D · T numbers; sliding: 2 · H_kv · D · min(T, W); MLA: (kv_lora_rank + qk_rope_head_dim "
        "+ index_head_dim) · T; linear: H_v · Dk · Dv + (2 · H_k · Dk + H_v · Dv) · (K - 1), whatever T is.",
        "sum over the layers, times dtype_bytes, and return torch.tensor(total) (an int64 scalar).",
    ),
    difficulty=3,
    minutes=45,
)


EXERCISES = (ATTENTION_KINDS, CACHE_SIZE)
