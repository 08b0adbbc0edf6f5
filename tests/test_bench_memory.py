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


def test_saved_for_backward_counts_what_autograd_keeps():
    import torch

    from attn_edu.attention import scaled_dot_product_attention
    from attn_edu.bench.memory import MIB, saved_for_backward_mib
    from attn_edu.flash import tiled_attention

    x = torch.randn(64, 32, requires_grad=True)
    one = x.numel() * 4 / MIB
    assert saved_for_backward_mib(torch.exp, x) == one  # exp keeps its result
    assert saved_for_backward_mib(torch.mul, x, x) == 2 * one  # mul keeps both factors
    assert saved_for_backward_mib(torch.exp, x.detach()) == 0  # nothing to differentiate
    H, n, D = 2, 48, 8
    q, k, v = (torch.randn(1, H, n, D, requires_grad=True) for _ in range(3))
    square = H * n * n * 4 / MIB
    assert saved_for_backward_mib(scaled_dot_product_attention, q, k, v) >= 2 * square
    assert saved_for_backward_mib(tiled_attention, q, k, v) == (4 * H * n * D + H * n) * 4 / MIB


def test_measure_here_gives_one_value_per_size_and_restores_the_threads():
    import torch

    from attn_edu.bench.memory import measure_here

    threads = torch.get_num_threads()
    measured, method = measure_here([256, 512], block=64)
    assert torch.get_num_threads() == threads
    assert set(measured) == {"naive", "tiled"} and all(len(v) == 2 for v in measured.values())
    assert all(value >= 0 for values in measured.values() for value in values) and method
