"""Notebook 09's training run (exercise 09.7): a tiny language model trained on the copy task, whose loss must
fall on held-out batches the learner's function never sees. Beside :mod:`~attn_edu.grading.checks.architectures`,
which holds the notebook's other exercises."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attn_edu.grading.exercise import Case, Exercise, Mistake, Property
from attn_edu.objectives import causal_lm_loss

# 09.7 a tiny training run whose loss must fall, judged on held-out batches the function never sees

TRAIN_SYMBOLS, TRAIN_LENGTH, TRAIN_STEPS, TRAIN_BATCH = 16, 4, 40, 32  # the copy task; 40 AdamW steps of 32
# nats: log V is about 3.0, as the untrained model scores; trained, 0.04 to 0.3 over seeds
HELD_OUT_BOUND = 0.6
HELD_OUT = "held-out loss"


def _copy_vocab():  # noqa: ANN202 - a ToyVocab; imported here so that the grader imports data lazily
    from attn_edu.data import ToyVocab

    return ToyVocab(num_symbols=TRAIN_SYMBOLS)


def _copy_batches(g: torch.Generator, steps: int, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``steps`` batches of the copy task of notebook 09, stacked: ids and aligned labels (steps, B, 2n + 2)."""
    from attn_edu.data import copy_task

    batches = [copy_task(batch, TRAIN_LENGTH, _copy_vocab(), generator=g) for _ in range(steps)]
    return torch.stack([b.input_ids for b in batches]), torch.stack([b.labels for b in batches])


def _train_cases(g: torch.Generator) -> list[Case]:
    V = _copy_vocab().size

    def case(group: str = "values") -> Case:
        seed = int(torch.randint(0, 2**31 - 1, (), generator=g))  # the model's initial weights
        ids, labels = _copy_batches(g, TRAIN_STEPS, TRAIN_BATCH)  # (steps, B, T) each
        return Case((ids, labels, V, 1e-2, seed), group=group)

    return [case(), case(), case(HELD_OUT)]  # each case is two trainings (yours and the recipe's)


def _train(input_ids, labels, vocab_size, lr, seed, *, shift=1, zero_grad="before", loss_fn=None):  # noqa: ANN001
    """The training loop of 09.7 with one piece swapped for a wrong one (the known mistakes below): the
    given model, one AdamW step per batch in order, the next-token loss; its trained weights, flattened."""
    from attn_edu.grading.given import tiny_language_model

    model = tiny_language_model(vocab_size, seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    with torch.enable_grad():  # a check calls the function with gradients off: training needs them
        for ids, targets in zip(input_ids, labels):  # (B, T) each: one batch per step
            logits = model(ids)  # (B, T, V)
            if loss_fn is not None:
                loss = loss_fn(logits, targets)
            else:
                T = ids.shape[1]
                loss = F.cross_entropy(
                    logits[:, : T - shift].reshape(-1, vocab_size),
                    targets[:, shift:].reshape(-1),
                    ignore_index=-100,
                )
            if zero_grad == "before":
                optimizer.zero_grad()
            loss.backward()
            if zero_grad == "after":  # cleared between backward and step: the step sees no gradient
                optimizer.zero_grad()
            optimizer.step()
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach()  # (P,)


def _train_reference(input_ids, labels, vocab_size, lr, seed):  # noqa: ANN001, ANN202
    return _train(input_ids, labels, vocab_size, lr, seed, loss_fn=causal_lm_loss)  # the library's loss


def _held_out_losses(case: Case, weights: torch.Tensor) -> dict[str, float]:
    """Losses on a held-out batch that the check draws from the case's seed (the function never sees it): of
    the given model untrained, of ``weights`` loaded into it (next token), and of ``weights`` scored on the
    token each position reads (what a model trained without the shift learns)."""
    from attn_edu.grading.given import tiny_language_model

    _, _, vocab_size, _, seed = case.args
    ids, labels = _copy_batches(torch.Generator().manual_seed(seed + 1), 1, 256)  # (1, 256, T)
    ids, labels = ids[0], labels[0]
    model = tiny_language_model(vocab_size, seed)
    losses = {}
    with torch.no_grad():
        losses["before"] = float(causal_lm_loss(model(ids), labels))
        torch.nn.utils.vector_to_parameters(weights.to(torch.float32), model.parameters())
        logits = model(ids)  # (B, T, V)
        losses["after"] = float(causal_lm_loss(logits, labels))
        losses["same position"] = float(F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=-100))
    return losses


