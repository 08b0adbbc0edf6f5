"""Checks of notebook 10's decoding exercises (`attn_edu.grading.checks.decoding`): independent right answers pass,
the properties catch what they name, and the references agree with the package's modules.

That the reference passes, a stub is not attempted and each known mistake is named on the notebook's and the
grader's inputs is tested for every exercise in ``tests/test_checks_registry.py``.
"""

from __future__ import annotations

import pytest
import torch

from attn_edu.generation import generate, residual_distribution
from attn_edu.grading import Status, check
from attn_edu.grading.checks import decoding
from attn_edu.grading.exercise import make_cases
from attn_edu.grading.given import tiny_lm
from attn_edu.grading.registry import get_exercise
from attn_edu.kv_quant import dequantize, quantize

SEEDS = range(12)


# 10.8: speculative decoding's acceptance rule


def _accept_by_loops(p, q, draft):
    """Row by row in float64, the minimum of two numbers, a residual that divides only when it can."""
    V = p.shape[-1]
    rows = []
    for p_row, q_row, x in zip(p.reshape(-1, V).double(), q.reshape(-1, V).double(), draft.reshape(-1)):
        keep = p_row[x] / torch.maximum(p_row[x], q_row[x])  # = min(1, p / q), without a ratio above 1
        owed = torch.relu(p_row - q_row)
        rows.append(torch.cat([keep.view(1), owed / owed.sum() if owed.sum() > 0 else p_row]))
    return torch.stack(rows).reshape(*p.shape[:-1], V + 1).float()


def _accept_without_the_guard(p, q, draft):
    x = draft.unsqueeze(-1)  # (..., 1)
    keep = (p.gather(-1, x) / q.gather(-1, x)).clamp(max=1.0)
    owed = (p - q).clamp(min=0)  # (..., V)
    return torch.cat([keep, owed / owed.sum(-1, keepdim=True)], dim=-1)  # 0/0 = NaN where p == q


def test_an_independent_acceptance_rule_passes() -> None:
    assert check("10.8", _accept_by_loops).status is Status.PASS


def test_a_residual_without_the_p_equals_q_guard_fails_that_property() -> None:
    result = check("10.8", _accept_without_the_guard)
    assert result.status is Status.FAIL and result.message.startswith("p == q:"), result
    assert "NaN" in result.hint


@pytest.mark.parametrize("residual", ["p", "raw", "q - p"])
def test_the_exactness_property_catches_every_wrong_residual(residual: str) -> None:
    exercise = get_exercise("10.8")
    for seed in SEEDS:
        for case in (c for c in make_cases(exercise, seed) if c.group == "exactly p"):
            assert decoding._emits_exactly_p(case, exercise.reference(*case.args)) is None
            wrong = decoding._speculative_variant(*case.args, residual=residual)
            assert decoding._emits_exactly_p(case, wrong) is not None, (seed, residual)


def test_the_reference_is_the_packages_rule_row_by_row() -> None:
    exercise = get_exercise("10.8")
    for case in make_cases(exercise, 0):
        p, q, draft = case.args
        out = exercise.reference(p, q, draft)
        V = p.shape[-1]
        for row, (p_i, q_i, x) in enumerate(zip(p.reshape(-1, V), q.reshape(-1, V), draft.reshape(-1))):
            torch.testing.assert_close(out.reshape(-1, V + 1)[row, 1:], residual_distribution(p_i, q_i))
            assert float(out.reshape(-1, V + 1)[row, 0]) == pytest.approx(min(1.0, float(p_i[x] / q_i[x])))


# 10.9: a quantised KV block


def _quantize_another_way(x, bits, dim):
    """Codes from (x - min) · levels / (max - min), a where for constant slices, a truncating cast after + 0.5."""
    x, levels = x.to(torch.float32), 2**bits - 1
    low, high = x.amin(dim, keepdim=True), x.amax(dim, keepdim=True)
    width = torch.where(high > low, high - low, torch.ones_like(high))
    codes = ((x - low) * levels / width + 0.5).to(torch.uint8)
    return torch.stack([codes.float(), low + codes.float() * (width / levels)])


def test_another_order_of_operations_gives_the_same_codes() -> None:
    assert check("10.9", _quantize_another_way).status is Status.PASS


def test_every_value_lies_away_from_a_rounding_tie() -> None:
    exercise = get_exercise("10.9")
    for seed in SEEDS:
        for case in make_cases(exercise, seed):
            x, bits, dim = case.args
            x = x.double()  # a bfloat16 block too, read exactly
            low, high = x.amin(dim, keepdim=True), x.amax(dim, keepdim=True)
            steps = (x - low) / ((high - low) / (2**bits - 1)).clamp_min(1e-8)
            distance = ((steps - steps.floor()) - 0.5).abs()
            assert float(distance.min()) > 0.05, seed


