"""Checks of notebook 04 (`attn_edu.grading.checks.masks`): right answers pass, stubs are not attempted, mistakes are named."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attn_edu.grading import Status, check
from attn_edu.grading.registry import get_exercise

IDS = ("04.1", "04.2", "04.3")
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
    result = check("04.1", lambda T, S: EXERCISES["04.1"].reference(T, S).int())
    assert result.status is Status.FAIL and "bool" in result.message


def test_a_padding_mask_without_side_raises_an_error_status() -> None:
    result = check("04.2", lambda lengths, max_len: EXERCISES["04.2"].reference(lengths, max_len))
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
