"""The algorithm an exercise asks for, checked while the learner's function runs, not only its output.

Some exercises ask for a way of computing, not just a result: 11.2 causal linear attention "without building
the (T, S) score matrix", 11.3 the same as a recurrence that carries its state from token to token, 12.2 a tiled
forward and 12.6 a tiled backward without autograd. The dense formula gives the same numbers, so comparing
outputs cannot tell. Here every torch operation of the call is recorded (a
:class:`~torch.overrides.TorchFunctionMode`) and the exercise's rules read the record:

- ``no (T, S) matrix``: no tensor whose last two sizes are ``(T, S)`` (or ``(S, T)``) is ever made, where ``T``
  is the queries' length and ``S`` the keys' (both above 1), and torch's ``scaled_dot_product_attention``, which
  makes one inside, is not called (on a case where ``(T, S)`` is also the size of a tensor the answer needs,
  ``S`` equal to a width say, the sizes cannot tell, and the other cases judge);
- ``no prefix sum``: 11.3's recurrence reads its state one step at a time: ``cumsum`` is the parallel form of
  11.2;
- ``no autograd``: 12.6 writes the backward pass, so no tensor of the call requires a gradient.

What a call did against a rule is kept (:class:`Watched`); once the values and properties are right, the check
fails the exercise with it (no points: the right numbers by the wrong way). The rules live outside the answer
key: the grading command's worker applies them too and sends what it saw with the outcomes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode


class _Recorder(TorchFunctionMode):
    """Every torch operation's name and the shapes it returned; whether any result requires a gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[str, tuple[int, ...]]] = []
        self.names: set[str] = set()
        self.grad: str | None = None

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", str(func))
        self.names.add(name)
        for value in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(value, torch.Tensor):
                self.shapes.append((name, tuple(value.shape)))
                if self.grad is None and (value.requires_grad or value.grad_fn is not None):
                    self.grad = name
        return out


def _no_score_matrix(record: _Recorder, T: int, S: int, sizes: set[tuple[int, int]]) -> str | None:
    if "scaled_dot_product_attention" in record.names:
        return "calls torch's scaled_dot_product_attention, which builds the (T, S) scores itself"
    if T < 2 or S < 2 or {(T, S), (S, T)} & sizes:  # a (T, S) tensor would look like one the answer needs
        return None
    for name, shape in record.shapes:
        if len(shape) >= 2 and shape[-2:] in ((T, S), (S, T)):
            return (
                f"builds a {shape[-2]} x {shape[-1]} tensor ({name}) for T = {T} queries and S = {S} keys: the "
                "exercise asks for the result without the (T, S) score matrix"
            )
    return None


def _no_prefix_sum(record: _Recorder, T: int, S: int, sizes: set[tuple[int, int]]) -> str | None:
    if "cumsum" in record.names:
        return "uses cumsum, the parallel form (11.2): the recurrence carries its state from one token to the next"
    return None


def _no_autograd(record: _Recorder, T: int, S: int, sizes: set[tuple[int, int]]) -> str | None:
    if record.grad is not None:
        return (
            f"uses autograd (a result of {record.grad} requires a gradient): write the backward pass yourself"
        )
    return None


RULES: dict[str, tuple[Callable[[_Recorder, int, int, set[tuple[int, int]]], str | None], ...]] = {
    "11.2": (_no_score_matrix,),
    "11.3": (_no_score_matrix, _no_prefix_sum),
    "12.2": (_no_score_matrix,),
    "12.6": (_no_score_matrix, _no_autograd),
}


class Watched:
    """``fn`` as the check calls it, with what broke the exercise's rules on any call so far (``broken``: the
    first such description, or ``None``)."""

    def __init__(self, fn: Callable[..., Any], rules: tuple[Any, ...]) -> None:
        self.fn, self.rules, self.broken = fn, rules, None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.rules:
            return self.fn(*args, **kwargs)
        T, S = args[0].shape[-2], args[1].shape[-2]
        # the (rows, width) pairs a right answer makes anyway: queries, keys and values by their widths
        widths = {t.shape[-1] for t in args[:3] if isinstance(t, torch.Tensor)}
        sizes = {(n, w) for n in (T, S, *widths) for w in widths} | {
            (w, n) for n in (T, S, *widths) for w in widths
        }
        with _Recorder() as record:
            out = self.fn(*args, **kwargs)
        for rule in self.rules:
            broken = rule(record, T, S, sizes)
            if broken and self.broken is None:
                self.broken = broken
        return out


def watched(exercise_id: str, fn: Callable[..., Any]) -> Watched:
    """``fn`` as the check calls it: for an exercise with rules, each call is recorded and judged by them (its
    first two arguments are the queries ``(..., T, D)`` and the keys ``(..., S, D)``); the check reads
    ``.broken`` afterwards. The values are judged first: a wrong value is the learner's first news. 10.11's rules
    read instead what its function fed the given model (:data:`FED_RULES`, below)."""
    if exercise_id in FED_RULES:
        return WatchedCalls(fn, FED_RULES[exercise_id])
    return Watched(fn, RULES.get(exercise_id, ()))


# ---------------------------------------------------------------------------------------------------------
# 10.11 a generation loop with a KV cache: what it fed the given model, call by call


def _one_new_token_per_step(calls: list[tuple[int, int]]) -> str | None:
    """After the first call (the prefill, the whole prompt), a loop with a cache feeds the newest token alone."""
    for i, (start_pos, T) in enumerate(calls[1:], start=2):
        if T > 1:
            return (
                f"feeds the model {T} tokens (positions {start_pos} .. {start_pos + T - 1}) at call {i}: after "
                "the prefill a loop with a cache feeds only the newest token, whose keys and values are the only "
                "ones not stored yet"
            )
    return None


FED_RULES = {"10.11": (_one_new_token_per_step,)}


class WatchedCalls(Watched):
    """``fn`` as the check calls it, judged by what it fed the given model (:class:`attn_edu.grading.given.TinyLM`
    records each call's ``(start_pos, T)``)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from attn_edu.grading.given import DECODER_CALLS

        DECODER_CALLS.clear()
        out = self.fn(*args, **kwargs)
        for rule in self.rules:
            broken = rule(list(DECODER_CALLS))
            if broken and self.broken is None:
                self.broken = broken
        return out
