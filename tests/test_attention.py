"""The reference attention against PyTorch's SDPA, plus the properties attention must have."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attn_edu.attention import (
    attention_entropy,
    attention_flops,
    attention_weights,
    masked_softmax,
    scaled_dot_product_attention,
)
from attn_edu.masks import causal_mask, key_mask, padding_mask


def _random_case(seed: int) -> dict:
    """One random problem: odd sizes, T != S, broadcast masks of several shapes."""
    g = torch.Generator().manual_seed(seed)

    def randint(lo: int, hi: int) -> int:
        return int(torch.randint(lo, hi + 1, (1,), generator=g))

    B, H, T, S, D, Dv = (
        randint(1, 3),
        randint(1, 5),
        randint(1, 13),
        randint(1, 17),
        randint(1, 24),
        randint(1, 9),
    )
    q = torch.randn(B, H, T, D, generator=g)
    k = torch.randn(B, H, S, D, generator=g)
    v = torch.randn(B, H, S, Dv, generator=g)
    mask_shape = [(B, H, T, S), (B, 1, 1, S), (T, S), (1, H, T, 1), (1, S)][seed % 5]
    mask = torch.rand(mask_shape, generator=g) > 0.3 if seed % 3 else None
    scale = [None, 0.5, 1.0 / D][seed % 3]
    return dict(q=q, k=k, v=v, mask=mask, scale=scale)


# A case's structure (mask shape: seed % 5; mask or none, and the scale: seed % 3) repeats every 15 seeds; only
# the random sizes differ after that. Fifteen seeds meet every structure once, each with its own odd sizes.
STRUCTURES = range(15)


@pytest.mark.parametrize("seed", STRUCTURES)
def test_matches_torch_sdpa(seed: int) -> None:
    case = _random_case(seed)
    q, k, v, mask, scale = case["q"], case["k"], case["v"], case["mask"], case["scale"]
    ours = scaled_dot_product_attention(q, k, v, mask, scale=scale)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("seed", STRUCTURES)
def test_gradients_match_torch_sdpa(seed: int) -> None:
    case = _random_case(seed)
    ins = [case[n].clone().requires_grad_() for n in "qkv"]
    ref = [case[n].clone().requires_grad_() for n in "qkv"]
    out = scaled_dot_product_attention(*ins, case["mask"], scale=case["scale"])
    expected = F.scaled_dot_product_attention(*ref, attn_mask=case["mask"], scale=case["scale"])
    grad = torch.randn_like(out)
    out.backward(grad)
    expected.backward(grad)
    for ours, theirs in zip(ins, ref):
        assert torch.isfinite(ours.grad).all()
        torch.testing.assert_close(ours.grad, theirs.grad, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("T", "S"), [(1, 1), (4, 4), (3, 7), (5, 9), (6, 2)])
def test_is_causal_is_bottom_right(T: int, S: int) -> None:
    g = torch.Generator().manual_seed(T * 31 + S)
    q, k, v = (
        torch.randn(2, 3, T, 8, generator=g),
        torch.randn(2, 3, S, 8, generator=g),
        torch.randn(2, 3, S, 5),
    )
    ours = scaled_dot_product_attention(q, k, v, is_causal=True)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(T, S, dtype=torch.bool).tril(S - T))
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    if S >= T:  # PyTorch's own bottom-right bias agrees where every query sees a key
        from torch.nn.attention.bias import causal_lower_right

        lower_right = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(T, S))
        torch.testing.assert_close(ours, lower_right, atol=1e-5, rtol=1e-5)


def test_is_causal_equals_torch_when_square() -> None:
    q, k, v = (torch.randn(2, 4, 11, 16) for _ in range(3))
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, is_causal=True),
        F.scaled_dot_product_attention(q, k, v, is_causal=True),
        atol=1e-5,
        rtol=1e-5,
    )


def test_torch_is_causal_differs_when_t_not_s() -> None:
    """PyTorch's `is_causal` is top-left aligned: for a KV cache it hides keys the new token must see."""
    q, k, v = torch.randn(1, 1, 2, 8), torch.randn(1, 1, 5, 8), torch.randn(1, 1, 5, 8)
    ours = scaled_dot_product_attention(q, k, v, is_causal=True)
    top_left = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert (ours - top_left).abs().max() > 1e-3


