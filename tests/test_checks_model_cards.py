"""Checks of notebook 14's exercises (`attn_edu.grading.checks.model_cards`): independent right answers pass, each
known slip is named, and the cases cover every spelling.

That the reference passes, a stub is not attempted and each known mistake is named on the notebook's and the
grader's inputs is tested for every exercise in ``tests/test_checks_registry.py``.
"""

from __future__ import annotations

import json

import pytest
import torch

from attn_edu.grading import Status, check
from attn_edu.grading.exercise import make_cases
from attn_edu.grading.registry import get_exercise

transformers = pytest.importorskip("transformers")

SEEDS = range(6)
CODES = {"full_attention": 0, "sliding_attention": 1, "linear_attention": 2}


def kinds_by_transformers(config_json):
    """14.1 through transformers' own config classes, which turn each spelling into ``layer_types``."""
    fields = json.loads(config_json)
    model_type = fields.pop("model_type")
    if model_type == "deepseek_v32":
        return torch.full((fields["num_hidden_layers"],), 3)
    classes = {"gpt_oss": "GptOssConfig", "qwen3_next": "Qwen3NextConfig", "gemma3_text": "Gemma3TextConfig"}
    classes["kimi_linear"] = "KimiLinearConfig"
    types = getattr(transformers, classes[model_type])(**fields).layer_types
    codes = {**CODES, "full_attention": 3} if model_type == "kimi_linear" else CODES  # Kimi attends with MLA
    return torch.tensor([codes[t] for t in types])


def size_by_token_layers(config_json, seq_len, dtype_bytes):
    """14.2 another way: count what one token adds to each layer, token by token, then the fixed states."""
    config = json.loads(config_json)
    kinds = kinds_by_transformers(config_json).tolist()
    numbers = 0
    for t in range(seq_len):
        for kind in kinds:
            if kind == 0 or (kind == 1 and t >= seq_len - config.get("sliding_window", 0)):
                numbers += 2 * config["num_key_value_heads"] * config["head_dim"]  # this token's K and V
            elif kind == 3:
                numbers += (
                    config["kv_lora_rank"] + config["qk_rope_head_dim"] + config.get("index_head_dim", 0)
                )
    for kind in kinds:
        if kind == 2 and seq_len > 0:
            heads_v, dk, dv = (
                config[f"linear_{k}"] for k in ("num_value_heads", "key_head_dim", "value_head_dim")
            )
            channels = 2 * config["linear_num_key_heads"] * dk + heads_v * dv
            numbers += heads_v * dk * dv + channels * (config["linear_conv_kernel_dim"] - 1)
    return torch.tensor(numbers * dtype_bytes)


def test_the_config_classes_of_transformers_pass_14_1() -> None:
    assert check("14.1", kinds_by_transformers).status is Status.PASS


def test_counting_token_by_token_passes_14_2() -> None:
    assert check("14.2", size_by_token_layers).status is Status.PASS


def test_the_cases_cover_every_spelling_and_both_sides_of_a_window() -> None:
    for seed in SEEDS:
        kinds_cases = make_cases(get_exercise("14.1"), seed)
        types = {json.loads(c.args[0])["model_type"] for c in kinds_cases}
        assert types == {"gpt_oss", "qwen3_next", "gemma3_text", "kimi_linear", "deepseek_v32"}
        below = above = 0
        for case in make_cases(get_exercise("14.2"), seed):
            config, seq_len = json.loads(case.args[0]), case.args[1]
            if "sliding_window" in config:
                below += seq_len < config["sliding_window"]
                above += seq_len > config["sliding_window"]
        assert below and above


def test_a_zero_based_reading_of_kimi_is_named() -> None:
    def zero_based(config_json):
        config = json.loads(config_json)
        kinds = kinds_by_transformers(config_json)
        if config["model_type"] == "kimi_linear":
            kinds = torch.full_like(kinds, 2)
            for number in config["linear_attn_config"]["full_attn_layers"]:
                kinds[number] = 3  # an IndexError on Kimi Linear's own list, which ends at its last layer
        return kinds

    result = check("14.1", zero_based)
    assert result.status is Status.FAIL and "count from 1" in result.hint, result
