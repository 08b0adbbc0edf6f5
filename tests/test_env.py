"""`python -m attn_edu.env`: OK/FAIL/MISSING lines with a fix for every problem."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
import sys

import pytest

from attn_edu import env


def test_report_on_this_machine_is_ok() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "attn_edu.env"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK      torch" in result.stdout
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
