"""Checks of notebook 04 (`attn_edu.grading.checks.masks`): right answers pass, stubs are not attempted, mistakes are named,
and 04.5's property (the padding masks' hidden entries) catches wrong fractions."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import answer_key

from attn_edu.grading import Status, check
from attn_edu.grading.exercise import make_cases
from attn_edu.grading.registry import get_exercise

IDS = ("04.1", "04.2", "04.3", "04.4", "04.5")
EXERCISES = {eid: get_exercise(eid) for eid in IDS}


# Independent correct versions: PyTorch's own helpers and plain loops.


def _causal_from_torch(T, S):
    from torch.nn.attention.bias import causal_lower_right

    return causal_lower_right(T, S)._materialize(torch.device("cpu"))


def _padding_by_loop(lengths, max_len, side="right"):
    out = torch.zeros(len(lengths), max_len, dtype=torch.bool)
    for b, length in enumerate(lengths.tolist()):
        start = 0 if side == "right" else max_len - length
        out[b, start : start + length] = True
    return out


def _softmax_with_where(scores, mask):
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return torch.where(mask.any(dim=-1, keepdim=True), weights, 0.0)


@pytest.mark.filterwarnings("ignore:Lower right causal bias")  # T > S rows are fully masked: on purpose
@pytest.mark.parametrize(
    "exercise_id, fn",
    [("04.1", _causal_from_torch), ("04.2", _padding_by_loop), ("04.3", _softmax_with_where)],
)
def test_independent_correct_versions_pass(exercise_id: str, fn) -> None:
    result = check(exercise_id, fn)
    assert result.status is Status.PASS, result


def test_pytorch_is_causal_is_the_top_left_mistake() -> None:
    # torch's is_causal with T != S is top-left: the check names that alignment
    def from_sdpa(T, S):
        eye = torch.eye(S)[None]  # (1, S, S): returns the weights themselves
        weights = F.scaled_dot_product_attention(
            torch.zeros(1, T, S), torch.zeros(1, S, S), eye, is_causal=True
        )
        return weights[0] > 0  # (T, S)

    result = check("04.1", from_sdpa)
    assert result.status is Status.FAIL and "top-left" in result.hint


def test_an_int_mask_gets_a_dtype_message() -> None:
    key = answer_key(EXERCISES["04.1"])
    result = check("04.1", lambda T, S: key(T, S).int())
    assert result.status is Status.FAIL and "bool" in result.message


def test_a_padding_mask_without_side_raises_an_error_status() -> None:
    key = answer_key(EXERCISES["04.2"])
    result = check("04.2", lambda lengths, max_len: key(lengths, max_len))
    assert result.status is Status.ERROR and "side" in result.message


def test_transformers_own_decoding_mask_passes_exercise_04_4() -> None:
    """The production peer: transformers' sdpa_mask, the mask its SDPA attention receives, is a right answer."""
    masking = pytest.importorskip("transformers.masking_utils")

    def theirs(attention_mask, T):  # noqa: ANN001, ANN202
        B, S = attention_mask.shape
        return masking.sdpa_mask(
            batch_size=B, q_length=T, kv_length=S, q_offset=S - T, mask_function=masking.causal_mask_function,
            attention_mask=attention_mask.bool(), allow_is_causal_skip=False,
        )  # fmt: skip

    assert check("04.4", theirs).passed


def test_a_loop_over_queries_and_keys_passes_exercise_04_4() -> None:
    def loops(attention_mask, T):  # noqa: ANN001, ANN202
        B, S = attention_mask.shape
        out = torch.zeros(B, 1, T, S, dtype=torch.bool)
        for b in range(B):
            for t in range(T):
                for s in range(S):
                    out[b, 0, t, s] = bool(s <= S - T + t and attention_mask[b, s] == 1)
        return out

    assert check("04.4", loops).passed


def _waste_by_drawing_the_batches(lengths, batch_size):
    # Draw every padded batch as a grid of real/padded tokens and count the score entries one by one.
    ordered = sorted(lengths.tolist(), reverse=True)
    hidden = total = 0
    for start in range(0, len(ordered), batch_size):
        batch = ordered[start : start + batch_size]
        L = max(batch)
        for length in batch:
            real = [position < length for position in range(L)]
            hidden += sum(not (a and b) for a in real for b in real)
            total += L * L
    return torch.tensor(hidden / total, dtype=torch.float64)


def test_drawing_the_batches_passes_exercise_04_5() -> None:
    assert check("04.5", _waste_by_drawing_the_batches).passed


def test_one_batch_is_the_unsorted_waste_and_batches_of_one_waste_nothing() -> None:
    reference = EXERCISES["04.5"].reference
    lengths = torch.tensor([7, 2, 9, 4, 4])
    assert float(reference(lengths, 5)) == 1 - (49 + 4 + 81 + 16 + 16) / (5 * 81)
    assert float(reference(lengths, 1)) == 0.0
    assert float(reference(lengths, 2)) < float(reference(lengths, 5))  # sorting pairs 9 with 7, 4 with 4


def test_the_mask_count_catches_a_wrong_fraction() -> None:
    exercise = EXERCISES["04.5"]
    (prop,) = exercise.properties
    cases = [c for c in make_cases(exercise, 0) if c.group == prop.name]
    assert cases
    for case in cases:
        right = exercise.reference(*case.args)
        assert prop.holds(case, right) is None
        message = prop.holds(case, right + 0.01)
        assert message and "hide" in message and f"({float(right):.6f})" in message, message
        assert f"{float(right) + 0.01:.6f}" in message
        unsorted = exercise.mistakes[0]  # batches in the given order
        assert "sort" in unsorted.message and prop.holds(case, unsorted.fn(*case.args))
        assert "0-d float64" in prop.holds(case, right[None])