def test_the_reference_agrees_with_the_packages_round_trip() -> None:
    exercise = get_exercise("10.9")
    for seed in SEEDS:
        for case in make_cases(exercise, seed):
            x, bits, dim = case.args
            codes, values = exercise.reference(x, bits, dim)
            x = x.float()  # a bfloat16 block is quantised in float32
            stored = quantize(x, bits, dim)  # codes (packed at 4 bits), scale and minimum in float16
            unpacked = dequantize(stored[0], torch.ones(()), torch.zeros(()), bits, x.shape[-1])
            assert torch.equal(codes, unpacked) and int(codes.max()) <= 2**bits - 1
            low, high = x.amin(dim, keepdim=True), x.amax(dim, keepdim=True)
            step = (high - low) / (2**bits - 1)
            assert bool(((values - x).abs() <= step / 2 + 1e-5).all())  # within half a step
            # the package dequantises with its float16 scale and minimum: off by their rounding, no more
            package = dequantize(*stored, bits, x.shape[-1])
            float16_error = (low.abs() + (2**bits - 1) * step) * 2**-10 + 1e-6
            assert bool(((package - values).abs() <= float16_error).all()), seed


def test_keys_per_channel_keep_the_outlier_channel_from_coarsening_the_others() -> None:
    x, bits, dim = make_cases(get_exercise("10.9"), 0)[0].args  # keys with an outlier channel, dim = -2
    reference = get_exercise("10.9").reference
    per_channel = (reference(x, bits, dim)[1] - x).abs()
    per_token = (reference(x, bits, -1)[1] - x).abs()
    others = [c for c in range(x.shape[-1]) if c != 2]
    assert float(per_token[..., others].mean()) > 5 * float(per_channel[..., others].mean())


def _quantize_in(dtype: torch.dtype, *, out: torch.dtype | None = None):
    """The solution's arithmetic in ``dtype`` (a bfloat16 block left in bfloat16, or read in float32), its result
    returned in ``out`` (default: ``dtype``)."""

    def quantize_kv(x, bits, dim):
        x, levels = x.to(dtype), 2**bits - 1
        low = x.amin(dim=dim, keepdim=True)
        scale = ((x.amax(dim=dim, keepdim=True) - low) / levels).clamp_min(1e-8)
        codes = ((x - low) / scale).round().clamp(0, levels).to(torch.uint8).to(dtype)
        return torch.stack([codes, codes * scale + low]).to(out or dtype)

    return quantize_kv


def test_the_bfloat16_block_is_read_in_float32() -> None:
    cases = make_cases(get_exercise("10.9"), 0)
    assert any(c.args[0].dtype == torch.bfloat16 for c in cases)
    assert check("10.9", _quantize_in(torch.float32)).status is Status.PASS
    for planted, words in (
        (_quantize_in(torch.bfloat16), "quantised in bfloat16"),  # and returned in bfloat16
        (_quantize_in(torch.bfloat16, out=torch.float32), "quantised in bfloat16"),  # upcast too late
        (_quantize_in(torch.float32, out=torch.bfloat16), "returned in the block's bfloat16"),
    ):
        result = check("10.9", lambda x, bits, dim, f=planted: f(x, bits, dim) if x.dtype == torch.bfloat16 else
                       _quantize_in(torch.float32)(x, bits, dim))  # fmt: skip
        assert result.status is Status.FAIL and words in result.hint, result


# 10.10: the block table of a paged KV cache