def _held_out_holds(case: Case, output: torch.Tensor) -> str | None:
    from attn_edu.grading.given import tiny_language_model

    size = sum(p.numel() for p in tiny_language_model(case.args[2], 0).parameters())
    if output.ndim != 1 or output.numel() != size or not output.is_floating_point():
        return (
            f"expected the {size:,} trained weights in one flat float tensor, got shape {tuple(output.shape)}"
        )
    if not torch.isfinite(output).all():
        return "the trained weights hold NaN or inf: the training diverged"
    loss = _held_out_losses(case, output)
    if loss["after"] < HELD_OUT_BOUND:
        return None
    said = f"on a held-out batch the loss went from {loss['before']:.3f} to {loss['after']:.3f} nats"
    if loss["same position"] < 1.0:
        return f"{said}, while it scores the token each position reads at {loss['same position']:.3f}"
    return f"{said}, not under {HELD_OUT_BOUND}"


def _train_diagnosis(case: Case, got: torch.Tensor) -> str | None:
    """Why trained weights differ from the recipe's, read from what they do on a held-out batch."""
    if got.ndim != 1 or not torch.isfinite(got).all():
        return None
    loss = _held_out_losses(case, got)
    if loss["same position"] < 1.0 and loss["after"] > loss["before"]:
        return TRAIN_SLIPS["shift"]
    if abs(loss["after"] - loss["before"]) < 0.05:
        return TRAIN_SLIPS["late"]
    if loss["after"] < HELD_OUT_BOUND:
        return (
            f"the model learns (held-out loss {loss['after']:.3f} nats), but not by the recipe: one AdamW step "
            "per batch, in order, with the given learning rate and the optimizer's defaults, on the mean "
            "next-token loss over the scored targets of the batch."
        )
    return TRAIN_SLIPS["accumulate"]  # the usual cause; the message names the others too


TRAIN_SLIPS = {
    "accumulate": "the held-out loss does not fall far enough. Most often the gradients pile up: they add into "
    "the same buffers at every backward pass unless they are cleared before it, so each step follows the sum of "
    "all the gradients so far. Clear them once per step, before the backward pass; if you do, look at the "
    "optimizer (AdamW with the given learning rate) and at the loss.",
    "shift": "the targets are not shifted: position t's logits are scored on the token at t itself, which the "
    "model already reads, so it learns to repeat its input and the next-token loss rises. Score position "
    "t on the label at t + 1, as in 09.2.",
    "late": "the weights do not learn: the gradients are cleared after the backward pass and before the "
    "optimizer's step, so the step finds no gradient and leaves the weights as they were. Clear them before "
    "the backward pass.",
}

TRAIN = Exercise(
    exercise_id="09.7",
    title="train the given tiny GPT on the copy task: one AdamW step per batch; the held-out loss must fall",
    function_name="train_tiny_lm",
    arg_names=("input_ids", "labels", "vocab_size", "lr", "seed"),
    reference=_train_reference,
    make_cases=_train_cases,
    mistakes=(
        Mistake(lambda *a: _train(*a, zero_grad="never"), TRAIN_SLIPS["accumulate"]),
        Mistake(lambda *a: _train(*a, shift=0), TRAIN_SLIPS["shift"]),
        Mistake(lambda *a: _train(*a, zero_grad="after"), TRAIN_SLIPS["late"]),
    ),
    properties=(
        Property(
            HELD_OUT,
            f"after training, the model must predict the next token of batches it never saw: a loss under "
            f"{HELD_OUT_BOUND} nats on a held-out batch the check draws, far below the untrained model's "
            "(about log V). Train on the next token, clear the gradients before each backward pass.",
            holds=_held_out_holds,
        ),
    ),
    diagnoses=(_train_diagnosis,),
    hints=(
        "a training step is four moves: the model's logits for the batch, the next-token loss, the "
        "gradients by a backward pass, one optimizer step; the gradients must start from zero at every "
        "step. Build the given model with the given seed, and the optimizer once, before the loop.",
        "the loss is 09.2's: position t's logits against the label at t + 1, scored targets only, the mean "
        "over the batch. Step through the batches in order, one step each. Hand back every trained weight, "
        "in the order the model lists its parameters, as one flat tensor.",
        "a sketch: torch.optim.AdamW over model.parameters() with lr, made once; then per pair of the "
        "zipped input_ids and labels: loss = causal_lm_loss(model(ids), targets) (your 09.2), "
        "zero_grad() on the optimizer, loss.backward(), step(). Finally flatten the weights with "
        "torch.nn.utils.parameters_to_vector over model.parameters(), detached.",
    ),
    difficulty=3,
    minutes=35,
    kind="measure",
    atol=0.05,  # trained weights: the same recipe written another way, or on more threads, drifts by ~0.01
    rtol=0.05,
)


EXERCISES = (TRAIN,)
