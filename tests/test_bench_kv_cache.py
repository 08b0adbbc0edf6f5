"""The KV-cache benchmark runs end to end on tiny lengths and reports consistent numbers."""

from __future__ import annotations

import json

from attn_edu.bench import kv_cache
from attn_edu.bench.__main__ import available


def test_kv_cache_benchmark_runs_and_writes_json(tmp_path, capsys):
    assert "kv_cache" in available()
    out = tmp_path / "kv.json"
    code = kv_cache.main(["--lengths", "4", "12", "--prompt", "4", "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "SKIP" in printed and "same tokens" in printed
    report = json.loads(out.read_text())
    rows = report["results"]
    assert [r["new_tokens"] for r in rows] == [4, 12]
    for r in rows:
        assert r["same_tokens"] is True
        assert r["cache_s"] > 0 and r["no_cache_s"] > 0
        assert abs(r["speedup"] - r["no_cache_s"] / r["cache_s"]) < 1e-9
    assert report["same_tokens"] is True and report["target"]["passed"] is None


def test_kv_cache_benchmark_rejects_bad_arguments(capsys):
    try:
        kv_cache.main(["--lengths", "0"])
    except SystemExit as exit_:
        assert exit_.code == 2
    else:
        raise AssertionError("argparse should have refused --lengths 0")
    assert "--lengths" in capsys.readouterr().err
