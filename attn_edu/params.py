"""Where a Transformer's parameters are: counted on a model, and predicted from its config in closed form.

Per block, with model width ``C`` and feed-forward width ``F = 4C``:

    attention   4 C² + 4 C          q, k, v and output projections with biases
    FFN         2 C F + F + C       = 8 C² + 5 C
    2 norms     4 C                 LayerNorm gain and bias, twice
    total       12 C² + 13 C        (Kaplan et al., 2020, §2.1, count 12 C² for the weights alone)

so a model's size is about ``12 · L · C²`` plus its embedding tables ``V · C`` (+ positions). The
functions below reproduce the published sizes exactly: GPT-2 small 124,439,808, GPT-2 XL 1,557,611,200,
BERT-base 109,482,240 (with the pooler that ``transformers.BertModel`` adds), Llama-2-7B 6,738,415,616,
and extrapolate GPT-3 175B (Brown et al., 2020, Table 2.1: 96 layers, C = 12288, 2048 positions).
The tests build the real models on the ``meta`` device (shapes without memory) to check them.

Tied matrices (GPT-2's ``lm_head`` is its token embedding) count once, as in ``model.parameters()``.
"""

from __future__ import annotations

from torch import nn

from attn_edu.blocks import FeedForward, RMSNorm, SwiGLUFeedForward
from attn_edu.models.bert import BertConfig
from attn_edu.models.gpt import GPTConfig
from attn_edu.models.llama import LlamaConfig
from attn_edu.multihead import MultiHeadAttention

CATEGORIES = ("embeddings", "attention", "ffn", "norms", "other")


