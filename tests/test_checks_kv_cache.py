"""Checks of notebook 10 (`attn_edu.grading.checks.kv_cache`): right answers pass, stubs are not attempted, mistakes are named."""

from __future__ import annotations

import pytest
import torch
from helpers import answer_key

from attn_edu.grading import Status, check
from attn_edu.grading.exercise import make_cases
from attn_edu.grading.given import tiny_lm
from attn_edu.grading.registry import get_exercise
from attn_edu.kv_cache import kv_cache_bytes

IDS = ("10.1", "10.2", "10.3", "10.4")
EXERCISES = {eid: get_exercise(eid) for eid in IDS}


# Independent correct versions: plain loops, a preallocated buffer, Hugging Face's logits warpers.


def _append_into_buffer(cache, new):
    B, H_kv, S, D = cache.shape
    out = cache.new_empty(B, H_kv, S + new.shape[2], D)
    out[:, :, :S] = cache
    out[:, :, S:] = new
    return out


def _bytes_by_loop(num_layers, num_heads, num_kv_heads, seq_len, head_dim, batch_size, dtype_bytes):
    sizes = []
    for L, H_kv, S, D, B, n in zip(
        *(x.tolist() for x in (num_layers, num_kv_heads, seq_len, head_dim, batch_size, dtype_bytes))
    ):
        one_tensor = torch.empty(B, H_kv, S, D, dtype={1: torch.int8, 2: torch.float16, 4: torch.float32}[n])
        sizes.append(L * 2 * one_tensor.numel() * one_tensor.element_size())  # K and V in every layer
    return torch.tensor(sizes)


def _hf_warped_probs(warper_name):
    transformers = pytest.importorskip("transformers")

    def probs(logits, value):
        warper = getattr(transformers, warper_name)(value)
        flat = logits.reshape(-1, logits.shape[-1])  # HF warpers take (B, V)
        warped = warper(torch.zeros(flat.shape[0], 1, dtype=torch.long), flat.clone())
        return torch.softmax(warped, dim=-1).reshape(logits.shape)

    return probs


@pytest.mark.parametrize(
    "exercise_id, fn",
    [("10.1", _append_into_buffer), ("10.2", _bytes_by_loop)],
)
def test_independent_correct_versions_pass(exercise_id: str, fn) -> None:
    result = check(exercise_id, fn)
    assert result.status is Status.PASS, result


@pytest.mark.parametrize("exercise_id, warper", [("10.3", "TopKLogitsWarper"), ("10.4", "TopPLogitsWarper")])
def test_hugging_face_warpers_pass(exercise_id: str, warper: str) -> None:
    result = check(exercise_id, _hf_warped_probs(warper))
    assert result.status is Status.PASS, result


def test_the_probabilities_of_the_references_sum_to_one_on_their_support() -> None:
    for exercise_id in ("10.3", "10.4"):
        exercise = EXERCISES[exercise_id]
        for case in make_cases(exercise, 0):
            probs = exercise.reference(*case.args)
            torch.testing.assert_close(probs.sum(dim=-1), torch.ones(probs.shape[:-1]))
    logits, k = EXERCISES["10.3"].make_cases(torch.Generator().manual_seed(0))[0].args
    assert int((EXERCISES["10.3"].reference(logits, k) > 0).sum()) == k


def test_a_float_size_gets_a_dtype_message() -> None:
    key = answer_key(EXERCISES["10.2"])
    result = check("10.2", lambda *columns: key(*columns).double())
    assert result.status is Status.FAIL and "int64" in result.message


# 10.5: the peer is PyTorch's own attention, F.scaled_dot_product_attention.


def _split(x, H):
    B, T, C = x.shape
    return x.view(B, T, H, C // H).transpose(1, 2)  # (B, H, T, D)


def _merge(x):
    B, H, T, D = x.shape
    return x.transpose(1, 2).reshape(B, T, H * D)  # (B, T, C)


def _decode_step_with_torch_sdpa(x, k_cache, v_cache, w_q, w_k, w_v, w_o, num_heads):
    q, k, v = (_split(x @ w.T, num_heads) for w in (w_q, w_k, w_v))  # (B, H, 1, D) each
    k, v = torch.cat([k_cache, k], dim=2), torch.cat([v_cache, v], dim=2)  # (B, H, S + 1, D)
    return _merge(torch.nn.functional.scaled_dot_product_attention(q, k, v)) @ w_o.T  # (B, 1, C)


def test_torch_sdpa_decoding_step_passes() -> None:
    result = check("10.5", _decode_step_with_torch_sdpa)
    assert result.status is Status.PASS, result


def test_decoding_step_equals_the_last_row_of_the_full_causal_forward() -> None:
    g = torch.Generator().manual_seed(1)
    B, S, C, H = 2, 8, 15, 5
    w_q, w_k, w_v, w_o = (torch.randn(C, C, generator=g) / C**0.5 for _ in range(4))
    tokens = torch.randn(B, S + 1, C, generator=g)  # (B, S + 1, C): the prefix, then the new token
    q, k, v = (_split(tokens @ w.T, H) for w in (w_q, w_k, w_v))  # (B, H, S + 1, D)
    full = _merge(torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)) @ w_o.T
    step = get_exercise("10.5").reference(tokens[:, -1:], k[:, :, :S], v[:, :, :S], w_q, w_k, w_v, w_o, H)
    torch.testing.assert_close(step, full[:, -1:], atol=1e-5, rtol=1e-4)


