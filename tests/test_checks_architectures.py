"""Checks of notebook 09 (`attn_edu.grading.checks.architectures`): right answers pass, stubs are not attempted,
mistakes are named."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attn_edu.grading import Status, check
from attn_edu.grading.command import GRADER_SEED
from attn_edu.grading.exercise import make_cases
from attn_edu.grading.registry import get_exercise
from attn_edu.models import GPT, GPTConfig
from attn_edu.objectives import span_corruption, span_uncorrupt

IDS = ("09.1", "09.2", "09.3", "09.4")
EXERCISES = {eid: get_exercise(eid) for eid in IDS}


# Independent correct versions: plain loops, torch's own loss module, a model built and counted.


def _mlm_by_loop(input_ids, u, random_ids, mask_token_id, special_ids):
    inputs, labels = input_ids.clone(), torch.full_like(input_ids, -100)
    specials = set(special_ids.tolist())
    for index in torch.cartesian_prod(*(torch.arange(n) for n in input_ids.shape)).tolist():
        at = tuple(index)
        token, draw = int(input_ids[at]), float(u[at])
        if token in specials or not draw < 0.15:
            continue
        labels[at] = token
        if draw < 0.15 * 0.8:
            inputs[at] = mask_token_id
        elif draw < 0.15 * 0.9:
            inputs[at] = random_ids[at]
    return torch.stack([inputs, labels])


def _clm_with_module(logits, labels):
    loss = nn.CrossEntropyLoss()  # ignore_index=-100, mean over the scored tokens
    return loss(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))


def _spans_by_loop(tokens, noise, sentinel_start_id):
    out, previous, spans = [], False, 0
    for token, hidden in zip(tokens.tolist(), noise.tolist()):
        if hidden and not previous:
            out.append(sentinel_start_id - spans)
            spans += 1
        elif not hidden:
            out.append(token)
        previous = hidden
    return torch.tensor(out)


def _count_from_checkpoint_shapes(vocab_size, max_seq_len, embed_dim, num_layers, ffn_dim, tie_embeddings):
    # The tensors of a Hugging Face GPT-2 checkpoint: packed q|k|v (c_attn), Conv1D weights (in, out).
    V, P, C, F = vocab_size, max_seq_len, embed_dim, ffn_dim
    block = [(C,), (C,), (C, 3 * C), (3 * C,), (C, C), (C,), (C,), (C,), (C, F), (F,), (F, C), (C,)]
    shapes = [(V, C), (P, C)] + block * num_layers + [(C,), (C,)] + ([] if tie_embeddings else [(V, C)])
    return torch.tensor(sum(torch.Size(shape).numel() for shape in shapes))


def _count_on_meta(vocab_size, max_seq_len, embed_dim, num_layers, ffn_dim, tie_embeddings):
    config = GPTConfig(
        vocab_size, max_seq_len, embed_dim, num_layers, 1, ffn_dim, tie_embeddings=tie_embeddings
    )
    with torch.device("meta"):
        model = GPT(config)
    return torch.tensor(sum(p.numel() for p in model.parameters()))


@pytest.mark.parametrize(
    "exercise_id, fn",
    [
        ("09.1", _mlm_by_loop),
        ("09.2", _clm_with_module),
        ("09.3", _spans_by_loop),
        ("09.4", _count_from_checkpoint_shapes),
    ],
)
def test_independent_correct_versions_pass(exercise_id: str, fn) -> None:
    result = check(exercise_id, fn, timeout=None)
    assert result.status is Status.PASS, result


def test_mlm_cases_exercise_every_band_and_the_specials() -> None:
    # The mistakes can only be told apart if each case has masked, random, kept and unpicked tokens.
    for seed in (0, GRADER_SEED):
        for case in make_cases(EXERCISES["09.1"], seed):
            ids, u, _, _, specials = case.args
            plain = ~torch.isin(ids, specials)
            for low, high in ((0.0, 0.12), (0.12, 0.135), (0.135, 0.15), (0.15, 1.0)):
                assert (plain & (u >= low) & (u < high)).any(), (seed, low)
            assert (~plain & (u < 0.15)).any()  # a special token that a careless rule would pick


def test_the_span_exercise_rebuilds_t5_inputs_and_targets() -> None:
    # span_inputs(tokens, noise) is span_corruption's input, and with ~noise its target.
    tokens = torch.arange(10, 40)
    reference = EXERCISES["09.3"].reference
    inputs, targets = span_corruption(
        tokens, sentinel_start_id=199, generator=torch.Generator().manual_seed(3)
    )
    noise = torch.isin(tokens, targets)
    assert torch.equal(reference(tokens, noise, 199), inputs)
    assert torch.equal(reference(tokens, ~noise, 199), targets)
    assert torch.equal(span_uncorrupt(inputs, targets, sentinel_start_id=199), tokens)


def test_the_loss_exercise_matches_a_shifted_cross_entropy_with_a_prompt() -> None:
    logits = torch.randn(2, 5, 7)
    labels = torch.tensor([[-100, -100, 1, 2, 3], [-100, 4, 5, 6, 0]])
    expected = F.cross_entropy(logits[:, :-1].reshape(-1, 7), labels[:, 1:].reshape(-1))
    torch.testing.assert_close(EXERCISES["09.2"].reference(logits, labels), expected)


@pytest.mark.parametrize("tied", [True, False])
def test_the_count_reference_matches_a_model_built_on_meta(tied: bool) -> None:
    sizes = (97, 23, 12, 3, 40, tied)
    assert int(EXERCISES["09.4"].reference(*sizes)) == int(_count_on_meta(*sizes))


def test_an_int_count_gets_a_type_message() -> None:
    result = check("09.4", lambda *sizes: int(_count_from_checkpoint_shapes(*sizes)))
    assert result.status is Status.FAIL and "torch.Tensor" in result.message
