"""Load Hugging Face ``transformers`` models into the course's models, weight by weight.

This is the only place where checkpoint names (``c_attn``, ``wte``, ``query``, ``o_proj``, ``wi``...)
appear. Each loader reads the Hugging Face config, builds our config, copies every tensor under our
teaching names (``q_proj``, ``out_proj``, ``ffn.up_proj``...), and returns the model in ``eval()``
mode with dropout set to 0. In ``eval()`` mode, in float32, both models then give the same outputs
(``tests/test_models.py`` checks it on random-weight models built from small configs).

Details that need care, model by model:

- **GPT-2** stores its projections as ``Conv1D`` with weights ``(in, out)``, the transpose of
  ``nn.Linear``'s ``(out, in)``; and packs q, k and v into one ``c_attn`` of width ``3C``.
- **BERT**: ``BertModel``'s pooler (a tanh layer on ``[CLS]``) has no counterpart and is skipped; the
  MLM decoder's bias lives in ``cls.predictions.bias``.
- **Llama**: only the default RoPE (no ``rope_scaling``), no biases; ``head_dim`` may differ from
  ``hidden / heads`` (as in Gemma or Qwen3-style configs).
- **gpt-oss**: every expert's gate and up projections are fused in one ``gate_up_proj`` ``(E, C, 2F)``
  with the gate in the even columns and the up projection in the odd ones (interleaved, not halves),
  stored ``(in, out)`` like GPT-2's ``Conv1D``; ``down_proj`` is ``(E, F, C)``. The sinks are the
  attention's ``sinks``; RoPE is YaRN with ``truncate=False``.
- **Qwen3-Next**: ``q_proj`` emits, per head, ``D`` query rows then ``D`` output-gate rows; ``gate_up_proj``
  is gate rows then up rows (halves); ``GatedDeltaNet.from_hf`` cuts its fused projections; norms: ``1 + w``.
- **T5**: the relative-bias table sits in the first layer of each stack; the ``C^-0.5`` output rescale
  applies when the checkpoint ties its embeddings (``scale_decoder_outputs`` in transformers 5,
  ``tie_word_embeddings`` before); only the ReLU FFN (original T5, not v1.1's gated GELU); ``d_kv``
  becomes ``head_dim`` (T5-3B and T5-11B have ``d_kv · num_heads > d_model``).

Nothing here imports ``transformers``: the loaders read attributes of the model object you pass.

Example (needs ``transformers``; random weights, no download)::

    from transformers import GPT2Config, GPT2LMHeadModel
    hf = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4)).eval()
    gpt = attn_edu.models.GPT.from_hf(hf)        # same logits as hf(ids).logits
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from attn_edu.delta_rule import GatedDeltaNet
from attn_edu.mla import MultiHeadLatentAttention
from attn_edu.models.bert import BERT, BertConfig, BertMLM
from attn_edu.models.gpt import GPT, GPTConfig
from attn_edu.models.gpt_oss import GptOss, GptOssConfig
from attn_edu.models.llama import Llama, LlamaConfig
from attn_edu.models.qwen3_next import Qwen3Next, Qwen3NextConfig
from attn_edu.models.t5 import T5, T5Config
from attn_edu.rope_scaling import RopeScaling

StateDict = dict[str, torch.Tensor]


def _load(ours: nn.Module, state: StateDict, like: nn.Module) -> Any:
    """Copy ``state`` into ``ours`` (every parameter must be named), match ``like``'s device and dtype."""
    missing, unexpected = ours.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"model: weights did not map cleanly; missing {missing}, unexpected {unexpected}")
    reference = next(like.parameters())
    return ours.to(device=reference.device, dtype=reference.dtype).eval()


def _linear(prefix: str, weight: torch.Tensor, bias: torch.Tensor | None = None) -> StateDict:
    out = {f"{prefix}.weight": weight}
    if bias is not None:
        out[f"{prefix}.bias"] = bias
    return out


def _norm(prefix: str, hf_norm: nn.Module) -> StateDict:
    return _linear(prefix, hf_norm.weight, getattr(hf_norm, "bias", None))


