"""Checks for notebook 05's exercises: split and merge heads, a multi-head forward pass, ``repeat_kv``,
self-attention from the packed weights of :class:`torch.nn.MultiheadAttention`, a GQA layer's parameters
(measured: the learner builds the projections on the meta device and counts them), and 05.7, grouped-query
attention end to end.

The references are :func:`attn_edu.multihead.split_heads`, :func:`attn_edu.multihead.merge_heads`,
:class:`attn_edu.multihead.MultiHeadAttention` (weights copied in; biases only for 05.5; ``num_kv_heads`` and
``is_causal`` for 05.7), :func:`attn_edu.multihead.repeat_kv`, and for 05.6 the tensors of a real
MultiHeadAttention built on the meta device. Cases use odd head counts, sizes that are not powers of
two, ``T != S`` and ``T != D`` (so that a transposed result cannot pass by having the right shape). The
known-wrong versions below are the usual slips: a reshape that cuts tokens instead of channels,
channels dealt out to heads in turn, transposing the wrong dimensions, a missing ``W^O``, the scale
``1/sqrt(C)`` instead of ``1/sqrt(D)``, kv heads tiled instead of repeated in place, torch's
``(out, in)`` weights used untransposed or its biases left out, K and V counted at full width, and in 05.7
kv heads shared in the wrong order, no causal mask, a missing scale; its bfloat16 case (a property, judged at
bfloat16's resolution) names an answer computed in bfloat16 at every step and one that returns float32.
"""

from __future__ import annotations

import math

import torch

from attn_edu import masks
from attn_edu.grading.exercise import (
    OVERFLOW_HINT,
    Case,
    Exercise,
    Mistake,
    Property,
    overflow_diagnosis,
    unshifted_softmax,
)
from attn_edu.multihead import MultiHeadAttention, merge_heads, repeat_kv, split_heads


def _randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=g)


# ---------------------------------------------------------------------------------------------------------
# 05.1 split heads


def _split_cases(g: torch.Generator) -> list[Case]:
    return [
        Case((_randn(g, 2, 5, 12), 3)),  # D = 4
        Case((_randn(g, 1, 7, 15), 5)),  # D = 3, five heads
        Case((_randn(g, 3, 4, 18), 3)),  # D = 6
        Case((_randn(g, 2, 6, 14), 7)),  # D = 2, seven heads
        Case((_randn(g, 1, 3, 10), 1)),  # one head: just a new axis
    ]


