"""Qwen3-Next against transformers' ``Qwen3NextForCausalLM`` (tiny random configs, float32, eager attention), its
parts against transformers' own layers, cached decoding against the full pass, and the errors a learner can run
into."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch

from attn_edu.blocks import SwiGLUFeedForward
from attn_edu.delta_rule import DeltaStateLayer, GatedDeltaNet
from attn_edu.generation import generate, new_cache
from attn_edu.kv_cache import KVCache, KVCacheLayer
from attn_edu.models import LlamaConfig, Qwen3Next, Qwen3NextConfig
from attn_edu.moe import MoEFeedForward
from attn_edu.multihead import MultiHeadAttention
from tests.helpers import randomize_

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

V, T = 50, 70  # vocabulary; a length of one chunk of 64 and 6 more (transformers' chunk size, and ours)
TOL = {"atol": 1e-4, "rtol": 0.0}
DECODE_TOL = {"atol": 5e-4, "rtol": 0.0}  # the recurrent step against the chunked form: see the decoding test
LINEAR, FULL = "linear_attention", "full_attention"
CONFIGS = {
    "hybrid": {},  # Qwen3-Next's own shape: three linear layers, then attention; RoPE on a quarter of each head
    "all-linear": {"layer_types": [LINEAR] * 4},
    "attention-first-with-biases": {
        "layer_types": [FULL, LINEAR, FULL, LINEAR], "attention_bias": True, "partial_rotary_factor": 0.5,
    },
    "dense-layers-equal-heads": {  # layers 0 and 2 dense (mlp_only_layers and decoder_sparse_step); 4 key heads
        "mlp_only_layers": [0], "decoder_sparse_step": 2, "linear_num_key_heads": 4,
    },
}  # fmt: skip


def hf_qwen3_next(**overrides):
    """A 4-layer Qwen3-Next: C = 64; attention with 4 query heads and 2 kv heads of D = 16, RoPE on the first
    ``int(16 · partial_rotary_factor)`` coordinates; Gated DeltaNet with 2 key heads of 16 serving 4 value heads
    of 8; 4 experts of width 32 (top 2) and a shared expert of width 48.

    ``randomize_`` adds N(0, 0.1) noise to every parameter, so the zero-centred norms' weights are not 0, the
    gates, the decay's ``A_log`` and ``dt_bias`` and the shared expert's gate are not at their initial values.
    """
    cfg = dict(
        vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=16, linear_value_head_dim=8, linear_conv_kernel_dim=4, num_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48,
        layer_types=[LINEAR, LINEAR, LINEAR, FULL], max_position_embeddings=256, partial_rotary_factor=0.25,
    )  # fmt: skip
    config = transformers.Qwen3NextConfig(**(cfg | overrides), attn_implementation="eager")
    torch.manual_seed(0)
    return randomize_(transformers.Qwen3NextForCausalLM(config))


def ids(B: int, length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, V, (B, length), generator=torch.Generator().manual_seed(seed))


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


@pytest.fixture(scope="module")
def pair():
    hf = hf_qwen3_next()
    return hf, Qwen3Next.from_hf(hf)


@pytest.fixture(scope="module")
def expected(pair):
    """transformers' logits for ``ids(2, T)``, computed once."""
    with torch.no_grad():
        return pair[0](ids(2, T), use_cache=False).logits


# ---------------------------------------------------------------------------------------------------
# Equivalence with transformers
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CONFIGS))
def test_qwen3_next_matches_qwen3_next_for_causal_lm(name):
    """The logits at ``T = 70`` tokens (not a multiple of the chunk size), max |Δ| over batch, positions, vocab."""
    hf = hf_qwen3_next(**CONFIGS[name])
    ours = Qwen3Next.from_hf(hf)
    kinds = [GatedDeltaNet if kind == LINEAR else MultiHeadAttention for kind in hf.config.layer_types]
    assert [type(block.attn) for block in ours.blocks] == kinds
    sparse = [type(layer.mlp).__name__ == "Qwen3NextSparseMoeBlock" for layer in hf.model.layers]
    assert [isinstance(block.ffn, MoEFeedForward) for block in ours.blocks] == sparse
    assert ours.config.rotary_dim == int(16 * hf.config.rope_parameters["partial_rotary_factor"])
    x = ids(2, T)
    with torch.no_grad():
        expected = hf(x, use_cache=False).logits  # its cache needs an attention layer
        got = ours(x)
    assert expected.abs().max() > 0.5  # logits large enough for 1e-4 to mean something
    assert max_diff(got, expected) <= TOL["atol"], f"max |Δ| = {max_diff(got, expected):.2e}"


