"""The wire protocol between ``python -m attn_edu.grade`` and its worker: both halves in one file.

The command and the worker talk over one socket, in **messages**: a JSON object behind its length
(:func:`send_message`, :func:`receive_message`). The command leads; the worker only answers, and the
grader's inputs reach the worker one exercise at a time, after every cell of the notebook has run:

1. command → worker: ``{"ask": "setup", "memory_bytes", "cell_timeout", "exercise_timeout", "cells": [[index,
   source], ...]}``; worker → command: ``{"event": "started"}``, then ``{"event": "cell", "index", "status",
   "detail"}`` for each cell that failed, then ``{"event": "cells_done"}``;
2. for each exercise, command → worker: ``{"ask": "exercise", "id", "function", "cases": [case, ...],
   "nonce"}`` where a case is ``{"args", "kwargs", "max_elements"}`` (:func:`encode_case`); worker → command:
   ``{"event": "exercise", "id", "nonce", "outcomes": [...]}`` or ``{"event": "exercise", "id", "nonce",
   "missing": true}``;
3. command → worker: ``{"ask": "answers", "questions": [{"id", "variable"}], "nonce"}``; worker → command:
   ``{"event": "answers", "nonce", "answers": {id: answer}}`` where an answer is ``{"kind": "text", "value"} |
   {"kind": "number", "value"} | {"kind": <failure>, "detail"} | {"missing": true}`` (:func:`encode_answer`);
4. command → worker: ``{"ask": "bye"}``.

An outcome is ``{"kind": "tensor", "dtype", "shape", "data"}``, ``{"kind": "oversized", "dtype", "shape"}``,
or ``{"kind": <failure>, "detail"}`` for ``wrong_type``, ``not_implemented``, ``error``, ``timeout`` and
``shortcut`` (:func:`encode_outcome`, :func:`failure`).

Values cross as plain JSON numbers: a tensor is its dtype, its shape and its elements, with ``"nan"``,
``"inf"`` and ``"-inf"`` as strings. The command trusts nothing that comes back: every reply is checked
against a strict schema (:func:`take_exercise_reply`, :func:`take_answers_reply`: known keys and dtypes,
sizes bounded by what the request allowed, finite floats, the nonce of the request it answers) and turned
into :class:`Outcome` objects. A reply that does not answer the request just sent (a message the notebook's
code wrote to the socket itself, before the request existed) is refused.

Example:
    >>> import torch
    >>> raw = encode_outcome(outcome_of(torch.tensor([1.0, float("nan")])), max_elements=8)
    >>> raw
    {'kind': 'tensor', 'dtype': 'float32', 'shape': [2], 'data': [1.0, 'nan']}
    >>> decode_outcome(raw, max_elements=8).tensor
    tensor([1., nan])
"""

from __future__ import annotations

import json
import math
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

import torch

FLOAT_DTYPES = {"float16", "bfloat16", "float32", "float64"}
INT_DTYPES = {"int8", "int16", "int32", "int64", "uint8"}
DTYPES = FLOAT_DTYPES | INT_DTYPES | {"bool"}
FAILURE_KINDS = ("wrong_type", "not_implemented", "error", "timeout", "shortcut")
MAX_DETAIL = 300  # characters kept of any text that comes from the learner's process
MAX_MESSAGE_BYTES = 64 * 2**20  # the command reads no longer message from the worker than this
MAX_NOTES = 20  # notes on failed cells kept per notebook


@dataclass(frozen=True)
class Outcome:
    """What one call produced, as plain data: a tensor, or why there is none."""

    kind: str  # "tensor", or one of FAILURE_KINDS
    tensor: torch.Tensor | None = None  # a plain CPU tensor when kind == "tensor"
    detail: str = ""  # the type that came back, or the exception text


def outcome_of(value: object) -> Outcome:
    """Turn a returned value into an :class:`Outcome`; only an exact ``torch.Tensor`` counts as a tensor."""
    if type(value) is torch.Tensor:
        return Outcome("tensor", tensor=value.detach().cpu().clone())
    if isinstance(value, torch.Tensor):
        return Outcome("wrong_type", detail=f"a subclass of torch.Tensor ({type(value).__name__})")
    return Outcome("wrong_type", detail=type(value).__name__)


class SchemaError(ValueError):
    """A record from the learner's process that does not have the expected form."""


# ---------------------------------------------------------------------------------------------------------
# The request: the grader's inputs, sent to the worker


def encode_value(value: Any) -> Any:
    """A grader input as JSON: tensors become ``{"tensor": {dtype, shape, data}}``."""
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        return {"tensor": {"dtype": dtype, "shape": list(value.shape), "data": value.reshape(-1).tolist()}}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"value: cannot send {type(value).__name__} to the worker")