def _decoder_ends(model: Any) -> StateDict:
    """The token embedding, final norm and output head of a ``...ForCausalLM`` (a tied head is the same tensor)."""
    base = model.model
    ends = {"token_embedding": base.embed_tokens, "final_norm": base.norm, "lm_head": model.lm_head}
    return {f"{ours}.weight": theirs.weight for ours, theirs in ends.items()}


def _attention_projections(prefix: str, attn: nn.Module, *, q: bool = True) -> StateDict:
    """q (unless ``q=False``), k, v and output projections of an HF attention, with their biases if any."""
    names = {"q_proj": "q_proj"} if q else {}
    names |= {"k_proj": "k_proj", "v_proj": "v_proj", "out_proj": "o_proj"}
    state: StateDict = {}
    for ours, theirs in names.items():
        layer = getattr(attn, theirs)
        state |= _linear(f"{prefix}.{ours}", layer.weight, layer.bias)
    return state


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(f"model: {message}")


# ---------------------------------------------------------------------------------------------------
# GPT-2
# ---------------------------------------------------------------------------------------------------


def gpt_config_from_hf(config: Any) -> GPTConfig:
    """Our :class:`GPTConfig` from a ``transformers.GPT2Config``."""
    _require(
        config.activation_function == "gelu_new",
        f"GPT.from_hf expects GPT-2's tanh GELU ('gelu_new'), got {config.activation_function!r}",
    )
    _require(
        not config.scale_attn_by_inverse_layer_idx, "scale_attn_by_inverse_layer_idx=True is not supported"
    )
    _require(config.scale_attn_weights, "scale_attn_weights=False (no 1/sqrt(D)) is not supported")
    _require(not getattr(config, "add_cross_attention", False), "add_cross_attention=True is not supported")
    return GPTConfig(
        vocab_size=config.vocab_size,
        max_seq_len=config.n_positions,
        embed_dim=config.n_embd,
        num_layers=config.n_layer,
        num_heads=config.n_head,
        ffn_dim=config.n_inner if config.n_inner is not None else 4 * config.n_embd,
        norm_eps=config.layer_norm_epsilon,
        dropout=0.0,
        tie_embeddings=bool(getattr(config, "tie_word_embeddings", True)),
    )


def gpt_from_hf(model: Any) -> GPT:
    """A :class:`GPT` with the weights of ``GPT2LMHeadModel`` (or ``GPT2Model``, whose head is the embedding)."""
    base = getattr(model, "transformer", model)  # GPT2LMHeadModel wraps a GPT2Model in .transformer
    config = gpt_config_from_hf(model.config)
    C = config.embed_dim
    state: StateDict = {
        "token_embedding.weight": base.wte.weight,
        "position_embedding.embedding.weight": base.wpe.weight,
        **_norm("final_norm", base.ln_f),
    }
    for i, h in enumerate(base.h):
        p = f"blocks.{i}"
        # Conv1D keeps weights as (in, out): transpose to nn.Linear's (out, in), then cut q | k | v.
        q_w, k_w, v_w = h.attn.c_attn.weight.T.split(C, dim=0)  # 3 x (C, C)
        q_b, k_b, v_b = h.attn.c_attn.bias.split(C)  # 3 x (C,)
        state |= _norm(f"{p}.attn_norm", h.ln_1)
        state |= _linear(f"{p}.attn.q_proj", q_w, q_b)
        state |= _linear(f"{p}.attn.k_proj", k_w, k_b)
        state |= _linear(f"{p}.attn.v_proj", v_w, v_b)
        state |= _linear(f"{p}.attn.out_proj", h.attn.c_proj.weight.T, h.attn.c_proj.bias)
        state |= _norm(f"{p}.ffn_norm", h.ln_2)
        state |= _linear(f"{p}.ffn.up_proj", h.mlp.c_fc.weight.T, h.mlp.c_fc.bias)
        state |= _linear(f"{p}.ffn.down_proj", h.mlp.c_proj.weight.T, h.mlp.c_proj.bias)
    head = getattr(model, "lm_head", None)
    state["lm_head.weight"] = base.wte.weight if head is None else head.weight
    return _load(GPT(config), state, model)


