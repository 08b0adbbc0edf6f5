"""Checks for the two GPT-2 exercises that build a real model from Hugging Face's weights and match it:

- 08.5 (notebook 08) a whole GPT-2 block from its twelve raw tensors, against the library's
  :class:`attn_edu.blocks.PreNormDecoderBlock` with those weights (what ``transformers.GPT2Block`` computes);
- 09.5 (notebook 09) a tiny GPT-2's logits from Hugging Face's weights (per-layer tensors stacked on a leading
  dim), against :class:`attn_edu.models.GPT` with those weights (what ``transformers.GPT2LMHeadModel`` computes).

They share the weight layout (Conv1D weights are ``(in, out)``) and the known slips (no causal mask, the exact
GELU, a transposed projection, heads split by a plain reshape), so they share this module.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attn_edu import masks
from attn_edu.blocks import FeedForward, PreNormDecoderBlock
from attn_edu.grading.exercise import Case, Exercise, Mistake
from attn_edu.models import GPT, GPTConfig
from attn_edu.multihead import MultiHeadAttention

# ---------------------------------------------------------------------------------------------------------
# 08.5 a GPT-2 block from Hugging Face's weights (build and verify against transformers' GPT2Block)

GPT2_NORM_EPS = 1e-5  # GPT2Config.layer_norm_epsilon


def gpt2_block_weights(g: torch.Generator, C: int, hidden: int) -> tuple[torch.Tensor, ...]:
    """A GPT-2 block's twelve tensors in Hugging Face's order and layout (``Conv1D`` weights are (in, out))."""

    def rand(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return scale * torch.randn(*shape, generator=g)

    return (
        1.0 + rand(C, scale=0.5),  # ln_1.weight (C,): not all ones, so a forgotten norm shows
        rand(C, scale=0.5),  # ln_1.bias (C,)
        rand(C, 3 * C, scale=C**-0.5),  # attn.c_attn.weight (C, 3C): q | k | v side by side
        rand(3 * C, scale=0.5),  # attn.c_attn.bias (3C,)
        rand(C, C, scale=C**-0.5),  # attn.c_proj.weight (C, C)
        rand(C, scale=0.5),  # attn.c_proj.bias (C,)
        1.0 + rand(C, scale=0.5),  # ln_2.weight (C,)
        rand(C, scale=0.5),  # ln_2.bias (C,)
        rand(C, hidden, scale=C**-0.5),  # mlp.c_fc.weight (C, hidden)
        rand(hidden, scale=0.5),  # mlp.c_fc.bias (hidden,)
        rand(hidden, C, scale=hidden**-0.5),  # mlp.c_proj.weight (hidden, C)
        rand(C, scale=0.5),  # mlp.c_proj.bias (C,)
    )


def _gpt2_block_cases(g: torch.Generator) -> list[Case]:
    def x(B: int, T: int, C: int) -> torch.Tensor:
        return 2.0 * torch.randn(B, T, C, generator=g) + 0.5  # not zero-mean, not unit-scale

    return [
        Case((x(2, 5, 12), *gpt2_block_weights(g, 12, 48), 3)),  # D = 4, hidden = 4C as in GPT-2
        Case((x(1, 7, 15), *gpt2_block_weights(g, 15, 60), 5)),  # D = 3
        Case((x(3, 6, 21), *gpt2_block_weights(g, 21, 40), 7)),  # D = 3, hidden not 4C
        Case((x(2, 4, 10), *gpt2_block_weights(g, 10, 40), 2)),  # D = 5
        Case((x(1, 9, 18), *gpt2_block_weights(g, 18, 72), 3)),  # D = 6
    ]


def gpt2_block_state(*weights: torch.Tensor) -> dict[str, torch.Tensor]:
    """The state dict of the library's GPT-2 block (:class:`attn_edu.blocks.PreNormDecoderBlock`) from
    Hugging Face's twelve tensors, mapped as :func:`attn_edu.interop.gpt_from_hf` maps them: each Conv1D
    weight transposed to nn.Linear's (out, in), and c_attn cut into q, k and v."""
    ln_1_w, ln_1_b, c_attn_w, c_attn_b, c_proj_w, c_proj_b, ln_2_w, ln_2_b, fc_w, fc_b, proj_w, proj_b = (
        weights
    )
    C = ln_1_w.shape[0]
    q_w, k_w, v_w = c_attn_w.T.split(C, dim=0)  # 3 x (C, C), nn.Linear layout
    q_b, k_b, v_b = c_attn_b.split(C)  # 3 x (C,)
    return {
        "attn_norm.weight": ln_1_w, "attn_norm.bias": ln_1_b,
        "attn.q_proj.weight": q_w, "attn.q_proj.bias": q_b,
        "attn.k_proj.weight": k_w, "attn.k_proj.bias": k_b,
        "attn.v_proj.weight": v_w, "attn.v_proj.bias": v_b,
        "attn.out_proj.weight": c_proj_w.T, "attn.out_proj.bias": c_proj_b,
        "ffn_norm.weight": ln_2_w, "ffn_norm.bias": ln_2_b,
        "ffn.up_proj.weight": fc_w.T, "ffn.up_proj.bias": fc_b,
        "ffn.down_proj.weight": proj_w.T, "ffn.down_proj.bias": proj_b,
    }  # fmt: skip


