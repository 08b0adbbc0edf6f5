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

IDS = ("09.1", "09.2", "09.3", "09.4", "09.6", "09.7")
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


def _loss_by_position_with_module(logits, targets, ignore_index=-100):
    loss = nn.CrossEntropyLoss(ignore_index=ignore_index)  # the mean over the batch's scored targets
    return torch.stack([loss(logits[:, t], targets[:, t]) for t in range(logits.shape[1])])


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
        ("09.6", _loss_by_position_with_module),
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


# Hugging Face's names of one block's tensors, in GPT2Block.state_dict() order (the arguments' order in 09.5).
GPT2_BLOCK_KEYS = (
    "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
    "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias",
)  # fmt: skip


def _gpt2_logits_by_transformers(input_ids, wte_weight, wpe_weight, *rest):
    """Hugging Face's own GPT2LMHeadModel (eager attention, eval mode) with the case's weights loaded by name."""
    transformers = pytest.importorskip("transformers")
    *stacked, ln_f_weight, ln_f_bias, num_heads = rest
    (V, C), P, L = wte_weight.shape, wpe_weight.shape[0], stacked[0].shape[0]
    config = transformers.GPT2Config(
        vocab_size=V, n_positions=P, n_embd=C, n_layer=L, n_head=num_heads, n_inner=stacked[8].shape[-1],
        bos_token_id=0, eos_token_id=0, attn_implementation="eager",
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(config).eval()
    state = {
        "transformer.wte.weight": wte_weight, "transformer.wpe.weight": wpe_weight, "lm_head.weight": wte_weight,
        "transformer.ln_f.weight": ln_f_weight, "transformer.ln_f.bias": ln_f_bias,
    }  # fmt: skip
    for i in range(L):
        state |= {f"transformer.h.{i}.{key}": t[i] for key, t in zip(GPT2_BLOCK_KEYS, stacked, strict=True)}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    with torch.no_grad():
        return model(input_ids).logits  # (B, T, V)


def test_transformers_own_gpt2_passes_exercise_09_5() -> None:
    """The production peer: transformers.GPT2LMHeadModel itself, given the weights, is a right answer."""
    pytest.importorskip("transformers")
    result = check("09.5", _gpt2_logits_by_transformers)
    assert result.status is Status.PASS, result


def test_the_gpt2_cases_use_several_layers_and_unused_position_rows() -> None:
    cases = make_cases(get_exercise("09.5"), 0)
    layers = {case.args[3].shape[0] for case in cases}  # ln_1_weight (L, C)
    assert {1, 2, 3} <= layers
    assert any(
        case.args[2].shape[0] > case.args[0].shape[1] for case in cases
    )  # P > T: take the first T rows


def test_cross_entropy_over_every_token_catches_a_loss_by_position_off_the_values() -> None:
    # Right on the value cases, 1% too high on the cases only the property judges: the property must see it.
    measured = {c.args[0].shape for c in make_cases(EXERCISES["09.6"], 0) if c.group != "values"}

    def too_high_when_measured(logits, targets, ignore_index=-100):
        scale = 1.01 if logits.shape in measured else 1.0
        return scale * _loss_by_position_with_module(logits, targets, ignore_index)

    result = check("09.6", too_high_when_measured)
    assert result.status is Status.FAIL and result.message.startswith("agrees with cross_entropy"), result
    assert (
        "count-weighted mean of the answer" in result.message and "F.cross_entropy over all" in result.message
    )


def test_a_negative_loss_fails_even_when_the_weighted_mean_agrees() -> None:
    exercise = EXERCISES["09.6"]
    case = next(c for c in make_cases(exercise, 0) if c.group != "values")
    right = exercise.reference(*case.args, **case.kwargs)
    counts = (case.args[1] != case.kwargs.get("ignore_index", -100)).sum(0).double()
    shift = torch.zeros_like(counts)
    shift[0], shift[1] = -(right[0] + 1) / counts[0], (right[0] + 1) / counts[1]  # weighted mean unchanged
    wrong = right + (shift * counts).float()
    assert wrong[0] < 0
    assert "lies in [0, inf)" in exercise.properties[0].holds(case, wrong)
    assert exercise.properties[0].holds(case, right) is None


def test_loss_by_position_cases_score_every_position_and_skip_some_targets() -> None:
    for seed in (0, GRADER_SEED):
        for case in make_cases(EXERCISES["09.6"], seed):
            logits, targets = case.args
            scored = targets != case.kwargs.get("ignore_index", -100)
            assert scored.any(0).all() and not scored.all(0).all()  # no empty position, some skipped
            assert logits.shape[0] != logits.shape[1]  # B != T: one loss per sequence has the wrong shape


# 09.7: a tiny training run, judged on a held-out batch the learner's function never sees.


def _train_by_hand(input_ids, labels, vocab_size, lr, seed, *, clear=True, shift=True, sgd=False):
    """The loop written another way than the reference: per-token losses summed and divided by hand."""
    from attn_edu.grading.given import tiny_language_model

    model = tiny_language_model(vocab_size, seed)
    optimizer = (torch.optim.SGD if sgd else torch.optim.AdamW)(model.parameters(), lr=lr)
    with torch.enable_grad():
        for ids, targets in zip(input_ids, labels):
            logits = model(ids)  # (B, T, V)
            logits, targets = (logits[:, :-1], targets[:, 1:]) if shift else (logits, targets)
            per_token = F.cross_entropy(
                logits.transpose(1, 2), targets, reduction="none"
            )  # (B, T), 0 if ignored
            loss = per_token.sum() / (targets != -100).sum()
            if clear:
                optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach()


def test_a_training_loop_written_another_way_passes_09_7() -> None:
    result = check("09.7", _train_by_hand)
    assert result.status is Status.PASS and "held-out loss" in result.message, result


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [({"clear": False}, "pile up"), ({"shift": False}, "the targets are not shifted")],
)
def test_09_7_slips_written_another_way_are_named(kwargs, named) -> None:
    # Written another way than the Mistake's version: no gradients cleared is chaotic, so the weights do not
    # match that version's; the diagnosis names the slip from what the weights do on a held-out batch.
    result = check("09.7", lambda *a: _train_by_hand(*a, **kwargs))
    assert result.status is Status.FAIL and named in result.hint, result