# ---------------------------------------------------------------------------------------------------
# BERT
# ---------------------------------------------------------------------------------------------------


def bert_config_from_hf(config: Any) -> BertConfig:
    """Our :class:`BertConfig` from a ``transformers.BertConfig``."""
    _require(
        config.hidden_act == "gelu", f"BERT.from_hf expects exact GELU ('gelu'), got {config.hidden_act!r}"
    )
    _require(
        getattr(config, "position_embedding_type", "absolute") == "absolute",
        "only absolute position embeddings are supported",
    )
    _require(
        not getattr(config, "is_decoder", False), "BERT used as a decoder (is_decoder=True) is not supported"
    )
    return BertConfig(
        vocab_size=config.vocab_size,
        max_seq_len=config.max_position_embeddings,
        type_vocab_size=config.type_vocab_size,
        embed_dim=config.hidden_size,
        num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads,
        ffn_dim=config.intermediate_size,
        norm_eps=config.layer_norm_eps,
        dropout=0.0,
        tie_embeddings=bool(getattr(config, "tie_word_embeddings", True)),
    )


def _bert_state(bert: Any, prefix: str = "") -> StateDict:
    emb = bert.embeddings
    state: StateDict = {
        f"{prefix}token_embedding.weight": emb.word_embeddings.weight,
        f"{prefix}position_embedding.embedding.weight": emb.position_embeddings.weight,
        f"{prefix}token_type_embedding.weight": emb.token_type_embeddings.weight,
        **_norm(f"{prefix}embed_norm", emb.LayerNorm),
    }
    for i, layer in enumerate(bert.encoder.layer):
        p = f"{prefix}blocks.{i}"
        attn = layer.attention
        state |= _linear(f"{p}.attn.q_proj", attn.self.query.weight, attn.self.query.bias)
        state |= _linear(f"{p}.attn.k_proj", attn.self.key.weight, attn.self.key.bias)
        state |= _linear(f"{p}.attn.v_proj", attn.self.value.weight, attn.self.value.bias)
        state |= _linear(f"{p}.attn.out_proj", attn.output.dense.weight, attn.output.dense.bias)
        state |= _norm(f"{p}.attn_norm", attn.output.LayerNorm)  # post-norm: after the residual sum
        state |= _linear(f"{p}.ffn.up_proj", layer.intermediate.dense.weight, layer.intermediate.dense.bias)
        state |= _linear(f"{p}.ffn.down_proj", layer.output.dense.weight, layer.output.dense.bias)
        state |= _norm(f"{p}.ffn_norm", layer.output.LayerNorm)
    return state


def bert_from_hf(model: Any) -> BERT:
    """A :class:`BERT` with the weights of ``BertModel`` (the pooler is skipped) or of the ``.bert``
    encoder inside ``BertForMaskedLM`` and friends."""
    config = bert_config_from_hf(model.config)
    bert = getattr(model, "bert", model)
    return _load(BERT(config), _bert_state(bert), bert)


def bert_mlm_from_hf(model: Any) -> BertMLM:
    """A :class:`BertMLM` with the weights of ``BertForMaskedLM`` (encoder and ``cls.predictions`` head)."""
    _require(hasattr(model, "cls") and hasattr(model, "bert"), "BertMLM.from_hf expects a BertForMaskedLM")
    config = bert_config_from_hf(model.config)
    head = model.cls.predictions
    state = _bert_state(model.bert, prefix="bert.")
    state |= _linear("head.transform", head.transform.dense.weight, head.transform.dense.bias)
    state |= _norm("head.norm", head.transform.LayerNorm)
    state |= _linear("head.vocab_proj", head.decoder.weight, head.bias)
    return _load(BertMLM(config), state, model)


# ---------------------------------------------------------------------------------------------------
# Llama
# ---------------------------------------------------------------------------------------------------


