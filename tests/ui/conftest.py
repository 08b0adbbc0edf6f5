"""Fixtures for the browser tests: one JupyterLab server and one headless Chromium per session.

The server runs on a temporary copy of ``course/`` with its own settings, workspaces and runtime
folders, so a learner's own JupyterLab settings can neither break nor be changed by the tests. The
browser is the system Chromium (Debian's ``/usr/bin/chromium``) driven by the ``playwright`` package;
Playwright's own browser download is never used. Without Chromium or playwright every test here is
skipped with a message that says what to install.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from stored_outputs import RECORD, cpu_settings, write_record

REPO = Path(__file__).resolve().parents[2]
# The notebooks to serve; ATTN_EDU_UI_NOTEBOOKS=folder serves another folder (as the test module does).
COURSE = Path(os.environ.get("ATTN_EDU_UI_NOTEBOOKS") or REPO / "course")
ARTIFACTS = REPO / "artifacts" / "ui"

# Where to look for a Chromium, in order. ATTN_EDU_CHROMIUM overrides them all.
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")
# Flags measured to work in containers (no sandbox as root, no GPU, small /dev/shm, no network chatter).
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
# The notebooks' stored outputs are computed with two threads; the kernel here uses the same.
# Ask the page twice a second, not on every animation frame (Playwright's default): Chromium's
# polling otherwise takes a share of the cores the notebook's kernel needs.
POLL_MS = 500
KERNEL_ENV = {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2", "PYTHONHASHSEED": "0"}
# Settings for the test server only: keep every cell in the page (JupyterLab's default "windowing"
# detaches cells scrolled out of view, and a widget that is not in the page cannot be moved).
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}
SERVER_START_TIMEOUT_S = 90
# Under pytest-xdist every worker runs its own server and browser; their files get the worker's name.
_WORKER_SUFFIX = f"-{os.environ['PYTEST_XDIST_WORKER']}" if os.environ.get("PYTEST_XDIST_WORKER") else ""


def find_chromium() -> str | None:
    """Path of a Chromium executable, or ``None``."""
    override = os.environ.get("ATTN_EDU_CHROMIUM")
    if override:
        return override if Path(override).is_file() else None
    for candidate in CHROMIUM_CANDIDATES:
        path = candidate if Path(candidate).is_file() else shutil.which(candidate)
        if path:
            return path
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_server(url: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"JupyterLab exited with code {process.returncode}; log:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/api/status", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(
        f"JupyterLab did not answer within {SERVER_START_TIMEOUT_S} s; log:\n{log.read_text()}"
    )


def _stop(process: subprocess.Popen) -> None:
    """Stop the server and its kernels (they share its process group)."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=15)


@pytest.fixture(scope="session")
def chromium_path() -> str:
    """The Chromium to drive; skips the browser tests (saying what to install) when there is none."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip('browser tests need the playwright package: pip install -e ".[test]"')
    path = find_chromium()
    if path is None:
        pytest.skip(
            "browser tests need Chromium: `sudo apt-get install chromium` on Debian/Ubuntu "
            "(or `bash scripts/install_system_packages.sh`), or set ATTN_EDU_CHROMIUM=/path/to/chrome"
        )
    return path


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def lab_server(
    chromium_path: str, tmp_path_factory: pytest.TempPathFactory, artifacts_dir: Path
) -> Iterator[str]:
    """Base URL of a JupyterLab serving a temporary copy of ``course/`` (with ``exercises/`` in it); shut down
    after the session."""
    home = tmp_path_factory.mktemp("lab")
    root = home / "course"
    shutil.copytree(COURSE, root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    # The exercise notebooks too, as a learner has them (tests/ui/test_exercise_in_browser.py works in one).
    shutil.copytree(
        REPO / "exercises", root / "exercises", ignore=shutil.ignore_patterns(".ipynb_checkpoints")
    )
    settings = home / "settings"
    for name, values in LAB_SETTINGS.items():
        path = settings / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    env = {
        **os.environ,
        **KERNEL_ENV,
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        # No user-level kernelspecs: "python3" is this interpreter, where attn_edu is installed.
        "JUPYTER_DATA_DIR": str(home / "data"),
        "ATTN_EDU_ANSWERS": str(home / "answers.json"),  # concept questions' first answers: this run's own
    }
    env.pop("MPLBACKEND", None)  # the kernel's own inline backend, as for a learner
    env.pop("TRITON_INTERPRET", None)
    port = _free_port()
    command = [
        sys.executable, "-m", "jupyterlab",
        "--allow-root", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
        "--IdentityProvider.token=", "--ServerApp.password=", "--LabApp.news_url=None",
        f"--ServerApp.root_dir={root}",
        # Lets the tests call JupyterLab's own commands (open, run all, shut down) as `window.jupyterapp`.
        "--LabApp.expose_app_in_browser=True",
    ]  # fmt: skip
    log = artifacts_dir / f"jupyterlab{_WORKER_SUFFIX}.log"
    with log.open("w") as log_file:
        process = subprocess.Popen(
            command, cwd=root, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for_server(url, process, log)
        yield url
    finally:
        _stop(process)


@pytest.fixture(scope="session")
def browser(chromium_path: str) -> Iterator[object]:
    """One headless Chromium for the whole session."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_path, headless=True, args=CHROMIUM_FLAGS
        )
        try:
            yield browser
        finally:
            browser.close()


