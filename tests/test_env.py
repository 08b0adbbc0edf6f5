"""`python -m attn_edu.env`: OK/FAIL/MISSING lines with a fix for every problem."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import subprocess
import sys

import pytest

from attn_edu import env


def test_report_on_this_machine_is_ok() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "attn_edu.env"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^(OK|DIFFERS) +torch ", result.stdout, re.M)  # DIFFERS: another torch than the lock's
    assert "All required packages are present." in result.stdout


@pytest.fixture
def hide(monkeypatch: pytest.MonkeyPatch):
    """Make find_spec report some modules as absent."""
    real = importlib.util.find_spec

    def hide_modules(*names: str) -> None:
        monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n in names else real(n, *a))

    return hide_modules


def test_missing_optional_triton_is_explained(hide, monkeypatch: pytest.MonkeyPatch) -> None:
    hide("triton")
    monkeypatch.setattr(sys, "platform", "linux")
    line = next(c for c in env.check_environment() if c.name == "triton")
    assert line.status == "MISSING" and 'pip install -e ".[triton]"' in line.fix
    monkeypatch.setattr(sys, "platform", "darwin")
    line = next(c for c in env.check_environment() if c.name == "triton")
    assert "Linux wheels only" in line.fix and "tiled_attention" in line.fix


def test_missing_required_package_fails_with_fix(hide, capsys: pytest.CaptureFixture[str]) -> None:
    hide("seaborn")
    assert env.main([]) == 1
    out = capsys.readouterr().out
    assert "FAIL    seaborn" in out and 'fix: pip install "seaborn>=0.13"' in out
    assert "Missing required: seaborn" in out


def test_too_old_version_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda d: "3.1.0" if d == "matplotlib" else real(d))
    line = next(c for c in env.check_environment() if c.name == "matplotlib")
    assert line.status == "FAIL" and "older than 3.7" in line.detail and "pip install -U" in line.fix


def test_checking_does_not_import_triton() -> None:
    code = "import sys, attn_edu.env as e; e.check_environment(); print('triton' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert out.strip() == "False"


def test_a_version_that_differs_from_the_lock_is_named_with_what_it_means(tmp_path) -> None:
    lock = tmp_path / "lock.txt"
    numpy = importlib.metadata.version("numpy")
    torch = importlib.metadata.version("torch").split("+")[0]  # the installed one: its line must say OK
    lock.write_text(f"numpy==0.0.1\ntorch=={torch}\nnowhere==1.0 ; sys_platform == 'nowhere'\n")
    checks = env.check_environment(lock)
    line = next(c for c in checks if c.name == "numpy")
    assert line.status == "DIFFERS" and line.detail == f"{numpy}, the lock has 0.0.1"
    assert "last digits" in line.fix and "requirements/lock.txt" in line.fix
    assert (
        next(c for c in checks if c.name == "torch").status == "OK"
    )  # a build tag (+cpu) is not a difference
    assert (
        next(c for c in checks if c.name == "lock").detail
        == "requirements/lock.txt: 1 of the packages above differ from it"
    )
    assert "DIFFERS numpy" in env.report(checks)


def test_without_a_lock_nothing_is_compared(tmp_path) -> None:
    checks = env.check_environment(tmp_path / "missing.txt")
    assert all(c.status != "DIFFERS" for c in checks)
    assert "not compared" in next(c for c in checks if c.name == "lock").detail