def test_causal_and_mask_combine() -> None:
    q, k, v = torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 3)
    pad = key_mask(padding_mask([5, 3], 5))  # (B, 1, 1, S)
    combined = pad & causal_mask(5)
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, pad, is_causal=True),
        F.scaled_dot_product_attention(q, k, v, attn_mask=combined),
        atol=1e-5,
        rtol=1e-5,
    )


def test_fully_masked_row_gives_zeros_and_finite_grads() -> None:
    q = torch.randn(1, 2, 3, 4, requires_grad=True)
    k = torch.randn(1, 2, 5, 4, requires_grad=True)
    v = torch.randn(1, 2, 5, 6, requires_grad=True)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False  # query 1 sees nothing
    out = scaled_dot_product_attention(q, k, v, mask)
    assert torch.equal(out[:, :, 1], torch.zeros(1, 2, 6))
    assert torch.isfinite(out).all()
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert torch.equal(q.grad[:, :, 1], torch.zeros(1, 2, 4))
    # the naive version (softmax of an all -inf row) really is NaN: that is what the guard prevents
    naive = torch.softmax(torch.full((5,), float("-inf")), dim=-1)
    assert torch.isnan(naive).all()


def test_score_bias_is_added_before_softmax() -> None:
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 5)
    bias = torch.randn(1, 3, 4, 6)
    ours = scaled_dot_product_attention(q, k, v, score_bias=bias)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)  # a float mask is added to the scores
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_half_precision_close_to_float32() -> None:
    q, k, v = (torch.randn(1, 2, 9, 16) for _ in range(3))
    ours = scaled_dot_product_attention(q.half(), k.half(), v.half(), is_causal=True)
    assert ours.dtype == torch.float16
    torch.testing.assert_close(
        ours.float(), scaled_dot_product_attention(q, k, v, is_causal=True), atol=2e-3, rtol=2e-3
    )


# ---------------------------------------------------------------- property tests

dims = st.integers(min_value=1, max_value=9)


@settings(max_examples=40, deadline=None)
@given(T=dims, S=dims, D=dims, seed=st.integers(0, 2**16), masked=st.booleans())
def test_rows_sum_to_one_and_masked_keys_get_zero(T: int, S: int, D: int, seed: int, masked: bool) -> None:
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, T, D, generator=g), torch.randn(2, S, D, generator=g)
    mask = torch.rand(2, T, S, generator=g) > 0.4 if masked else None
    w = attention_weights(q, k, mask)  # (2, T, S)
    assert (w >= 0).all()
    row_sums = w.sum(-1)
    if mask is None:
        torch.testing.assert_close(row_sums, torch.ones_like(row_sums))
    else:
        has_key = mask.any(-1)
        torch.testing.assert_close(row_sums[has_key], torch.ones_like(row_sums[has_key]))
        assert torch.equal(row_sums[~has_key], torch.zeros_like(row_sums[~has_key]))
        assert torch.equal(w[~mask], torch.zeros_like(w[~mask]))  # exactly zero, not just small


