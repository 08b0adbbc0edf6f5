"""The memory benchmark runs end to end at small sizes and writes its table and JSON."""

from __future__ import annotations

import json

import pytest

from attn_edu.bench import __main__ as bench
from attn_edu.bench import memory


@pytest.mark.slow  # four fresh Python processes, each importing torch
def test_memory_benchmark_small_sizes_table_and_json(tmp_path, capsys):
    out_file = tmp_path / "memory.json"
    assert bench.main(["memory", "--sizes", "256", "512", "--json", str(out_file)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.split()[:1] == ["N"])
    assert header.split() == ["N", "naive", "MiB", "tiled", "MiB", "tiled/naive", "naive", "s", "tiled", "s"]
    table = [line.split() for line in lines if line.split()[:1] in (["256"], ["512"])]
    assert [row[0] for row in table] == ["256", "512"] and all(len(row) == 6 for row in table)
    assert any(line.startswith("SKIP: target") for line in lines)  # 8192 was not measured

    report = json.loads(out_file.read_text())
    assert report["config"] == {
        "batch": 1,
        "heads": 8,
        "head_dim": 64,
        "dtype": "float32",
        "device": "cpu",
        "block": 128,
        "threads": 1,
    }
    assert report["target"] == {"n": 8192, "max_ratio": 0.05, "passed": None}
    assert isinstance(report["method"], str)
    rows = report["results"]
    assert [row["n"] for row in rows] == [256, 512]
    for row in rows:
        assert set(row) == {"n", "naive_mib", "tiled_mib", "ratio", "naive_seconds", "tiled_seconds"}
        assert row["ratio"] == pytest.approx(row["tiled_mib"] / row["naive_mib"], rel=0.05, abs=1e-3)
    # The (T, S) matrices show even at these sizes: doubling N quadruples the naive extra memory.
    assert rows[1]["naive_mib"] > 3 * rows[0]["naive_mib"]
    assert rows[1]["tiled_mib"] < rows[1]["naive_mib"]


def test_memory_benchmark_rejects_bad_sizes():
    with pytest.raises(SystemExit):
        memory.main(["--sizes", "0"])