def count_parameters(model: nn.Module, *, trainable_only: bool = False) -> int:
    """Number of distinct parameters (shared tensors count once); works on the ``meta`` device.

    Example:
        >>> count_parameters(nn.Linear(3, 2))          # 3·2 weights + 2 biases
        8
        >>> tied = nn.ModuleList([nn.Embedding(10, 4), nn.Linear(4, 10, bias=False)])
        >>> tied[1].weight = tied[0].weight
        >>> count_parameters(tied)
        40
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


_ATTENTION = (MultiHeadAttention, nn.MultiheadAttention)
_FFN = (FeedForward, SwiGLUFeedForward)
_NORMS = (nn.LayerNorm, RMSNorm, nn.RMSNorm, nn.modules.batchnorm._BatchNorm, nn.GroupNorm)


def parameter_breakdown(model: nn.Module) -> dict[str, int]:
    """Parameters per kind: ``embeddings``, ``attention``, ``ffn``, ``norms``, ``other``.

    Each parameter belongs to the innermost of these modules that holds it: attention layers
    (:class:`~attn_edu.multihead.MultiHeadAttention`), feed-forward networks, norms, embedding tables
    (tokens, positions, segments, T5's relative-bias table). What is left, e.g. an *untied* output
    head or BERT's MLM transform, is ``other``. A tied matrix is counted once, where it is first met
    (the token embedding, registered before the head). The values sum to :func:`count_parameters`.

    Example:
        >>> from attn_edu.models import GPT, GPTConfig
        >>> parts = parameter_breakdown(GPT(GPTConfig(vocab_size=10, max_seq_len=8, embed_dim=4,
        ...                                           num_layers=1, num_heads=1, ffn_dim=16)))
        >>> parts                       # 10·4 + 8·4 | 4·4² + 4·4 | 2·4·16 + 16 + 4 | 3 LayerNorms · 2·4
        {'embeddings': 72, 'attention': 80, 'ffn': 148, 'norms': 24, 'other': 0}
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    counts = dict.fromkeys(CATEGORIES, 0)
    seen: set[int] = set()

    def visit(module: nn.Module, category: str) -> None:
        if isinstance(module, _ATTENTION):
            category = "attention"
        elif isinstance(module, _FFN):
            category = "ffn"
        elif isinstance(module, _NORMS):
            category = "norms"
        elif isinstance(module, nn.Embedding) and category == "other":
            category = "embeddings"
        for p in module.parameters(recurse=False):
            if id(p) not in seen:
                seen.add(id(p))
                counts[category] += p.numel()
        for child in module.children():
            visit(child, category)

    visit(model, "other")
    return counts


# ---------------------------------------------------------------------------------------------------
# Closed-form counts from a config
# ---------------------------------------------------------------------------------------------------


def gpt_parameter_breakdown(config: GPTConfig) -> dict[str, int]:
    """:func:`parameter_breakdown` of a :class:`~attn_edu.models.GPT`, computed from its config alone.

    Example:
        >>> gpt_parameter_breakdown(GPTConfig(vocab_size=50257, max_seq_len=1024, embed_dim=768,
        ...                                   num_layers=12, num_heads=12, ffn_dim=3072))   # GPT-2 small
        {'embeddings': 39383808, 'attention': 28348416, 'ffn': 56669184, 'norms': 38400, 'other': 0}
    """
    if not isinstance(config, GPTConfig):
        raise ValueError(f"config: expected a GPTConfig, got {type(config).__name__}")
    V, P, C, L, F = config.vocab_size, config.max_seq_len, config.embed_dim, config.num_layers, config.ffn_dim
    return {
        "embeddings": V * C + P * C,  # token table + learned positions
        "attention": L * (4 * C * C + 4 * C),  # q, k, v, out: C x C weights and C biases each
        "ffn": L * (2 * C * F + F + C),  # up (C x F + F) and down (F x C + C)
        "norms": L * 4 * C + 2 * C,  # two LayerNorms per block + the final one, gain and bias each
        "other": 0 if config.tie_embeddings else V * C,  # an untied lm_head
    }


def gpt_parameter_count(config: GPTConfig) -> int:
    """Total parameters of a GPT-2-style model: ``V·C + P·C + L·(12C² + 13C) + 2C`` when ``F = 4C``
    and the head is tied (add ``V·C`` if not).

    Example:
        >>> gpt_parameter_count(GPTConfig(vocab_size=50257, max_seq_len=1024, embed_dim=768,
        ...                               num_layers=12, num_heads=12, ffn_dim=3072))    # GPT-2 small
        124439808
    """
    return sum(gpt_parameter_breakdown(config).values())


def bert_parameter_count(config: BertConfig, *, pooler: bool = False) -> int:
    """Total parameters of a BERT encoder (no MLM head); ``pooler=True`` adds the ``C² + C`` tanh layer
    on ``[CLS]`` that ``transformers.BertModel`` includes by default (our :class:`~attn_edu.models.BERT`
    has none).

        V·C + P·C + types·C + 2C  +  L·(4C² + 4C + 2CF + F + C + 4C)  [+ C² + C]

    Example:
        >>> base = BertConfig(vocab_size=30522, max_seq_len=512, embed_dim=768, num_layers=12,
        ...                   num_heads=12, ffn_dim=3072)
        >>> bert_parameter_count(base), bert_parameter_count(base, pooler=True)   # the "110M" of BERT-base
        (108891648, 109482240)
    """
    if not isinstance(config, BertConfig):
        raise ValueError(f"config: expected a BertConfig, got {type(config).__name__}")
    V, P, C, L, F = config.vocab_size, config.max_seq_len, config.embed_dim, config.num_layers, config.ffn_dim
    embeddings = V * C + P * C + config.type_vocab_size * C + 2 * C  # three tables + their LayerNorm
    block = (4 * C * C + 4 * C) + (2 * C * F + F + C) + 4 * C  # attention + FFN + two LayerNorms
    return embeddings + L * block + (C * C + C if pooler else 0)


def llama_parameter_count(config: LlamaConfig) -> int:
    """Total parameters of a Llama-style model (no biases; GQA shrinks k and v to ``H_kv·D`` columns).

        V·C [+ V·C untied head]  +  L·(2C·H·D + 2C·H_kv·D + 3C·F + 2C)  +  C

    (``H·D = C`` unless the config sets its own ``head_dim``, so q and out are usually ``C²`` each.)

    Example:
        >>> llama_parameter_count(LlamaConfig(vocab_size=32000, embed_dim=4096, num_layers=32,
        ...                                   num_heads=32, num_kv_heads=32, ffn_dim=11008))   # Llama-2-7B
        6738415616
    """
    if not isinstance(config, LlamaConfig):
        raise ValueError(f"config: expected a LlamaConfig, got {type(config).__name__}")
    V, C, L, F = config.vocab_size, config.embed_dim, config.num_layers, config.ffn_dim
    q_width = config.num_heads * config.head_dim  # H · D
    kv_width = config.num_kv_heads * config.head_dim  # H_kv · D
    block = 2 * C * q_width + 2 * C * kv_width + 3 * C * F + 2 * C  # q, out | k, v | gate, up, down | 2 norms
    head = 0 if config.tie_embeddings else V * C
    return V * C + L * block + C + head