def _gpt2_block_reference(x: torch.Tensor, *args: torch.Tensor | int) -> torch.Tensor:
    """The library's GPT-2 block with Hugging Face's weights copied in (:func:`gpt2_block_state`)."""
    *weights, num_heads = args
    C, hidden = weights[8].shape  # mlp.c_fc.weight (C, hidden)
    block = PreNormDecoderBlock(
        MultiHeadAttention(C, int(num_heads)),
        FeedForward(C, hidden, activation="gelu_tanh"),
        nn.LayerNorm(C, eps=GPT2_NORM_EPS),
        nn.LayerNorm(C, eps=GPT2_NORM_EPS),
    )
    block.load_state_dict(gpt2_block_state(*weights))
    return block.eval()(x).detach()  # (B, T, C)


def gpt2_block_variant(
    x, ln_1_w, ln_1_b, c_attn_w, c_attn_b, c_proj_w, c_proj_b, ln_2_w, ln_2_b, fc_w, fc_b, proj_w, proj_b,
    num_heads, *, causal=True, gelu="tanh", proj_transposed=False, scale_dim=None, split_by_reshape=False,
    pre_norm=True,
):  # fmt: skip
    """The GPT-2 block with one piece swapped for a wrong one (the known mistakes below)."""
    B, T, C = x.shape
    H = num_heads
    D = C // H

    def heads(t: torch.Tensor) -> torch.Tensor:
        if split_by_reshape:
            return t.reshape(B, H, T, D)  # tokens and channels mixed
        return t.view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)

    def attention(h: torch.Tensor) -> torch.Tensor:
        q, k, v = (h @ c_attn_w + c_attn_b).split(C, dim=-1)  # 3 x (B, T, C)
        q, k, v = heads(q), heads(k), heads(v)  # (B, H, T, D)
        scores = (
            q @ k.transpose(-2, -1) / (D if scale_dim is None else scale_dim(C, D)) ** 0.5
        )  # (B, H, T, T)
        if causal:
            scores = scores.masked_fill(~masks.causal_mask(T), float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v  # (B, H, T, D)
        merged = out.reshape(B, T, C) if split_by_reshape else out.transpose(1, 2).reshape(B, T, C)
        return merged @ (c_proj_w.T if proj_transposed else c_proj_w) + c_proj_b  # (B, T, C)

    def mlp(h: torch.Tensor) -> torch.Tensor:
        act = nn.functional.gelu(h @ fc_w + fc_b, approximate=gelu)  # (B, T, hidden)
        return act @ proj_w + proj_b  # (B, T, C)

    def ln(h: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return nn.functional.layer_norm(h, (C,), w, b, GPT2_NORM_EPS)

    if pre_norm:
        x = x + attention(ln(x, ln_1_w, ln_1_b))
        return x + mlp(ln(x, ln_2_w, ln_2_b))  # (B, T, C)
    x = ln(x + attention(x), ln_1_w, ln_1_b)
    return ln(x + mlp(x), ln_2_w, ln_2_b)  # (B, T, C)


GPT2_BLOCK = Exercise(
    exercise_id="08.5",
    kind="build",
    title="a whole GPT-2 block from Hugging Face's weights: pre-norm, causal, tanh GELU, Conv1D (in, out) layout",
    function_name="gpt2_block",
    arg_names=(
        "x",
        "ln_1_weight",
        "ln_1_bias",
        "attn_c_attn_weight",
        "attn_c_attn_bias",
        "attn_c_proj_weight",
        "attn_c_proj_bias",
        "ln_2_weight",
        "ln_2_bias",
        "mlp_c_fc_weight",
        "mlp_c_fc_bias",
        "mlp_c_proj_weight",
        "mlp_c_proj_bias",
        "num_heads",
    ),  # fmt: skip
    reference=_gpt2_block_reference,
    make_cases=_gpt2_block_cases,
    mistakes=(
        Mistake(
            lambda *a: gpt2_block_variant(*a, causal=False),
            "there is no causal mask: GPT-2 is a decoder, so token t may attend only to tokens 0 .. t. Set "
            "the scores of future keys to -inf before the softmax.",
        ),
        Mistake(
            lambda *a: gpt2_block_variant(*a, gelu="none"),
            "the FFN uses the exact (erf) GELU; GPT-2's activation, 'gelu_new', is the tanh approximation: "
            'F.gelu(h, approximate="tanh"). The two differ by up to about 1e-3.',
        ),
        Mistake(
            lambda *a: gpt2_block_variant(*a, proj_transposed=True),
            "attn.c_proj.weight is used transposed: GPT-2's Conv1D stores its weight as (in, out), so a "
            "projection is h @ weight + bias, with no .T (the opposite of nn.Linear).",
        ),
        Mistake(
            lambda *a: gpt2_block_variant(*a, scale_dim=lambda C, D: C),
            "the scores are divided by sqrt(C), the model width; each head compares D = C / num_heads "
            "numbers, so divide by sqrt(D).",
        ),
        Mistake(
            lambda *a: gpt2_block_variant(*a, split_by_reshape=True),
            "the heads are split by a plain reshape to (B, H, T, D), which cuts tokens instead of channels: "
            "view(B, T, H, D).transpose(1, 2), and the reverse to merge them.",
        ),
        Mistake(
            lambda *a: gpt2_block_variant(*a, pre_norm=False),
            "the norms come after the residual sums (post-norm, as in GPT-1 and BERT); GPT-2 normalises the "
            "input of each sub-layer: x + attn(ln_1(x)), then x + mlp(ln_2(x)).",
        ),
    ),
    hints=(
        "GPT-2's Conv1D weights are (in, out): a projection is h @ weight + bias. c_attn makes q, k and v at "
        "once, side by side in its 3C outputs, in that order.",
        "the attention sub-layer: LayerNorm with ln_1 (eps 1e-5), c_attn, cut into q | k | v, split each into "
        "heads, causal softmax of q kᵀ / sqrt(D), merge the heads, c_proj, and add to x.",
        "the MLP sub-layer reads the updated x: LayerNorm with ln_2, c_fc, the tanh GELU "
        '(F.gelu with approximate="tanh"), mlp c_proj, and add to x once more.',
    ),
    difficulty=3,
    minutes=25,
)


# ---------------------------------------------------------------------------------------------------------
# 09.5 a tiny GPT-2 forward pass from Hugging Face's weights (build and verify against GPT2LMHeadModel)

GPT2_LAYER_ARGS = (
    "ln_1_weight", "ln_1_bias", "attn_c_attn_weight", "attn_c_attn_bias", "attn_c_proj_weight", "attn_c_proj_bias",
    "ln_2_weight", "ln_2_bias", "mlp_c_fc_weight", "mlp_c_fc_bias", "mlp_c_proj_weight", "mlp_c_proj_bias",
)  # fmt: skip


def _gpt2_model_case(g: torch.Generator, B: int, T: int, V: int, P: int, C: int, L: int, H: int) -> Case:
    layers = [gpt2_block_weights(g, C, 4 * C) for _ in range(L)]
    stacked = tuple(torch.stack(parts) for parts in zip(*layers, strict=True))  # each (L, ...)
    return Case(
        (
            torch.randint(0, V, (B, T), generator=g),  # input_ids (B, T)
            torch.randn(V, C, generator=g),  # wte_weight (V, C), also the tied lm_head
            0.5 * torch.randn(P, C, generator=g),  # wpe_weight (P, C), P >= T
            *stacked,
            1.0 + 0.5 * torch.randn(C, generator=g),  # ln_f_weight (C,)
            0.5 * torch.randn(C, generator=g),  # ln_f_bias (C,)
            H,
        )
    )


def _gpt2_model_cases(g: torch.Generator) -> list[Case]:
    return [
        _gpt2_model_case(g, 2, 5, 37, 11, 12, 2, 3),  # B, T, V, P, C, L, H
        _gpt2_model_case(g, 1, 7, 29, 7, 15, 1, 5),  # one layer; T = P, every position used
        _gpt2_model_case(g, 3, 6, 41, 13, 10, 3, 2),  # three layers
        _gpt2_model_case(g, 2, 4, 23, 9, 18, 2, 3),
    ]


def _split_gpt2_args(args: tuple) -> tuple:
    input_ids, wte, wpe, *rest = args
    *stacked, ln_f_w, ln_f_b, num_heads = rest
    return input_ids, wte, wpe, stacked, ln_f_w, ln_f_b, int(num_heads)


def _gpt2_model_reference(*args: torch.Tensor | int) -> torch.Tensor:
    """The library's :class:`attn_edu.models.GPT` with the weights copied in, block by block."""
    input_ids, wte, wpe, stacked, ln_f_w, ln_f_b, num_heads = _split_gpt2_args(args)
    (V, C), P, L = wte.shape, wpe.shape[0], stacked[0].shape[0]
    config = GPTConfig(
        vocab_size=V, max_seq_len=P, embed_dim=C, num_layers=L, num_heads=num_heads,
        ffn_dim=stacked[8].shape[-1], norm_eps=GPT2_NORM_EPS,
    )  # fmt: skip
    state = {
        "token_embedding.weight": wte, "lm_head.weight": wte,  # tied: one (V, C) matrix
        "position_embedding.embedding.weight": wpe,
        "final_norm.weight": ln_f_w, "final_norm.bias": ln_f_b,
    }  # fmt: skip
    for i in range(L):
        block = gpt2_block_state(*(t[i] for t in stacked))
        state |= {f"blocks.{i}.{name}": t for name, t in block.items()}
    model = GPT(config)
    model.load_state_dict(state)
    return model.eval()(input_ids).detach()  # (B, T, V)


def _gpt2_model_variant(*args, positions=True, final_norm=True, **block_slip):  # noqa: ANN001, ANN202
    """The forward pass with one piece swapped for a wrong one (the known mistakes below)."""
    input_ids, wte, wpe, stacked, ln_f_w, ln_f_b, num_heads = _split_gpt2_args(args)
    T = input_ids.shape[1]
    x = wte[input_ids] + (wpe[:T] if positions else 0.0)  # (B, T, C)
    for i in range(stacked[0].shape[0]):
        x = gpt2_block_variant(x, *(t[i] for t in stacked), num_heads, **block_slip)  # (B, T, C)
    if final_norm:
        x = F.layer_norm(x, (x.shape[-1],), ln_f_w, ln_f_b, GPT2_NORM_EPS)  # (B, T, C)
    return x @ wte.T  # (B, T, V)


GPT2_MODEL = Exercise(
    exercise_id="09.5",
    kind="build",
    title="a tiny GPT-2 to logits from Hugging Face's weights: embeddings, L blocks, ln_f, tied lm_head",
    function_name="gpt2_logits",
    arg_names=(
        "input_ids",
        "wte_weight",
        "wpe_weight",
        *GPT2_LAYER_ARGS,
        "ln_f_weight",
        "ln_f_bias",
        "num_heads",
    ),
    reference=_gpt2_model_reference,
    make_cases=_gpt2_model_cases,
    mistakes=(
        Mistake(
            lambda *a: _gpt2_model_variant(*a, positions=False),
            "the position embeddings are missing: GPT-2's input is wte[input_ids] + wpe[positions], with "
            "positions 0 .. T - 1; without them the model cannot tell the order of the tokens.",
        ),
        Mistake(
            lambda *a: _gpt2_model_variant(*a, final_norm=False),
            "the final LayerNorm is missing: GPT-2 normalises the stream once more after the last block "
            "(ln_f, Radford et al., 2019, §2.3) before the lm_head.",
        ),
        Mistake(
            lambda *a: _gpt2_model_variant(*a, causal=False),
            "the blocks have no causal mask: each token may attend only to itself and the tokens before it.",
        ),
        Mistake(
            lambda *a: _gpt2_model_variant(*a, gelu="none"),
            "the MLP uses the exact (erf) GELU; GPT-2's 'gelu_new' is the tanh approximation, "
            'F.gelu(h, approximate="tanh").',
        ),
    ),
    hints=(
        "three stages: embed (a token row plus a position row per token), run the L blocks in order, then "
        "ln_f and the tied head. Layer i's tensors are the i-th slices of the stacked ones.",
        "each block is Exercise 08.5's: pre-norm, causal, Conv1D weights (in, out), the tanh GELU. The position "
        "rows are the first T rows of wpe_weight.",
        "the lm_head has no weight of its own: it reuses wte_weight, (V, C), so the logits of a normalised "
        "stream (B, T, C) come from a product with its transpose.",
    ),
    difficulty=3,
    minutes=25,
)


EXERCISES = (GPT2_BLOCK, GPT2_MODEL)
