"""The setup files agree with each other, and `make lab` really serves JupyterLab."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]
CONDA_NAMES = {"pytorch": "torch"}  # conda-forge name -> PyPI name


def _split(requirement: str) -> tuple[str, str]:
    """'torch>=2.4' -> ('torch', '>=2.4'), ignoring environment markers."""
    requirement = requirement.split(";")[0].strip()
    match = re.match(r"^([A-Za-z0-9_.\-]+)\s*(.*)$", requirement)
    assert match, requirement
    return match.group(1).lower().replace("_", "-"), match.group(2).replace(" ", "")


def test_environment_yml_installs_the_lock() -> None:
    """conda brings Python; pip brings the rest at the lock's exact versions, torch at the Makefile's pin."""
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert "conda-forge" in env["channels"]
    conda = [entry for entry in env["dependencies"] if not isinstance(entry, dict)]
    assert sorted(conda) == ["pip", "python=3.11"]
    pip_section = next(entry["pip"] for entry in env["dependencies"] if isinstance(entry, dict))
    assert "-c requirements/lock.txt" in pip_section
    makefile = (ROOT / "Makefile").read_text()
    torch = re.search(r"^TORCH_VERSION \?= (\S+)$", makefile, re.M).group(1)
    assert f"torch=={torch}" in pip_section
    # the package itself is installed from the checkout, with the optional extras the notebooks use
    assert any(line.startswith("-e .[") and "interop" in line for line in pip_section), pip_section


def test_optional_extras_are_declared() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {"test", "triton", "interop"} <= set(extras)
    assert all("sys_platform == 'linux'" in r for r in extras["triton"]), "Triton has Linux wheels only"
    assert {_split(r)[0] for r in extras["test"]} >= {"pytest", "nbval", "hypothesis", "ruff"}


def test_makefile_pins_torch_and_ci_runs_make_test() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^TORCH_VERSION \?= 2\.13\.0$", makefile, re.M)
    assert "TORCH_SPEC := torch==$(TORCH_VERSION)\n" in makefile
    assert '"$(TORCH_SPEC)"' in makefile
    commands = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    commands = [c for c in commands if c and not c.startswith(("#", "set ", "cd "))]
    assert commands == ["make test"]


@pytest.mark.skipif(sys.platform == "win32", reason="make is not a Windows tool")
@pytest.mark.parametrize(
    ("switch", "spec", "index"), [([], "torch==2.13.0", False), (["TORCH_CPU=1"], "torch==2.13.0+cpu", True)]
)
def test_torch_cpu_switch_installs_the_cpu_build(
    tmp_path: Path, switch: list[str], spec: str, index: bool
) -> None:
    """`make setup TORCH_CPU=1` asks for PyTorch's CPU-only wheel from its own index; the default asks PyPI."""
    dry_run = subprocess.run(
        ["make", "-n", "-B", "setup", f"VENV={tmp_path / 'venv'}", *switch],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert f'"{spec}"' in dry_run
    assert ("--extra-index-url https://download.pytorch.org/whl/cpu" in dry_run) is index


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="make is not a Windows tool")
def test_make_lab_serves_jupyterlab(tmp_path: Path) -> None:
    port = _free_port()
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    # No --allow-root here: `make lab` adds it by itself when it runs as root (as this machine and CI do).
    args = "--ip=127.0.0.1 --IdentityProvider.token= --ServerApp.password= --LabApp.news_url=None"
    proc = subprocess.Popen(
        ["make", "-s", "lab", f"LAB_PORT={port}", f"LAB_ARGS={args}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline, last_error = time.monotonic() + 90, None
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read().decode(errors="replace")[-2000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/lab", timeout=5) as response:
                    body = response.read().decode(errors="replace")
                assert response.status == 200 and "JupyterLab" in body
                break
            except OSError as err:
                last_error = err
                time.sleep(1)
        else:
            pytest.fail(f"JupyterLab did not answer on /lab within 90 s: {last_error}")
    finally:
        _stop(proc)
    printed = proc.stdout.read().decode(errors="replace")
    assert f"http://127.0.0.1:{port}/lab" in printed, printed[-2000:]  # the URL to open
    if os.geteuid() == 0:
        assert "running as root, so JupyterLab starts with --allow-root" in printed


def _stop(proc: subprocess.Popen) -> None:
    """Stop make and the JupyterLab server it started (one process group)."""
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def test_readme_map_matches_the_files() -> None:
    """Every course notebook has a row; every linked notebook and named module exists."""
    readme = (ROOT / "README.md").read_text()
    rows = [ln for ln in readme.splitlines() if re.match(r"^\| \d\d \|", ln)]
    listed = {re.search(r"\((course/[^)]+\.ipynb)\)", r).group(1) for r in rows}
    assert listed == {f"course/{p.name}" for p in (ROOT / "course").glob("*.ipynb")}
    for row in rows:
        for link in re.findall(r"\]\(((?:course|exercises)/[^)]+\.ipynb)\)", row):
            assert (ROOT / link).is_file(), f"README links a missing notebook: {link}"
        modules_cell = row.split("|")[4]
        for module in re.findall(r"`([\w.]+)`", modules_cell):
            path = ROOT / "attn_edu" / module.replace(".", "/")
            assert path.with_suffix(".py").is_file() or (path / "__init__.py").is_file(), module


def _root_conftest():  # noqa: ANN202 - the repository's conftest.py (tests/ has one of the same name)
    import importlib.util

    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_kernel_that_dies_while_starting_is_started_again() -> None:
    retry_kernel_start = _root_conftest().retry_kernel_start

    calls = []

    def flaky_start(**kwargs):
        calls.append(kwargs)
        if len(calls) < 3:
            raise RuntimeError("Kernel died before replying to kernel_info")
        return "km", "kc"

    assert retry_kernel_start(flaky_start)(kernel_name="python") == ("km", "kc")
    assert calls == [{"kernel_name": "python"}] * 3

    def always_dies(**kwargs):
        calls.append(kwargs)
        raise RuntimeError("Kernel died before replying to kernel_info")

    calls.clear()
    with pytest.raises(RuntimeError, match="Kernel died"):
        retry_kernel_start(always_dies, attempts=2)()
    assert len(calls) == 2

    def other_error(**kwargs):
        calls.append(kwargs)
        raise RuntimeError("Kernel didn't respond in 60 seconds")

    calls.clear()
    with pytest.raises(RuntimeError, match="didn't respond"):
        retry_kernel_start(other_error)()
    assert len(calls) == 1  # only a dead kernel is retried