def test_the_held_out_property_judges_by_the_loss_on_batches_the_function_never_sees() -> None:
    from attn_edu.grading.checks.training import HELD_OUT_BOUND, _held_out_losses

    exercise = get_exercise("09.7")
    prop = exercise.properties[0]
    cases = [c for c in make_cases(exercise, 0) if c.group == prop.name]
    for case in cases:
        trained = exercise.reference(*case.args)
        loss = _held_out_losses(case, trained)
        assert loss["after"] < HELD_OUT_BOUND < loss["before"] - 2  # from about log V to far below it
        assert prop.holds(case, trained) is None
        # Planted: the untrained model's weights, and a model trained without the shift: both fail it.
        from attn_edu.grading.given import tiny_language_model

        untrained = torch.nn.utils.parameters_to_vector(
            tiny_language_model(*case.args[2:3], case.args[4]).parameters()
        )
        assert "not under" in prop.holds(case, untrained.detach())
        unshifted = _train_by_hand(*case.args, shift=False)
        assert "scores the token each position reads" in prop.holds(case, unshifted)
    # The held-out batch is drawn by the check: none of its rows is one of the training batches' rows.
    case = cases[0]
    from attn_edu.grading.checks.training import _copy_batches

    held, _ = _copy_batches(torch.Generator().manual_seed(case.args[4] + 1), 1, 256)
    train_rows = {tuple(r) for r in case.args[0].flatten(0, 1).tolist()}
    assert sum(tuple(r) in train_rows for r in held[0].tolist()) < 20  # chance repeats of 16^4 prompts: ~5


def test_a_planted_wrong_training_fails_09_7() -> None:
    # Planted: plain SGD at the given rate, a recipe that runs but barely learns in 40 steps.
    result = check("09.7", lambda *a: _train_by_hand(*a, sgd=True))
    assert result.status is Status.FAIL, result