def _gather_by_formula(blocks, block_table, length):
    """Token by token, as the formula says: block block_table[t // block_size], slot t % block_size."""
    size = blocks.shape[2]  # block_size
    tokens = [blocks[block_table[t // size], :, t % size] for t in range(length)]  # (H_kv, D) each
    if not tokens:
        return blocks.new_zeros(blocks.shape[1], 0, blocks.shape[3])
    return torch.stack(tokens, dim=1)  # (H_kv, length, D)


def _gather_whole_blocks(blocks, block_table, length):
    chosen = blocks[block_table]  # (n, H_kv, block_size, D)
    n, H_kv, block_size, D = chosen.shape
    return chosen.transpose(0, 1).reshape(H_kv, n * block_size, D)[:, :length]  # (H_kv, length, D)


@pytest.mark.parametrize("fn", [_gather_by_formula, _gather_whole_blocks])
def test_independent_block_table_lookups_pass(fn) -> None:
    assert check("10.10", fn).status is Status.PASS


def test_the_reference_is_the_formula() -> None:
    exercise = get_exercise("10.10")
    for seed in SEEDS:
        for case in make_cases(exercise, seed):
            assert torch.equal(exercise.reference(*case.args), _gather_by_formula(*case.args)), seed


def test_calling_the_package_is_reported_not_passed() -> None:
    from attn_edu.paged_kv import gather_blocks

    result = check("10.10", lambda blocks, table, length: gather_blocks(blocks, table, length))
    assert result.status is Status.FAIL and "gather_blocks" in result.message, result


def test_the_cases_pad_their_tables_and_cover_the_edges() -> None:
    cases = make_cases(get_exercise("10.10"), 0)
    for case in cases:
        blocks, table, length = case.args
        assert table.numel() > -(-length // blocks.shape[2])  # a padding entry past the sequence's blocks
        assert len(set(table.tolist())) == table.numel()  # distinct blocks
        assert not torch.equal(table, torch.arange(table.numel()))  # not in physical order
    edges = [c.args for c in cases if c.group == "edge cases"]
    assert any(length == 0 for _, _, length in edges)
    assert any(length and length % b.shape[2] == 0 for b, _, length in edges)
    assert any(b.shape[2] == 1 for b, _, _ in edges)


# 10.11: a generation loop with a KV cache


def _generate(seed, prompt, max_new_tokens, *, refeed=False, position=lambda P, step: P + step):
    """Greedy decoding written as a learner would, the prefill then one token per call; ``refeed`` runs the whole
    sequence without a cache every step (the slow way), ``position`` says where the step-th new token sits."""
    model, ids = tiny_lm(seed), prompt
    cache = None if refeed else model.new_cache()
    logits = model(prompt, cache, 0)  # (B, P, V)
    for step in range(max_new_tokens):
        token = logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
        ids = torch.cat([ids, token], dim=1)
        if refeed:
            logits = model(ids, None, 0)  # (B, T, V)
        elif step < max_new_tokens - 1:  # the last token need not be fed
            logits = model(token, cache, position(prompt.shape[1], step))  # (B, 1, V)
    return ids


def test_a_cached_loop_passes_and_gives_the_librarys_tokens() -> None:
    assert check("10.11", _generate).status is Status.PASS
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    for use_cache in (True, False):
        assert torch.equal(
            _generate(3, prompt, 9), generate(tiny_lm(3).model, prompt, 9, use_cache=use_cache)
        )


def test_refeeding_the_whole_sequence_gets_the_right_tokens_and_fails() -> None:
    result = check("10.11", lambda *a: _generate(*a, refeed=True))
    assert result.status is Status.FAIL and result.points == 0, result
    assert result.message.startswith("right on every case, but it feeds the model"), result


@pytest.mark.parametrize(
    ("position", "words"),
    [(lambda P, step: P + step + 1, "wrong positions"), (lambda P, step: step, "wrong positions")],
)
def test_positions_off_after_the_prefill_get_their_message(position, words: str) -> None:
    result = check("10.11", lambda *a: _generate(*a, position=position))
    assert result.status is Status.FAIL and words in result.hint, result


def test_a_loop_that_never_feeds_back_the_new_token_gets_its_message() -> None:
    def stale(seed, prompt, max_new_tokens):
        model, ids = tiny_lm(seed), prompt
        cache = model.new_cache()
        logits = model(prompt, cache, 0)
        for step in range(max_new_tokens):
            ids = torch.cat([ids, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
            logits = model(prompt[:, -1:], cache, prompt.shape[1] + step)  # the prompt's last token, again
        return ids

    result = check("10.11", stale)
    assert result.status is Status.FAIL and "never fed back" in result.hint, result


def test_a_planted_wrong_answer_fails() -> None:
    def sampled(seed, prompt, max_new_tokens):  # the second most likely token: not greedy
        ids = _generate(seed, prompt, max_new_tokens)
        return ids.clone().index_fill_(1, torch.tensor([ids.shape[1] - 1]), 0)

    assert check("10.11", sampled).status is Status.FAIL


def test_every_greedy_choice_of_the_cases_is_clear_cut() -> None:
    for seed in SEEDS[:4]:
        for case in make_cases(get_exercise("10.11"), seed):
            seed_, prompt, n = case.args
            ids, model = prompt, tiny_lm(seed_).model
            for _ in range(n):
                top2 = model(ids)[:, -1].topk(2, dim=-1).values
                assert float((top2[:, 0] - top2[:, 1]).min()) >= 1e-3
                ids = torch.cat([ids, model(ids)[:, -1].argmax(dim=-1, keepdim=True)], dim=1)


def test_the_given_model_records_what_it_is_fed() -> None:
    from attn_edu.grading.given import DECODER_CALLS

    DECODER_CALLS.clear()
    _generate(0, torch.tensor([[1, 2, 3, 4]]), 3)
    assert DECODER_CALLS == [(0, 4), (4, 1), (5, 1)]
