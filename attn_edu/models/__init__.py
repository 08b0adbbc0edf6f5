"""Six Transformer families built from the same parts (:mod:`attn_edu.blocks`, :mod:`attn_edu.multihead`).

- :class:`GPT` (decoder only): learned positions, pre-norm LayerNorm, GELU (tanh), tied embeddings.
- :class:`BERT` (encoder only): learned positions + segments, post-norm, GELU, padding mask;
  :class:`BertMLM` adds the masked-language-model head.
- :class:`Llama` (decoder only): RoPE, RMSNorm, SwiGLU, grouped-query attention, no biases.
- :class:`GptOss` (decoder only): Llama's skeleton with attention biases and sinks, YaRN, alternating
  sliding/full layers and a mixture of clamped-SwiGLU experts.
- :class:`Qwen3Next` (decoder only): three Gated DeltaNet layers to each gated attention layer (QK-norm,
  partial RoPE), zero-centred RMSNorms, and a mixture of SwiGLU experts with a gated shared expert.
- :class:`AttentionOnlyTransformer`: attention layers only (no MLP), for finding induction heads.
- :class:`T5` (encoder-decoder): relative position bias, RMSNorm, ReLU, no ``1/sqrt(D)``, cross-attention.
- :class:`ToyDecoder`: embeddings, a stack of any decoder block type and a head, to train block types
  against each other (notebook 08); no ``from_hf``.

Each of the six families has a frozen config dataclass with tiny defaults and a ``from_hf(model)`` loader that copies a
Hugging Face ``transformers`` model (names are mapped in :mod:`attn_edu.interop`).

Example:
    >>> from attn_edu.models import GPT, GPTConfig
    >>> GPT(GPTConfig())(torch.zeros(1, 4, dtype=torch.long)).shape
    torch.Size([1, 4, 64])
"""

from __future__ import annotations

import torch  # noqa: F401  (used by the doctest above)

from attn_edu.models.attention_only import AttentionOnlyConfig, AttentionOnlyTransformer
from attn_edu.models.bert import BERT, BertConfig, BertMLM, MaskedLMHead
from attn_edu.models.gpt import GPT, GPTConfig
from attn_edu.models.gpt_oss import GptOss, GptOssConfig
from attn_edu.models.llama import Llama, LlamaConfig
from attn_edu.models.qwen3_next import Qwen3Next, Qwen3NextConfig
from attn_edu.models.t5 import T5, T5Config
from attn_edu.models.toy_decoder import ToyDecoder

__all__ = [
    "AttentionOnlyConfig",
    "AttentionOnlyTransformer",
    "BERT",
    "GPT",
    "T5",
    "BertConfig",
    "BertMLM",
    "GPTConfig",
    "GptOss",
    "GptOssConfig",
    "Llama",
    "LlamaConfig",
    "MaskedLMHead",
    "Qwen3Next",
    "Qwen3NextConfig",
    "T5Config",
    "ToyDecoder",
]