def test_the_chunk_size_does_not_change_the_logits(pair, expected):
    """Chunks of 8 (70 = 8 · 8 + 6) and 64 tokens: the chunked delta rule is the same recurrence."""
    _, ours = pair
    small = Qwen3Next(replace(ours.config, chunk_size=8))
    small.load_state_dict(ours.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(small.eval()(ids(2, T)), expected, **TOL)


def test_the_weights_land_where_qwen3_next_keeps_them(pair):
    hf, ours = pair
    attn, block = hf.model.layers[3].self_attn, ours.blocks[3]
    H, D, C = 4, 16, 64
    fused = attn.q_proj.weight.view(H, 2 * D, C)  # per head: D query rows, then D gate rows
    assert torch.equal(block.attn.q_proj.weight.view(H, D, C), fused[:, :D])
    assert torch.equal(block.attn.output_gate.proj.weight.view(H, D, C), fused[:, D:])
    norm = hf.model.layers[0].input_layernorm.weight
    assert torch.equal(ours.blocks[0].attn_norm.weight, norm) and norm.abs().min() > 0  # w, not 1 + w
    assert torch.equal(block.attn.qk_norm.k_norm.weight, attn.k_norm.weight)
    mlp, ffn = hf.model.layers[1].mlp, ours.blocks[1].ffn
    F = 32
    assert torch.equal(
        ffn.experts[3].gate_proj.weight, mlp.experts.gate_up_proj[3, :F]
    )  # halves, not interleaved
    assert torch.equal(ffn.experts[3].up_proj.weight, mlp.experts.gate_up_proj[3, F:])
    assert torch.equal(ffn.shared_expert_gate.weight, mlp.shared_expert_gate.weight)
    assert ours.lm_head.weight is not ours.token_embedding.weight  # untied, as in Qwen3-Next


def test_each_sub_layer_equals_transformers_own(pair):
    """Each kind of sub-layer on its own, on the same input: Gated DeltaNet, gated attention, the experts."""
    hf, ours = pair
    x = torch.randn(2, 9, 64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(ours.blocks[0].attn(x), hf.model.layers[0].linear_attn(x), **TOL)
        torch.testing.assert_close(ours.blocks[1].ffn(x)[0], hf.model.layers[1].mlp(x), **TOL)
        torch.testing.assert_close(ours.final_norm(x), hf.model.norm(x), **TOL)
        layer = hf.model.layers[3].self_attn
        cos_sin = hf.model.rotary_emb(x, torch.arange(9)[None])  # (1, T, R) each: R = D/4 turned coordinates
        causal = torch.full((9, 9), -torch.inf).triu(1)[None, None]  # (1, 1, T, T), additive
        theirs, _ = layer(x, position_embeddings=cos_sin, attention_mask=causal)
        torch.testing.assert_close(ours.blocks[3].attn(x, is_causal=True), theirs, **TOL)


def test_each_qwen3_next_part_changes_the_logits(pair, expected):
    """Each part the model adds to a plain hybrid matters: without it, the logits move far past the tolerance."""
    _, ours = pair
    x = ids(2, T)

    def without(change):
        other = copy.deepcopy(ours)
        change(other)
        with torch.no_grad():
            return max_diff(other(x), expected)

    def plain_norms(model):  # the stored w used as the gain itself: a loader that forgets the + 1
        for module in model.modules():
            if hasattr(module, "zero_centred"):
                module.zero_centred = False

    def no_shared_expert(model):
        for block in model.blocks:
            block.ffn.shared_expert = None

    def no_output_gate(model):
        for block in model.blocks:
            if isinstance(block.attn, MultiHeadAttention):
                block.attn.output_gate = None

    for what, change in {
        "zero-centred norms": plain_norms,
        "shared expert": no_shared_expert,
        "output gate": no_output_gate,
    }.items():
        assert without(change) > 1e-3, what
    full_rotary = Qwen3Next(replace(ours.config, partial_rotary_factor=1.0))
    full_rotary.load_state_dict(ours.state_dict())
    with torch.no_grad():
        assert max_diff(full_rotary.eval()(x), expected) > 1e-3, "partial rotary"
    assert ours.rotary.rotary_dim == 4 and full_rotary.rotary.rotary_dim == 16


# ---------------------------------------------------------------------------------------------------
# Decoding: a fixed-size state for the linear layers, a KV cache for the attention layer
# ---------------------------------------------------------------------------------------------------


def hf_stepwise(hf, x: torch.Tensor, prompt: int) -> torch.Tensor:
    """transformers' own cached decode: the prompt, then one token at a time through its cache."""
    out = hf(x[:, :prompt], use_cache=True)
    pieces = [out.logits]
    for t in range(prompt, x.shape[1]):
        out = hf(x[:, t : t + 1], cache=out.cache, use_cache=True)
        pieces.append(out.logits)
    return torch.cat(pieces, dim=1)  # (B, T, V)


@pytest.mark.parametrize("prompt", [1, 6, 13])
def test_cached_decoding_equals_the_full_pass(pair, prompt):
    """A prompt, then one token at a time: the linear layers carry their state and convolution inputs.

    One token at a time, a linear layer takes the recurrent step; over a prompt, the chunked form. Both compute
    the same recurrence but sum in another order, and with these weights (embeddings of size about 0.1, which
    the first RMSNorm scales up tenfold) float32 leaves up to about 1.5e-4 between them: transformers' own
    cached decode differs from its own full pass as much. So the cached decode is held to ``DECODE_TOL`` against
    the full pass, and to ``TOL`` against transformers' cached decode, which takes the same steps.
    """
    hf, ours = pair
    length = 20
    x = ids(2, length, seed=prompt)
    cache = new_cache(ours)
    assert [type(layer) for layer in cache.layers] == [DeltaStateLayer] * 3 + [KVCacheLayer]
    with torch.no_grad():
        pieces = [ours(x[:, :prompt], kv_cache=cache)]
        pieces += [ours(x[:, t : t + 1], kv_cache=cache) for t in range(prompt, length)]
        stepwise, full = torch.cat(pieces, dim=1), ours(x)  # (B, T, V) each
        theirs_stepwise, theirs_full = hf_stepwise(hf, x, prompt), hf(x, use_cache=False).logits
    delta, attention = cache.layers[0], cache.layers[3]
    assert delta.seq_len == attention.seq_len == length
    assert delta.state.shape == (2, 4, 16, 8) and delta.conv.shape == (2, 2 * 2 * 16 + 4 * 8, 3)  # fixed size
    assert attention.k.shape[2] == length  # the attention layer keeps every token
    torch.testing.assert_close(stepwise, theirs_stepwise, **TOL)
    torch.testing.assert_close(stepwise, full, **DECODE_TOL)
    torch.testing.assert_close(stepwise, theirs_full, **DECODE_TOL)


def test_greedy_generation_equals_transformers_generate(pair):
    hf, ours = pair
    hf.generation_config.eos_token_id = None  # every step counts
    prompt = ids(1, 6, seed=7)
    with torch.no_grad():
        theirs = hf.generate(prompt, max_new_tokens=14, do_sample=False, pad_token_id=0)
    assert torch.equal(generate(ours, prompt, 14), theirs)


# ---------------------------------------------------------------------------------------------------
# Configs and errors
# ---------------------------------------------------------------------------------------------------


def test_the_defaults_are_qwen3_next_shape():
    config = Qwen3NextConfig(num_layers=8)
    assert config.layer_types == (LINEAR, LINEAR, LINEAR, FULL) * 2  # every fourth layer is attention
    assert config.rotary_dim == config.head_dim // 4
    model = Qwen3Next(replace(config, num_layers=4, layer_types=None, dense_layers=[1]))
    assert isinstance(model.blocks[1].ffn, SwiGLUFeedForward) and isinstance(
        model.blocks[0].ffn, MoEFeedForward
    )
    norms = [model.final_norm, model.blocks[0].attn_norm, model.blocks[3].attn.qk_norm]
    assert all(norm.zero_centred for norm in norms) and not model.final_norm.weight.any()  # gain 1 + 0


def test_bad_input_gives_a_clear_error(pair):
    _, ours = pair
    bad_configs = [
        ({"layer_types": (FULL,) * 3}, "layer_types: expected num_layers=4 entries, got 3"),
        ({"layer_types": ("linear", FULL, FULL, FULL)}, "layer_types: expected one of"),
        ({"partial_rotary_factor": 0.0}, r"partial_rotary_factor: expected a number in \(0, 1\]"),
        ({"partial_rotary_factor": 0.1}, "partial_rotary_factor: RoPE turns pairs"),
        ({"experts_per_token": 5}, "experts_per_token: expected at most num_experts=4"),
        ({"linear_num_k_heads": 3}, "linear_num_k_heads: must divide linear_num_heads=4"),
        ({"dense_layers": (4,)}, "dense_layers: expected layer indices from 0 to 3"),
        ({"chunk_size": 0}, "chunk_size"),
    ]
    for change, message in bad_configs:
        with pytest.raises(ValueError, match=message):
            Qwen3NextConfig(**change)
    with pytest.raises(ValueError, match="config: expected a Qwen3NextConfig"):
        Qwen3Next(LlamaConfig())
    with pytest.raises(ValueError, match="input_ids"):
        ours(torch.tensor([[1, V]]))  # V is one past the last token
    with pytest.raises(ValueError, match="kv_cache: expected 4 layers"):
        ours(ids(1, 3), kv_cache=KVCache(2))
    llama = transformers.LlamaForCausalLM(
        transformers.LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=40, num_hidden_layers=1,
                                 num_attention_heads=4, num_key_value_heads=2)
    )  # fmt: skip
    with pytest.raises(ValueError, match="Qwen3Next.from_hf expects a Qwen3NextForCausalLM"):
        Qwen3Next.from_hf(llama)
    with pytest.raises(ValueError, match="only norm_topk_prob=True"):
        Qwen3Next.from_hf(hf_qwen3_next(norm_topk_prob=False))
