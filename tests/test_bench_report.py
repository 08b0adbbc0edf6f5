"""The performance report: its table, JSON and plot, with tiny options so it runs in seconds."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import nbformat
import pytest
import torch

from attn_edu.bench import report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _notebook(path: Path, source: str) -> Path:
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    nbformat.write(notebook, path)
    return path


def test_tiny_report_writes_table_json_and_plot(tmp_path, capsys):
    good = _notebook(tmp_path / "good.ipynb", "print(6 * 7)")
    bad = _notebook(tmp_path / "bad.ipynb", "raise RuntimeError('broken on purpose')")
    json_path, plot_path = tmp_path / "out" / "report.json", tmp_path / "out" / "report.png"
    code = report.main(
        [
            "--notebooks",
            str(good),
            str(bad),
            "--memory-sizes",
            "64",
            "--memory-block",
            "32",
            "--kv-tokens",
            "3",
        ]
        + ["--skip", "interpreter", "gpu", "--json", str(json_path), "--plot", str(plot_path)]
    )
    assert code == 1, "a notebook that fails must make the report fail"

    data = json.loads(json_path.read_text())
    sections = {s["name"]: s for s in data["sections"]}
    assert list(sections) == list(report.SECTIONS)
    assert sections["notebooks"]["status"] == "error"
    rows = {row["notebook"]: row for row in sections["notebooks"]["rows"]}
    assert rows["good.ipynb"]["status"] == "ok" and rows["good.ipynb"]["seconds"] > 0
    assert "broken on purpose" in rows["bad.ipynb"]["status"]
    assert sections["memory"]["status"] == "ok"
    (memory_row,) = sections["memory"]["rows"]
    assert memory_row["N"] == 64 and memory_row["naive_mib"] >= 0 and memory_row["tiled_mib"] >= 0
    assert sections["kv_cache"]["status"] == "ok"
    (kv_row,) = sections["kv_cache"]["rows"]
    assert kv_row["new_tokens"] == 3 and kv_row["same_tokens"] is True and kv_row["speedup"] > 0
    for name in ("interpreter", "gpu"):
        assert sections[name]["status"] == "skipped"

    printed = capsys.readouterr().out
    assert "== notebooks: error" in printed and "== memory: ok" in printed
    assert "naive_mib" in printed and "good.ipynb" in printed
    assert plot_path.read_bytes()[:8] == PNG_MAGIC


def test_missing_benchmark_module_is_not_available(monkeypatch):
    monkeypatch.setitem(report.SECTION_MODULES, "kv_cache", "attn_edu.bench.no_such_benchmark")
    section = report._guarded("kv_cache", lambda: report.kv_cache_speedup([5]))
    assert section["status"] == "not available"
    assert "no_such_benchmark" in section["note"]
    assert "not available" in report.format_report(
        {"environment": {"python": "3", "torch": "2", "device": "cpu"}, "sections": [section]}
    )


def test_an_unexpected_failure_is_an_error_not_a_crash():
    def broken() -> dict:
        raise ZeroDivisionError("oops")

    section = report._guarded("memory", broken)
    assert section["status"] == "error" and "ZeroDivisionError" in section["note"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only path")
def test_gpu_rows_are_absent_without_a_gpu():
    section = report.gpu_table()
    assert section["status"] == "absent" and section["rows"] == []


@pytest.mark.slow
@pytest.mark.triton
@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")
def test_interpreter_section_times_the_kernel_in_a_fresh_process():
    section = report.interpreter_time((1, 1, 16, 16))
    assert section["status"] == "ok", section["note"]
    assert "INTERPRETER" in section["note"]
    providers = {(row["provider"], row["causal"]) for row in section["rows"]}
    assert {("triton", False), ("triton", True), ("naive", False)} <= providers
    assert all(row["forward_ms"] > 0 and row["backward_ms"] > 0 for row in section["rows"])


def test_bad_options_are_refused():
    with pytest.raises(SystemExit):
        report.main(["--memory-sizes", "0"])
    with pytest.raises(SystemExit):
        report.main(["--skip", "everything"])
