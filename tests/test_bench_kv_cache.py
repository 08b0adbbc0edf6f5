"""The KV-cache benchmark runs end to end on tiny lengths and reports consistent numbers."""

from __future__ import annotations

import json
import time

import pytest

from attn_edu.bench import kv_cache
from attn_edu.bench.__main__ import available

ROW_KEYS = {"new_tokens", "cache_s", "no_cache_s", "speedup", "same_tokens"}  # run()'s docstring


def test_kv_cache_benchmark_runs_and_writes_json(tmp_path, capsys):
    assert "kv_cache" in available()
    out = tmp_path / "kv.json"
    start = time.perf_counter()
    code = kv_cache.main(["--lengths", "4", "12", "--prompt", "4", "--json", str(out)])
    elapsed = time.perf_counter() - start
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "SKIP" in printed and "same tokens" in printed
    report = json.loads(out.read_text())
    rows = report["results"]
    assert [r["new_tokens"] for r in rows] == [4, 12]
    for r in rows:
        assert set(r) == ROW_KEYS
        assert r["same_tokens"] is True
        # Seconds, not milliseconds: every timed run happened, one after the other, inside this call.
        assert 0 < r["cache_s"] and 0 < r["no_cache_s"]
    assert sum(r["cache_s"] + r["no_cache_s"] for r in rows) < elapsed
    assert report["same_tokens"] is True and report["target"]["passed"] is None


@pytest.mark.parametrize("speedup, code, verdict", [(12.0, 0, "PASS"), (4.0, 1, "FAIL")])
def test_the_target_line_judges_the_speedup_at_its_length(monkeypatch, capsys, speedup, code, verdict):
    row = {"new_tokens": kv_cache.TARGET_N, "cache_s": 1.0, "no_cache_s": speedup, "speedup": speedup,
           "same_tokens": True}  # fmt: skip
    monkeypatch.setattr(kv_cache, "run", lambda *args, **kwargs: {"results": [row], "note": "fake"})
    assert kv_cache.main(["--lengths", str(kv_cache.TARGET_N)]) == code
    assert f"{verdict}: {speedup:.1f}x at N={kv_cache.TARGET_N}" in capsys.readouterr().out


def test_kv_cache_benchmark_rejects_bad_arguments(capsys):
    with pytest.raises(SystemExit) as exit_:
        kv_cache.main(["--lengths", "0"])
    assert exit_.value.code == 2
    assert "--lengths" in capsys.readouterr().err


def test_time_decoding_keeps_every_run_and_pairs_the_two_ways():
    import statistics

    import torch

    from attn_edu.models import GPT, GPTConfig

    model = GPT(GPTConfig(vocab_size=16, max_seq_len=24, embed_dim=16, num_layers=1, num_heads=2)).eval()
    rows = kv_cache.time_decoding(model, torch.randint(16, (1, 4)), [3, 8], runs=3)
    assert [r["new_tokens"] for r in rows] == [3, 8]
    for r in rows:
        assert set(r) == ROW_KEYS
        assert r["same_tokens"] is True  # the cache changes the work, never the tokens
        assert len(r["cache_s"]) == len(r["no_cache_s"]) == 3 and min(r["cache_s"] + r["no_cache_s"]) > 0
        assert r["speedup"] == statistics.median(r["no_cache_s"]) / statistics.median(r["cache_s"])
    with pytest.raises(ValueError, match="runs"):
        kv_cache.time_decoding(model, torch.randint(16, (1, 4)), [3], runs=0)
