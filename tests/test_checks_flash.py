"""Checks of notebook 12 (`attn_edu.grading.checks.flash`): independent right answers pass, the cases hold the hard inputs,
and mistakes written differently from the known variants are still named. (Reference, stub and each known
mistake: tests/test_checks_registry.py.)"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attn_edu.grading import Status, check
from attn_edu.grading.checks import flash as flash_checks
from attn_edu.grading.checks import triton_kernels as triton_checks
from attn_edu.grading.exercise import make_cases
from attn_edu.grading.judge import judge
from attn_edu.grading.registry import get_exercise
from attn_edu.grading.run import run_case

IDS = ("12.1", "12.2", "12.3", "12.9")
EXERCISES = {eid: get_exercise(eid) for eid in IDS}


# Independent correct versions: the exercise's own driver with a right update step, PyTorch's SDPA, float64.


def online_softmax_update(m_i, l_i, x_block):  # 12.1's name: the check runs its own driver around it
    m_new = torch.maximum(m_i, x_block.amax(dim=-1))
    return m_new, l_i * torch.exp(m_i - m_new) + torch.exp(x_block - m_new[..., None]).sum(dim=-1)


def _online_softmax_streamed(x, block_size):
    return flash_checks._streamed(x, block_size, online_softmax_update)


def _attention_from_torch(q, k, v, is_causal=False, block_q=16, block_k=16):
    T, S = q.shape[-2], k.shape[-2]
    if not is_causal:
        return F.scaled_dot_product_attention(q, k, v)
    visible = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)  # (T, S) bottom-right causal
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=visible)  # NaN on rows that see no key
    return torch.where(visible.any(dim=-1)[:, None], out, 0.0)


def _logsumexp_in_float64(m_i, l_i):
    return (m_i.double() + torch.log(l_i.double())).float()


@pytest.mark.parametrize(
    "exercise_id, fn",
    [("12.1", _online_softmax_streamed), ("12.3", _logsumexp_in_float64)],
)
def test_independent_correct_versions_pass(exercise_id: str, fn) -> None:
    result = check(exercise_id, fn)
    assert result.status is Status.PASS, result


def test_torchs_attention_has_the_right_numbers_but_is_not_tiled() -> None:
    result = check("12.2", _attention_from_torch)
    assert result.status is Status.FAIL and "scaled_dot_product_attention" in result.message, result


def test_cases_cover_the_hard_inputs() -> None:
    # 12.1: scores large enough that exp(x) overflows; 12.2: T > S causal (queries with no key), T < S,
    # tiles that do not divide the lengths, odd head counts; 12.3: a row with m = -inf and l = 0.
    online = make_cases(EXERCISES["12.1"], 0)
    assert any(bool(torch.isinf(torch.exp(c.args[0])).any()) for c in online)
    tiled = make_cases(EXERCISES["12.2"], 0)
    shapes = [(c.args[0].shape, c.args[1].shape[-2], c.kwargs) for c in tiled]
    assert any(kw.get("is_causal") and q[-2] > S for q, S, kw in shapes)
    assert any(kw.get("is_causal") and q[-2] < S for q, S, kw in shapes)
    assert any(q[-2] % kw["block_q"] and S % kw["block_k"] for q, S, kw in shapes)
    assert any(q[1] % 2 == 1 and q[1] > 1 for q, _, _ in shapes)
    lse = make_cases(EXERCISES["12.3"], 0)
    assert any(bool((c.args[1] == 0).any() & torch.isneginf(c.args[0]).any()) for c in lse)


def test_fully_masked_queries_must_be_zeros_not_nan() -> None:
    def nan_rows(q, k, v, is_causal=False, block_q=16, block_k=16):
        T, S = q.shape[-2], k.shape[-2]
        visible = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T) if is_causal else None
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if visible is not None:
            scores = scores.masked_fill(~visible, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v  # NaN where a row sees no key

    result = check("12.2", nan_rows)
    assert result.status is Status.FAIL and "NaN" in result.message and "no key" in result.hint


def test_a_per_block_softmax_written_differently_is_still_recognised() -> None:
    # Normalising each block on its own, without the known variant's NaN guard: the values-all-one case
    # (every right output row is 1) shows the sum over blocks, and the diagnosis names the mistake.
    def per_block(q, k, v, is_causal=False, block_q=16, block_k=16):
        T, S = q.shape[-2], k.shape[-2]
        out = torch.zeros(*q.shape[:-1], v.shape[-1])
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if is_causal:
            scores = scores.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(S - T), float("-inf"))
        for k_start in range(0, S, block_k):
            block = slice(k_start, k_start + block_k)
            out = out + torch.softmax(scores[..., block], dim=-1) @ v[..., block, :]
        return out

    result = check("12.2", per_block)
    assert result.status is Status.FAIL and result.hint == flash_checks.PER_BLOCK, result


def test_upside_down_rescale_is_nan_from_the_first_block() -> None:
    def online_softmax_update(m_i, l_i, x_block):
        return flash_checks._update_rescale_upside_down(m_i, l_i, x_block)

    result = check("12.1", online_softmax_update)
    assert "NaN" in result.message and result.hint == EXERCISES["12.1"].mistakes[1].message


# 12.6: PyTorch's own backward pass, autograd through F.scaled_dot_product_attention, is the peer.


def _backward_from_torch_autograd(q, k, v, out, lse, grad_out, is_causal=False, block_q=16, block_k=16):
    T, S = q.shape[-2], k.shape[-2]
    visible = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T) if is_causal else None  # bottom-right
    with torch.enable_grad():  # check() calls the function under no_grad
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        F.scaled_dot_product_attention(q, k, v, attn_mask=visible).backward(grad_out)
    return torch.cat([q.grad, k.grad, v.grad], dim=-2)  # (..., T + 2S, D)


def test_torch_autograd_of_sdpa_has_the_right_numbers_but_is_not_the_backward_asked_for() -> None:
    result = check("12.6", _backward_from_torch_autograd)
    assert result.status is Status.FAIL and result.message.startswith("right on every case, but it "), result


def test_backward_cases_cover_the_hard_inputs() -> None:
    # T != S both ways, causal with T < S (bottom-right), tiles that divide neither length, a batch > 1,
    # and rows longer than one key tile (so that a D summed per tile differs from the row's).
    cases = make_cases(get_exercise("12.6"), 0)
    shapes = [(c.args[0].shape, c.args[1].shape[-2], c.kwargs) for c in cases]
    assert any(q[-2] > S for q, S, _ in shapes) and any(q[-2] < S for q, S, _ in shapes)
    assert any(kw["is_causal"] and q[-2] < S for q, S, kw in shapes)
    assert any(q[-2] % kw["block_q"] and S % kw["block_k"] for q, S, kw in shapes)
    assert any(q[0] > 1 for q, _, _ in shapes) and all(S > kw["block_k"] for _, S, kw in shapes)


# 12.9, a measurement: an independent count (the tiles the forward would load, walked pair by pair), and a
# property that catches an answer the value cases let through.


def _tiles_by_pairs(seq_q, seq_k, block_m, block_n):
    seen = {
        (t // block_m, s // block_n) for t in range(seq_q) for s in range(seq_k) if s <= seq_k - seq_q + t
    }  # the tiles that hold at least one visible (query, key) pair, bottom-right
    return torch.tensor(len(seen))


def test_tile_count_from_the_visible_pairs_passes() -> None:
    result = check("12.9", _tiles_by_pairs)
    assert result.status is Status.PASS, result


def test_a_tile_count_wrong_only_on_the_property_cases_fails_the_property() -> None:
    def off_on_some(
        seq_q, seq_k, block_m, block_n
    ):  # right on every value case, one tile short on (13, 13, 4, 4)
        return _tiles_by_pairs(seq_q, seq_k, block_m, block_n) - (1 if (seq_q, seq_k) == (13, 13) else 0)

    result = check("12.9", off_on_some)
    assert result.status is Status.FAIL and "tiles of the causal mask" in result.message, result
    assert "the causal mask has 10 tiles with a visible pair, the answer says 9" in result.message, result


# 12.12 (Triton step 3): scores through tl.dot. A GPU rounds float32 inputs to TF32 unless told otherwise; the
# interpreter never does, so the diagnosis is tried on products rounded as TF32 rounds them, here in torch.


def _tf32(x: torch.Tensor) -> torch.Tensor:
    """float32 rounded to TF32's 10-bit mantissa (to nearest), as a GPU's tl.dot treats its inputs by default."""
    bits = x.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


def _judged(exercise_id: str, fn):  # noqa: ANN001, ANN202
    exercise = get_exercise(exercise_id)
    cases = make_cases(exercise, 0)
    return judge(exercise, cases, [run_case(fn, case, None) for case in cases])


def test_scores_multiplied_in_tf32_are_named_as_such() -> None:
    result = _judged("12.12", lambda q, k: _tf32(q) @ _tf32(k).T)
    assert result.status is Status.FAIL and result.hint == triton_checks.TF32, result


def test_scores_off_by_more_than_tf32_are_not_blamed_on_it() -> None:
    result = _judged("12.12", lambda q, k: (q @ k.T) * 1.01)  # 1% off: ten times what TF32 rounding gives
    assert result.status is Status.FAIL and result.hint != triton_checks.TF32, result
