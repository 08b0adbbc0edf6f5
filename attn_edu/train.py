"""A small, seeded training loop for the course's toy models (AdamW, CPU-friendly).

    for step in range(steps):
        batch = batches_fn(generator)         # fresh synthetic data, from a seeded generator
        loss = loss_fn(model, batch)
        loss.backward(); clip; optimizer.step()

AdamW (Loshchilov & Hutter, 2019) with a constant learning rate is enough for models of a few
thousand to a few hundred thousand parameters trained for a few hundred steps. Gradient-norm clipping
guards the first steps, when an untrained attention model can produce large gradients.

The progress bar is tqdm's (``leave=False``, so nothing is left behind in a notebook's output);
pass ``progress=False`` for runs whose output must be reproducible (nbval).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from attn_edu._validate import check_positive_int
from attn_edu.data import TaskBatch
from attn_edu.objectives import causal_lm_loss


def lm_loss(model: nn.Module, batch: TaskBatch) -> torch.Tensor:
    """The default loss: next-token cross-entropy on the batch's scored labels.

    The model's output may be the logits ``(B, T, V)`` or a tuple whose first item is the logits.
    """
    out = model(batch.input_ids)
    logits = out[0] if isinstance(out, tuple) else out  # (B, T, V)
    return causal_lm_loss(logits, batch.labels)


@dataclass(frozen=True)
class TrainResult:
    """What :func:`train` measured."""

    losses: list[float]  # the training loss at every step
    seconds: float  # wall-clock time of the loop
    steps: int  # optimizer steps taken

    def final_loss(self, window: int = 10) -> float:
        """Mean loss over the last ``window`` steps (one step's loss is noisy)."""
        tail = self.losses[-window:]
        return sum(tail) / len(tail)


def lr_factor(
    step: int, steps: int, *, warmup_steps: int = 0, schedule: Literal["constant", "cosine"] = "constant"
) -> float:
    """The multiple of the peak learning rate that :func:`train` uses at ``step`` (0-based) of ``steps``.

    Example:
        >>> [round(lr_factor(s, 5, warmup_steps=2, schedule="cosine"), 3) for s in range(5)]
        [0.5, 1.0, 1.0, 0.5, 0.0]
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    decay_steps = steps - 1 - warmup_steps
    return 0.5 * (1 + math.cos(math.pi * (step - warmup_steps) / decay_steps)) if decay_steps > 0 else 1.0


def train(
    model: nn.Module,
    batches_fn: Callable[[torch.Generator], Any],
    *,
    steps: int = 250,
    lr: float = 3e-3,
    weight_decay: float = 0.01,
    seed: int = 0,
    progress: bool = True,
    loss_fn: Callable[[nn.Module, Any], torch.Tensor] = lm_loss,
    grad_clip: float | None = 1.0,
    warmup_steps: int = 0,
    schedule: Literal["constant", "cosine"] = "constant",
    on_step: Callable[[int, nn.Module], object] | None = None,
) -> TrainResult:
    """Train ``model`` in place for ``steps`` AdamW steps; return the losses and the time taken.

    ``batches_fn(generator)`` returns one batch (e.g. a :class:`attn_edu.data.TaskBatch`) drawn with the
    given ``torch.Generator``, which is seeded with ``seed``: the same seed and the same initial model
    give the same run. ``loss_fn(model, batch)`` returns a scalar loss (default :func:`lm_loss`).
    Weight decay applies to every parameter (fine at this scale). The model is left in ``eval()`` mode.

    The learning rate rises linearly from ``lr / warmup_steps`` to ``lr`` over the first ``warmup_steps``
    steps (0: no warm-up), then stays there (``schedule="constant"``) or follows a half cosine down to 0 at
    the last step (``schedule="cosine"``, as in Loshchilov & Hutter 2017 without restarts).

    ``on_step(steps_taken, model)``, if given, runs after every optimizer step, under ``torch.no_grad()``:
    a place to measure the model while it learns (e.g. a head's induction score against the step). It must
    not change the model or draw from the global random generator, or the run is no longer the same run.

    Example:
        >>> from attn_edu.data import repeated_sequences
        >>> model = nn.Sequential(nn.Embedding(8, 8), nn.Linear(8, 8))
        >>> batches = lambda g: repeated_sequences(4, 4, vocab_size=8, generator=g)
        >>> result = train(model, batches, steps=3, progress=False)
        >>> len(result.losses), result.steps
        (3, 3)
    """
    check_positive_int("steps", steps)
    if not lr > 0:
        raise ValueError(f"lr: expected a learning rate > 0, got {lr!r}")
    if weight_decay < 0:
        raise ValueError(f"weight_decay: expected a number >= 0, got {weight_decay!r}")
    if grad_clip is not None and not grad_clip > 0:
        raise ValueError(f"grad_clip: expected a number > 0 or None, got {grad_clip!r}")
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or not 0 <= warmup_steps < steps:
        raise ValueError(
            f"warmup_steps: expected an integer from 0 to steps - 1 = {steps - 1}, got {warmup_steps!r}"
        )
    if schedule not in ("constant", "cosine"):
        raise ValueError(f"schedule: expected 'constant' or 'cosine', got {schedule!r}")

    torch.manual_seed(seed)  # anything random inside the model (dropout) repeats too
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, steps, warmup_steps=warmup_steps, schedule=schedule)
    )
    step_range: Any = range(steps)
    if progress:
        from tqdm.auto import tqdm  # imported only when asked for

        step_range = tqdm(step_range, desc="training", leave=False)

    model.train()
    losses: list[float] = []
    start = time.perf_counter()
    for step in step_range:
        batch = batches_fn(generator)
        loss = loss_fn(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        if on_step is not None:
            with torch.no_grad():
                on_step(step + 1, model)
        if progress and step % 10 == 0:
            step_range.set_postfix(loss=f"{losses[-1]:.3f}")
    seconds = time.perf_counter() - start
    model.eval()
    return TrainResult(losses=losses, seconds=seconds, steps=steps)


def steepest_fall(losses: Sequence[float], *, window: int = 10, span: int = 20) -> tuple[int, float]:
    """Where a loss curve falls fastest: the largest drop of its ``window``-step mean within ``span`` steps.

    The mean at step ``s`` (counted from 1) averages the losses of steps ``s - window + 1 .. s``. Returns
    ``(s, drop)`` for the first step ``s`` that maximises ``mean(s) - mean(s + span)``: the fall runs from step
    ``s`` to step ``s + span``. A phase change, such as induction heads forming (Olsson et al., 2022, section 3),
    shows as a drop far larger than the step-to-step noise, which the mean smooths away.

    Example:
        >>> steepest_fall([4.0] * 30 + [1.0] * 30, window=10, span=20)
        (20, 3.0)
    """
    check_positive_int("window", window)
    check_positive_int("span", span)
    values = [float(x) for x in losses]
    if len(values) < window + span:
        raise ValueError(
            f"losses: expected at least window + span = {window + span} values, got {len(values)}"
        )
    means = [sum(values[i : i + window]) / window for i in range(len(values) - window + 1)]  # step i + window
    drops = [means[i] - means[i + span] for i in range(len(means) - span)]
    first = max(range(len(drops)), key=drops.__getitem__)  # the first of equal drops
    return first + window, drops[first]