def decode_value(value: Any) -> Any:
    """The inverse of :func:`encode_value` (in the worker: the request comes from the grader, not the learner)."""
    if isinstance(value, dict):
        spec = value["tensor"]
        return torch.tensor(spec["data"], dtype=getattr(torch, spec["dtype"])).reshape(spec["shape"])
    return value


def encode_case(args: tuple[Any, ...], kwargs: dict[str, Any], max_elements: int) -> dict[str, Any]:
    """One call of the learner's function, and the most elements its result may send back."""
    return {
        "args": [encode_value(a) for a in args],
        "kwargs": {name: encode_value(v) for name, v in kwargs.items()},
        "max_elements": max_elements,
    }


def decode_case(raw: dict[str, Any]) -> tuple[list[Any], dict[str, Any], int]:
    """``(args, kwargs, max_elements)`` of a case written by :func:`encode_case`."""
    args = [decode_value(a) for a in raw["args"]]
    kwargs = {name: decode_value(v) for name, v in raw["kwargs"].items()}
    return args, kwargs, raw["max_elements"]


# ---------------------------------------------------------------------------------------------------------
# The events: written by the worker


def clip(text: object, limit: int = MAX_DETAIL) -> str:
    """Text from the learner's process, cut to ``limit`` characters."""
    return str(text)[:limit]


def failure(kind: str, detail: object) -> dict[str, Any]:
    """An outcome without a tensor: ``kind`` is one of :data:`FAILURE_KINDS`."""
    if kind not in FAILURE_KINDS:
        raise ValueError(f"kind: expected one of {FAILURE_KINDS}, got {kind!r}")
    return {"kind": kind, "detail": clip(detail)}


def encode_outcome(outcome: Outcome, max_elements: int) -> dict[str, Any]:
    """An :class:`Outcome` (:func:`outcome_of` decided what counts as a tensor) as plain data: a tensor's
    numbers when it has at most ``max_elements`` and a dtype the command reads, else why not."""
    if outcome.kind != "tensor" or outcome.tensor is None:
        return failure(outcome.kind, outcome.detail)
    value = outcome.tensor
    dtype = str(value.dtype).removeprefix("torch.")
    if dtype not in DTYPES:
        return failure("wrong_type", f"a torch.Tensor of dtype {dtype}")
    shape = list(value.shape)
    if value.numel() > max_elements:
        return {"kind": "oversized", "dtype": dtype, "shape": shape}
    flat = value.reshape(-1)
    if dtype in FLOAT_DTYPES:
        data = [x if x == x and abs(x) != float("inf") else repr(x) for x in flat.double().tolist()]
    else:
        data = flat.tolist()
    return {"kind": "tensor", "dtype": dtype, "shape": shape, "data": data}


MAX_ANSWER = 40  # characters kept of a text answer (a letter is one)


def encode_answer(value: object) -> dict[str, Any]:
    """A concept question's answer as plain data: text (a choice's letter), a number, or why neither.

    ``...`` (the exercise notebook's placeholder) is "not attempted"; a bool is not a number; a 0-d
    tensor or NumPy scalar is read as the number it holds.

    Example:
        >>> encode_answer(" B "), encode_answer(8), encode_answer(...)["kind"]
        ({'kind': 'text', 'value': ' B '}, {'kind': 'number', 'value': 8.0}, 'not_implemented')
    """
    if value is Ellipsis:
        return failure("not_implemented", "the answer is still `...`")
    if isinstance(value, str):
        return {"kind": "text", "value": value[:MAX_ANSWER]}
    if isinstance(value, torch.Tensor) or (hasattr(value, "item") and hasattr(value, "shape")):  # NumPy too
        shape = tuple(value.shape)
        if math.prod(shape) != 1:
            return failure("wrong_type", f"{type(value).__name__} of shape {shape}, not one number")
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return failure("wrong_type", type(value).__name__)
    try:
        number = float(value)
    except OverflowError:
        number = math.inf if value > 0 else -math.inf
    return {"kind": "number", "value": number if math.isfinite(number) else repr(number)}


def decode_answer(raw: object) -> Outcome:
    """An answer written by :func:`encode_answer` as an :class:`Outcome`: ``kind`` "text" (``detail`` holds
    it), "number" (a float64 0-d ``tensor``), or a failure; :class:`SchemaError` unless well formed."""
    if not isinstance(raw, dict):
        raise SchemaError("answer: expected an object")
    kind = raw.get("kind")
    if kind in FAILURE_KINDS and set(raw) == {"kind", "detail"}:
        return Outcome(kind, detail=_clean(raw["detail"]))
    if set(raw) != {"kind", "value"}:
        raise SchemaError("answer: unexpected fields")
    if kind == "text" and isinstance(raw["value"], str):
        return Outcome("text", detail=_clean(raw["value"])[:MAX_ANSWER])
    if kind == "number":
        return Outcome("number", tensor=torch.tensor(_number(raw["value"], "float64"), dtype=torch.float64))
    raise SchemaError("answer: expected text or a number")