def _rope_theta(config: Any) -> float:
    params = getattr(config, "rope_parameters", None) or {}  # transformers 5
    scaling = getattr(config, "rope_scaling", None)  # transformers 4
    rope_type = params.get("rope_type", (scaling or {}).get("rope_type", "default"))
    _require(rope_type == "default", f"only the default RoPE is supported, got rope_type={rope_type!r}")
    return float(params.get("rope_theta", getattr(config, "rope_theta", 10000.0)))


def _sliding_window(config: Any) -> int | None:
    """Mistral's ``sliding_window`` (None or absent: full attention); Qwen2's ``use_sliding_window=False`` too."""
    if not getattr(config, "use_sliding_window", True):
        return None
    return getattr(config, "sliding_window", None)


def llama_config_from_hf(config: Any) -> LlamaConfig:
    """Our :class:`LlamaConfig` from a ``transformers.LlamaConfig``."""
    _require(config.hidden_act == "silu", f"Llama.from_hf expects SwiGLU ('silu'), got {config.hidden_act!r}")
    _require(
        not getattr(config, "attention_bias", False) and not getattr(config, "mlp_bias", False),
        "biases are not supported",
    )
    return LlamaConfig(
        vocab_size=config.vocab_size,
        embed_dim=config.hidden_size,
        num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads,
        num_kv_heads=config.num_key_value_heads or config.num_attention_heads,
        head_dim=getattr(config, "head_dim", None),  # None: hidden_size / num_attention_heads
        ffn_dim=config.intermediate_size,
        norm_eps=config.rms_norm_eps,
        rope_base=_rope_theta(config),
        dropout=0.0,
        tie_embeddings=bool(config.tie_word_embeddings),
        sliding_window=_sliding_window(config),
    )


def llama_from_hf(model: Any) -> Llama:
    """A :class:`Llama` with the weights of ``LlamaForCausalLM`` (also Mistral-like models with the same names)."""
    _require(
        hasattr(model, "lm_head") and hasattr(model, "model"), "Llama.from_hf expects a LlamaForCausalLM"
    )
    config = llama_config_from_hf(model.config)
    base = model.model
    state = _decoder_ends(model)
    for i, layer in enumerate(base.layers):
        p = f"blocks.{i}"
        attn, mlp = layer.self_attn, layer.mlp
        state |= _norm(f"{p}.attn_norm", layer.input_layernorm)
        state |= _attention_projections(f"{p}.attn", attn)
        state |= _norm(f"{p}.ffn_norm", layer.post_attention_layernorm)
        state |= _linear(f"{p}.ffn.gate_proj", mlp.gate_proj.weight)
        state |= _linear(f"{p}.ffn.up_proj", mlp.up_proj.weight)
        state |= _linear(f"{p}.ffn.down_proj", mlp.down_proj.weight)
    return _load(Llama(config), state, model)


# ---------------------------------------------------------------------------------------------------
# gpt-oss
# ---------------------------------------------------------------------------------------------------


def _rope_from_hf(config: Any) -> tuple[float, RopeScaling | None]:
    """RoPE's base and scaling from transformers 5's ``rope_parameters``: the default rotation, or YaRN."""
    params = dict(getattr(config, "rope_parameters", None) or {})
    rope_type = params.get("rope_type", "default")
    base = float(params.get("rope_theta", getattr(config, "rope_theta", 10000.0)))
    _require(
        rope_type in ("default", "yarn"), f"only the default RoPE and YaRN are supported, got {rope_type!r}"
    )
    if rope_type == "default":
        return base, None
    _require(
        not (params.get("mscale") and params.get("mscale_all_dim")),
        "YaRN with DeepSeek's mscale and mscale_all_dim is not supported",
    )
    _require(params.get("factor") is not None, "YaRN needs rope_parameters['factor']")
    return base, RopeScaling(
        "yarn",
        float(params["factor"]),
        original_max_positions=int(params["original_max_position_embeddings"]),
        beta_fast=float(params.get("beta_fast") or 32.0),  # transformers: a missing or 0 value means 32
        beta_slow=float(params.get("beta_slow") or 1.0),
        truncate=bool(params.get("truncate", True)),
        attention_factor=params.get("attention_factor"),
    )