def _interleaved_split(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    B, T, C = x.shape
    return x.view(B, T, C // num_heads, num_heads).permute(0, 3, 1, 2)  # head h gets channels h, h+H, ...


SPLIT = Exercise(
    exercise_id="05.1",
    title="split (B, T, C) into heads (B, H, T, D): head h gets channels h*D .. (h+1)*D - 1",
    function_name="split_heads",
    arg_names=("x", "num_heads"),
    # A wrapper defined here, in the checks: the package function itself, handed to check(), counts
    # as a learner calling the package (attn_edu.grading.watch_shortcuts).
    reference=lambda x, num_heads: split_heads(x, num_heads),
    make_cases=_split_cases,
    mistakes=(
        Mistake(
            lambda x, num_heads: x.reshape(x.shape[0], num_heads, x.shape[1], -1),
            "a reshape straight to (B, H, T, D) cuts the *tokens'* rows into pieces (memory is laid out "
            "token by token), so a head mixes channels of different tokens: view(B, T, H, D) first, then "
            "transpose(1, 2).",
        ),
        Mistake(
            _interleaved_split,
            "the heads are interleaved: head h got channels h, h + H, h + 2H, ... Each head owns one "
            "contiguous block of D channels: view(B, T, H, D), not view(B, T, D, H).",
        ),
        Mistake(
            lambda x, num_heads: x.view(x.shape[0], x.shape[1], num_heads, -1),
            "the heads are cut but not moved: the result is (B, T, H, D); transpose(1, 2) puts the head "
            "axis next to the batch, (B, H, T, D).",
        ),
        Mistake(
            lambda x, num_heads: x.view(x.shape[0], x.shape[1], num_heads, -1).transpose(2, 3),
            "the wrong dimensions are transposed: (B, T, H, D).transpose(2, 3) swaps heads and channels; "
            "swap the token and head axes, transpose(1, 2).",
        ),
        Mistake(
            lambda x, num_heads: x.view(x.shape[0], x.shape[1], num_heads, -1).permute(0, 2, 3, 1),
            "the result is (B, H, D, T), the layout of a transposed key; split_heads returns (B, H, T, D): "
            "transpose(1, 2) only.",
        ),
    ),
    hints=(
        "two steps: cut the last dimension C into (H, D), then move the head axis next to the batch.",
        "first give the tensor the shape (B, T, H, D) without moving any data (each token's C channels "
        "cut into H blocks of D); which two dimensions must then swap to get (B, H, T, D)?",
        "a sketch: unpack B, T, C from x.shape; view the tensor as (B, T, H, D) with D = C // num_heads; then "
        "swap the token and head axes.",
    ),
    difficulty=2,
    minutes=10,
)


# ---------------------------------------------------------------------------------------------------------
# 05.2 merge heads


def _merge_cases(g: torch.Generator) -> list[Case]:
    return [
        Case((_randn(g, 2, 3, 5, 4),)),
        Case((_randn(g, 1, 5, 7, 3),)),
        Case((_randn(g, 3, 7, 4, 2),)),
        Case((_randn(g, 2, 1, 6, 5),)),  # one head
        Case((_randn(g, 1, 3, 6, 6).transpose(2, 3),)),  # a non-contiguous input, as attention may return
    ]


def _merge_interleaved(x: torch.Tensor) -> torch.Tensor:
    B, H, T, D = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, T, H * D)  # channel d*H + h instead of h*D + d


MERGE = Exercise(
    exercise_id="05.2",
    title="merge heads (B, H, T, D) back into (B, T, C), head h in channels h*D .. (h+1)*D - 1",
    function_name="merge_heads",
    arg_names=("x",),
    reference=lambda x: merge_heads(x),
    make_cases=_merge_cases,
    mistakes=(
        Mistake(
            lambda x: x.reshape(x.shape[0], x.shape[2], -1),
            "a reshape straight to (B, T, C) without moving the heads back reads the memory head by "
            "head, so 'token t' gets pieces of other tokens: transpose(1, 2) to (B, T, H, D) first, "
            "then reshape(B, T, H * D).",
        ),
        Mistake(
            _merge_interleaved,
            "the heads are interleaved: channel h*D + d must hold head h's channel d, but yours holds "
            "it at d*H + h. Go through (B, T, H, D), not (B, T, D, H).",
        ),
        Mistake(
            lambda x: x.sum(dim=1),
            "the heads are summed: merging concatenates them, (B, T, H·D); mixing heads is the job of "
            "W^O, which comes after.",
        ),
        Mistake(
            lambda x: x.mean(dim=1),
            "the heads are averaged: merging concatenates them side by side, (B, T, H·D).",
        ),
    ),
    hints=(
        "undo split_heads step by step, in reverse order.",
        "swapping the head and token axes back gives (B, T, H, D); that tensor is no longer contiguous "
        "in memory, so flattening its last two axes needs an operation that may copy, not a plain view.",
        "a sketch: unpack B, H, T, D from x.shape; swap the head and token axes back, to (B, T, H, D); then "
        "flatten the last two axes into the H * D channels of each token.",
    ),
    difficulty=1,
    minutes=5,
)


# ---------------------------------------------------------------------------------------------------------
# 05.3 a multi-head attention forward pass from four weight matrices


def _weight(g: torch.Generator, out_features: int, in_features: int) -> torch.Tensor:
    return _randn(g, out_features, in_features) / math.sqrt(in_features)  # (out, in) like nn.Linear


def _mha_case(
    g: torch.Generator, B: int, T: int, S: int, C: int, H: int, kdim: int, vdim: int, mask: torch.Tensor | None
) -> Case:  # fmt: skip
    inputs = (_randn(g, B, T, C), _randn(g, B, S, kdim), _randn(g, B, S, vdim))  # query, key, value
    weights = (_weight(g, C, C), _weight(g, C, kdim), _weight(g, C, vdim), _weight(g, C, C))  # w_q, k, v, o
    return Case((*inputs, *weights, H), {} if mask is None else {"mask": mask})


def _mha_cases(g: torch.Generator) -> list[Case]:
    padding = masks.key_mask(masks.padding_mask(torch.tensor([9, 6, 4]), 9))  # (B, 1, 1, S)
    return [
        _mha_case(g, 2, 5, 7, 12, 3, 12, 12, None),
        _mha_case(g, 1, 6, 6, 10, 5, 10, 10, masks.causal_mask(6)),  # self-attention, causal
        _mha_case(g, 3, 4, 9, 14, 7, 14, 14, padding),  # cross-attention with padded keys
        _mha_case(g, 2, 3, 8, 18, 3, 7, 11, masks.causal_mask(3, 8)),  # kdim, vdim != C; T < S
        _mha_case(g, 1, 4, 5, 8, 1, 8, 8, None),  # one head
        _sharp_mha(_mha_case(g, 2, 4, 6, 12, 3, 12, 12, masks.causal_mask(4, 6))),  # a query's scores to 200
    ]


def _sharp_mha(case: Case) -> Case:
    """The case with its last query token scaled so that the largest score it has is 200, past exp's float32
    range (about 88), the other tokens left as they are: a softmax that does not subtract the row's maximum
    gives NaN there. Under a bottom-right causal mask the last query sees every key."""
    query, key, value, w_q, w_k, w_v, w_o, H = case.args
    q, k = split_heads(query @ w_q.T, H), split_heads(key @ w_k.T, H)  # (B, H, T, D), (B, H, S, D)
    last = q[..., -1:, :] @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, 1, S), the last query
    sharp = query.clone()
    sharp[:, -1] *= 200.0 / last.max()  # (B, T, C)
    return Case((sharp, key, value, w_q, w_k, w_v, w_o, H), case.kwargs)