# 10.6: the bytes of a cache against the bytes of the weights, measured on the given model.


def _cache_bytes(cache) -> int:
    return sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.k, layer.v))


def _overtake_by_bisection(num_layers, num_heads, head_dim, batch_size, dtype, *, count=None, batch=None):
    """Bisect over prompt lengths, prefilling a fresh cache each time; the weights counted by distinct storage.
    ``count`` and ``batch`` plant a learner's slip (how the weights are counted, how many sequences are fed)."""
    model = tiny_lm(0, num_layers=num_layers, num_heads=num_heads, head_dim=head_dim, dtype=dtype)
    storages = {p.data_ptr(): p.numel() * p.element_size() for p in model.parameters()}
    weights = sum(storages.values()) if count is None else count(model)

    def cached(S: int) -> int:
        cache = model.new_cache()
        model(torch.zeros(batch_size if batch is None else batch, S, dtype=torch.long), cache, 0)
        return _cache_bytes(cache)

    low, high = 0, 1  # cached(low) < weights <= cached(high)
    while cached(high) < weights:
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if cached(middle) >= weights else (middle, high)
    return torch.tensor(high)


def test_a_bisection_over_prompt_lengths_passes() -> None:
    result = check("10.6", _overtake_by_bisection)
    assert result.status is Status.PASS, result


def _off_on_the_measured_cases(shift: int):
    measured = {c.args for c in make_cases(get_exercise("10.6"), 0) if c.group != "values"}
    return lambda *args: _overtake_by_bisection(*args) + (shift if args in measured else 0)


def test_the_models_own_cache_catches_an_answer_one_token_off() -> None:
    late, early = check("10.6", _off_on_the_measured_cases(1)), check("10.6", _off_on_the_measured_cases(-1))
    for result, verdict in ((late, "already as many, so S ="), (early, "): fewer")):
        assert result.status is Status.FAIL and result.message.startswith("measured on the model's cache"), (
            result
        )
        assert "the model's cache holds" in result.message and verdict in result.message, result


_SLIPS = {  # a learner's measurement with one slip, and the words its message must contain
    "tied twice": (
        dict(count=lambda m: sum(t.numel() * t.element_size() for t in m.state_dict().values())),
        "counted twice",
    ),
    "numbers": (dict(count=lambda m: sum(p.numel() for p in m.parameters())), "counted in numbers"),
    "4 bytes": (
        dict(count=lambda m: sum(p.numel() * 4 for p in m.parameters())),
        "4 bytes a number whatever",
    ),
    "one sequence": (dict(batch=1), "filled for one sequence"),
}


@pytest.mark.parametrize("slip", sorted(_SLIPS))
def test_a_measurement_with_a_slip_gets_its_message(slip: str) -> None:
    planted, words = _SLIPS[slip]
    result = check("10.6", lambda *args: _overtake_by_bisection(*args, **planted))
    assert result.status is Status.FAIL and words in result.hint, result


def test_the_cases_include_bfloat16_models_whose_answer_is_that_of_float32() -> None:
    exercise = get_exercise("10.6")
    cases = [c for seed in (0, 1) for c in make_cases(exercise, seed)]
    assert any(c.args[-1] == "bfloat16" for c in cases) and any(c.args[-1] == "float32" for c in cases)
    for case in cases:  # 2 bytes a weight and 2 a cached number: the crossing does not move
        as_float32 = (*case.args[:-1], "float32")
        assert torch.equal(exercise.reference(*case.args), exercise.reference(*as_float32))


def test_the_reference_agrees_with_the_library_formula_at_llama_sizes() -> None:
    # the claim of the cell after the check: Llama-2-7B (6,738,415,616 parameters) in bf16 at batch 1 and 16
    weights = 6_738_415_616 * 2
    for batch, expected in ((1, 25_706), (16, 1_607)):
        sizes = [
            kv_cache_bytes(num_layers=32, num_kv_heads=32, seq_len=s, head_dim=128, batch_size=batch)
            for s in (expected - 1, expected)
        ]
        assert sizes[0] < weights <= sizes[1]


def test_decoding_cases_cover_the_hard_inputs() -> None:
    cases = make_cases(get_exercise("10.5"), 0)
    assert any(c.args[0].shape[0] > 1 for c in cases)  # a batch
    assert any(c.args[1].shape[2] == 1 for c in cases)  # one cached token
    assert any(c.args[-1] % 2 == 1 and c.args[-1] > 1 for c in cases)  # odd head counts