def _partial_rotary_factor(config: Any) -> float:
    """The share of each head that RoPE turns (1.0: all of it), from transformers 5's ``rope_parameters``."""
    return float((getattr(config, "rope_parameters", None) or {}).get("partial_rotary_factor", 1.0))


def gpt_oss_config_from_hf(config: Any) -> GptOssConfig:
    """Our :class:`GptOssConfig` from a ``transformers.GptOssConfig``."""
    _require(_partial_rotary_factor(config) == 1.0, "partial RoPE is not supported")
    _require(config.attention_bias, "GptOss.from_hf expects gpt-oss's attention biases (attention_bias=True)")
    rope_base, rope_scaling = _rope_from_hf(config)
    return GptOssConfig(
        vocab_size=config.vocab_size,
        embed_dim=config.hidden_size,
        num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads,
        num_kv_heads=config.num_key_value_heads or config.num_attention_heads,
        head_dim=getattr(config, "head_dim", None),
        num_experts=config.num_local_experts,
        experts_per_token=config.num_experts_per_tok,
        ffn_dim=config.intermediate_size,
        swiglu_limit=float(config.swiglu_limit),
        swiglu_alpha=float(config.swiglu_alpha),
        norm_eps=config.rms_norm_eps,
        rope_base=rope_base,
        rope_scaling=rope_scaling,
        sliding_window=config.sliding_window,
        layer_types=tuple(config.layer_types),
        tie_embeddings=bool(config.tie_word_embeddings),
    )


def _gpt_oss_experts(prefix: str, experts: Any) -> StateDict:
    """One layer's experts: cut the interleaved ``gate_up_proj`` into our ``gate_proj`` and ``up_proj``."""
    state: StateDict = {}
    for e in range(experts.gate_up_proj.shape[0]):
        fused, fused_bias = experts.gate_up_proj[e], experts.gate_up_proj_bias[e]  # (C, 2F), (2F,)
        p = f"{prefix}.{e}"
        # Stored (in, out): transpose to nn.Linear's (out, in). Gates in even columns, ups in odd ones.
        state |= _linear(f"{p}.gate_proj", fused[:, ::2].T, fused_bias[::2])  # (F, C), (F,)
        state |= _linear(f"{p}.up_proj", fused[:, 1::2].T, fused_bias[1::2])  # (F, C), (F,)
        state |= _linear(f"{p}.down_proj", experts.down_proj[e].T, experts.down_proj_bias[e])  # (C, F), (C,)
    return state


def gpt_oss_from_hf(model: Any) -> GptOss:
    """A :class:`GptOss` with the weights of ``GptOssForCausalLM``."""
    _require(
        hasattr(model, "lm_head") and hasattr(getattr(model, "config", None), "num_local_experts"),
        "GptOss.from_hf expects a GptOssForCausalLM (its config has num_local_experts)",
    )
    config = gpt_oss_config_from_hf(model.config)
    base = model.model
    state = _decoder_ends(model)
    for i, layer in enumerate(base.layers):
        p = f"blocks.{i}"
        attn, mlp = layer.self_attn, layer.mlp
        state |= _norm(f"{p}.attn_norm", layer.input_layernorm)
        state |= _attention_projections(f"{p}.attn", attn)
        state[f"{p}.attn.attention_fn.sinks"] = attn.sinks  # (H,)
        state |= _norm(f"{p}.ffn_norm", layer.post_attention_layernorm)
        state |= _linear(f"{p}.ffn.router.gate", mlp.router.weight, mlp.router.bias)  # (E, C), (E,)
        state |= _gpt_oss_experts(f"{p}.ffn.experts", mlp.experts)
    return _load(GptOss(config), state, model)


# ---------------------------------------------------------------------------------------------------
# Qwen3-Next
# ---------------------------------------------------------------------------------------------------