def _mha_reference(query, key, value, w_q, w_k, w_v, w_o, num_heads, mask=None):
    C = query.shape[-1]
    layer = MultiHeadAttention(C, num_heads, bias=False, kdim=key.shape[-1], vdim=value.shape[-1])
    with torch.no_grad():
        for proj, w in [(layer.q_proj, w_q), (layer.k_proj, w_k), (layer.v_proj, w_v), (layer.out_proj, w_o)]:
            proj.weight.copy_(w)
        return layer(query, key, value, mask=mask)  # (B, T, C)


def _mha_variant(
    query, key, value, w_q, w_k, w_v, w_o, num_heads, mask=None, *, split=split_heads, merge=merge_heads,
    scale_dim=None, out=True, softmax=torch.softmax,
):  # fmt: skip
    """The forward pass with one piece swapped for a wrong one (the known mistakes below)."""
    q = split(query @ w_q.T, num_heads)  # (B, H, T, D)
    k = split(key @ w_k.T, num_heads)  # (B, H, S, D)
    v = split(value @ w_v.T, num_heads)  # (B, H, S, D)
    width = q.shape[-1] if scale_dim is None else scale_dim
    scores = q @ k.transpose(-2, -1) / math.sqrt(width)  # (B, H, T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    heads = softmax(scores, dim=-1) @ v  # (B, H, T, D)
    merged = merge(heads)  # (B, T, C)
    return merged @ w_o.T if out else merged  # (B, T, C)


