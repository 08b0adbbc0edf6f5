"""Decoding speed with the KV cache against recomputing the whole prefix, on a small GPT on the CPU.

Usage::

    python -m attn_edu.bench kv_cache [--lengths 128 512 1024] [--prompt 16] [--threads 1] [--json FILE]
    python -m attn_edu.bench kv_cache --model text --lengths 256 1024 --threads 2

For each number ``N`` of new tokens, greedy :func:`attn_edu.generation.generate` runs twice on the same
prompt, in the same process, one after the other: with ``use_cache=True`` (prefill, then one token
per step) and with ``use_cache=False`` (every step re-runs the whole sequence). Each time is the best
of up to three runs (one, if a run takes over 10 s): other work on a shared machine only ever adds
time. The speed-up is the ratio of the two times, and both must produce exactly the same tokens.

Without the cache, step ``t`` costs a forward pass over ``t`` tokens, so ``N`` steps cost ``O(N²)``
token-passes (and ``O(N³)`` attention work); with it, each step is one token attending to ``t``
cached keys. The ratio therefore grows with ``N``; the target line checks ≥ 10× at ``N = 1024``.

The model (``--model random``, the default) is a 4-layer GPT (C=128, 4 heads) with random weights
drawn with a larger spread than GPT-2's (std 0.1 instead of 0.02) so that the greedy choice is never a
near-tie that float rounding could flip between the two runs. ``--model text`` is the trained
sliding-window Llama of :mod:`attn_edu.experiments.text_gpt` (``text_llama``: 4 layers, C=128, window 128),
continuing the title of the "while" topic from the Python documentation: its rolling cache holds
128 characters per layer, so each cached step costs the same however far it has written, while the
uncached step re-runs the whole text with a sliding-window mask.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from attn_edu.bench.timing import best_time_and_result

TARGET_N, TARGET_SPEEDUP = 1024, 10.0
MODEL = dict(vocab_size=256, embed_dim=128, num_layers=4, num_heads=4, ffn_dim=512)
TEXT_PROMPT = 'The "while" statement\n*********************\n\n'  # a topic's title, as the docs write it


def run(
    new_tokens: list[int], *, prompt_len: int = 16, threads: int = 1, seed: int = 0, model: str = "random"
) -> dict[str, Any]:
    """Time cached and uncached greedy decoding for each count in ``new_tokens``.

    ``model="random"``: the random-weight GPT, on a random prompt of ``prompt_len`` tokens;
    ``model="text"``: the trained sliding-window text model on :data:`TEXT_PROMPT`.

    Returns ``{"config": ..., "results": [{"new_tokens", "cache_s", "no_cache_s", "speedup",
    "same_tokens"}, ...], "note": ...}``.
    """
    import torch

    from attn_edu.blocks import init_normal_
    from attn_edu.generation import generate
    from attn_edu.models import GPT, GPTConfig

    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        if model == "text":
            decoder, prompt, config_note = _text_model()
        else:
            torch.manual_seed(seed)
            config = GPTConfig(max_seq_len=prompt_len + max(new_tokens), **MODEL)
            decoder = init_normal_(GPT(config), std=0.1).eval()
            prompt = torch.randint(
                config.vocab_size, (1, prompt_len), generator=torch.Generator().manual_seed(seed)
            )
            config_note = dict(MODEL, prompt_len=prompt_len)
        generate(decoder, prompt, 4, use_cache=True)  # warm-up: thread pools, lazily loaded kernels
        generate(decoder, prompt, 4, use_cache=False)

        results = []
        for n in new_tokens:
            seconds, outputs = {}, {}
            for use_cache in (True, False):
                seconds[use_cache], outputs[use_cache] = best_time_and_result(
                    generate, decoder, prompt, n, use_cache=use_cache, repeats=3, slow_run_s=10.0
                )
            results.append(
                {
                    "new_tokens": n,
                    "cache_s": seconds[True],
                    "no_cache_s": seconds[False],
                    "speedup": seconds[False] / seconds[True],
                    "same_tokens": bool(torch.equal(outputs[True], outputs[False])),
                }
            )
    finally:
        torch.set_num_threads(previous_threads)  # leave the caller's setting as it was
    if model == "text":
        note = (
            f"text_llama (trained, sliding window {config_note['sliding_window']}), 4 layers, C=128, "
            f"prompt {config_note['prompt_len']} characters, batch 1, float32, CPU, {threads} thread(s), greedy"
        )
    else:
        note = (
            f"GPT {MODEL['num_layers']} layers, C={MODEL['embed_dim']}, H={MODEL['num_heads']}, V={MODEL['vocab_size']}, "
            f"prompt {prompt_len} tokens, batch 1, float32, CPU, {threads} thread(s), greedy"
        )
    return {
        "config": dict(config_note, model=model, threads=threads, seed=seed),
        "results": results,
        "note": note,
    }


def time_decoding(model: Any, prompt: Any, new_tokens: list[int], *, runs: int = 3) -> list[dict[str, Any]]:
    """Every run's seconds of greedy decoding with and without the cache, for each count in ``new_tokens``.

    Unlike :func:`run`, which keeps the best of three, this keeps all ``runs`` times, and alternates the two
    ways run by run (cache, no cache, cache, ...), so that a busy moment of a shared machine hits both: the
    spread of the runs is then a fair band, and ``no_cache_s[i] / cache_s[i]`` a paired ratio. One warm-up
    of each way runs first.

    Returns one dict per count: ``{"new_tokens", "cache_s": [runs], "no_cache_s": [runs], "speedup"`` (the
    ratio of the medians)``, "same_tokens"`` (both ways chose the same tokens in every run)``}``.

    Shapes:
        prompt ``(B, T)``.

    Example:
        >>> import torch
        >>> from attn_edu.models import GPT, GPTConfig
        >>> tiny = GPT(GPTConfig(vocab_size=16, max_seq_len=16, embed_dim=16, num_layers=1, num_heads=2)).eval()
        >>> rows = time_decoding(tiny, torch.zeros(1, 4, dtype=torch.long), [2, 4], runs=2)
        >>> [(r["new_tokens"], len(r["cache_s"]), r["same_tokens"]) for r in rows]
        [(2, 2, True), (4, 2, True)]
    """
    import statistics

    import torch

    from attn_edu.bench.timing import times_and_result
    from attn_edu.generation import generate

    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise ValueError(f"runs: expected an integer >= 1, got {runs!r}")
    generate(model, prompt, 2, use_cache=True)  # warm-up: thread pools, lazily loaded kernels
    generate(model, prompt, 2, use_cache=False)
    rows = []
    for n in new_tokens:
        seconds: dict[bool, list[float]] = {True: [], False: []}
        same = True
        for _ in range(runs):
            ids = {}
            for use_cache in (True, False):
                (elapsed,), ids[use_cache] = times_and_result(
                    generate, model, prompt, n, use_cache=use_cache, repeats=1
                )
                seconds[use_cache].append(elapsed)
            same = same and bool(torch.equal(ids[True], ids[False]))
        rows.append(
            {
                "new_tokens": n,
                "cache_s": seconds[True],
                "no_cache_s": seconds[False],
                "speedup": statistics.median(seconds[False]) / statistics.median(seconds[True]),
                "same_tokens": same,
            }
        )
    return rows


def _text_model() -> tuple[Any, Any, dict[str, Any]]:
    """The trained sliding-window text model, its prompt ``(1, T)`` and what the note says of it."""
    from attn_edu.experiments.text_gpt import load_text_gpt

    decoder, tokenizer = load_text_gpt(name="text_llama")
    prompt = tokenizer.encode(TEXT_PROMPT)[None]  # (1, T)
    note = {"sliding_window": decoder.config.sliding_window, "prompt_len": prompt.shape[1]}
    return decoder, prompt, note


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m attn_edu.bench kv_cache",
        description="Greedy decoding with and without the KV cache on a small GPT (CPU): seconds and speed-up.",
    )
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 1024], help="new tokens N")
    parser.add_argument("--prompt", type=int, default=16, help="prompt length")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument(
        "--model",
        choices=("random", "text"),
        default="random",
        help="a random-weight GPT, or the trained sliding-window text model",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if min(args.lengths + [args.prompt, args.threads]) <= 0:
        parser.error("--lengths, --prompt and --threads must be positive integers")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    report = run(args.lengths, prompt_len=args.prompt, threads=args.threads, model=args.model)
    rows = report["results"]
    print(f"KV-cache decoding: {report['note']}")
    print(f"{'new tokens':>10} {'cache s':>9} {'no cache s':>11} {'speed-up':>9} {'same tokens':>12}")
    for r in rows:
        print(
            f"{r['new_tokens']:>10} {r['cache_s']:>9.3f} {r['no_cache_s']:>11.3f} {r['speedup']:>8.1f}x "
            f"{'yes' if r['same_tokens'] else 'NO':>12}"
        )

    same = all(r["same_tokens"] for r in rows)
    if not same:
        print("FAIL: cached and uncached decoding produced different tokens")
    at_target = [r for r in rows if r["new_tokens"] == TARGET_N]
    passed = None
    if at_target:
        passed = at_target[0]["speedup"] >= TARGET_SPEEDUP
        verdict = "PASS" if passed else "FAIL"
        print(f"{verdict}: {at_target[0]['speedup']:.1f}x at N={TARGET_N} (target >= {TARGET_SPEEDUP:.0f}x)")
    else:
        print(
            f"SKIP: the speed-up target (>= {TARGET_SPEEDUP:.0f}x) is checked at N={TARGET_N}, not in --lengths"
        )

    if args.json is not None:
        report["target"] = {"new_tokens": TARGET_N, "min_speedup": TARGET_SPEEDUP, "passed": passed}
        report["same_tokens"] = same
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 1 if passed is False or not same else 0


if __name__ == "__main__":
    sys.exit(main())
