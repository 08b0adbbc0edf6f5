"""The four model families against Hugging Face transformers (random weights, small configs, no downloads),
and cached step-by-step decoding against the full forward pass."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from attn_edu.generation import generate
from attn_edu.kv_cache import KVCache
from attn_edu.models import BERT, GPT, T5, BertConfig, BertMLM, GPTConfig, Llama, LlamaConfig, T5Config
from tests.helpers import randomize_

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

TOL = {"atol": 1e-4, "rtol": 1e-4}
V = 50


def ids(B: int, T: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def hf_gpt2(**overrides):
    cfg = dict(n_layer=2, n_embd=32, n_head=4, vocab_size=V, n_positions=16)
    config = transformers.GPT2Config(**(cfg | overrides), attn_implementation="eager")
    return randomize_(transformers.GPT2LMHeadModel(config))


# The sizes of the Llama-family test models (Llama, Mistral).
LLAMA_SIZES = dict(
    vocab_size=V,
    hidden_size=32,
    intermediate_size=56,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,  # GQA: two query heads per kv head
)


def hf_llama(**overrides):
    cfg = LLAMA_SIZES | dict(rope_parameters={"rope_type": "default", "rope_theta": 500.0})
    config = transformers.LlamaConfig(**(cfg | overrides), attn_implementation="eager")
    return randomize_(transformers.LlamaForCausalLM(config))


def hf_mistral(**overrides):
    """A Mistral: Llama's layout with a sliding window of 5 tokens, so 20-token inputs slide well past it."""
    cfg = LLAMA_SIZES | dict(sliding_window=5, max_position_embeddings=64)
    config = transformers.MistralConfig(**(cfg | overrides), attn_implementation="eager")
    return randomize_(transformers.MistralForCausalLM(config))


def hf_t5(**overrides):
    cfg = dict(
        vocab_size=V,
        d_model=32,
        d_kv=8,
        num_heads=4,
        d_ff=48,
        num_layers=2,
        num_decoder_layers=3,
        relative_attention_num_buckets=8,  # few buckets and a short max_distance: 9 tokens reach
        relative_attention_max_distance=6,  # the log-spaced and the clipped buckets too
    )
    config = transformers.T5Config(**(cfg | overrides), attn_implementation="eager")
    return randomize_(transformers.T5ForConditionalGeneration(config))


def hf_bert_config():
    return transformers.BertConfig(
        vocab_size=V,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=16,
        attn_implementation="eager",
    )


PADDING = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0]])  # (B, T): second row padded


# ---------------------------------------------------------------------------------------------------
# Equivalence with Hugging Face
# ---------------------------------------------------------------------------------------------------


def test_gpt_matches_gpt2():
    hf = hf_gpt2()
    ours = GPT.from_hf(hf)
    x = ids(2, 9)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), hf(x).logits, **TOL)
    assert ours.lm_head.weight is ours.token_embedding.weight  # tied, as in GPT-2


def test_bert_matches_bert_model_on_a_padded_batch():
    hf = randomize_(transformers.BertModel(hf_bert_config()))
    ours = BERT.from_hf(hf)
    x, segments = ids(2, 7), ids(2, 7, seed=2) % 2
    with torch.no_grad():
        expected = hf(x, attention_mask=PADDING, token_type_ids=segments).last_hidden_state
        torch.testing.assert_close(ours(x, PADDING, segments), expected, **TOL)
        # bool masks mean the same thing
        torch.testing.assert_close(ours(x, PADDING.bool(), segments), expected, **TOL)


def test_bert_padding_is_invisible_to_real_tokens():
    ours = BERT.from_hf(randomize_(transformers.BertModel(hf_bert_config())))
    x = ids(2, 7)
    changed = x.clone()
    changed[1, 4:] = (changed[1, 4:] + 1) % V  # rewrite the padded tokens only
    with torch.no_grad():
        a, b = ours(x, PADDING), ours(changed, PADDING)
    torch.testing.assert_close(a[1, :4], b[1, :4], **TOL)


def test_bert_mlm_matches_bert_for_masked_lm():
    hf = randomize_(transformers.BertForMaskedLM(hf_bert_config()))
    ours = BertMLM.from_hf(hf)
    x = ids(2, 7)
    with torch.no_grad():
        torch.testing.assert_close(ours(x, PADDING), hf(x, attention_mask=PADDING).logits, **TOL)


@pytest.mark.parametrize("tie", [False, True])
def test_llama_with_gqa_matches_llama_for_causal_lm(tie):
    hf = hf_llama(tie_word_embeddings=tie)
    ours = Llama.from_hf(hf)
    assert ours.config.num_kv_heads == 2 < ours.config.num_heads and ours.config.rope_base == 500.0
    assert (ours.lm_head.weight is ours.token_embedding.weight) == tie
    x = ids(2, 9)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), hf(x).logits, **TOL)


