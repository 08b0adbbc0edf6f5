"""Starting a learner notebook's worker and talking to it: the grader's side of :mod:`attn_edu.grading.worker`.

:func:`run_notebook` starts one process per notebook, in the sandbox (:mod:`attn_edu.grading.sandbox`) where it
works, else forked from a ``multiprocessing`` forkserver that imported torch once (a notebook then costs its own
cells, not a fresh torch import of about 3 s), and leads the conversation of :mod:`attn_edu.grading.protocol`
over a socket: the notebook's cells first, then each exercise's inputs, then the questions. It holds no
answer: it returns what came back, read against the schema, for :mod:`attn_edu.grading.command` to judge.
"""

from __future__ import annotations

import multiprocessing
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attn_edu.grading import protocol, sandbox, worker


@dataclass(frozen=True)
class Limits:
    exercise_timeout: float = 10.0  # seconds for all the cases of one exercise
    cell_timeout: float = 60.0  # seconds for one code cell of the notebook
    notebook_timeout: float = 300.0  # seconds for the whole notebook process, start-up included
    memory_mb: int = 4096  # address-space limit of the notebook process (torch alone maps ~0.8 GB)
    sandbox: str = "auto"  # "bwrap" (required), "auto" (bwrap where it works, else a plain process), "none"


_FORKSERVER = multiprocessing.get_context("forkserver")
# Imported once by the server; every notebook process is forked from it with torch already loaded, and the
# answer key not loaded (the worker never imports it: tests/test_grading_attacks.py looks).
_FORKSERVER.set_forkserver_preload(["torch", "attn_edu.grading.worker"])
_START_LOCK = threading.Lock()
_NOTICE_LOCK = threading.Lock()
_noticed: list[str] = []


def _no_sandbox_notice(why: str) -> None:
    """Say once per run that notebooks run without the sandbox, and why."""
    with _NOTICE_LOCK:
        if not _noticed:
            _noticed.append(why)
            print(f"grader: no sandbox ({why}); each notebook runs in a plain process", file=sys.stderr)


class _Worker:
    """One notebook's process: in the sandbox (``bwrap``), or forked from the forkserver without one."""

    def __init__(self, sock: socket.socket, work: Path, sandboxed: bool, hide: list[Path]) -> None:
        self.sandboxed = sandboxed
        if sandboxed:
            argv = [sys.executable, "-m", "attn_edu.grading.worker", str(sock.fileno()), str(work)]
            self.proc: Any = subprocess.Popen(
                sandbox.command(argv, workdir=work, hide=hide),
                pass_fds=[sock.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        else:
            self.proc = _FORKSERVER.Process(target=worker.run, args=(sock, str(work)))
            with _START_LOCK:
                self.proc.start()

    def stop(self, grace: float) -> int | None:
        """End the process and all it started, once it has had ``grace`` seconds to end by itself; its exit
        code (``None``: it was still running)."""
        if self.sandboxed:
            try:
                code = self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                code = None
            if (
                code is not None and code > 128
            ):  # bwrap passes a signal on as 128 + its number, as a shell does
                code = -(code - 128)
        else:
            self.proc.join(timeout=grace)
            code = self.proc.exitcode
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # it leads its own session: this ends what it started
        except (ProcessLookupError, PermissionError):
            pass
        if self.sandboxed:
            self.proc.wait()
        else:
            self.proc.join()
        return code


def no_replies() -> dict[str, Any]:
    """What a notebook's process sent back, before it sent anything: outcomes and what the calls did against
    the algorithm, per exercise; answers, per question; the items it has no function or answer for; notes on
    failed cells; whether the conversation ended as it should."""
    return {"outcomes": {}, "algorithm": {}, "answers": {}, "missing": set(), "notes": [], "done": False}


def _converse(
    sock: socket.socket,
    setup: dict[str, Any],
    asks: list[dict[str, Any]],
    questions: list[dict[str, Any]],
    deadline: float,
) -> dict[str, Any]:
    """The grader's side of the conversation (:mod:`attn_edu.grading.protocol`): the cells, then each exercise's
    inputs, then the questions; what came back, read against the schema. Stops at the first reply that is
    late, missing or malformed: what was not answered by then has no entry."""
    parsed = no_replies()

    def note(text: str) -> None:
        if len(parsed["notes"]) < protocol.MAX_NOTES:
            parsed["notes"].append(text)

    try:
        protocol.send_message(sock, setup)
        while True:  # the cell phase
            event = protocol.receive_message(sock, deadline, 2**16)
            kind = protocol.take_cell_event(event)
            if kind == "cells_done":
                break
            if kind is None:
                note(protocol.cell_note(event))  # type: ignore[arg-type]
        for ask in asks:
            ask = {**ask, "nonce": secrets.token_hex(8)}
            protocol.send_message(sock, ask)
            sizes = [case["max_elements"] for case in ask["cases"]]
            reply = protocol.receive_message(sock, deadline, 32 * sum(sizes) + 2**16)
            taken = protocol.take_exercise_reply(reply, ask["id"], ask["nonce"], sizes)
            if taken is None:
                parsed["missing"].add(ask["id"])
            else:
                parsed["outcomes"][ask["id"]], parsed["algorithm"][ask["id"]] = taken
        if questions:
            asked = [q["id"] for q in questions]
            ask = {"ask": "answers", "questions": questions, "nonce": secrets.token_hex(8)}
            protocol.send_message(sock, ask)
            reply = protocol.receive_message(sock, deadline, 2**16)
            for question_id, answer in protocol.take_answers_reply(reply, asked, ask["nonce"]).items():
                if answer is None:
                    parsed["missing"].add(question_id)
                else:
                    parsed["answers"][question_id] = answer
        protocol.send_message(sock, {"ask": "bye"})
        parsed["done"] = True
    except protocol.SchemaError as err:
        note(f"the notebook's process sent what the grader did not ask for ({err}); grading stopped there")
    except (protocol.Closed, OSError):
        pass
    return parsed


def run_notebook(
    cells: list[list[Any]], request: dict[str, Any], limits: Limits, hide: list[Path]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run one notebook's cells in a worker and ask it for each exercise (``request``: :func:`command._request`);
    the parsed replies, and what happened to the process. ``hide``: folders the sandbox empties."""
    started = time.monotonic()
    deadline = started + limits.notebook_timeout
    why = None if limits.sandbox == "none" else sandbox.problem()
    if why is not None:
        if limits.sandbox == "bwrap":
            raise RuntimeError(f"--sandbox bwrap: {why}")
        _no_sandbox_notice(why)
    with tempfile.TemporaryDirectory(prefix="attn_edu_grade_") as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        ours, theirs = socket.socketpair()
        with ours, theirs:
            process = _Worker(theirs, work, sandboxed=why is None and limits.sandbox != "none", hide=hide)
            theirs.close()
            setup = {
                "ask": "setup",
                "memory_bytes": limits.memory_mb * 2**20,
                "cell_timeout": limits.cell_timeout,
                "exercise_timeout": limits.exercise_timeout,
                "cells": cells,
            }
            parsed = _converse(ours, setup, request["exercises"], request["questions"], deadline)
            timed_out = not parsed["done"] and time.monotonic() >= deadline
            code = process.stop(grace=0.0 if timed_out else 2.0)
    return parsed, {"exit_code": code, "timed_out": timed_out, "sandboxed": process.sandboxed}
