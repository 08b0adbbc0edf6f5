"""gpt-oss against transformers' ``GptOssForCausalLM`` (tiny random configs, float32, eager attention), cached
decoding against the full pass, and the errors a learner can run into."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from attn_edu.generation import generate, new_cache
from attn_edu.kv_cache import KVCache, KVCacheLayer, RollingKVCacheLayer
from attn_edu.models import GptOss, GptOssConfig, LlamaConfig
from attn_edu.moe import ClampedSwiGLU
from tests.helpers import randomize_

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

V, W, T = 50, 8, 24  # vocabulary, sliding window, and a length three windows long
TOL = {"atol": 1e-5, "rtol": 0.0}
SLIDING, FULL = "sliding_attention", "full_attention"
# gpt-oss's own RoPE: YaRN ×32 over 4096 trained tokens, unrounded ramp. Its frequencies do not depend on the
# length read, and with D = 16 the ramp runs from pair index 2.02 to 4.35 (rounded: 2 to 5).
YARN = {
    "rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
    "truncate": False, "original_max_position_embeddings": 4096,
}  # fmt: skip
CONFIGS = {
    "yarn-alternating": {},  # gpt-oss's own shape: sliding, full, sliding, full
    "plain-rope": {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
    "full-only": {"layer_types": [FULL] * 4},
    "full-first": {"layer_types": [FULL, SLIDING, SLIDING, FULL]},
}


def hf_gpt_oss(**overrides):
    """A 4-layer gpt-oss: C = 64, 4 query heads and 2 kv heads of D = 16, 4 experts (top 2) of width 48.

    ``randomize_`` adds noise to every parameter, so the sinks, the router's and the experts' biases are not
    0 and the norm gains not 1. ``swiglu_limit=1.0`` is far below gpt-oss's 7 so that the clamps act on
    these small activations (``test_each_gpt_oss_part_changes_the_logits`` checks that they do).
    """
    cfg = dict(
        vocab_size=V, hidden_size=64, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=W,
        max_position_embeddings=131072, swiglu_limit=1.0, rope_parameters=YARN,
    )  # fmt: skip
    config = transformers.GptOssConfig(**(cfg | overrides), attn_implementation="eager")
    torch.manual_seed(0)
    return randomize_(transformers.GptOssForCausalLM(config))


def ids(B: int, length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, V, (B, length), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def pair():
    hf = hf_gpt_oss()
    return hf, GptOss.from_hf(hf)


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


# ---------------------------------------------------------------------------------------------------
# Equivalence with transformers
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CONFIGS))
def test_gpt_oss_matches_gpt_oss_for_causal_lm(name):
    hf = hf_gpt_oss(**CONFIGS[name])
    ours = GptOss.from_hf(hf)
    assert ours.config.layer_types == tuple(hf.config.layer_types)
    assert [block.attn.window for block in ours.blocks] == [
        W if kind == SLIDING else None for kind in hf.config.layer_types
    ]
    x = ids(2, T)
    with torch.no_grad():
        expected = hf(x).logits
        got = ours(x)
    assert expected.abs().max() > 0.5  # logits large enough for 1e-5 to mean something
    assert max_diff(got, expected) <= TOL["atol"], f"max |Δ| = {max_diff(got, expected):.2e}"


def test_the_weights_land_where_gpt_oss_keeps_them(pair):
    hf, ours = pair
    layer, block = hf.model.layers[1], ours.blocks[1]
    assert (
        torch.equal(block.attn.attention_fn.sinks, layer.self_attn.sinks)
        and layer.self_attn.sinks.abs().min() > 0
    )
    assert torch.equal(block.attn.out_proj.bias, layer.self_attn.o_proj.bias)
    assert torch.equal(block.ffn.router.gate.bias, layer.mlp.router.bias)
    expert, fused = (
        block.ffn.experts[3],
        layer.mlp.experts.gate_up_proj[3],
    )  # (C, 2F): gate, up, gate, up, ...
    assert torch.equal(expert.gate_proj.weight.T, fused[:, 0::2]) and torch.equal(
        expert.up_proj.weight.T, fused[:, 1::2]
    )
    assert ours.lm_head.weight is not ours.token_embedding.weight  # untied, as in gpt-oss


def test_clamped_swiglu_equals_gpt_oss_experts_gate():
    """The unit on its own against ``GptOssExperts._apply_gate`` on a fused, interleaved (gate, up) tensor."""
    experts = hf_gpt_oss(swiglu_limit=7.0).model.layers[0].mlp.experts
    gate_up = 6 * torch.randn(5, 2 * 48, generator=torch.Generator().manual_seed(4))  # beyond ±7 too
    assert (gate_up.abs() > 7).any()
    expected = experts._apply_gate(gate_up)
    torch.testing.assert_close(ClampedSwiGLU(7.0, 1.702)(gate_up[:, ::2], gate_up[:, 1::2]), expected)


def test_each_gpt_oss_part_changes_the_logits(pair):
    """Each option the test models exercise matters: without it, the logits move far past the tolerance."""
    hf, ours = pair
    x = ids(2, T)
    with torch.no_grad():
        expected = hf(x).logits
        scaling = ours.config.rope_scaling
        variants = {
            "YaRN rounded (truncate=True)": replace(
                ours.config, rope_scaling=replace(scaling, truncate=True)
            ),
            "no YaRN": replace(ours.config, rope_scaling=None),
            "no sliding window": replace(ours.config, layer_types=(FULL,) * 4),
            "no clamp (limit 100)": replace(ours.config, swiglu_limit=100.0),
        }
        for what, config in variants.items():
            other = GptOss(config)
            other.load_state_dict(ours.state_dict())
            assert max_diff(other(x), expected) > 1e-3, what
        sinkless = GptOss(ours.config)
        sinkless.load_state_dict(ours.state_dict())
        for block in sinkless.blocks:
            block.attn.attention_fn.sinks.fill_(-1e4)  # a sink logit of −∞ is no sink
        assert max_diff(sinkless(x), expected) > 1e-3, "no sinks"
        # The window only hides keys W or more tokens back: the first W positions agree without it.
        full = GptOss(variants["no sliding window"])
        full.load_state_dict(ours.state_dict())
        torch.testing.assert_close(full(x)[:, :W], expected[:, :W], **TOL)


# ---------------------------------------------------------------------------------------------------
# KV cache: rolling layers for the sliding ones, and one token at a time equals the full pass
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("prompt", [1, 5, 11])
def test_cached_decoding_equals_the_full_pass(pair, prompt):
    """A prompt (shorter or longer than the window), then one token at a time, past three windows."""
    hf, ours = pair
    x = ids(2, T, seed=prompt)
    cache = new_cache(ours)
    assert [type(layer) for layer in cache.layers] == [RollingKVCacheLayer, KVCacheLayer] * 2
    with torch.no_grad():
        pieces = [ours(x[:, :prompt], kv_cache=cache)]
        pieces += [ours(x[:, t : t + 1], kv_cache=cache) for t in range(prompt, T)]
        stepwise, full = torch.cat(pieces, dim=1), ours(x)  # (B, T, V) each
    assert cache.seq_len == T and cache.layers[0].k.shape[2] == W  # the sliding layers held W tokens only
    assert cache.layers[1].k.shape[2] == T
    torch.testing.assert_close(stepwise, full, **TOL)
    torch.testing.assert_close(stepwise, hf(x).logits, **TOL)


def test_greedy_generation_equals_transformers_generate(pair):
    hf, ours = pair
    hf.generation_config.eos_token_id = None  # every step counts
    prompt = ids(1, 6, seed=7)
    with torch.no_grad():
        theirs = hf.generate(prompt, max_new_tokens=T - 6, do_sample=False, pad_token_id=0)
    assert torch.equal(generate(ours, prompt, T - 6), theirs)


# ---------------------------------------------------------------------------------------------------
# Configs and errors
# ---------------------------------------------------------------------------------------------------


def test_layer_types_default_to_alternating_and_to_full_without_a_window():
    assert GptOssConfig(num_layers=3, sliding_window=4).layer_types == (SLIDING, FULL, SLIDING)
    assert GptOssConfig(num_layers=2, sliding_window=None).layer_types == (FULL, FULL)
    config = GptOssConfig(num_layers=2, layer_types=[FULL, SLIDING])  # a list becomes a tuple
    assert config.layer_types == (FULL, SLIDING) and [config.window(i) for i in range(2)] == [None, 8]


def test_bad_input_gives_a_clear_error(pair):
    hf, ours = pair
    with pytest.raises(ValueError, match="layer_types: expected num_layers=2 entries, got 3"):
        GptOssConfig(num_layers=2, layer_types=(FULL, FULL, FULL))
    with pytest.raises(ValueError, match="layer_types: expected one of"):
        GptOssConfig(num_layers=2, layer_types=("sliding", FULL))
    with pytest.raises(ValueError, match="sliding_window: layer_types has sliding layers"):
        GptOssConfig(num_layers=2, sliding_window=None, layer_types=(SLIDING, FULL))
    with pytest.raises(ValueError, match="experts_per_token: expected at most num_experts=4"):
        GptOssConfig(experts_per_token=5)
    with pytest.raises(ValueError, match="limit: expected a finite number > 0"):
        GptOssConfig(swiglu_limit=0.0)
    with pytest.raises(ValueError, match="config: expected a GptOssConfig"):
        GptOss(LlamaConfig())
    with pytest.raises(ValueError, match="input_ids"):
        ours(torch.tensor([[1, V]]))  # V is one past the last token
    with pytest.raises(ValueError, match="kv_cache: expected 4 layers"):
        ours(ids(1, 3), kv_cache=KVCache(2))
    llama = transformers.LlamaForCausalLM(
        transformers.LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=40, num_hidden_layers=1,
                                 num_attention_heads=4, num_key_value_heads=2)
    )  # fmt: skip
    with pytest.raises(ValueError, match="GptOss.from_hf expects a GptOssForCausalLM"):
        GptOss.from_hf(llama)
    linear = {"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0}
    with pytest.raises(ValueError, match="only the default RoPE and YaRN are supported, got 'linear'"):
        GptOss.from_hf(hf_gpt_oss(num_hidden_layers=2, rope_parameters=linear))
