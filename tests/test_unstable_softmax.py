"""The unshifted softmax, ``exp(scores) / exp(scores).sum()``, fails each exercise of notebooks 02-11 that takes a
softmax, and is named as that slip.

Each exercise below has a case whose scores (or logits) reach past about 88, where ``exp`` overflows float32.
The answers here are a learner's, written with torch alone for each exercise's signature, around one softmax
of their own. Written unshifted (the mask applied as ``-inf`` before ``exp``, or multiplied in after it, the
sum clamped), the answer must fail with the overflow message on the notebook's inputs and on the grading
command's; the same answer with the row's largest score subtracted first must pass, so the large cases sit
within each exercise's tolerance and the failure is the overflow alone.
"""

from __future__ import annotations

import math

import pytest
import torch
from helpers import answer_key

from attn_edu.grading import Status, check
from attn_edu.grading.exercise import GRADER_SEED, OVERFLOW_HINT
from attn_edu.grading.registry import get_exercise

SEEDS = (0, GRADER_SEED, 1, 2)  # check()'s inputs, the grading command's, and two more draws


def _softmax(style: str):
    """A learner's softmax over the last dim, ``keep`` (bool, True = may take weight) optional; a row that
    keeps nothing gets zeros. ``style``: "shifted" (the row's largest kept score subtracted before exp),
    "unshifted" (masked scores set to -inf, then exp / sum), "unshifted, mask multiplied" (exp times the
    mask, then divided by the clamped sum)."""

    def softmax(scores: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        keep = torch.ones_like(scores, dtype=torch.bool) if keep is None else keep.expand_as(scores)
        if style == "unshifted, mask multiplied":
            e = scores.exp() * keep
        else:
            hidden = scores.masked_fill(~keep, float("-inf"))
            top = hidden.amax(dim=-1, keepdim=True)
            shift = torch.where(torch.isfinite(top), top, 0.0) if style == "shifted" else 0.0
            e = (hidden - shift).exp()
        return e / e.sum(dim=-1, keepdim=True).clamp_min(1e-30)

    return softmax


def _heads(x: torch.Tensor, H: int) -> torch.Tensor:
    B, T, C = x.shape
    return x.view(B, T, H, C // H).transpose(1, 2)  # (B, H, T, D)


def _merged(x: torch.Tensor) -> torch.Tensor:
    B, H, T, D = x.shape
    return x.transpose(1, 2).reshape(B, T, H * D)  # (B, T, C)


def _answer(exercise_id: str, softmax):
    """The learner's function for ``exercise_id``, around ``softmax``."""

    def weights(q, k, scale=None):  # 02.1
        scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        return softmax((q * scale) @ k.transpose(-2, -1))  # (..., T, S), q scaled first: other rounding

    def sdpa(q, k, v):  # 02.2
        return weights(q, k) @ v  # (..., T, Dv)

    def cross_attention(x, context, w_q, w_k, w_v, w_o):  # 02.4
        q, k, v = x @ w_q.T, context @ w_k.T, context @ w_v.T  # (B, T, C), (B, S, C), (B, S, C)
        return weights(q, k) @ v @ w_o.T  # (B, T, C)

    def masked_softmax(scores, mask):  # 04.3
        return softmax(scores, mask)

    def multi_head_attention(query, key, value, w_q, w_k, w_v, w_o, num_heads, mask=None):  # 05.3
        q, k, v = (_heads(t @ w.T, num_heads) for t, w in ((query, w_q), (key, w_k), (value, w_v)))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, T, S)
        return _merged(softmax(scores, mask) @ v) @ w_o.T  # (B, T, C)

    def mha_from_torch(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, num_heads):  # 05.5
        C = x.shape[-1]
        pieces = zip(in_proj_weight.split(C), in_proj_bias.split(C))
        q, k, v = (_heads(x @ w.T + b, num_heads) for w, b in pieces)  # (B, H, T, D) each
        out = softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])) @ v  # (B, H, T, D)
        return _merged(out) @ out_proj_weight.T + out_proj_bias  # (B, T, C)

    def shaw(q, k, v, key_table, value_table, max_distance, is_causal):  # 06.4
        T, S, D = q.shape[-2], k.shape[-2], q.shape[-1]
        distance = torch.arange(S)[None, :] - (torch.arange(T)[:, None] + S - T)  # (T, S)
        row = distance.clamp(-max_distance, max_distance) + max_distance  # (T, S)
        a_k, a_v = key_table[row], value_table[row]  # (T, S, D), (T, S, Dv)
        scores = (q @ k.transpose(-2, -1) + torch.einsum("bhtd,tsd->bhts", q, a_k)) / math.sqrt(D)
        w = softmax(scores, distance <= 0 if is_causal else None)  # (B, H, T, S)
        return w @ v + torch.einsum("bhts,tsd->bhtd", w, a_v)  # (B, H, T, Dv)

    def top_k_probs(logits, k):  # 10.3
        kth = logits.topk(k, dim=-1).values[..., -1:]  # (..., 1)
        return softmax(logits, logits >= kth)  # (..., V)

    def top_p_probs(logits, p):  # 10.4
        ordered, order = logits.sort(dim=-1, descending=True)  # (..., V)
        probs = softmax(ordered)
        keep = probs.cumsum(dim=-1) - probs < p  # the mass ranked above each token is still below p
        return softmax(logits, keep.scatter(-1, order, keep))  # (..., V)

    def top_k_routing(x, gate_weight, k):  # 11.4
        top, index = (x @ gate_weight.T).topk(k, dim=-1)  # (N, k), (N, k)
        return torch.zeros(x.shape[0], gate_weight.shape[0]).scatter(1, index, softmax(top))  # (N, E)

    return {
        "02.1": weights,
        "02.2": sdpa,
        "02.4": cross_attention,
        "04.3": masked_softmax,
        "05.3": multi_head_attention,
        "05.5": mha_from_torch,
        "06.4": shaw,
        "10.3": top_k_probs,
        "10.4": top_p_probs,
        "11.4": top_k_routing,
    }[exercise_id]


IDS = ("02.1", "02.2", "02.4", "04.3", "05.3", "05.5", "06.4", "10.3", "10.4", "11.4")
MASKED = ("04.3", "05.3", "06.4", "10.3", "10.4")  # where a mask (or a kept set) meets the softmax
UNSHIFTED = [(eid, "unshifted") for eid in IDS] + [(eid, "unshifted, mask multiplied") for eid in MASKED]


@pytest.mark.parametrize(("exercise_id", "style"), UNSHIFTED)
def test_an_unshifted_softmax_fails_with_the_overflow_message(exercise_id: str, style: str) -> None:
    answer = _answer(exercise_id, _softmax(style))
    for seed in SEEDS:
        result = check(exercise_id, answer, seed=seed)
        assert result.status is Status.FAIL, (seed, result)
        assert result.hint == OVERFLOW_HINT, (seed, result)


@pytest.mark.parametrize("exercise_id", IDS)
def test_the_same_answer_shifted_passes_and_so_does_the_reference(exercise_id: str) -> None:
    answer = _answer(exercise_id, _softmax("shifted"))
    exercise = get_exercise(exercise_id)
    for seed in SEEDS:
        result = check(exercise_id, answer, seed=seed)
        assert result.status is Status.PASS, (seed, result)
        assert check(exercise_id, answer_key(exercise, seed), seed=seed).status is Status.PASS, seed