def _split_by_reshape(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    return x.reshape(x.shape[0], num_heads, x.shape[1], -1)  # (B, H, T, D), tokens and channels mixed


def _merge_by_reshape(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(x.shape[0], x.shape[2], -1)  # (B, T, C), heads not moved back


def _unshifted_mha(*args, **kwargs) -> torch.Tensor:
    return _mha_variant(*args, **kwargs, softmax=unshifted_softmax)  # (B, T, C), NaN rows past a score of 88


MHA = Exercise(
    exercise_id="05.3",
    title="multi-head attention: project, split heads, attend, merge, apply W^O",
    function_name="multi_head_attention",
    arg_names=("query", "key", "value", "w_q", "w_k", "w_v", "w_o", "num_heads"),
    reference=_mha_reference,
    make_cases=_mha_cases,
    mistakes=(
        Mistake(
            lambda *a, **kw: _mha_variant(*a, **kw, out=False),
            "W^O is missing: after merging the heads, the output projection w_o mixes the heads and is "
            "part of the layer.",
        ),
        Mistake(
            lambda *a, **kw: _mha_variant(*a, **kw, scale_dim=a[0].shape[-1]),
            "the scores are divided by sqrt(C), the model width; each head compares D = C / H numbers, "
            "so divide by sqrt(D).",
        ),
        Mistake(
            lambda *a, **kw: _mha_variant(*a, **kw, merge=_merge_by_reshape),
            "the heads are merged without moving them back: (B, H, T, D).transpose(1, 2) before the "
            "reshape to (B, T, C); otherwise token t receives other tokens' outputs.",
        ),
        Mistake(
            lambda *a, **kw: _mha_variant(*a, **kw, split=_split_by_reshape, merge=_merge_by_reshape),
            "the heads are split and merged by a plain reshape: (B, T, C) -> (B, H, T, D) directly cuts "
            "tokens instead of channels. Use view(B, T, H, D).transpose(1, 2), and the reverse to merge.",
        ),
        Mistake(
            lambda *a, **kw: _mha_variant(*a, **kw, scale_dim=1),
            "the scores are not scaled: divide q kᵀ by sqrt(D), D = C / num_heads.",
        ),
        Mistake(_unshifted_mha, OVERFLOW_HINT),
    ),
    diagnoses=(overflow_diagnosis(_unshifted_mha),),
    hints=(
        "the weights follow a linear layer's layout, so each projection multiplies by the weight "
        "transposed. Project query, key and value, then split each into num_heads heads of width D = C / "
        "num_heads.",
        "per head: softmax(q kᵀ / √D) over the keys, with the masked scores set to -inf before it (mask "
        "True = may attend), times v; heads are split as in 05.1 (cut the channels, then move the head "
        "axis) and merged back as in 05.2.",
        "a sketch: q = split_heads(query @ w_q.T, num_heads), the same for k and v; scores = q @ "
        "k.transpose(-2, -1) / math.sqrt(D), masked_fill(~mask, float('-inf')) when a mask is given; "
        "torch.softmax over dim=-1, times v; merge the heads back to (B, T, C) and finish with the "
        "output projection, @ w_o.T.",
    ),
    difficulty=3,
    minutes=25,
)


# ---------------------------------------------------------------------------------------------------------
# 05.4 repeat_kv for grouped-query attention


def _repeat_cases(g: torch.Generator) -> list[Case]:
    return [
        Case((_randn(g, 2, 2, 5, 4), 3)),  # H_kv = 2, H = 6
        Case((_randn(g, 1, 3, 7, 6), 2)),  # H_kv = 3, H = 6
        Case((_randn(g, 2, 4, 3, 5), 3)),  # H_kv = 4, H = 12
        Case((_randn(g, 1, 1, 6, 3), 5)),  # MQA: one kv head for 5 query heads
        Case((_randn(g, 3, 5, 4, 2), 1)),  # H_kv = H: nothing to repeat
    ]


REPEAT_KV = Exercise(
    exercise_id="05.4",
    title="repeat each kv head n_rep times in place: query head h reads kv head h // n_rep",
    function_name="repeat_kv",
    arg_names=("x", "n_rep"),
    reference=lambda x, n_rep: repeat_kv(x, n_rep),
    make_cases=_repeat_cases,
    mistakes=(
        Mistake(
            lambda x, n_rep: x.repeat(1, n_rep, 1, 1),
            "the kv heads are tiled (0, 1, 0, 1, ...), so query head h reads kv head h mod H_kv; the "
            "grouped layout (attn_edu, Hugging Face) copies each kv head into consecutive slots (0, 0, "
            "1, 1, ...): query head h reads kv head ⌊h / n_rep⌋. Look for an operation that repeats each "
            "slice in place along the head axis.",
        ),
        Mistake(
            lambda x, n_rep: x.repeat_interleave(n_rep, dim=2),
            "the copies went along the sequence (dim 2): the result has n_rep × S keys. Repeat the "
            "heads, dim 1.",
        ),
        Mistake(
            lambda x, n_rep: x.repeat_interleave(n_rep, dim=-1),
            "the copies went along the head dimension D (the last one); repeat the heads, dim 1.",
        ),
    ),
    hints=(
        "the result has H = H_kv · n_rep heads; kv head j must fill slots j·n_rep .. (j+1)·n_rep - 1.",
        "tiling the whole head axis gives (0, 1, 0, 1); you want each head repeated in place (0, 0, 1, "
        "1): every slice of the head axis copied n_rep times before the next one, along dim 1, leaving S "
        "and D as they are.",
        "a sketch: one torch method copies every slice n_rep times in place along a dimension you choose "
        "(its name says it interleaves); choose the heads. Or insert an axis of size 1 after the heads, "
        "expand it to n_rep, and fold it into the head axis with a reshape.",
    ),
    difficulty=1,
    minutes=5,
)


# ---------------------------------------------------------------------------------------------------------
# 05.5 self-attention from the weights of torch.nn.MultiheadAttention


def _torch_mha_case(g: torch.Generator, B: int, T: int, C: int, H: int) -> Case:
    x, in_proj = _randn(g, B, T, C), (_randn(g, 3 * C, C) / math.sqrt(C), _randn(g, 3 * C))  # rows q, k, v
    return Case((x, *in_proj, _weight(g, C, C), _randn(g, C), H))  # then out_proj's weight and bias


def _torch_mha_cases(g: torch.Generator) -> list[Case]:
    return [
        _torch_mha_case(g, 2, 5, 12, 3),  # D = 4
        _torch_mha_case(g, 1, 7, 10, 5),  # D = 2, five heads
        _torch_mha_case(g, 3, 4, 18, 3),  # D = 6
        _torch_mha_case(g, 2, 6, 14, 7),  # seven heads
        _torch_mha_case(g, 1, 3, 9, 1),  # one head
        _sharp_torch_mha(_torch_mha_case(g, 2, 5, 12, 4)),  # scores of 200
    ]


def _sharp_torch_mha(case: Case) -> Case:
    """The case with the query rows of in_proj_weight and in_proj_bias scaled so that the largest score is 200."""
    x, weight, bias, out_weight, out_bias, H = case.args
    C = x.shape[-1]
    q = split_heads(x @ weight[:C].T + bias[:C], H)  # (B, H, T, D)
    k = split_heads(x @ weight[C : 2 * C].T + bias[C : 2 * C], H)  # (B, H, T, D)
    factor = torch.ones(3 * C)
    factor[:C] = 200.0 / (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).max()
    return Case((x, weight * factor[:, None], bias * factor, out_weight, out_bias, H))


def _torch_mha_reference(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, num_heads):
    C = x.shape[-1]
    layer = MultiHeadAttention(C, num_heads, bias=True)
    q_weight, k_weight, v_weight = in_proj_weight.split(C, dim=0)  # 3 x (C, C)
    q_bias, k_bias, v_bias = in_proj_bias.split(C, dim=0)  # 3 x (C,)
    with torch.no_grad():
        for proj, w, b in [
            (layer.q_proj, q_weight, q_bias),
            (layer.k_proj, k_weight, k_bias),
            (layer.v_proj, v_weight, v_bias),
            (layer.out_proj, out_proj_weight, out_proj_bias),
        ]:
            proj.weight.copy_(w)
            proj.bias.copy_(b)
        return layer(x)  # (B, T, C)


def _torch_mha_variant(
    x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, num_heads, *, transpose=True,
    in_bias=True, out_bias=True, scale_dim=None, softmax=torch.softmax,
):  # fmt: skip
    """The forward pass with one piece swapped for a wrong one (the known mistakes below)."""
    C = x.shape[-1]
    weights = [w.T if transpose else w for w in in_proj_weight.split(C, dim=0)]  # 3 x (C, C)
    biases = in_proj_bias.split(C, dim=0) if in_bias else (0.0, 0.0, 0.0)
    q, k, v = (split_heads(x @ w + b, num_heads) for w, b in zip(weights, biases))  # (B, H, T, D) each
    width = q.shape[-1] if scale_dim is None else scale_dim
    scores = q @ k.transpose(-2, -1) / math.sqrt(width)  # (B, H, T, T)
    heads = softmax(scores, dim=-1) @ v  # (B, H, T, D)
    out = merge_heads(heads) @ (out_proj_weight.T if transpose else out_proj_weight)  # (B, T, C)
    return out + out_proj_bias if out_bias else out


def _unshifted_torch_mha(*args) -> torch.Tensor:
    return _torch_mha_variant(*args, softmax=unshifted_softmax)  # (B, T, C), NaN rows past a score of 88


TORCH_MHA = Exercise(
    exercise_id="05.5",
    kind="build",
    title="self-attention from nn.MultiheadAttention's packed weights and biases",
    function_name="mha_from_torch",
    arg_names=("x", "in_proj_weight", "in_proj_bias", "out_proj_weight", "out_proj_bias", "num_heads"),
    reference=_torch_mha_reference,
    make_cases=_torch_mha_cases,
    mistakes=(
        Mistake(
            lambda *a: _torch_mha_variant(*a, transpose=False),
            "the weights are used untransposed: PyTorch stores them as (out_features, in_features), like "
            "a linear layer, so a projection multiplies by the transposed weight.",
        ),
        Mistake(
            lambda *a: _torch_mha_variant(*a, in_bias=False),
            "in_proj_bias is missing: slice it like the weight (q, then k, then v, C numbers each) and "
            "add each piece after its projection.",
        ),
        Mistake(
            lambda *a: _torch_mha_variant(*a, out_bias=False),
            "out_proj_bias is missing: the output projection is a linear layer with a bias, added after "
            "the product with its weight.",
        ),
        Mistake(
            lambda *a: _torch_mha_variant(*a, in_bias=False, out_bias=False),
            "both biases are missing: add in_proj_bias's three slices after the input projections and "
            "out_proj_bias after the output projection.",
        ),
        Mistake(
            lambda *a: _torch_mha_variant(*a, scale_dim=a[0].shape[-1]),
            "the scores are divided by sqrt(C), the model width; each head compares D = C / H numbers, "
            "so divide by sqrt(D).",
        ),
        Mistake(_unshifted_torch_mha, OVERFLOW_HINT),
    ),
    diagnoses=(overflow_diagnosis(_unshifted_torch_mha),),
    hints=(
        "in_proj_weight (3C, C) stacks three linear layers' weights on top of each other: rows 0 .. C - "
        "1 are W^Q, then W^K, then W^V; in_proj_bias (3C,) is stacked the same way.",
        "cut both into three pieces along dim 0, project x with each piece (times the transposed weight, "
        "plus its bias), then do what 05.3 did: split the heads, softmax(q kᵀ / √D) v, merge the heads.",
        "a sketch: w_q, w_k, w_v = in_proj_weight.chunk(3, dim=0) and the same for in_proj_bias; q = x @ "
        "w_q.T + b_q, and so on; attention per head as in 05.3; the output projection also has a bias: "
        "merged @ out_proj_weight.T + out_proj_bias.",
    ),
    difficulty=3,
    minutes=25,
)


# ---------------------------------------------------------------------------------------------------------
# 05.6 measure: the parameters of a grouped-query attention layer, checked on the module's own tensors

MODULE_COUNT = "the module's own parameters"


def _count_cases(g: torch.Generator) -> list[Case]:
    def layer(num_kv_heads: int, n_rep: int, bias: bool, group: str = "values") -> Case:
        H, head_dim = num_kv_heads * n_rep, int(torch.randint(3, 10, (), generator=g))  # odd widths too
        return Case((H * head_dim, H, num_kv_heads, bias), group=group)

    reps = torch.randint(2, 5, (3,), generator=g).tolist()  # query heads per kv head
    return [
        layer(5, 1, True),  # MHA: H_kv = H
        layer(2, reps[0], True),  # GQA
        layer(1, 7, True),  # MQA
        layer(3, reps[1], False),
        Case((4096, 32, 8, False)),  # a Llama-3-8B layer
        layer(2, reps[2], True, MODULE_COUNT),
        layer(1, 5, False, MODULE_COUNT),
        layer(3, 1, True, MODULE_COUNT),
        Case((4096, 32, 8, False), group=MODULE_COUNT),  # on the meta device: shapes without memory
    ]


def _module_count(d_model: int, num_heads: int, num_kv_heads: int, bias: bool) -> int:
    """The numbers a real MultiHeadAttention holds, built on the meta device (shapes without memory)."""
    with torch.device("meta"):
        layer = MultiHeadAttention(d_model, num_heads, num_kv_heads=num_kv_heads, bias=bias)
    return sum(p.numel() for p in layer.parameters())  # the tensors themselves, not a formula


def _count_holds(case: Case, output: torch.Tensor) -> str | None:
    counted = _module_count(*case.args)
    if output.ndim != 0 or output.is_floating_point() or int(output) != counted:
        return f"the module's tensors hold {counted:,} numbers (sum of p.numel()), the answer says {output.tolist()}"
    return None


def _count_with(d_model, num_heads, num_kv_heads, bias, *, kv_width=None, bias_width=None, out=True):
    """A known-wrong count: K and V ``kv_width`` wide, ``bias_width`` biases, or W^O left out."""
    kv = num_kv_heads * (d_model // num_heads) if kv_width is None else kv_width  # H_kv · D
    weights = d_model * d_model * (2 if out else 1) + 2 * d_model * kv
    biases = d_model * (2 if out else 1) + 2 * kv if bias_width is None else bias_width
    return torch.tensor(weights + (biases if bias else 0))


PARAMETER_COUNT = Exercise(
    exercise_id="05.6",
    kind="measure",
    title="measure a grouped-query attention layer's size: build its four projections on the meta device, count",
    function_name="attention_parameter_count",
    arg_names=("d_model", "num_heads", "num_kv_heads", "bias"),
    reference=lambda d_model, num_heads, num_kv_heads, bias: torch.tensor(
        _module_count(d_model, num_heads, num_kv_heads, bias)
    ),
    make_cases=_count_cases,
    mistakes=(
        Mistake(
            lambda d, h, kv, b: _count_with(d, h, kv, b, kv_width=d),
            "W^K and W^V are counted at full width: that is the MHA count. Under GQA they produce only "
            "num_kv_heads heads, d_model × (num_kv_heads · head_dim) each, where head_dim is d_model / "
            "num_heads.",
        ),
        Mistake(
            lambda d, h, kv, b: _count_with(d, h, kv, False),
            "the biases are missing: with a bias each projection has one bias per output feature, "
            "d_model for W^Q and W^O, num_kv_heads · head_dim for W^K and W^V.",
        ),
        Mistake(
            lambda d, h, kv, b: _count_with(d, h, kv, b, bias_width=4 * d),
            "the weights of W^K and W^V shrink but their biases are counted as d_model each: a bias has one "
            "number per output feature, num_kv_heads · head_dim for the kv projections.",
        ),
        Mistake(
            lambda d, h, kv, b: _count_with(d, h, kv, b, out=False),
            "W^O is missing: the output projection (d_model × d_model, plus its bias) is part of the layer.",
        ),
    ),
    properties=(
        Property(
            MODULE_COUNT,
            "build attn_edu's MultiHeadAttention with these sizes (num_kv_heads and bias as given) and "
            "add up the number of elements of its parameters: the answer must be that number.",
            holds=_count_holds,
        ),
    ),
    hints=(
        "measure instead of adding up a formula: build the layer's four projections as linear layers, "
        "without bias when bias is False, and count the numbers their tensors hold. On the meta device "
        "a layer has shapes but no memory, so a Llama-sized one costs nothing.",
        "each projection reads d_model features. The query and output projections write d_model; under "
        "GQA the key and value projections write only the features of the num_kv_heads heads they keep, "
        "each d_model / num_heads wide. Then add up the element counts of every parameter.",
        "a sketch: head_dim = d_model // num_heads; under with torch.device('meta'): build nn.Linear("
        "d_model, d_model, bias=bias) for q and out, nn.Linear(d_model, num_kv_heads * head_dim, "
        "bias=bias) for k and v; then add p.numel() over every p of every layer's parameters() and "
        "hand the sum back through torch.tensor.",
    ),
    difficulty=2,
    minutes=15,
)


# ---------------------------------------------------------------------------------------------------------
# 05.7 grouped-query attention end to end: project, split, share the kv heads, attend causally, merge, W^O


def _gqa_case(g: torch.Generator, B: int, T: int, C: int, H: int, H_kv: int) -> Case:
    D = C // H
    weights = (_weight(g, C, C), _weight(g, H_kv * D, C), _weight(g, H_kv * D, C), _weight(g, C, C))
    return Case((_randn(g, B, T, C), *weights, H, H_kv))  # x, w_q, w_k, w_v, w_o, num_heads, num_kv_heads


def _gqa_cases(g: torch.Generator) -> list[Case]:
    return [
        _gqa_case(g, 2, 5, 12, 6, 2),  # three query heads per kv head, D = 2
        _gqa_case(g, 1, 7, 15, 5, 1),  # MQA: one kv head for five query heads
        _gqa_case(g, 3, 4, 24, 4, 2),  # D = 6
        _gqa_case(g, 2, 6, 14, 7, 7),  # H_kv = H: plain multi-head attention
        _gqa_case(g, 1, 9, 36, 6, 3),  # D = 6, two query heads per kv head
        _sharp_gqa(_gqa_case(g, 2, 6, 16, 4, 2)),  # the last query's largest score 200: exp overflows
        _bf16_gqa(_gqa_case(g, 2, 8, 24, 6, 2)),  # a bfloat16 layer, scores up to about ±30
    ]


def _bf16_gqa(case: Case) -> Case:
    """The case in bfloat16, as a bf16 model hands it to the layer, with x three times larger: its scores (about
    nine times larger, up to about ±30) then sit where bfloat16 resolves only steps of 0.125, as a trained model's
    sharp heads do. Judged by :func:`_computed_in_float32`."""
    x, *weights, H, H_kv = case.args
    return Case(((3 * x).bfloat16(), *(w.bfloat16() for w in weights), H, H_kv), group=BF16_INPUTS)


def _sharp_gqa(case: Case) -> Case:
    """The case with its last token scaled so that its query's largest score is 200 or more, past exp's float32
    range; under the causal mask only the last query sees the last key, so every other row is left as it was."""
    x, w_q, w_k, w_v, w_o, H, H_kv = case.args
    q = split_heads(x @ w_q.T, H)  # (B, H, T, D)
    k = repeat_kv(split_heads(x @ w_k.T, H_kv), H // H_kv)  # (B, H, T, D)
    last = q[..., -1:, :] @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, 1, T)
    x_sharp = x.clone()
    x_sharp[:, -1] *= 200.0 / last.max()  # (B, T, C): the last token's query, key and value grow
    return Case((x_sharp, w_q, w_k, w_v, w_o, H, H_kv))


def _gqa_reference(x, w_q, w_k, w_v, w_o, num_heads, num_kv_heads):
    """The library's layer; a bfloat16 input is computed in float32 from the same values and the result rounded
    to bfloat16 once, at the end."""
    layer = MultiHeadAttention(x.shape[-1], num_heads, num_kv_heads=num_kv_heads, bias=False)
    with torch.no_grad():
        for proj, w in [(layer.q_proj, w_q), (layer.k_proj, w_k), (layer.v_proj, w_v), (layer.out_proj, w_o)]:
            proj.weight.copy_(w.float())
        return layer(x.float(), is_causal=True).to(x.dtype)  # (B, T, C)


# A bfloat16 output keeps 8 significant bits: one unit in its last place is up to 2^-7 of the value. An answer
# computed in float32 and rounded once lands within one unit of the reference, whatever the order of its
# operations; BF16_RTOL allows two. Rounding every intermediate to bfloat16 (scores, weights, products) lands
# several units off. BF16_ATOL covers outputs near 0.
BF16_RTOL, BF16_ATOL = 2.0**-6, 1e-3
BF16_INPUTS = "bfloat16 inputs"


def _bf16_gap(got: torch.Tensor, expected: torch.Tensor) -> float:
    """How far ``got`` lies outside bfloat16's tolerance around ``expected``, in multiples of it (<= 1: inside)."""
    allowed = BF16_ATOL + BF16_RTOL * expected.double().abs()
    return float(((got.double() - expected.double()).abs() / allowed).max())


def _computed_in_float32(case: Case, got: torch.Tensor) -> str | None:
    """A bfloat16 case: the output in bfloat16, within BF16_RTOL and BF16_ATOL of the float32 computation. A
    property is judged after the float32 cases pass, so an answer off here does its arithmetic in bfloat16."""
    x = case.args[0]
    expected = _gqa_reference(*case.args)  # (B, T, C) in bfloat16
    if got.shape != expected.shape:
        return f"expected shape {tuple(expected.shape)}, got {tuple(got.shape)}"
    gap = _bf16_gap(got, expected)
    error = float((got.double() - expected.double()).abs().max())
    tolerance = f"rtol 2^{math.log2(BF16_RTOL):.0f}, atol {BF16_ATOL:g}"
    off = f"max abs difference {error:.3g}, {gap:.1f} times bfloat16's tolerance ({tolerance})"
    if got.dtype != x.dtype:
        values = "the values are right" if gap <= 1 else f"computed in bfloat16 before converting: {off}"
        return f"the output is {got.dtype} for {x.dtype} inputs ({values}): a layer returns its input's dtype"
    if gap <= 1:
        return None
    return (
        f"{off}: the float32 cases pass, so some step (scores, weights or a product) still rounds to bfloat16"
    )


def _tiled_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    return x.repeat(1, n_rep, 1, 1)  # (B, H, S, D), kv heads in turn: 0, 1, 0, 1 instead of 0, 0, 1, 1


def _gqa_variant(
    x, w_q, w_k, w_v, w_o, num_heads, num_kv_heads, *, share=repeat_kv, merge=merge_heads, scale_dim=None,
    causal=True, out=True, softmax=torch.softmax,
):  # fmt: skip
    """Grouped-query attention with one piece swapped for a wrong one (the known mistakes below)."""
    T, n_rep = x.shape[-2], num_heads // num_kv_heads
    q = split_heads(x @ w_q.T, num_heads)  # (B, H, T, D)
    k = share(split_heads(x @ w_k.T, num_kv_heads), n_rep)  # (B, H_kv, T, D) -> (B, H, T, D)
    v = share(split_heads(x @ w_v.T, num_kv_heads), n_rep)  # (B, H, T, D)
    width = q.shape[-1] if scale_dim is None else scale_dim
    scores = q @ k.transpose(-2, -1) / math.sqrt(width)  # (B, H, T, T)
    if causal:
        scores = scores.masked_fill(~masks.causal_mask(T), float("-inf"))
    merged = merge(softmax(scores, dim=-1) @ v)  # (B, H, T, D) -> (B, T, C)
    return merged @ w_o.T if out else merged  # (B, T, C)


def _unshifted_gqa(*args) -> torch.Tensor:
    return _gqa_variant(*args, softmax=unshifted_softmax)  # (B, T, C), NaN rows past a score of 88


GQA = Exercise(
    exercise_id="05.7",
    title="grouped-query attention end to end: H query heads share H_kv key/value heads, causal, then W^O",
    function_name="gqa_attention",
    arg_names=("x", "w_q", "w_k", "w_v", "w_o", "num_heads", "num_kv_heads"),
    reference=_gqa_reference,
    make_cases=_gqa_cases,
    mistakes=(
        Mistake(
            lambda *a: _gqa_variant(*a, share=_tiled_kv),
            "the kv heads are shared in the wrong order: the copies were laid out in turn, so query head 1 "
            "reads kv head 1 instead of kv head 0. Each kv head serves a block of neighbouring query heads: "
            "copy every kv head in place, as in 05.4, before moving to the next.",
        ),
        Mistake(
            lambda *a: _gqa_variant(*a, scale_dim=1),
            "the scores are not scaled: divide them by the square root of the head width D = C / num_heads.",
        ),
        Mistake(
            lambda *a: _gqa_variant(*a, scale_dim=a[0].shape[-1]),
            "the scores are divided by the square root of the model width C; each head compares D = C / "
            "num_heads numbers, so the square root of D.",
        ),
        Mistake(
            lambda *a: _gqa_variant(*a, merge=_merge_by_reshape),
            "the heads are merged in the wrong order: the head axis must move back behind the tokens before "
            "the last two axes are folded into C, else token t receives other tokens' outputs.",
        ),
        Mistake(
            lambda *a: _gqa_variant(*a, causal=False),
            "the causal mask is missing: token t may attend to keys 0 .. t only, so hide the later keys "
            "before the softmax.",
        ),
        Mistake(
            lambda *a: _gqa_variant(*a, out=False),
            "W^O is missing: after merging the heads, the output projection w_o mixes them and is part of "
            "the layer.",
        ),
        Mistake(_unshifted_gqa, OVERFLOW_HINT),
    ),
    properties=(
        Property(
            BF16_INPUTS,
            "a bfloat16 layer hands over bfloat16 tensors, whose 8 significant bits store a score near 20 only "
            "to the nearest 0.125, so its softmax weight moves by up to 6 %. Compute in float32 from the same "
            "values (convert each input), and round the result to bfloat16 once, at the end: the layer returns "
            "its input's dtype.",
            holds=_computed_in_float32,
        ),
    ),
    diagnoses=(overflow_diagnosis(_unshifted_gqa),),
    hints=(
        "it is 05.3 with one change in the middle: the key and value projections make only num_kv_heads "
        "heads, and each of them is shared by a block of num_heads / num_kv_heads neighbouring query "
        "heads. Bring them to num_heads heads, and the rest is ordinary causal multi-head attention.",
        "project (w_k and w_v map C to num_kv_heads · D features, D = C / num_heads), split every "
        "projection into its own number of heads, repeat each kv head in place as in 05.4 so that kv head "
        "j serves query heads j · n_rep .. (j + 1) · n_rep - 1, hide the future keys with -inf, softmax "
        "over the keys, merge as in 05.2 and apply w_o.",
        "a sketch: q = split_heads(x @ w_q.T, num_heads); k = repeat_kv(split_heads(x @ w_k.T, "
        "num_kv_heads), num_heads // num_kv_heads), the same for v; scores = q @ k.transpose(-2, -1) / "
        "math.sqrt(D), masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float('-inf')); "
        "merge_heads(torch.softmax(scores, dim=-1) @ v) @ w_o.T; for bfloat16 inputs, x.float() and each "
        "w.float() first and out.to(x.dtype) last.",
    ),
    difficulty=3,
    minutes=40,
)


EXERCISES = (SPLIT, MERGE, MHA, REPEAT_KV, TORCH_MHA, PARAMETER_COUNT, GQA)
