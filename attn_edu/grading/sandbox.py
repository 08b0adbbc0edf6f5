"""The sandbox a learner's notebook is graded in: bubblewrap (``bwrap``), where this machine lets it run.

Inside it the notebook's process has

- **no network** (its own, empty network namespace) and its own process, IPC and host-name namespaces: it
  sees no other process, and ends with the grader (``--die-with-parent``);
- **no view of the answer key**: the folders of :mod:`attn_edu.grading.checks` and
  :mod:`attn_edu.grading.questions`, and a ``solutions/`` folder beside the package, are empty there;
- **no view of other submissions or of the instructor's files**: every folder a graded notebook came from,
  the folder the grader runs in, the home folders, ``/tmp`` and the other usual places for people's files
  are empty there, except the Python installation and the package, which it reads but cannot change;
- **one writable folder**, its own working folder, which the grader deletes afterwards.

Everything else (``/usr``, ``/etc``, ...) is read-only. bwrap is a Debian package (``apt-get install
bubblewrap``); it needs unprivileged user namespaces, or root. Where it is missing or cannot start, the
grader says so once and runs each notebook in a plain process, with the limits of
:mod:`attn_edu.grading.worker` only (``--sandbox none`` asks for that).
"""

from __future__ import annotations

import functools
import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

import attn_edu

PACKAGE = Path(attn_edu.__file__).resolve().parent
# The answer key's folders, and a checkout's solutions: empty inside the sandbox.
KEY_FOLDERS = (
    PACKAGE / "grading" / "checks",
    PACKAGE / "grading" / "questions",
    PACKAGE.parent / "solutions",
)
# The usual places for people's files: empty inside the sandbox (with the graded folders and the grader's own).
PRIVATE = ("/home", "/root", "/tmp", "/var/tmp", "/srv", "/mnt", "/media", "/run/user")


def _python_paths() -> list[Path]:
    """What the worker must read: the interpreter, the environment and its packages, this package."""
    paths = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix), PACKAGE}
    paths |= {Path(p) for p in site.getsitepackages() if p}
    return sorted(p for p in paths if p.exists())


def command(argv: list[str], *, workdir: Path, hide: Iterable[Path] = ()) -> list[str]:
    """``bwrap ... argv``: ``argv`` run in the sandbox, in ``workdir`` (its only writable folder), with the
    folders ``hide`` (and :data:`PRIVATE`, the current folder, the home folder) empty."""
    hidden = {Path(p) for p in PRIVATE} | {Path.cwd(), Path.home()} | {Path(p).resolve() for p in hide}
    args = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/dev/shm"]
    for folder in sorted(p for p in hidden if p.is_dir() and p != Path("/")):
        args += ["--tmpfs", str(folder)]
    # Bound again, read-only, over the emptied folders: what Python needs, and the package alone (not the
    # checkout around it), found through PYTHONPATH where it is not installed
    for path in _python_paths():
        if any(path.is_relative_to(folder) for folder in hidden):
            args += ["--ro-bind", str(path), str(path)]
    for folder in KEY_FOLDERS:
        if folder.is_dir():
            args += ["--tmpfs", str(folder)]
    args += ["--bind", str(workdir), str(workdir), "--chdir", str(workdir), "--setenv", "HOME", str(workdir)]
    args += ["--setenv", "PYTHONPATH", str(PACKAGE.parent)]
    args += ["--unshare-all", "--die-with-parent", "--new-session", "--"]
    return args + argv


@functools.cache
def problem() -> str | None:
    """``None`` when the sandbox works on this machine, else why not (one line)."""
    if shutil.which("bwrap") is None:
        return "bwrap (bubblewrap) is not installed: apt-get install bubblewrap"
    with tempfile.TemporaryDirectory(prefix="attn_edu_sandbox_") as tmp:
        probe = command([sys.executable, "-c", "import attn_edu"], workdir=Path(tmp))
        try:
            done = subprocess.run(probe, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"bwrap could not start: {err}"
    if done.returncode != 0:
        return f"bwrap could not start a sandbox here: {done.stderr.strip()[:200]}"
    return None
