"""The child side of ``python -m attn_edu.grade``: run one learner notebook, report plain numbers.

:mod:`attn_edu.grading.command` starts :func:`run` in a process forked from a server that has already
imported torch (``multiprocessing``'s forkserver, so each notebook starts in well under a second instead of paying
for a fresh torch import), one process per notebook, never reused. The process

1. starts its own session (so the grader can kill everything it spawns), moves to an empty folder,
   and limits its memory (``RLIMIT_AS``) and file sizes before any learner code runs;
2. sends the learner's printing to a small buffer (file descriptors 1 and 2 go to ``/dev/null``;
   stdin is ``/dev/null``, so ``input()`` raises ``EOFError``);
3. runs the notebook's code cells in order in one namespace, each under a time limit, like "Run all"
   in Jupyter (IPython syntax such as ``%pip`` is translated; magics and ``!`` commands are skipped);
4. calls each exercise's function, found by name, on the grader's inputs, under the exercise time limit
   (:func:`attn_edu.grading.run.run_cases`, as ``check()`` does in a notebook), and reads each concept
   question's answer (the value passed to ``check()``, else the variable);
5. writes one JSON line per event to the results file as it goes, so what was graded before a crash survives.

Nothing here decides PASS or FAIL: the grader reads the numbers back, checks them against a strict
schema (both halves of the format are in :mod:`attn_edu.grading.protocol`) and compares them with the
reference in its own process, where the learner's code never ran.
"""

from __future__ import annotations

import io
import json
import os
import resource
import sys
from typing import Any

import torch

from attn_edu.grading import protocol
from attn_edu.grading.exercise import Case
from attn_edu.grading.notebook import submitted
from attn_edu.grading.run import ExerciseTimeout, run_cases, time_limit


def _limit_resources(memory_bytes: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 2**20, 256 * 2**20))  # no disk-filling files
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


class _Capped(io.TextIOBase):
    """A text stream that keeps the first ``limit`` characters and drops the rest (an endless print is cheap)."""

    def __init__(self, limit: int = 4000) -> None:
        self.limit, self.kept = limit, []
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        text = str(text)
        if self.size < self.limit:
            self.kept.append(text[: self.limit - self.size])
        self.size += len(text)
        return len(text)


def _silence() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    sys.stdout, sys.stderr = _Capped(), _Capped()


class _Shell:
    """Stands in for ``get_ipython()``: magics and shell commands do nothing when grading."""

    def run_line_magic(self, name: str, line: str, *args: Any) -> None:
        return None

    def run_cell_magic(self, name: str, line: str, body: str) -> None:
        return None

    def system(self, command: str) -> None:
        return None

    def getoutput(self, command: str) -> list[str]:
        return []


def _translate(source: str) -> str:
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # plain Python without IPython: only pure-Python cells run
        return source
    return TransformerManager().transform_cell(source)


_MISSING = object()


def _answer(question: dict[str, Any], namespace: dict[str, Any], seconds: float) -> dict[str, Any]:
    value = submitted(question["id"], _MISSING)
    if value is _MISSING:
        value = namespace.get(question["variable"], _MISSING)
    if value is _MISSING:
        return protocol.missing_answer_event(question["id"])
    try:
        with time_limit(seconds):  # reading a learner's object runs its code (__float__, .item())
            answer = protocol.encode_answer(value)
    except ExerciseTimeout:
        answer = protocol.failure("timeout", f"{seconds:g} s")
    except BaseException as err:  # noqa: BLE001 - whatever the object does, the grader hears of it
        answer = protocol.failure("error", f"{type(err).__name__}: {err}")
    return protocol.answer_event(question["id"], answer)


def _run_cells(cells: list[tuple[int, str]], namespace: dict[str, Any], seconds: float, emit: Any) -> None:
    for index, source in cells:
        try:
            code = compile(_translate(source), f"<cell {index}>", "exec")
            with time_limit(seconds):
                exec(code, namespace)
        except ExerciseTimeout:
            emit(protocol.cell_event(index, "timeout", f"over {seconds:g} s"))
        except BaseException as err:  # noqa: BLE001 - a failing cell must not stop the notebook
            emit(protocol.cell_event(index, "error", f"{type(err).__name__}: {err}"))


CHILD_ENV = {
    "ATTN_EDU_GRADER_CHILD": "1",  # check() in the notebook only records the function
    "OMP_NUM_THREADS": "1",  # one core per notebook; --jobs grades several side by side
    "MKL_NUM_THREADS": "1",
    "MPLBACKEND": "Agg",
    # Triton kernels (exercises 12.4, 12.5, 12.7, 12.8) run in Triton's interpreter on the grader's CPU tensors,
    # GPU or not, so that the memory limit holds for them too; set before the notebook imports triton, which
    # reads it once.
    "TRITON_INTERPRET": "1",
}


def run(request_path: str, results_path: str, workdir: str) -> None:
    """Grade one notebook as described in the request file; the process ends here (``os._exit``)."""
    os.setsid()
    os.chdir(workdir)  # files the notebook writes land in a folder the grader deletes
    os.environ.pop("ATTN_EDU_STRICT", None)
    os.environ.update(CHILD_ENV)
    with open(request_path, encoding="utf-8") as f:
        request = json.load(f)
    _limit_resources(request["memory_bytes"])
    results = os.open(results_path, os.O_WRONLY | os.O_APPEND)

    def emit(event: dict[str, Any]) -> None:
        os.write(results, (json.dumps(event) + "\n").encode())

    emit(protocol.started_event())
    _silence()
    try:
        with open(request["notebook"], encoding="utf-8") as f:
            notebook = json.load(f)
        cells = [
            (i, "".join(c["source"]) if isinstance(c["source"], list) else c["source"])
            for i, c in enumerate(notebook["cells"], 1)
            if c.get("cell_type") == "code"
        ]
    except Exception as err:  # noqa: BLE001 - not JSON, no cells, ...: the grader reports it
        emit(protocol.unreadable_event(f"{type(err).__name__}: {err}"))
        os._exit(0)
    torch.set_num_threads(1)
    namespace: dict[str, Any] = {"__name__": "__main__", "get_ipython": _Shell}
    _run_cells(cells, namespace, request["cell_timeout"], emit)
    for exercise in request["exercises"]:
        fn = namespace.get(exercise["function"])
        if fn is None:  # renamed? then the function the notebook passed to check() stands in
            fn = submitted(exercise["id"])
        if fn is None:
            emit(protocol.missing_event(exercise["id"]))
            continue
        if not callable(fn):
            detail = f"{exercise['function']} is a {type(fn).__name__}, not a function"
            emit(protocol.exercise_event(exercise["id"], [protocol.failure("error", detail)]))
            continue
        decoded = [protocol.decode_case(case) for case in exercise["cases"]]
        cases = [Case(tuple(args), kwargs) for args, kwargs, _ in decoded]
        outcomes = run_cases(
            fn, cases, request["exercise_timeout"]
        )  # the notebook's check() runs them so too
        encoded = [protocol.encode_outcome(o, limit) for o, (_, _, limit) in zip(outcomes, decoded)]
        emit(protocol.exercise_event(exercise["id"], encoded))
    for question in request.get("questions", []):
        emit(_answer(question, namespace, request["exercise_timeout"]))
    emit(protocol.done_event())
    os._exit(0)  # skip whatever the learner registered with atexit