@settings(max_examples=30, deadline=None)
@given(T=dims, S=dims, seed=st.integers(0, 2**16))
def test_permutation_equivariance(T: int, S: int, seed: int) -> None:
    """Permuting queries permutes outputs; permuting key/value pairs together changes nothing."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = torch.randn(T, 6, generator=g), torch.randn(S, 6, generator=g), torch.randn(S, 4, generator=g)
    out = scaled_dot_product_attention(q, k, v)
    pq, pk = torch.randperm(T, generator=g), torch.randperm(S, generator=g)
    torch.testing.assert_close(scaled_dot_product_attention(q[pq], k, v), out[pq])
    torch.testing.assert_close(scaled_dot_product_attention(q, k[pk], v[pk]), out)


@settings(max_examples=30, deadline=None)
@given(T=st.integers(2, 12), t=st.integers(0, 10), seed=st.integers(0, 2**16))
def test_causal_output_ignores_the_future(T: int, t: int, seed: int) -> None:
    t = t % T
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, T, 8, generator=g)
    changed = x.clone()
    changed[:, t + 1 :] = torch.randn(1, T - t - 1, 8, generator=g)  # rewrite every token after t
    before = scaled_dot_product_attention(x, x, x, is_causal=True)
    after = scaled_dot_product_attention(changed, changed, changed, is_causal=True)
    torch.testing.assert_close(after[:, : t + 1], before[:, : t + 1])
    if t + 1 < T:
        assert not torch.allclose(after[:, t + 1 :], before[:, t + 1 :])


def test_default_scale_is_inverse_sqrt_head_dim() -> None:
    q, k = torch.randn(3, 16), torch.randn(5, 16)
    torch.testing.assert_close(attention_weights(q, k), attention_weights(q, k, scale=1 / math.sqrt(16)))
    assert not torch.allclose(attention_weights(q, k), attention_weights(q, k, scale=1.0))


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            dict(q=torch.randn(2, 3, 4), k=torch.randn(2, 5, 6), v=torch.randn(2, 5, 6)),
            r"k: expected shape \(\.\.\., S, D\) with D=4",
        ),
        (
            dict(q=torch.randn(2, 3, 4), k=torch.randn(2, 5, 4), v=torch.randn(2, 6, 4)),
            r"v: expected shape \(\.\.\., S, Dv\) with S=5",
        ),
        (
            dict(q=torch.randn(4), k=torch.randn(5, 4), v=torch.randn(5, 4)),
            r"q: expected shape \(\.\.\., T, D\)",
        ),
        (dict(q=torch.randn(2, 3, 4), k=torch.randn(3, 5, 4), v=torch.randn(3, 5, 4)), r"leading dims"),
        (
            dict(
                q=torch.randn(3, 4),
                k=torch.randn(5, 4),
                v=torch.randn(5, 4),
                mask=torch.ones(3, 4, dtype=torch.bool),
            ),
            r"mask: expected a shape that broadcasts to \(\.\.\., T, S\)",
        ),
        (
            dict(q=torch.randn(3, 4), k=torch.randn(5, 4), v=torch.randn(5, 4), mask=torch.zeros(3, 5)),
            r"mask: expected a bool mask",
        ),
        (dict(q=torch.randn(3, 4), k=torch.randn(5, 4).double(), v=torch.randn(5, 4)), r"one dtype"),
        (
            dict(q=torch.ones(3, 4, dtype=torch.long), k=torch.randn(5, 4), v=torch.randn(5, 4)),
            r"q: expected a floating-point tensor",
        ),
        (
            dict(q=torch.randn(3, 4), k=torch.randn(5, 4), v=torch.randn(5, 4), scale=float("nan")),
            r"scale: expected a finite number",
        ),
        (
            dict(
                q=torch.randn(3, 4), k=torch.randn(5, 4), v=torch.randn(5, 4), score_bias=torch.randn(2, 3, 5)
            ),
            r"score_bias: expected a shape that broadcasts",
        ),
    ],
)
def test_bad_input_names_argument_and_shape(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        scaled_dot_product_attention(**kwargs)


def test_non_tensor_input_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="q: expected a torch.Tensor, got list"):
        attention_weights([[1.0]], torch.randn(1, 1))


def test_float64_keeps_full_precision() -> None:
    q, k, v = (torch.randn(2, 3, 6, 8, dtype=torch.float64) for _ in range(3))
    ours = scaled_dot_product_attention(q, k, v, is_causal=True)
    assert ours.dtype == torch.float64
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(ours, theirs, atol=1e-12, rtol=1e-12)


def test_masked_softmax_zero_rows_and_errors() -> None:
    from attn_edu.attention import masked_softmax

    scores = torch.randn(3, 4)
    mask = torch.tensor([True, False, True, True]).expand(3, 4).clone()
    mask[2] = False
    w = masked_softmax(scores, mask)
    torch.testing.assert_close(w[:2], torch.softmax(scores[:2].masked_fill(~mask[:2], float("-inf")), -1))
    assert torch.equal(w[2], torch.zeros(4))
    with pytest.raises(ValueError, match="mask: expected a bool mask"):
        masked_softmax(scores, mask.float())
    with pytest.raises(ValueError, match="mask: expected a shape that broadcasts"):
        masked_softmax(scores, torch.ones(2, 4, dtype=torch.bool))


def _count_calls(monkeypatch: pytest.MonkeyPatch, module: object, names: tuple[str, ...]) -> Counter:
    """Replace ``module``'s validators ``names`` by wrappers that count their calls by argument name."""
    calls: Counter = Counter()
    for name in names:
        real = getattr(module, name)

        def counted(*args: object, _real=real, _name=name, **kwargs: object) -> object:
            label = args[0] if args and isinstance(args[0], str) else ""
            calls[f"{_name}({label})" if label else _name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)
    return calls