def test_sliding_window_llama_matches_mistral_for_causal_lm():
    hf = hf_mistral()
    ours = Llama.from_hf(hf)
    assert ours.config.sliding_window == 5
    x = ids(2, 20)
    with torch.no_grad():
        expected = hf(x).logits
        torch.testing.assert_close(ours(x), expected, **TOL)
        # The window matters: the same weights with full attention agree only on the first 5 tokens.
        full = Llama(replace(ours.config, sliding_window=None))
        full.load_state_dict(ours.state_dict())
        torch.testing.assert_close(full(x)[:, :5], expected[:, :5], **TOL)
        assert not torch.allclose(full(x)[:, 5:], expected[:, 5:], **TOL)


def test_rolling_cache_generation_equals_mistral_generate():
    """Twenty tokens past a window of 5: our ring buffer of 5 slots picks what Hugging Face's cache picks."""
    hf = hf_mistral()
    ours = Llama.from_hf(hf)
    hf.generation_config.eos_token_id = None  # every step counts: no early stop on token 2
    prompt = ids(1, 7)
    with torch.no_grad():
        theirs = hf.generate(prompt, max_new_tokens=20, do_sample=False, pad_token_id=0)
    assert torch.equal(generate(ours, prompt, 20), theirs)
    assert torch.equal(generate(ours, prompt, 20, use_cache=False), theirs)


@pytest.mark.parametrize("tie", [True, False])
def test_t5_matches_t5_for_conditional_generation(tie):
    hf = hf_t5(tie_word_embeddings=tie)  # False: T5 v1.1 style, no C^-0.5 logit rescale
    ours = T5.from_hf(hf)
    assert ours.config.tie_embeddings == tie
    src = ids(2, 9)
    mask = torch.tensor([[1] * 9, [1] * 6 + [0] * 3])
    tgt = ids(2, 8, seed=3)
    with torch.no_grad():
        expected = hf(input_ids=src, attention_mask=mask, decoder_input_ids=tgt).logits
        torch.testing.assert_close(ours(src, tgt, mask), expected, **TOL)


def test_a_head_dim_of_its_own_matches_hf():
    """Heads wider than C / H (T5's d_kv as in T5-3B; Llama-family configs with their own head_dim)."""
    src, tgt = ids(2, 9), ids(2, 8, seed=3)
    hf = hf_t5(d_kv=16)  # 4 heads of 16 from d_model 32
    ours = T5.from_hf(hf)
    assert ours.config.head_dim == 16 and ours.decoder_blocks[0].cross_attn.inner_dim == 64
    with torch.no_grad():
        torch.testing.assert_close(ours(src, tgt), hf(input_ids=src, decoder_input_ids=tgt).logits, **TOL)
    hf = hf_llama(head_dim=12)  # 4 query heads and 2 kv heads of 12 from hidden 32
    ours = Llama.from_hf(hf)
    assert ours.config.head_dim == 12 and ours.blocks[0].attn.q_proj.weight.shape == (48, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours(src), hf(src).logits, **TOL)


# ---------------------------------------------------------------------------------------------------
# KV cache: one token at a time equals the full forward
# ---------------------------------------------------------------------------------------------------


def decode_stepwise(step, x: torch.Tensor, num_layers: int, prompt: int = 3) -> torch.Tensor:
    """Feed ``prompt`` tokens at once, then one token per call, through ``step(ids, kv_cache=...)``."""
    cache = KVCache(num_layers)
    pieces = [step(x[:, :prompt], kv_cache=cache)]
    for t in range(prompt, x.shape[1]):
        pieces.append(step(x[:, t : t + 1], kv_cache=cache))
    assert cache.seq_len == x.shape[1]
    return torch.cat(pieces, dim=1)  # (B, T, V)


# GPT and a GQA Llama are decoded stepwise in tests/test_generation.py (two ways of chunking the prompt);
# here the layouts that only the model tests build: one key/value head (MQA), and a head_dim not C / H.
@pytest.mark.parametrize(
    "model",
    [
        Llama(LlamaConfig(vocab_size=V, embed_dim=32, num_heads=4, num_kv_heads=1, ffn_dim=48)),  # MQA
        Llama(LlamaConfig(vocab_size=V, embed_dim=32, num_heads=4, num_kv_heads=2, head_dim=6, ffn_dim=48)),
    ],
    ids=["llama-mqa", "llama-head-dim"],
)
def test_decoder_with_kv_cache_equals_full_forward(model):
    model = randomize_(model)
    x = ids(2, 8)
    with torch.no_grad():
        torch.testing.assert_close(decode_stepwise(model, x, model.config.num_layers), model(x), **TOL)