def qwen3_next_config_from_hf(config: Any) -> Qwen3NextConfig:
    """Our :class:`Qwen3NextConfig` from a ``transformers.Qwen3NextConfig``."""
    _require(config.hidden_act == "silu", f"expects SiLU (SwiGLU) experts, got {config.hidden_act!r}")
    _require(config.norm_topk_prob, "only norm_topk_prob=True (the top k weights renormalised) is supported")
    rope_base, rope_scaling = _rope_from_hf(config)
    L, dense_only = config.num_hidden_layers, set(config.mlp_only_layers or ())
    # transformers' rule: a layer is dense if listed in mlp_only_layers or off the decoder_sparse_step grid
    dense = tuple(i for i in range(L) if i in dense_only or (i + 1) % config.decoder_sparse_step)
    return Qwen3NextConfig(
        vocab_size=config.vocab_size,
        embed_dim=config.hidden_size,
        num_layers=L,
        layer_types=tuple(config.layer_types),
        num_heads=config.num_attention_heads,
        num_kv_heads=config.num_key_value_heads or config.num_attention_heads,
        head_dim=getattr(config, "head_dim", None),
        partial_rotary_factor=_partial_rotary_factor(config),
        rope_base=rope_base,
        rope_scaling=rope_scaling,
        attention_bias=bool(config.attention_bias),
        linear_num_heads=config.linear_num_value_heads,
        linear_num_k_heads=config.linear_num_key_heads,
        linear_k_dim=config.linear_key_head_dim,
        linear_v_dim=config.linear_value_head_dim,
        conv_size=config.linear_conv_kernel_dim,
        num_experts=config.num_experts,
        experts_per_token=config.num_experts_per_tok,
        expert_ffn_dim=config.moe_intermediate_size,
        shared_expert_ffn_dim=config.shared_expert_intermediate_size,
        dense_layers=dense,
        ffn_dim=config.intermediate_size,
        norm_eps=config.rms_norm_eps,
        tie_embeddings=bool(config.tie_word_embeddings),
    )


def _swiglu(prefix: str, mlp: Any) -> StateDict:
    return {f"{prefix}.{n}.weight": getattr(mlp, n).weight for n in ("gate_proj", "up_proj", "down_proj")}


def _qwen3_next_attention(prefix: str, attn: Any, H: int, D: int) -> StateDict:
    """Cut the fused ``q_proj`` (per head: D query rows, then D gate rows) into ``q_proj`` and the output gate;
    the QK-norms' zero-centred weights copy as they are."""
    weight, bias = attn.q_proj.weight.view(H, 2 * D, -1), attn.q_proj.bias  # (H, 2D, C), (H·2D,) or None
    state = {f"{prefix}.qk_norm.{n}.weight": getattr(attn, n).weight for n in ("q_norm", "k_norm")}
    for name, rows in (("q_proj", slice(0, D)), ("output_gate.proj", slice(D, 2 * D))):
        cut_bias = None if bias is None else bias.view(H, 2 * D)[:, rows].reshape(H * D)  # (H·D,)
        state |= _linear(f"{prefix}.{name}", weight[:, rows].reshape(H * D, -1), cut_bias)  # (H·D, C)
    return state | _attention_projections(prefix, attn, q=False)


def _qwen3_next_moe(prefix: str, mlp: Any) -> StateDict:
    """The router, the experts (``gate_up_proj`` ``(E, 2F, C)``: gate rows, then up rows) and the shared expert."""
    state = _linear(f"{prefix}.router.gate", mlp.gate.weight)  # (E, C)
    experts, F = mlp.experts, mlp.experts.down_proj.shape[-1]
    for e in range(experts.gate_up_proj.shape[0]):
        state |= _linear(f"{prefix}.experts.{e}.gate_proj", experts.gate_up_proj[e, :F])  # (F, C)
        state |= _linear(f"{prefix}.experts.{e}.up_proj", experts.gate_up_proj[e, F:])  # (F, C)
        state |= _linear(f"{prefix}.experts.{e}.down_proj", experts.down_proj[e])  # (C, F)
    state |= _swiglu(f"{prefix}.shared_expert", mlp.shared_expert)
    return state | _linear(f"{prefix}.shared_expert_gate", mlp.shared_expert_gate.weight)  # (1, C)