def cell_event(index: int, status: str, detail: object) -> dict[str, Any]:
    """A code cell that raised (``status="error"``) or ran out of time (``"timeout"``)."""
    return {"event": "cell", "index": index, "status": status, "detail": clip(detail)}


def exercise_event(
    ask: dict[str, Any], outcomes: list[dict[str, Any]], algorithm: str | None = None
) -> dict[str, Any]:
    """The outcomes of one exercise's cases, in order, up to the first that is not a tensor, and what the calls
    did against the algorithm the exercise asks for (:mod:`attn_edu.grading.algorithms`), if anything."""
    event = {"event": "exercise", "id": ask["id"], "nonce": ask["nonce"], "outcomes": outcomes}
    return event | ({"algorithm": clip(algorithm)} if algorithm else {})


def missing_event(ask: dict[str, Any]) -> dict[str, Any]:
    """The notebook has no function of the exercise's name."""
    return {"event": "exercise", "id": ask["id"], "nonce": ask["nonce"], "missing": True}


MISSING = {"missing": True}  # a question's answer when the notebook has neither the variable nor a check()


# ---------------------------------------------------------------------------------------------------------
# Reading the events back (untrusted): in the command


def _clean(text: object) -> str:
    if not isinstance(text, str):
        raise SchemaError("expected a string")
    return "".join(c if c.isprintable() else " " for c in text[:MAX_DETAIL])


def _reject_constant(name: str) -> None:
    raise SchemaError(f"bare {name} in the results")


def _shape(raw: object) -> tuple[int, ...]:
    if not isinstance(raw, list) or len(raw) > 16:
        raise SchemaError("shape: expected a list of at most 16 sizes")
    if not all(type(n) is int and 0 <= n <= 2**31 for n in raw):
        raise SchemaError("shape: expected sizes 0 .. 2**31")
    if math.prod(raw) > 2**62:
        raise SchemaError("shape: too many elements")
    return tuple(raw)


def _number(x: object, dtype: str) -> float | int | bool:
    if dtype == "bool":
        if type(x) is not bool:
            raise SchemaError("expected a bool")
        return x
    if dtype in FLOAT_DTYPES:
        if x in ("nan", "inf", "-inf"):
            return float(x)
        if type(x) not in (int, float) or not math.isfinite(x):
            raise SchemaError("expected a finite number")
        return float(x)
    info = torch.iinfo(getattr(torch, dtype))
    if type(x) is not int or not info.min <= x <= info.max:
        raise SchemaError(f"expected an integer in the range of {dtype}")
    return x


_OUTCOME_KEYS = {
    "tensor": {"kind", "dtype", "shape", "data"},
    "oversized": {"kind", "dtype", "shape"},
    **{kind: {"kind", "detail"} for kind in FAILURE_KINDS},
}


def decode_outcome(raw: object, max_elements: int) -> Outcome:
    """One result from the worker as an :class:`Outcome`; :class:`SchemaError` unless it is well formed."""
    if (
        not isinstance(raw, dict)
        or raw.get("kind") not in _OUTCOME_KEYS
        or set(raw) != _OUTCOME_KEYS[raw["kind"]]
    ):
        raise SchemaError("outcome: unexpected fields")
    kind = raw["kind"]
    if "detail" in raw:
        return Outcome(kind, detail=_clean(raw["detail"]))
    if raw["dtype"] not in DTYPES:
        raise SchemaError("dtype: not one the grader reads")
    dtype = getattr(torch, raw["dtype"])
    shape = _shape(raw["shape"])
    numel = math.prod(shape)
    if kind == "oversized":
        if numel <= max_elements:
            raise SchemaError("oversized: the tensor is small enough to send")
        return Outcome("tensor", tensor=torch.zeros((), dtype=dtype).expand(shape))  # shape only, no memory
    data = raw["data"]
    if not isinstance(data, list) or len(data) != numel or numel > max_elements:
        raise SchemaError("data: expected one number per element, within the size limit")
    values = [_number(x, raw["dtype"]) for x in data]
    carrier = (
        torch.bool if dtype == torch.bool else torch.float64 if raw["dtype"] in FLOAT_DTYPES else torch.int64
    )
    return Outcome("tensor", tensor=torch.tensor(values, dtype=carrier).reshape(shape).to(dtype))


class Closed(Exception):
    """The other end closed the socket, or sent nothing in time."""


def send_message(sock: socket.socket, message: dict[str, Any]) -> None:
    """Write one message: its length (4 bytes, big-endian), then the JSON."""
    data = json.dumps(message).encode()
    sock.sendall(struct.pack(">I", len(data)) + data)


