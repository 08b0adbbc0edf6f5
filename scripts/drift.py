"""What the newest releases break: run by ``make drift`` inside a fresh environment of the newest versions.

    python scripts/drift.py [--out artifacts/drift] [--markers "not slow"] [--notebooks course]

``make drift`` builds ``.venv-drift`` with the newest release of every package the course uses (torch too,
where the machine allows: ``DRIFT_TORCH``), then runs this script in it. The script

1. lists every installed package whose version differs from ``requirements/lock.txt`` (the versions the course
   is tested with, and its stored outputs were computed with),
2. runs the unit tests (``--markers``: the quick ones by default; ``--markers ""`` runs all),
3. runs every course notebook to its end in a fresh kernel, without comparing its outputs with the stored ones
   (new releases may move their last digits; what must hold is that every cell runs),

and writes what it found to ``artifacts/drift/report.md`` and ``report.json``. Exit code 0 when the tests and
every notebook passed, 1 when something broke: then the report names it, and the lock should not move to these
versions until it is fixed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attn_edu.env import locked_versions  # noqa: E402


def changed_versions(pins: dict[str, str]) -> list[tuple[str, str, str]]:
    """``(name, lock's version, installed version)`` for each locked package installed at another version (the
    distribution an import finds first, as :func:`importlib.metadata.version` does)."""
    changed = []
    for name, pinned in sorted(pins.items()):
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if installed.split("+")[0] != pinned:
            changed.append((name, pinned, installed))
    return changed


def run_unit_tests(markers: str) -> dict:
    # tests/test_lock.py checks that the lock's versions are the ones installed: here they are not, by design
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--ignore=tests/ui", "-rf"]
    cmd += ["--ignore=tests/test_lock.py"]
    cmd += ["-n", "2"] + (["-m", markers] if markers else [])
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    failed = [
        line.split(" ", 1)[1].split(" - ")[0] for line in lines if line.startswith(("FAILED ", "ERROR "))
    ]
    return {
        "summary": lines[-1] if lines else done.stderr.strip()[-300:],
        "failed": failed,
        "ok": done.returncode == 0,
        "seconds": round(time.monotonic() - started, 1),
    }


def run_notebook(path: Path, timeout: int = 600) -> dict:
    """Run ``path`` to its end in a fresh kernel; nothing is written back."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    started = time.monotonic()
    try:
        NotebookClient(
            nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
        ).execute()
        error = ""
    except CellExecutionError as err:
        error = re.sub(r"\x1b\[[0-9;]*m", "", str(err).strip().splitlines()[-1])[
            :300
        ]  # without terminal colours
    except Exception as err:  # a kernel that dies, a timeout
        error = f"{type(err).__name__}: {err}"[:300]
    return {
        "notebook": path.name,
        "ok": not error,
        "error": error,
        "seconds": round(time.monotonic() - started, 1),
    }


def report_text(changed: list[tuple[str, str, str]], unit: dict, notebooks: list[dict]) -> str:
    lines = ["# Drift report: the newest releases against requirements/lock.txt", ""]
    lines += [f"## {len(changed)} package(s) newer (or older) than the lock", ""]
    lines += ["| package | lock | installed |", "|---|---|---|"]
    lines += [f"| {name} | {pinned} | {now} |" for name, pinned, now in changed]
    lines += [
        "",
        f"## Unit tests: {'passed' if unit['ok'] else 'FAILED'} ({unit['seconds']} s)",
        "",
        unit["summary"],
    ]
    lines += [f"- {test}" for test in unit["failed"]]
    broken = [n for n in notebooks if not n["ok"]]
    lines += ["", f"## Notebooks: {len(notebooks) - len(broken)} of {len(notebooks)} ran to the end", ""]
    lines += [
        f"- {n['notebook']}: {'ran' if n['ok'] else 'FAILED: ' + n['error']} ({n['seconds']} s)"
        for n in notebooks
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "artifacts" / "drift")
    parser.add_argument("--markers", default="not slow", help='pytest -m expression ("" runs every test)')
    parser.add_argument("--notebooks", type=Path, default=ROOT / "course")
    args = parser.parse_args(argv)
    changed = changed_versions(locked_versions())
    print(f"{len(changed)} package(s) differ from the lock", flush=True)
    unit = run_unit_tests(args.markers)
    print(f"unit tests: {unit['summary']}", flush=True)
    notebooks = []
    for path in sorted(args.notebooks.glob("*.ipynb")):
        notebooks.append(run_notebook(path))
        print(
            f"{path.name}: {'ran' if notebooks[-1]['ok'] else 'FAILED'} ({notebooks[-1]['seconds']} s)",
            flush=True,
        )
    args.out.mkdir(parents=True, exist_ok=True)
    text = report_text(changed, unit, notebooks)
    (args.out / "report.md").write_text(text, encoding="utf-8")
    record = {"changed": changed, "unit": unit, "notebooks": notebooks}
    (args.out / "report.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(text)
    return 0 if unit["ok"] and all(n["ok"] for n in notebooks) else 1


if __name__ == "__main__":
    sys.exit(main())