def qwen3_next_from_hf(model: Any) -> Qwen3Next:
    """A :class:`Qwen3Next` with the weights of ``Qwen3NextForCausalLM``."""
    _require(
        hasattr(model, "lm_head") and hasattr(getattr(model, "config", None), "linear_num_value_heads"),
        "Qwen3Next.from_hf expects a Qwen3NextForCausalLM (its config has linear_num_value_heads)",
    )
    config, base = qwen3_next_config_from_hf(model.config), model.model
    state = _decoder_ends(model)  # the final norm is zero-centred on both sides
    for i, layer in enumerate(base.layers):
        p = f"blocks.{i}"
        state |= _norm(f"{p}.attn_norm", layer.input_layernorm)
        state |= _norm(f"{p}.ffn_norm", layer.post_attention_layernorm)
        if config.layer_types[i] == "linear_attention":
            delta = GatedDeltaNet.from_hf(layer.linear_attn).state_dict()  # cuts the fused projections
            state |= {f"{p}.attn.{name}": tensor for name, tensor in delta.items()}
        else:
            state |= _qwen3_next_attention(f"{p}.attn", layer.self_attn, config.num_heads, config.head_dim)
        state |= (_swiglu if i in config.dense_layers else _qwen3_next_moe)(f"{p}.ffn", layer.mlp)
    return _load(Qwen3Next(config), state, model)


# ---------------------------------------------------------------------------------------------------
# DeepSeek's multi-head latent attention
# ---------------------------------------------------------------------------------------------------


def mla_from_hf(attention: Any) -> MultiHeadLatentAttention:
    """A :class:`MultiHeadLatentAttention` with the weights of one ``DeepseekV3Attention`` (or V2) layer.

    Hugging Face's names: ``q_proj`` or ``q_a_proj``/``q_a_layernorm``/``q_b_proj`` (the query's low rank),
    ``kv_a_proj_with_mqa`` (the latent and the shared rotary key), ``kv_a_layernorm``, ``kv_b_proj`` (every
    head's ``W^UK`` and ``W^UV``), ``o_proj``.
    """
    _require(hasattr(attention, "kv_a_proj_with_mqa"), "mla_from_hf expects a DeepseekV3Attention layer")
    config = attention.config
    _require(not getattr(config, "attention_bias", False), "biases are not supported")
    _require(
        config.num_key_value_heads == config.num_attention_heads,
        "MLA's heads all have their own keys: expected num_key_value_heads == num_attention_heads",
    )
    ours = MultiHeadLatentAttention(
        config.hidden_size,
        config.num_attention_heads,
        kv_rank=config.kv_lora_rank,
        nope_dim=config.qk_nope_head_dim,
        rope_dim=config.qk_rope_head_dim,
        v_dim=config.v_head_dim,
        q_rank=config.q_lora_rank,
        rope_base=_rope_theta(config),
        rope_layout="interleaved" if getattr(config, "rope_interleave", True) else "half",
        norm_eps=config.rms_norm_eps,
    )
    if config.q_lora_rank is None:
        state = _linear("q_proj", attention.q_proj.weight)
    else:
        state = _linear("q_down", attention.q_a_proj.weight) | _linear("q_up", attention.q_b_proj.weight)
        state |= _norm("q_norm", attention.q_a_layernorm)
    state |= _linear("kv_down", attention.kv_a_proj_with_mqa.weight)
    state |= _norm("kv_norm", attention.kv_a_layernorm)
    state |= _linear("kv_up", attention.kv_b_proj.weight)
    state |= _linear("out_proj", attention.o_proj.weight)
    return _load(ours, state, attention)


# ---------------------------------------------------------------------------------------------------
# T5
# ---------------------------------------------------------------------------------------------------