def test_each_public_function_checks_its_arguments_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The public functions validate; the core they share (``_weights``, ``_masked_softmax``) does not again."""
    import attn_edu.attention as attention

    names = ("check_qkv", "check_mask", "check_scale", "check_floating", "check_broadcast")
    calls = _count_calls(monkeypatch, attention, names)
    q, k, v = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 7, 4), torch.randn(2, 3, 7, 6)
    mask, bias = torch.rand(2, 1, 5, 7) > 0.3, torch.randn(3, 5, 7)
    once = {
        "check_qkv": 1,
        "check_mask(mask)": 1,
        "check_scale": 1,
        "check_floating(score_bias)": 1,
        "check_broadcast(score_bias)": 1,
    }
    for public in (attention.scaled_dot_product_attention, attention.attention_weights):
        calls.clear()
        args = (q, k, v) if public is attention.scaled_dot_product_attention else (q, k)
        public(*args, mask, is_causal=True, score_bias=bias)
        assert dict(calls) == once, public.__name__
    calls.clear()
    attention.masked_softmax(torch.randn(5, 7), mask[0, 0])
    assert dict(calls) == {"check_floating(scores)": 1, "check_mask(mask)": 1}


def test_a_module_call_checks_the_query_once_and_the_mask_at_two_entries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``MultiHeadAttention`` checks its query once, and its mask as its own argument; the attention
    function it calls is a public entry of its own and checks the mask once more, nothing below it."""
    import attn_edu.attention as attention
    import attn_edu.multihead as multihead

    module_calls = _count_calls(monkeypatch, multihead, ("check_shape", "check_mask"))
    function_calls = _count_calls(monkeypatch, attention, ("check_qkv", "check_mask"))
    mha = multihead.MultiHeadAttention(8, 2)
    mha(torch.randn(2, 5, 8), mask=causal_mask(5), is_causal=True)
    assert module_calls["check_shape(query)"] == 1
    assert module_calls["check_mask(mask)"] == 1
    assert dict(function_calls) == {"check_qkv": 1, "check_mask(mask)": 1}


# ---------------------------------------------------------------- attention entropy


@pytest.mark.parametrize("S", [1, 2, 7, 64])
def test_entropy_of_uniform_rows_is_log_s(S: int) -> None:
    weights = torch.full((2, 3, 5, S), 1 / S)  # (B, H, T, S)
    entropy = attention_entropy(weights)  # (B, H, T)
    assert entropy.shape == (2, 3, 5) and entropy.dtype == weights.dtype
    torch.testing.assert_close(entropy, torch.full((2, 3, 5), math.log(S)))


def test_entropy_of_one_hot_and_of_key_less_rows_is_zero() -> None:
    one_hot = F.one_hot(torch.tensor([[0, 3, 2], [1, 1, 0]]), 4).float()  # (B, T, S)
    assert torch.equal(attention_entropy(one_hot), torch.zeros(2, 3))
    no_key = masked_softmax(torch.randn(3, 4), torch.zeros(3, 4, dtype=torch.bool))  # (T, S) rows of zeros
    assert torch.equal(attention_entropy(no_key), torch.zeros(3))  # 0 · log 0 = 0, not NaN


