"""Speculative decoding measured: the text GPT as target, its one-block draft, acceptance and speed-up against gamma.

``python -m attn_edu.bench speculative [--gammas 1 2 3 4 6 8] [--prompts 8] [--new 96] [--threads 2] [--write]``
decodes held-out prompts of the pydoc text with the target alone (:func:`attn_edu.generation.generate`, KV cache)
and with :func:`attn_edu.generation.speculative_generate` at each ``gamma``, greedy and at temperature 1, and
prints one table. ``--write`` stores it in ``attn_edu/weights/speculative.json``, which notebook 10 reads.

What it counts, per new token: the target's forward passes (the cost that speculative decoding divides) and the
draft's; what it times: the wall seconds of the same prompts both ways, run alternately so that a busy moment of
the machine hits both. Beside the measured figures, Leviathan et al.'s (2023, equation 1 and theorem 3.8)
prediction from two numbers measured apart: ``alpha``, the share of guesses kept at ``gamma = 1`` (one guess a
round: the plain acceptance probability), and ``c``, the cost of a draft pass over a target pass. If every guess
were kept with probability ``alpha`` independently, a target pass would yield ``(1 - alpha^(gamma+1)) / (1 -
alpha)`` tokens, and the wall time would shrink by that over ``gamma · c + 1``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Sequence
from typing import Any

import torch

RECORD = "speculative"  # attn_edu/weights/speculative.json
PROMPT_LEN = 32


def expected_tokens_per_pass(alpha: float, gamma: int) -> float:
    """Leviathan et al. (2023), equation 1: the mean tokens one target pass yields, each guess kept with
    probability ``alpha`` independently, ``gamma`` guesses a round.

    Example:
        >>> expected_tokens_per_pass(0.0, 4), expected_tokens_per_pass(1.0, 4)
        (1.0, 5.0)
    """
    return float(gamma + 1) if alpha >= 1 else (1 - alpha ** (gamma + 1)) / (1 - alpha)


def pass_seconds(model: Any, length: int, *, repeats: int = 50) -> float:
    """Median seconds of one cached decoding pass (one new token after ``length``), for the cost ratio ``c``."""
    from attn_edu.generation import new_cache

    ids = torch.zeros(1, length + 1, dtype=torch.long)
    times = []
    with torch.no_grad():
        for _ in range(repeats):
            cache = new_cache(model)
            model(ids[:, :length], kv_cache=cache)
            start = time.perf_counter()
            model(ids[:, length:], kv_cache=cache)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(
    target: Any,
    draft: Any,
    prompts: Sequence[torch.Tensor],
    new_tokens: int,
    gammas: Sequence[int],
    *,
    temperatures: Sequence[float] = (0.0, 1.0),
    runs: int = 3,
    threads: int = 2,
) -> dict[str, Any]:
    """Every ``(temperature, gamma)``'s counts and times over ``prompts``; see the module's docstring. ``gamma = 1``
    is always measured (its acceptance share is the ``alpha`` of every prediction).

    Greedy rows also check that the tokens equal the target's own ``generate`` (``same_as_target``). Sampled rows
    use one seeded generator per prompt and run.
    """
    from attn_edu.generation import SpeculativeStats, generate, speculative_generate

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        cost = pass_seconds(draft, PROMPT_LEN + new_tokens // 2) / pass_seconds(
            target, PROMPT_LEN + new_tokens // 2
        )
        rows = []
        for temperature in temperatures:
            alpha = None  # the share kept at gamma = 1, measured first
            for gamma in sorted(set(gammas) | {1}):
                stats, same = SpeculativeStats(), True
                alone: list[float] = []
                spec: list[float] = []
                for run in range(runs):
                    base_s = spec_s = 0.0
                    for i, prompt in enumerate(prompts):
                        seed = 1000 * run + i
                        start = time.perf_counter()
                        reference = generate(
                            target, prompt, new_tokens, temperature=temperature,
                            generator=torch.Generator().manual_seed(seed),
                        )  # fmt: skip
                        middle = time.perf_counter()
                        out = speculative_generate(
                            target, draft, prompt, new_tokens, gamma=gamma, temperature=temperature,
                            generator=torch.Generator().manual_seed(seed), stats=stats if run == 0 else None,
                        )  # fmt: skip
                        base_s, spec_s = base_s + middle - start, spec_s + time.perf_counter() - middle
                        same = same and (temperature > 0 or torch.equal(out, reference))
                    alone.append(base_s)
                    spec.append(spec_s)
                alpha = stats.acceptance_rate if alpha is None else alpha
                tokens = len(prompts) * new_tokens
                predicted = expected_tokens_per_pass(alpha, gamma)
                rows.append({
                    "temperature": temperature, "gamma": gamma, "accepted_share": stats.acceptance_rate,
                    "tokens_per_target_pass": tokens / stats.target_calls,
                    "predicted_tokens_per_pass": predicted,
                    "target_passes_per_token": stats.target_calls / tokens,
                    "draft_passes_per_token": stats.draft_calls / tokens,
                    "target_alone_s": alone, "speculative_s": spec,
                    "speedup": statistics.median(alone) / statistics.median(spec),
                    "predicted_speedup": predicted / (gamma * cost + 1),
                    "same_as_target": same if temperature == 0 else None,
                })  # fmt: skip
    finally:
        torch.set_num_threads(previous)
    return {
        "setup": {
            "prompts": len(prompts), "prompt_len": prompts[0].shape[1], "new_tokens": new_tokens, "runs": runs,
            "threads": threads, "draft_cost": cost, "machine": platform.processor() or platform.machine(),
            "torch": torch.__version__,
        },
        "rows": rows,
    }  # fmt: skip


def table(record: dict[str, Any]) -> str:
    """The measured rows as a text table, each prediction in brackets after its measurement."""
    lines = [
        f"{'sampling':<9}{'gamma':>6}{'kept':>7}{'target passes':>15}{'draft passes':>14}"
        f"{'tokens per target pass':>24}{'wall-time speed-up':>21}",
        f"{'':<9}{'':>6}{'':>7}{'per token':>15}{'per token':>14}{'(predicted)':>24}{'(predicted)':>21}",
    ]
    for r in record["rows"]:
        how = "greedy" if r["temperature"] == 0 else f"T = {r['temperature']:g}"
        per_pass = f"{r['tokens_per_target_pass']:.2f} ({r['predicted_tokens_per_pass']:.2f})"
        speedup = f"{r['speedup']:.2f}x ({r['predicted_speedup']:.2f}x)"
        lines.append(
            f"{how:<9}{r['gamma']:>6}{r['accepted_share']:>7.0%}{r['target_passes_per_token']:>15.2f}"
            f"{r['draft_passes_per_token']:>14.2f}{per_pass:>24}{speedup:>21}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from attn_edu.corpus import held_out_windows
    from attn_edu.experiments import shipped
    from attn_edu.experiments.text_gpt import load_text_gpt

    parser = argparse.ArgumentParser(
        prog="python -m attn_edu.bench speculative", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--gammas", type=int, nargs="+", default=[1, 2, 3, 4, 6, 8])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--new", type=int, default=96, help="new tokens per prompt (prompt 32: at most 96)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--write", action="store_true", help=f"store the record in attn_edu/weights/{RECORD}.json"
    )
    args = parser.parse_args(argv)
    if (
        not 1 <= args.new <= 128 - PROMPT_LEN
        or min(args.gammas + [args.prompts, args.runs, args.threads]) < 1
    ):
        parser.error("--new must be 1..96; --gammas, --prompts, --runs and --threads positive")
    target, tokenizer = load_text_gpt()
    draft, _ = load_text_gpt(name="text_gpt_draft")
    prompts = list(held_out_windows(tokenizer, args.prompts, PROMPT_LEN)[:, None])  # (1, 32) each
    record = measure(target, draft, prompts, args.new, args.gammas, runs=args.runs, threads=args.threads)
    record["command"] = "python -m attn_edu.bench speculative " + " ".join(argv or [])
    print(f"draft pass / target pass: c = {record['setup']['draft_cost']:.2f}\n" + table(record))
    if args.write:
        print("wrote", shipped.save_record(RECORD, record))
    return 0