JS_APP_RESTORED = """async () => { await window.jupyterapp.restored; return true; }"""


def open_lab(page, url: str) -> None:  # noqa: ANN001
    """Load JupyterLab with an empty workspace (``?reset``: no tabs from an earlier run reopened)."""
    page.goto(f"{url}/lab?reset")
    page.wait_for_function("() => window.jupyterapp !== undefined", polling=POLL_MS, timeout=120_000)
    page.evaluate(JS_APP_RESTORED)


@pytest.fixture(scope="session")
def lab_page(browser, lab_server: str) -> Iterator[object]:
    """One browser tab with JupyterLab loaded, shared by the notebook tests (loading Lab takes seconds).

    Each test opens its notebook in a new JupyterLab tab and closes it, with its kernel, at the end.
    """
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    open_lab(page, lab_server)
    try:
        yield page
    finally:
        context.close()


@pytest.fixture
def reload_lab(lab_page, lab_server: str) -> Callable[[], None]:
    """Reload JupyterLab in the shared tab (after a failure left it in an unknown state)."""
    return lambda: open_lab(lab_page, lab_server)


def _parts(kind: str) -> list[Path]:
    return sorted(ARTIFACTS.glob(f"{kind}*.part.json"))


def _save_part(kind: str, values: dict) -> None:
    """Each process (one per pytest-xdist worker, or the only one) writes its own part file."""
    if values:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / f"{kind}{_WORKER_SUFFIX or '-main'}.part.json").write_text(json.dumps(values))


def _merge_parts(kind: str) -> dict:
    merged: dict = {}
    for part in _parts(kind):
        merged.update(json.loads(part.read_text()))
        part.unlink()
    return dict(sorted(merged.items()))


@pytest.fixture(scope="session")
def ui_timings(artifacts_dir: Path) -> Iterator[dict[str, float]]:
    """Seconds per notebook test, ``{"run": open and run all, "whole": the whole test}``, collected into
    ``artifacts/ui/timings.json`` and printed at the end."""
    timings: dict[str, float] = {}
    yield timings
    _save_part("timings", timings)


@pytest.fixture(scope="session")
def ui_compared(artifacts_dir: Path) -> Iterator[dict[str, str]]:
    """``{notebook: sha256}`` of the notebooks whose browser outputs equal the stored ones.

    Merged at the end into ``artifacts/ui/outputs-compared.json`` (``stored_outputs.write_record``).
    """
    compared: dict[str, str] = {}
    yield compared
    _save_part("compared", compared)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With two or more workers, the site and exercise tests run first in lane 0 (test_notebooks_in_browser.py),
    beside the shortest notebooks of lane 1, which runs shortest first; lane 0's notebooks follow, longest first."""
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) < 2:
        return
    others = [
        item
        for item in items
        if item.fspath.basename in ("test_site_in_browser.py", "test_exercise_in_browser.py")
    ]
    for item in others:
        item.add_marker(pytest.mark.xdist_group("notebooks-0"))
    items[:] = others + [item for item in items if item not in others]


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # the controller (or the only process)
        for part in _parts("timings") + _parts("compared"):
            part.unlink()
        RECORD.unlink(missing_ok=True)  # a run that stops early must not leave an earlier record


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001
    if hasattr(terminalreporter.config, "workerinput"):  # a pytest-xdist worker: the controller reports
        return
    compared = _merge_parts("compared")
    if compared:
        write_record(compared)
        terminalreporter.write_line(
            f"outputs equal to the stored ones in the browser: {len(compared)} notebook(s), "
            f"CPU settings {cpu_settings() or 'native'} (written to {RECORD})"
        )
    timings = _merge_parts("timings")
    if not timings:
        return
    path = ARTIFACTS / "timings.json"
    total = {key: round(sum(t[key] for t in timings.values()), 1) for key in ("run", "whole")}
    path.write_text(json.dumps({**timings, "total": total}, indent=2) + "\n")
    terminalreporter.write_sep("-", "notebooks in the browser (seconds per notebook)")
    terminalreporter.write_line(f"{'':<36} {'open and run all':>17} {'whole test':>11}")
    for name, seconds in [*timings.items(), ("total", total)]:
        terminalreporter.write_line(f"{name:<36} {seconds['run']:15.1f} s {seconds['whole']:9.1f} s")
    terminalreporter.write_line(f"(written to {path})")
