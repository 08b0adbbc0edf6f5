"""Parameter counts: closed-form formulas = our models = Hugging Face's models = the published sizes.

Big models are built on the ``meta`` device: every tensor has a shape and no storage, so GPT-2 XL,
Llama-2-7B and even GPT-3 cost no memory.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attn_edu.models import BERT, GPT, T5, BertConfig, BertMLM, GPTConfig, Llama, LlamaConfig, T5Config
from attn_edu.params import (
    CATEGORIES,
    bert_parameter_count,
    count_parameters,
    gpt_parameter_breakdown,
    gpt_parameter_count,
    llama_parameter_count,
    parameter_breakdown,
)

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

META = torch.device("meta")

GPT2_SMALL = GPTConfig(
    vocab_size=50257, max_seq_len=1024, embed_dim=768, num_layers=12, num_heads=12, ffn_dim=3072
)
GPT2_XL = GPTConfig(
    vocab_size=50257, max_seq_len=1024, embed_dim=1600, num_layers=48, num_heads=25, ffn_dim=6400
)
BERT_BASE = BertConfig(
    vocab_size=30522, max_seq_len=512, embed_dim=768, num_layers=12, num_heads=12, ffn_dim=3072
)
LLAMA2_7B = LlamaConfig(
    vocab_size=32000,
    embed_dim=4096,
    num_layers=32,
    num_heads=32,
    num_kv_heads=32,
    ffn_dim=11008,
    norm_eps=1e-5,
)


def on_meta(make):
    with META:
        return make()


def hf_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # tied tensors appear once


@pytest.mark.parametrize(
    ("config", "published", "hf_kwargs"),
    [
        # Sizes as reported for the Hugging Face checkpoints openai-community/gpt2 and gpt2-xl.
        (GPT2_SMALL, 124_439_808, dict()),
        (GPT2_XL, 1_557_611_200, dict(n_embd=1600, n_layer=48, n_head=25)),
    ],
    ids=["gpt2-small", "gpt2-xl"],
)
def test_gpt2_counts(config, published, hf_kwargs):
    ours = on_meta(lambda: GPT(config))
    hf = on_meta(lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(**hf_kwargs)))
    assert gpt_parameter_count(config) == count_parameters(ours) == hf_count(hf) == published


def test_bert_base_counts_with_and_without_the_pooler():
    hf_config = transformers.BertConfig()  # the defaults are BERT-base
    with_pooler = on_meta(lambda: transformers.BertModel(hf_config))
    without_pooler = on_meta(lambda: transformers.BertModel(hf_config, add_pooling_layer=False))
    ours = on_meta(lambda: BERT(BERT_BASE))
    # The paper's "110M" is HF BertModel with its pooler: 109,482,240.
    assert bert_parameter_count(BERT_BASE, pooler=True) == hf_count(with_pooler) == 109_482_240
    assert bert_parameter_count(BERT_BASE) == count_parameters(ours) == hf_count(without_pooler)


def test_bert_mlm_head_counts_like_hf():
    hf = on_meta(lambda: transformers.BertForMaskedLM(transformers.BertConfig()))
    ours = on_meta(lambda: BertMLM(BERT_BASE))
    assert count_parameters(ours) == hf_count(hf)
    head = parameter_breakdown(ours)["other"] + parameter_breakdown(ours.head)["norms"]
    C, V = 768, 30522
    assert head == C * C + C + 2 * C + V  # transform, its LayerNorm, output bias; decoder tied


@pytest.mark.parametrize(
    ("config", "published", "hf_kwargs"),
    [
        (LLAMA2_7B, 6_738_415_616, dict(vocab_size=32000, num_key_value_heads=32)),
        (  # Llama-3-8B: GQA with 8 kv heads, 128256 tokens, untied head; 8.03B
            LlamaConfig(
                vocab_size=128256, embed_dim=4096, num_layers=32, num_heads=32, num_kv_heads=8, ffn_dim=14336
            ),
            8_030_261_248,
            dict(vocab_size=128256, num_key_value_heads=8, intermediate_size=14336),
        ),
    ],
    ids=["llama2-7b", "llama3-8b"],
)
def test_llama_counts(config, published, hf_kwargs):
    hf_config = transformers.LlamaConfig(
        hidden_size=4096,
        num_hidden_layers=32,
        num_attention_heads=32,
        **({"intermediate_size": 11008} | hf_kwargs),
    )
    hf = on_meta(lambda: transformers.LlamaForCausalLM(hf_config))
    ours = on_meta(lambda: Llama(config))
    assert llama_parameter_count(config) == count_parameters(ours) == hf_count(hf) == published


def test_llama_count_with_a_head_dim_of_its_own():
    """Gemma-7B-like attention: 16 heads of 256 from C = 3072, so q and out are C × 4096, not C²."""
    config = LlamaConfig(
        vocab_size=1000, embed_dim=3072, num_layers=2, num_heads=16, num_kv_heads=16, head_dim=256, ffn_dim=64
    )
    hf_config = transformers.LlamaConfig(
        vocab_size=1000, hidden_size=3072, num_hidden_layers=2, num_attention_heads=16,
        num_key_value_heads=16, head_dim=256, intermediate_size=64,
    )  # fmt: skip
    hf = on_meta(lambda: transformers.LlamaForCausalLM(hf_config))
    ours = on_meta(lambda: Llama(config))
    assert llama_parameter_count(config) == count_parameters(ours) == hf_count(hf)
    assert ours.blocks[0].attn.q_proj.weight.shape == (4096, 3072)


def test_gpt3_extrapolation():
    gpt3 = GPTConfig(
        vocab_size=50257, max_seq_len=2048, embed_dim=12288, num_layers=96, num_heads=96, ffn_dim=4 * 12288
    )
    total = gpt_parameter_count(gpt3)
    assert round(total / 1e9) == 175  # Brown et al. (2020), Table 2.1: "175.0B"
    assert 12 * 96 * 12288**2 / total > 0.99  # the 12·L·C² rule of thumb is almost everything
    assert count_parameters(on_meta(lambda: GPT(gpt3))) == total


def test_t5_small_matches_hf():
    hf = on_meta(lambda: transformers.T5ForConditionalGeneration(transformers.T5Config()))  # T5-small
    config = T5Config(
        vocab_size=32128, embed_dim=512, num_layers=6, num_decoder_layers=6, num_heads=8, ffn_dim=2048
    )
    ours = on_meta(lambda: T5(config))
    # HF keeps a relative-bias table in layer 0 of each stack; ours keeps one per stack: the same count.
    assert count_parameters(ours) == hf_count(hf)


@pytest.mark.parametrize("tie", [True, False])
def test_breakdown_matches_formula_and_sums_to_total(tie):
    config = GPTConfig(
        vocab_size=37, max_seq_len=11, embed_dim=12, num_layers=3, num_heads=3, ffn_dim=20, tie_embeddings=tie
    )
    model = GPT(config)
    parts = parameter_breakdown(model)
    assert parts == gpt_parameter_breakdown(config)
    assert sum(parts.values()) == count_parameters(model) == gpt_parameter_count(config)
    assert set(parts) == set(CATEGORIES)
    assert parts["other"] == (0 if tie else 37 * 12)  # an untied head is the only "other"


def test_breakdown_of_gpt2_small_on_meta():
    parts = parameter_breakdown(on_meta(lambda: GPT(GPT2_SMALL)))
    assert parts == gpt_parameter_breakdown(GPT2_SMALL)
    assert 0.3 < parts["embeddings"] / sum(parts.values()) < 0.33  # a third of GPT-2 small is embeddings


def test_trainable_only():
    model = GPT(GPTConfig(vocab_size=10, embed_dim=8, num_heads=2, ffn_dim=16))
    total = count_parameters(model)
    model.token_embedding.weight.requires_grad_(False)  # also the tied head
    assert count_parameters(model, trainable_only=True) == total - 10 * 8
    assert count_parameters(model) == total


def test_errors():
    with pytest.raises(ValueError, match="model"):
        count_parameters("gpt2")
    with pytest.raises(ValueError, match="model"):
        parameter_breakdown([nn.Linear(2, 2)])
    with pytest.raises(ValueError, match="config"):
        gpt_parameter_count(BERT_BASE)
    with pytest.raises(ValueError, match="config"):
        bert_parameter_count(GPT2_SMALL)
    with pytest.raises(ValueError, match="config"):
        llama_parameter_count(GPT2_SMALL)
