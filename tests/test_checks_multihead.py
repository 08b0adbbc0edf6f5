"""Checks of notebook 05 (`attn_edu.grading.checks.multihead`): right answers pass, stubs are not attempted, mistakes are named."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attn_edu.grading import Status, check
from attn_edu.grading.exercise import make_cases
from attn_edu.grading.registry import get_exercise

IDS = ("05.1", "05.2", "05.3", "05.4", "05.5", "05.6", "05.7")
EXERCISES = {eid: get_exercise(eid) for eid in IDS}


# Independent correct versions: loops over heads, torch.nn.MultiheadAttention, index arithmetic.


def _split_by_chunks(x, num_heads):
    return torch.stack(x.chunk(num_heads, dim=-1), dim=1)  # H x (B, T, D) -> (B, H, T, D)


def _merge_by_cat(x):
    return torch.cat(x.unbind(dim=1), dim=-1)  # H x (B, T, D) -> (B, T, H·D)


def _mha_with_torch(query, key, value, w_q, w_k, w_v, w_o, num_heads, mask=None):
    C = query.shape[-1]
    layer = nn.MultiheadAttention(
        C, num_heads, bias=False, kdim=key.shape[-1], vdim=value.shape[-1], batch_first=True
    )
    with torch.no_grad():
        if layer.in_proj_weight is not None:
            layer.in_proj_weight.copy_(torch.cat([w_q, w_k, w_v]))
        else:
            layer.q_proj_weight.copy_(w_q)
            layer.k_proj_weight.copy_(w_k)
            layer.v_proj_weight.copy_(w_v)
        layer.out_proj.weight.copy_(w_o)
    if mask is None:
        attn_mask = None
    else:  # torch: True = ignore, one (T, S) mask per batch element and head
        B, T, S = query.shape[0], query.shape[1], key.shape[1]
        full = mask.expand(B, num_heads, T, S).reshape(B * num_heads, T, S)
        attn_mask = ~full
    return layer.eval()(query, key, value, attn_mask=attn_mask, need_weights=False)[0]


def _torch_mha_self(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, num_heads):
    # The production peer itself: nn.MultiheadAttention with the given parameters loaded into it.
    layer = nn.MultiheadAttention(x.shape[-1], num_heads, batch_first=True)
    with torch.no_grad():
        layer.in_proj_weight.copy_(in_proj_weight)
        layer.in_proj_bias.copy_(in_proj_bias)
        layer.out_proj.weight.copy_(out_proj_weight)
        layer.out_proj.bias.copy_(out_proj_bias)
        return layer.eval()(x, x, x, need_weights=False)[0]


def _repeat_by_index(x, n_rep):
    H = x.shape[1] * n_rep
    return x[:, torch.arange(H) // n_rep]  # query head h reads kv head h // n_rep


@pytest.mark.parametrize(
    "exercise_id, fn",
    [
        ("05.1", _split_by_chunks),
        ("05.2", _merge_by_cat),
        ("05.3", _mha_with_torch),
        ("05.4", _repeat_by_index),
        ("05.5", _torch_mha_self),
    ],
)
def test_independent_correct_versions_pass(exercise_id: str, fn) -> None:
    result = check(exercise_id, fn)
    assert result.status is Status.PASS, result


def test_an_sdpa_based_forward_passes() -> None:
    # A learner may use PyTorch's fused attention for the inner step: same polarity, same scale.
    def with_sdpa(query, key, value, w_q, w_k, w_v, w_o, num_heads, mask=None):
        q, k, v = (_split_by_chunks(t @ w.T, num_heads) for t, w in [(query, w_q), (key, w_k), (value, w_v)])
        return _merge_by_cat(F.scaled_dot_product_attention(q, k, v, attn_mask=mask)) @ w_o.T

    assert check("05.3", with_sdpa).status is Status.PASS


def test_view_after_transpose_is_an_error_not_a_crash() -> None:
    # .view on the transposed heads raises inside the learner's code: the check reports it as an ERROR.
    result = check("05.2", lambda x: x.transpose(1, 2).view(x.shape[0], x.shape[2], -1))
    assert result.status is Status.ERROR and "view" in result.message


# 05.6: the count read off torch's own layers, and the property that counts a real module's tensors.


def _count_from_torch_layers(d_model, num_heads, num_kv_heads, bias):
    kv_width = num_kv_heads * (d_model // num_heads)
    with torch.device("meta"):  # plain nn.Linear layers, no attn_edu: shapes without memory
        layers = [nn.Linear(d_model, width, bias=bias) for width in (d_model, kv_width, kv_width, d_model)]
    return torch.tensor(sum(p.numel() for layer in layers for p in layer.parameters()))


def test_a_count_from_torch_linear_layers_passes_05_6() -> None:
    result = check("05.6", _count_from_torch_layers)
    assert result.status is Status.PASS and "1 property holds" in result.message, result


def test_the_module_count_catches_an_answer_off_by_one() -> None:
    exercise = get_exercise("05.6")
    prop = exercise.properties[0]
    cases = [c for c in make_cases(exercise, 0) if c.group == prop.name]
    assert any(c.args[2] == 1 for c in cases) and any(c.args[3] for c in cases)  # MQA, and biases
    for case in cases:
        right = exercise.reference(*case.args)
        assert prop.holds(case, right) is None
        wrong = prop.holds(case, right + 1)
        assert wrong is not None and f"{int(right):,}" in wrong and f"{int(right) + 1}" in wrong, wrong
    assert prop.holds(cases[0], torch.tensor(float(exercise.reference(*cases[0].args)))) is not None


# 05.7: grouped-query attention end to end, against PyTorch's SDPA with enable_gqa as an independent peer.


def _gqa_with_torch_sdpa(x, w_q, w_k, w_v, w_o, num_heads, num_kv_heads):
    B, T, C = x.shape
    heads = lambda w, n: (x @ w.T).view(B, T, n, -1).transpose(1, 2)  # noqa: E731 - (B, n, T, D)
    out = F.scaled_dot_product_attention(
        heads(w_q, num_heads),
        heads(w_k, num_kv_heads),
        heads(w_v, num_kv_heads),
        is_causal=True,
        enable_gqa=True,
    )  # (B, H, T, D)
    return out.transpose(1, 2).reshape(B, T, C) @ w_o.T  # (B, T, C)


def _gqa_with_a_loop_over_query_heads(x, w_q, w_k, w_v, w_o, num_heads, num_kv_heads):
    B, T, C = x.shape
    D = C // num_heads
    q, k, v = x @ w_q.T, x @ w_k.T, x @ w_v.T  # (B, T, C), (B, T, H_kv·D), (B, T, H_kv·D)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    outs = []
    for h in range(num_heads):
        j = h // (num_heads // num_kv_heads)  # the kv head that serves query head h
        scores = q[..., h * D : (h + 1) * D] @ k[..., j * D : (j + 1) * D].transpose(-2, -1) / D**0.5
        outs.append(
            torch.softmax(scores.masked_fill(~causal, float("-inf")), -1) @ v[..., j * D : (j + 1) * D]
        )
    return torch.cat(outs, dim=-1) @ w_o.T  # (B, T, C)


PEERS = [_gqa_with_torch_sdpa, _gqa_with_a_loop_over_query_heads]


def _computed_in(dtype: torch.dtype, fn):
    """``fn`` as a bfloat16 layer should run it: in ``dtype`` from the same values, rounded to the input's dtype
    once, at the end."""

    def peer(x, *weights_and_heads):
        *weights, num_heads, num_kv_heads = weights_and_heads
        out = fn(x.to(dtype), *(w.to(dtype) for w in weights), num_heads, num_kv_heads)
        return out.to(x.dtype)

    return peer


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fn", PEERS)
def test_gqa_peers_pass_05_7(fn, dtype) -> None:
    result = check("05.7", _computed_in(dtype, fn))
    assert result.status is Status.PASS and "bfloat16 inputs" in result.message, result


def _bf16_cases(seed: int) -> list:
    return [c for c in make_cases(EXERCISES["05.7"], seed) if c.args[0].dtype == torch.bfloat16]


def test_the_bfloat16_tolerance_passes_precise_peers_and_fails_bfloat16_arithmetic() -> None:
    # On the bfloat16 cases of many seeds: every peer computed in float32 or float64 and rounded once holds;
    # the same peers run in bfloat16 throughout (the float32 code left as it was) do not.
    prop = next(p for p in EXERCISES["05.7"].properties if p.name == "bfloat16 inputs")
    cases = [case for seed in range(40) for case in _bf16_cases(seed)]
    assert len(cases) == 40
    for case in cases:
        for fn in PEERS:
            for dtype in (torch.float32, torch.float64):
                assert prop.holds(case, _computed_in(dtype, fn)(*case.args)) is None
            in_bf16 = fn(*case.args)
            assert in_bf16.dtype == torch.bfloat16
            assert "still rounds to bfloat16" in (prop.holds(case, in_bf16) or ""), fn.__name__


def test_the_bfloat16_case_has_scores_where_bfloat16_steps_are_coarse() -> None:
    # bfloat16 stores a number of size 16 to 32 to the nearest 0.125: scores there make its rounding visible.
    for case in _bf16_cases(0):
        x, w_q, w_k, *_, H, H_kv = (a.float() if isinstance(a, torch.Tensor) else a for a in case.args)
        q = (x @ w_q.T).unflatten(-1, (H, -1)).transpose(1, 2)
        k = (x @ w_k.T).unflatten(-1, (H_kv, -1)).transpose(1, 2).repeat_interleave(H // H_kv, dim=1)
        assert float((q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).abs().max()) > 16


@pytest.mark.parametrize(
    ("slip", "words"),
    [
        (lambda fn: fn, "still rounds to bfloat16"),  # the float32 code, run on bfloat16 unchanged
        (
            lambda fn: lambda x, *rest: _computed_in(torch.float32, fn)(x, *rest).float(),
            "the output is torch.float32 for torch.bfloat16 inputs (the values are right)",
        ),
        (
            lambda fn: lambda *args: fn(*args).float(),
            "the output is torch.float32 for torch.bfloat16 inputs (computed in bfloat16 before converting",
        ),
    ],
    ids=["bfloat16 throughout", "float32 returned", "bfloat16 then converted"],
)
def test_each_bfloat16_slip_is_named(slip, words) -> None:
    prop = next(p for p in EXERCISES["05.7"].properties if p.name == "bfloat16 inputs")
    result = check("05.7", slip(_gqa_with_a_loop_over_query_heads))
    assert result.status is Status.FAIL and result.points < EXERCISES["05.7"].points, result
    assert result.message.startswith("bfloat16 inputs: ") and words in result.message, result.message
    assert result.hint == prop.message


def test_gqa_cases_cover_mqa_mha_and_scores_past_exp_range() -> None:
    exercise = get_exercise("05.7")
    cases = make_cases(exercise, 0)
    ratios = {c.args[5] // c.args[6] for c in cases}
    assert 1 in ratios and any(c.args[6] == 1 for c in cases) and len(ratios) >= 3  # MHA, MQA and groups
    largest = []
    for case in cases:
        x, w_q, w_k, *_, H, H_kv = case.args
        q = (x @ w_q.T).unflatten(-1, (H, -1)).transpose(1, 2)
        k = (x @ w_k.T).unflatten(-1, (H_kv, -1)).transpose(1, 2).repeat_interleave(H // H_kv, dim=1)
        largest.append(float((q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).tril().max()))
    assert max(largest) > 88 > min(largest)


def test_gqa_kv_heads_in_the_wrong_order_are_named_however_they_are_written() -> None:
    # The tiled order written with expand and reshape instead of repeat: same slip, same message.
    def tiled(x, w_q, w_k, w_v, w_o, num_heads, num_kv_heads):
        B, T, C = x.shape
        n_rep = num_heads // num_kv_heads
        q = (x @ w_q.T).view(B, T, num_heads, -1).transpose(1, 2)
        k, v = ((x @ w.T).view(B, T, num_kv_heads, -1).transpose(1, 2) for w in (w_k, w_v))
        k, v = (t[:, None].expand(B, n_rep, *t.shape[1:]).reshape(B, num_heads, T, -1) for t in (k, v))
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        w = torch.softmax(
            (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).masked_fill(~mask, float("-inf")), -1
        )
        return (w @ v).transpose(1, 2).reshape(B, T, C) @ w_o.T

    result = check("05.7", tiled)
    assert result.status is Status.FAIL and "wrong order" in result.hint, result


def test_a_planted_wrong_gqa_fails_05_7() -> None:
    # Planted: the right layer with its output projection transposed.
    def planted(x, w_q, w_k, w_v, w_o, num_heads, num_kv_heads):
        return _gqa_with_torch_sdpa(x, w_q, w_k, w_v, w_o.T, num_heads, num_kv_heads)

    result = check("05.7", planted)
    assert result.status is Status.FAIL and "values differ" in result.message, result