def t5_config_from_hf(config: Any) -> T5Config:
    """Our :class:`T5Config` from a ``transformers.T5Config``."""
    _require(
        config.feed_forward_proj == "relu",
        f"T5.from_hf covers the original ReLU FFN, got feed_forward_proj={config.feed_forward_proj!r}",
    )
    # transformers 5 always ties and records the rescale separately; transformers 4 used tie_word_embeddings.
    tied = getattr(config, "scale_decoder_outputs", getattr(config, "tie_word_embeddings", True))
    return T5Config(
        vocab_size=config.vocab_size,
        embed_dim=config.d_model,
        num_layers=config.num_layers,
        num_decoder_layers=config.num_decoder_layers,
        num_heads=config.num_heads,
        head_dim=config.d_kv,
        ffn_dim=config.d_ff,
        num_buckets=config.relative_attention_num_buckets,
        max_distance=config.relative_attention_max_distance,
        norm_eps=config.layer_norm_epsilon,
        dropout=0.0,
        tie_embeddings=bool(tied),
    )


def _t5_attention(prefix: str, attn: Any) -> StateDict:
    return {
        **_linear(f"{prefix}.q_proj", attn.q.weight),
        **_linear(f"{prefix}.k_proj", attn.k.weight),
        **_linear(f"{prefix}.v_proj", attn.v.weight),
        **_linear(f"{prefix}.out_proj", attn.o.weight),
    }


def _t5_ffn(prefix: str, ffn: Any) -> StateDict:
    return {**_linear(f"{prefix}.up_proj", ffn.wi.weight), **_linear(f"{prefix}.down_proj", ffn.wo.weight)}


def t5_from_hf(model: Any) -> T5:
    """A :class:`T5` with the weights of ``T5ForConditionalGeneration``."""
    _require(
        all(hasattr(model, name) for name in ("encoder", "decoder", "lm_head")),
        "T5.from_hf expects a T5ForConditionalGeneration",
    )
    config = t5_config_from_hf(model.config)
    enc, dec = model.encoder, model.decoder
    # The bias tables live in layer 0 of each stack; every later layer reuses them.
    enc_bias = enc.block[0].layer[0].SelfAttention.relative_attention_bias
    dec_bias = dec.block[0].layer[0].SelfAttention.relative_attention_bias
    state: StateDict = {
        "token_embedding.weight": model.shared.weight,
        "lm_head.weight": model.lm_head.weight,
        "encoder_position_bias.embedding.weight": enc_bias.weight,
        "decoder_position_bias.embedding.weight": dec_bias.weight,
        "encoder_norm.weight": enc.final_layer_norm.weight,
        "decoder_norm.weight": dec.final_layer_norm.weight,
    }
    for i, block in enumerate(enc.block):
        self_attn, ff = block.layer  # T5LayerSelfAttention, T5LayerFF
        p = f"encoder_blocks.{i}"
        state |= _norm(f"{p}.attn_norm", self_attn.layer_norm)
        state |= _t5_attention(f"{p}.attn", self_attn.SelfAttention)
        state |= _norm(f"{p}.ffn_norm", ff.layer_norm)
        state |= _t5_ffn(f"{p}.ffn", ff.DenseReluDense)
    for i, block in enumerate(dec.block):
        self_attn, cross_attn, ff = block.layer  # ... plus T5LayerCrossAttention in the middle
        p = f"decoder_blocks.{i}"
        state |= _norm(f"{p}.self_attn_norm", self_attn.layer_norm)
        state |= _t5_attention(f"{p}.self_attn", self_attn.SelfAttention)
        state |= _norm(f"{p}.cross_attn_norm", cross_attn.layer_norm)
        state |= _t5_attention(f"{p}.cross_attn", cross_attn.EncDecAttention)
        state |= _norm(f"{p}.ffn_norm", ff.layer_norm)
        state |= _t5_ffn(f"{p}.ffn", ff.DenseReluDense)
    return _load(T5(config), state, model)