def _read_exactly(sock: socket.socket, n: int, deadline: float | None) -> bytes:
    chunks, got = [], 0
    while got < n:
        sock.settimeout(None if deadline is None else max(deadline - time.monotonic(), 1e-3))
        try:
            chunk = sock.recv(min(n - got, 2**20))
        except (TimeoutError, OSError) as err:
            raise Closed(type(err).__name__) from err
        if not chunk:
            raise Closed("closed")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def receive_message(
    sock: socket.socket,
    deadline: float | None = None,
    max_bytes: int = MAX_MESSAGE_BYTES,
    *,
    from_grader: bool = False,
) -> object:
    """Read one message written by :func:`send_message` (``deadline``: a :func:`time.monotonic` time).

    :class:`Closed` when the socket closes or the deadline passes; :class:`SchemaError` for a message longer
    than ``max_bytes`` (the rest of the stream cannot be trusted then: the caller stops reading) or not JSON.
    Bare ``NaN`` and ``Infinity`` are refused, except ``from_grader`` (the worker reading the grader's inputs,
    whose masked scores hold ``-inf``).
    """
    (n,) = struct.unpack(">I", _read_exactly(sock, 4, deadline))
    if n > max_bytes:
        raise SchemaError(f"a message of {n} bytes, over the limit of {max_bytes}")
    try:
        data = _read_exactly(sock, n, deadline)
        return json.loads(data) if from_grader else json.loads(data, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as err:
        raise SchemaError(f"not JSON ({type(err).__name__})") from err


def take_cell_event(event: object) -> str | None:
    """Read a message of the cell phase: ``"started"``, ``"cells_done"`` or ``None`` for a cell's note, which
    the caller gets from :func:`cell_note`; :class:`SchemaError` for anything else."""
    if not isinstance(event, dict):
        raise SchemaError("event: expected an object")
    kind = event.get("event")
    if kind in ("started", "cells_done") and set(event) == {"event"}:
        return kind
    if (
        kind == "cell"
        and set(event) == {"event", "index", "status", "detail"}
        and type(event["index"]) is int
    ):
        return None
    raise SchemaError("event: not one of the cell phase")


def cell_note(event: dict[str, Any]) -> str:
    """A failed cell's note, as the report shows it."""
    return f"cell {event['index']}: " + _clean(event["detail"])


def _answering(event: object, kind: str, nonce: str) -> dict[str, Any]:
    if not isinstance(event, dict) or event.get("event") != kind or event.get("nonce") != nonce:
        raise SchemaError(f"{kind}: not the reply to the request just sent")
    return event


def take_exercise_reply(
    event: object, exercise_id: str, nonce: str, sizes: list[int]
) -> tuple[list[Outcome], str | None] | None:
    """The outcomes in the worker's reply to the request ``nonce`` for ``exercise_id``, with what the calls did
    against the exercise's algorithm (``None``: nothing), or ``None`` when the notebook has no such function.
    ``sizes[i]`` bounds the size of the i-th result. :class:`SchemaError` for a reply that is not to this
    request or not well formed; a malformed outcome becomes an ``"error"`` outcome."""
    event = _answering(event, "exercise", nonce)
    if event.get("id") != exercise_id:
        raise SchemaError("exercise: the reply names another exercise")
    if set(event) == {"event", "id", "nonce", "missing"} and event["missing"] is True:
        return None
    raw = event.get("outcomes")
    if (
        set(event) - {"algorithm"} != {"event", "id", "nonce", "outcomes"}
        or not isinstance(raw, list)
        or not 1 <= len(raw) <= len(sizes)
    ):
        raise SchemaError("exercise: expected 1 .. len(cases) outcomes")
    algorithm = _clean(event["algorithm"]) if "algorithm" in event else None
    try:
        return [decode_outcome(r, n) for r, n in zip(raw, sizes)], algorithm
    except SchemaError as err:
        return [Outcome("error", detail=f"the grader could not read this result ({err})")], algorithm


def take_answers_reply(event: object, asked: list[str], nonce: str) -> dict[str, Outcome | None]:
    """Each asked question's answer in the worker's reply to the request ``nonce`` (``None``: no answer in the
    notebook); a malformed answer becomes an ``"error"`` outcome. :class:`SchemaError` unless the reply
    answers this request with one entry per question."""
    event = _answering(event, "answers", nonce)
    answers = event.get("answers")
    if (
        set(event) != {"event", "nonce", "answers"}
        or not isinstance(answers, dict)
        or set(answers) != set(asked)
    ):
        raise SchemaError("answers: expected one answer per question asked")
    taken: dict[str, Outcome | None] = {}
    for question_id in asked:
        raw = answers[question_id]
        if raw == MISSING:
            taken[question_id] = None
            continue
        try:
            taken[question_id] = decode_answer(raw)
        except SchemaError as err:
            taken[question_id] = Outcome("error", detail=f"the grader could not read this answer ({err})")
    return taken