def test_t5_decoder_with_kv_cache_equals_full_forward():
    model = T5.from_hf(hf_t5())
    src, tgt = ids(2, 9), ids(2, 8, seed=3)
    mask = torch.tensor([[1] * 9, [1] * 6 + [0] * 3])
    with torch.no_grad():
        memory = model.encode(src, mask)

        def step(piece, kv_cache):
            return model(src, piece, mask, kv_cache=kv_cache, encoder_output=memory)

        # (that the encoder output is projected once per decoder layer is tests/test_kv_cache.py's to check)
        stepwise = decode_stepwise(step, tgt, model.config.num_decoder_layers)
        torch.testing.assert_close(stepwise, model(src, tgt, mask), **TOL)


def test_hf_cached_generation_agrees_with_ours():
    """Greedy decoding with Hugging Face's own cache picks the same tokens as ours, step by step."""
    hf = hf_llama()
    ours = Llama.from_hf(hf)
    prompt = ids(1, 4)
    with torch.no_grad():
        hf_tokens = hf.generate(prompt, max_new_tokens=5, do_sample=False, pad_token_id=0)
        cache, tokens = KVCache(ours.config.num_layers), prompt
        logits = ours(prompt, kv_cache=cache)
        for _ in range(5):
            next_token = logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
            tokens = torch.cat([tokens, next_token], dim=1)
            logits = ours(next_token, kv_cache=cache)
    assert torch.equal(tokens, hf_tokens)


# ---------------------------------------------------------------------------------------------------
# Behaviour and errors
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: GPT(GPTConfig(vocab_size=V, embed_dim=16, num_heads=2, ffn_dim=32)),
        lambda: Llama(LlamaConfig(vocab_size=V, embed_dim=16, num_heads=2, num_kv_heads=1, ffn_dim=32)),
    ],
    ids=["gpt", "llama"],
)
def test_decoders_are_causal(make):
    model = make().eval()
    x = ids(1, 8)
    changed = x.clone()
    changed[0, 5:] = (changed[0, 5:] + 1) % V
    with torch.no_grad():
        torch.testing.assert_close(model(x)[:, :5], model(changed)[:, :5], **TOL)
        assert not torch.allclose(model(x)[:, 5:], model(changed)[:, 5:])


def torch_sdpa(q, k, v, mask=None, *, is_causal=False, scale=None):
    """PyTorch's SDPA behind our signature (T == S here, so its top-left causal mask is right)."""
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale
    )


@pytest.mark.parametrize(
    ("cls", "config"),
    [
        (GPT, GPTConfig(vocab_size=V, embed_dim=16, num_heads=2, ffn_dim=32)),
        (Llama, LlamaConfig(vocab_size=V, embed_dim=16, num_heads=2, num_kv_heads=1, ffn_dim=32)),
    ],
    ids=["gpt", "llama"],
)
def test_attention_fn_is_passed_to_every_layer(cls, config):
    torch.manual_seed(0)
    reference = cls(config).eval()
    fast = cls(config, attention_fn=torch_sdpa).eval()
    fast.load_state_dict(reference.state_dict())
    assert all(block.attn.attention_fn is torch_sdpa for block in fast.blocks)
    x = ids(2, 6)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), reference(x), **TOL)


def _attention_functions() -> dict[str, object]:
    """Every attention function the package has that runs on a CPU tensor without Triton's interpreter."""
    from attn_edu.attention import scaled_dot_product_attention
    from attn_edu.experiments.text_gpt import fused_attention
    from attn_edu.flash import tiled_attention

    return {"reference": scaled_dot_product_attention, "tiled": tiled_attention, "fused": fused_attention}