@settings(max_examples=40, deadline=None)
@given(T=dims, S=dims, seed=st.integers(0, 2**16), sharpness=st.sampled_from([0.1, 1.0, 10.0]))
def test_entropy_matches_torch_categorical_between_zero_and_log_s(
    T: int, S: int, seed: int, sharpness: float
) -> None:
    g = torch.Generator().manual_seed(seed)
    scores = sharpness * torch.randn(2, T, S, generator=g, dtype=torch.float64)  # (B, T, S)
    mask = causal_mask(T, S) if seed % 2 else None  # exact zeros, and rows with no key when T > S
    w = masked_softmax(scores, mask)  # (B, T, S)
    ours = attention_entropy(w)  # (B, T)
    has_key = w.sum(-1) > 0  # Categorical needs a row that sums to 1
    theirs = torch.distributions.Categorical(probs=w[has_key]).entropy()
    torch.testing.assert_close(ours[has_key], theirs, atol=1e-12, rtol=1e-12)
    assert (ours >= 0).all() and (ours <= math.log(S) + 1e-12).all()


def test_entropy_of_half_precision_is_summed_in_float32() -> None:
    w = torch.softmax(torch.randn(4, 6, 300), dim=-1)  # (B, T, S) long rows of small weights
    for dtype in (torch.float16, torch.bfloat16):
        ours = attention_entropy(w.to(dtype))
        assert ours.dtype == dtype
        torch.testing.assert_close(ours.float(), attention_entropy(w), atol=2e-2, rtol=1e-2)


@pytest.mark.parametrize(
    ("weights", "error", "message"),
    [
        ([0.5, 0.5], TypeError, "weights: expected a torch.Tensor, got list"),
        (torch.tensor([1, 0]), ValueError, "weights: expected a floating-point tensor"),
        (torch.tensor(0.5), ValueError, r"weights: expected shape \(\.\.\., S\)"),
        (torch.tensor([1.2, -0.2]), ValueError, r"weights: expected probabilities >= 0 .* minimum -0.2"),
        (torch.tensor([float("nan"), 1.0]), ValueError, r"weights: expected probabilities >= 0 .* nan"),
    ],
)
def test_entropy_bad_input_names_the_argument(weights: object, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        attention_entropy(weights)


@pytest.mark.parametrize(
    ("B", "H", "T", "S", "D", "Dv"), [(2, 3, 5, 7, 4, 6), (1, 1, 1, 9, 5, 3), (3, 1, 4, 4, 2, 2)]
)
def test_flops_equal_pytorchs_flop_counter(B: int, H: int, T: int, S: int, D: int, Dv: int) -> None:
    from torch.utils.flop_counter import FlopCounterMode

    # The reference's two matrix products are what the counter sees (torch's fused CPU kernel, taken when
    # Dv == D, has no FLOP formula and counts 0, so it is not the peer here).
    q, k, v = torch.randn(B, H, T, D), torch.randn(B, H, S, D), torch.randn(B, H, S, Dv)
    with FlopCounterMode(display=False) as counter:
        scaled_dot_product_attention(q, k, v)
    assert counter.get_total_flops() == attention_flops(B, H, T, S, D, Dv)
    assert attention_flops(B, H, T, S, D) == attention_flops(B, H, T, S, D, D)  # Dv defaults to D


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ((0, 1, 2, 3, 4), "B: expected a positive int, got 0"),
        ((1, 1, 2.0, 3, 4), "T: expected a positive int, got 2.0"),
        ((1, True, 2, 3, 4), "H: expected a positive int, got True"),
        ((1, 1, 2, 3, 4, -5), "Dv: expected a positive int, got -5"),
    ],
)
def test_flops_bad_sizes_name_the_argument(sizes: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        attention_flops(*sizes)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(1, 3), max_size=4), min_size=1, max_size=3))
def test_the_validators_broadcast_rule_is_torchs(shapes: list[list[int]]) -> None:
    from attn_edu._validate import broadcast_shapes  # torch's own imports sympy on first use: 2 s

    try:
        expected = tuple(torch.broadcast_shapes(*shapes))
    except RuntimeError:
        with pytest.raises(RuntimeError, match="do not broadcast"):
            broadcast_shapes(*shapes)
    else:
        assert broadcast_shapes(*shapes) == expected
