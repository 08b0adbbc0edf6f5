"""The child side of ``python -m attn_edu.grade``: run one learner notebook, answer the grader's requests.

:mod:`attn_edu.grading.command` starts :func:`run` in a process of its own for each notebook, never reused:
inside a sandbox (:mod:`attn_edu.grading.sandbox`, as ``python -m attn_edu.grading.worker FD WORKDIR``) where
one works, else forked from a ``multiprocessing`` forkserver that has already imported torch. Either way the
process has never imported the answer key (:mod:`attn_edu.grading.checks`, :mod:`attn_edu.grading.questions`,
the registry): its imports are refused here (:class:`KeyBlocker`), and in the sandbox its files are not
there at all. The process

1. starts its own session (so the grader can kill everything it spawns), moves to an empty folder,
   refuses imports of the answer key, and limits its memory (``RLIMIT_AS``) and file sizes before any
   learner code runs;
2. sends the learner's printing to a small buffer (file descriptors 1 and 2 go to ``/dev/null``;
   stdin is ``/dev/null``, so ``input()`` raises ``EOFError``);
3. runs the notebook's code cells, which the grader sent, in order in one namespace, each under a time
   limit, like "Run all" in Jupyter (IPython syntax such as ``%pip`` is translated; magics and ``!``
   commands are skipped);
4. then, and only then, receives each exercise's inputs from the grader, calls the function, found by name,
   on them under the exercise time limit (:func:`attn_edu.grading.run.run_cases`, as ``check()`` does in a
   notebook) and sends back what came out; then the concept questions' answers (the value passed to
   ``check()``, else the variable).

Nothing here decides PASS or FAIL, and nothing here is written to a file: the grader reads each reply from
the socket, checks it against a strict schema (both halves of the format are in
:mod:`attn_edu.grading.protocol`) and compares it with the reference in its own process, where the learner's
code never ran and which the learner's code cannot reach.
"""

from __future__ import annotations

import functools
import importlib.abc
import io
import os
import resource
import socket
import sys
from typing import Any

import torch

from attn_edu.grading import protocol
from attn_edu.grading.algorithms import watched
from attn_edu.grading.exercise import Case
from attn_edu.grading.harness import KERNELS, kernel_of
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
        return protocol.MISSING
    try:
        with time_limit(seconds):  # reading a learner's object runs its code (__float__, .item())
            return protocol.encode_answer(value)
    except ExerciseTimeout:
        return protocol.failure("timeout", f"{seconds:g} s")
    except BaseException as err:  # noqa: BLE001 - whatever the object does, the grader hears of it
        return protocol.failure("error", f"{type(err).__name__}: {err}")


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
    # Triton kernels (the eight steps of notebook 12's ladder) run in Triton's interpreter on the grader's CPU tensors,
    # GPU or not, so that the memory limit holds for them too; set before the notebook imports triton, which
    # reads it once.
    "TRITON_INTERPRET": "1",
}


# The answer key, and the modules that import it: a notebook being graded cannot import them.
ANSWER_KEY = (
    "attn_edu.grading.checks",
    "attn_edu.grading.questions",
    "attn_edu.grading.registry",
    "attn_edu.grading.command",
    "attn_edu.grading.generate",
    "attn_edu.grading.nbgrader",
    "attn_edu.grading.gradescope",
    "attn_edu.grade",
    "attn_edu.exercises",
)


def is_answer_key(name: str) -> bool:
    return any(name == key or name.startswith(key + ".") for key in ANSWER_KEY)


class KeyBlocker(importlib.abc.MetaPathFinder):
    """Refuses to import the answer key (first on ``sys.meta_path``, so no other finder is asked)."""

    def find_spec(self, fullname: str, path: object, target: object = None) -> None:
        if is_answer_key(fullname):
            raise ImportError(
                f"{fullname} is the grader's answer key: a notebook cannot import it while it is graded",
                name=fullname,
            )
        return None


def _grade_exercise(ask: dict[str, Any], namespace: dict[str, Any], seconds: float) -> dict[str, Any]:
    if (
        ask["id"] in KERNELS
    ):  # a Triton exercise: the kernel, found by name, launched by the grader's launcher
        fn = kernel_of(ask["id"], None, namespace)
    else:
        fn = namespace.get(ask["function"])
    if fn is None:  # renamed? then the function the notebook passed to check() stands in
        fn = submitted(ask["id"])
    if fn is None:
        return protocol.missing_event(ask)
    if not callable(fn):
        detail = f"{ask['function']} is a {type(fn).__name__}, not a function"
        return protocol.exercise_event(ask, [protocol.failure("error", detail)])
    decoded = [protocol.decode_case(case) for case in ask["cases"]]
    cases = [Case(tuple(args), kwargs) for args, kwargs, _ in decoded]
    call = watched(ask["id"], fn)
    outcomes = run_cases(call, cases, seconds)  # the notebook's check() runs them so too
    encoded = [protocol.encode_outcome(o, n) for o, (_, _, n) in zip(outcomes, decoded)]
    return protocol.exercise_event(ask, encoded, call.broken)


def run(sock: socket.socket, workdir: str) -> None:
    """Grade one notebook, as the grader asks over ``sock``; the process ends here (``os._exit``)."""
    try:
        os.setsid()
    except OSError:  # already leads its session (the sandbox started it so)
        pass
    os.chdir(workdir)  # files the notebook writes land in a folder the grader deletes
    os.environ.pop("ATTN_EDU_STRICT", None)
    os.environ.update(CHILD_ENV)
    sys.meta_path.insert(0, KeyBlocker())
    for name in [m for m in sys.modules if is_answer_key(m)]:  # none, unless a caller imported them
        del sys.modules[name]
    send = protocol.send_message  # bound before any learner code runs
    receive = functools.partial(protocol.receive_message, from_grader=True)
    setup = receive(sock)
    _limit_resources(setup["memory_bytes"])
    send(sock, {"event": "started"})
    _silence()
    torch.set_num_threads(1)
    namespace: dict[str, Any] = {"__name__": "__main__", "get_ipython": _Shell}
    _run_cells(
        [(i, source) for i, source in setup["cells"]],
        namespace,
        setup["cell_timeout"],
        lambda e: send(sock, e),
    )
    send(sock, {"event": "cells_done"})
    seconds = setup["exercise_timeout"]
    while True:
        ask = receive(sock)
        if ask["ask"] == "exercise":
            send(sock, _grade_exercise(ask, namespace, seconds))
        elif ask["ask"] == "answers":
            answers = {q["id"]: _answer(q, namespace, seconds) for q in ask["questions"]}
            send(sock, {"event": "answers", "nonce": ask["nonce"], "answers": answers})
        else:
            break
    os._exit(0)  # skip whatever the learner registered with atexit


def main(argv: list[str] | None = None) -> None:
    """``python -m attn_edu.grading.worker FD WORKDIR``: the sandbox's way in (FD: the socket to the grader)."""
    fd, workdir = argv or sys.argv[1:]
    run(socket.socket(fileno=int(fd)), workdir)


if __name__ == "__main__":
    main()