MODELS = {
    "gpt": lambda fn: GPT(GPTConfig(vocab_size=V, embed_dim=16, num_heads=2, ffn_dim=32), attention_fn=fn),
    "bert": lambda fn: BERT(BertConfig(vocab_size=V, embed_dim=16, num_heads=2, ffn_dim=32), attention_fn=fn),
    "llama": lambda fn: Llama(
        LlamaConfig(vocab_size=V, embed_dim=16, num_heads=2, num_kv_heads=1, ffn_dim=32), attention_fn=fn
    ),
    "t5": lambda fn: T5(T5Config(vocab_size=V, embed_dim=16, num_heads=2, ffn_dim=32), attention_fn=fn),
}


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("fn_name", ["tiled", "fused"])
def test_every_model_runs_with_every_attention_function_or_says_at_once_what_it_needs(name, fn_name):
    """T5 adds its relative bias to every score: an attention function without ``score_bias=`` is refused when
    the model is built, with a message naming the keyword (not a bare TypeError at the first forward)."""
    fn = _attention_functions()[fn_name]
    if name == "t5":
        with pytest.raises(ValueError, match=r"attention_fn: T5 adds a bias .* takes no score_bias"):
            MODELS[name](fn)
        return
    torch.manual_seed(0)
    reference = MODELS[name](_attention_functions()["reference"]).eval()
    other = MODELS[name](fn).eval()
    other.load_state_dict(reference.state_dict())
    x = ids(2, 6)
    with torch.no_grad():
        torch.testing.assert_close(other(x), reference(x), **TOL)


def test_t5_takes_an_attention_function_that_accepts_score_bias():
    seen = []

    def biased(q, k, v, mask=None, *, is_causal=False, scale=None, score_bias=None):
        from attn_edu.attention import scaled_dot_product_attention

        seen.append(score_bias is not None)
        return scaled_dot_product_attention(
            q, k, v, mask, is_causal=is_causal, scale=scale, score_bias=score_bias
        )

    torch.manual_seed(0)
    reference = MODELS["t5"](_attention_functions()["reference"]).eval()
    model = MODELS["t5"](biased).eval()
    model.load_state_dict(reference.state_dict())
    src, tgt = ids(2, 5), ids(2, 4, seed=2)
    with torch.no_grad():
        torch.testing.assert_close(model(src, tgt), reference(src, tgt), **TOL)
    assert seen and all(seen[:2])  # the encoder's and decoder's self-attention get the bias


def test_t5_encoder_padding_is_hidden_from_the_decoder():
    model = T5(T5Config(vocab_size=V, embed_dim=16, num_heads=2, ffn_dim=32)).eval()
    src, tgt = ids(1, 6), ids(1, 4)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0]])
    changed = src.clone()
    changed[0, 4:] = (changed[0, 4:] + 1) % V
    with torch.no_grad():
        torch.testing.assert_close(model(src, tgt, mask), model(changed, tgt, mask), **TOL)


def test_input_errors_name_the_argument():
    gpt = GPT(GPTConfig(vocab_size=V, max_seq_len=8, embed_dim=16, num_heads=2, ffn_dim=32))
    with pytest.raises(ValueError, match="input_ids"):
        gpt(torch.tensor([[1, V]]))  # id outside the vocabulary
    with pytest.raises(ValueError, match="input_ids"):
        gpt(torch.tensor([1, 2]))  # missing batch dim
    with pytest.raises(ValueError, match="max_len=8"):
        gpt(ids(1, 9))  # longer than the learned position table
    bert = BERT(BertConfig(vocab_size=V, embed_dim=16, num_heads=2, ffn_dim=32))
    with pytest.raises(ValueError, match="attention_mask"):
        bert(ids(2, 7), PADDING[:, :5])
    with pytest.raises(ValueError, match="attention_mask"):
        bert(ids(2, 7), PADDING * 2)
    t5 = T5(T5Config(vocab_size=V, embed_dim=16, num_heads=2, ffn_dim=32))
    with pytest.raises(ValueError, match="encoder_output"):
        t5(ids(1, 4), ids(1, 3), encoder_output=torch.zeros(1, 4, 8))


def test_config_errors():
    with pytest.raises(ValueError, match="num_heads"):
        GPTConfig(embed_dim=30, num_heads=4)
    with pytest.raises(ValueError, match="num_kv_heads"):
        LlamaConfig(num_heads=4, num_kv_heads=3)
    with pytest.raises(ValueError, match="num_layers"):
        T5Config(num_layers=0)
    with pytest.raises(ValueError, match="head_dim"):
        LlamaConfig(head_dim=5)  # RoPE rotates pairs of channels
    with pytest.raises(ValueError, match="head_dim"):
        T5Config(head_dim=0)
    assert LlamaConfig(embed_dim=64, num_heads=4).head_dim == 16  # None means C / H
    with pytest.raises(ValueError, match="config"):
        GPT(LlamaConfig())
    with pytest.raises(ValueError, match="sliding_window"):
        LlamaConfig(sliding_window=0)


def test_unsupported_hf_variants_are_refused():
    with pytest.raises(ValueError, match="feed_forward_proj"):
        T5.from_hf(hf_t5(feed_forward_proj="gated-gelu"))
    with pytest.raises(ValueError, match="rope_type"):
        Llama.from_hf(hf_llama(rope_parameters={"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0}))
