"""Ring attention measured: equal to full attention, the causal load balance of two layouts, and what each rank
sends and holds as ranks are added (:mod:`attn_edu.distributed`).

``python -m attn_edu.bench ring [--ranks 4] [--length 2048]`` starts the ranks (CPU processes joined by gloo on
127.0.0.1) and prints the three tables. Each measuring function runs *inside* :func:`attn_edu.distributed.launch`,
on every rank; :func:`measure_all` runs all three in one start of the processes, as notebook 12 does.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from attn_edu.distributed import LAYOUTS, RingStats, allgather_attention, launch, ring_attention, shard


def _subgroups(sizes: Sequence[int]) -> dict[int, Any]:
    """One process group of the first ``w`` ranks for each ``w`` (every rank must create every group)."""
    world = dist.get_world_size()
    return {w: (None if w == world else dist.new_group(list(range(w)))) for w in sizes}


def compare_with_full(
    world_sizes: Sequence[int] = (2, 3, 4), lengths: Sequence[int] = (13, 16), *, heads: int = 2, dim: int = 8
) -> list[dict[str, Any]]:
    """On every rank: for each world size (the first ``w`` ranks), length, mask and layout, the largest
    ``|ring - full|`` of this rank's output and of its dq, dk, dv, against ``torch``'s
    ``scaled_dot_product_attention`` and its autograd on the whole sequence (float32). Rows of ranks outside a
    group are left out; take the largest over ranks."""
    rank, rows = dist.get_rank(), []
    groups = _subgroups(world_sizes)
    for w, group in groups.items():
        for length in lengths:
            for causal in (False, True):
                for layout in LAYOUTS:
                    g = torch.Generator().manual_seed(length)
                    q, k, v = (
                        torch.randn(1, heads, length, dim, generator=g, requires_grad=True) for _ in range(3)
                    )
                    full = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    grad = torch.randn(full.shape, generator=g)
                    full.backward(grad)
                    if rank >= w:
                        continue
                    mine = [shard(x.detach(), rank, w, layout).requires_grad_() for x in (q, k, v)]
                    out = ring_attention(*mine, is_causal=causal, layout=layout, group=group)
                    out.backward(shard(grad, rank, w, layout))
                    pairs = [(out, full.detach()), *((m.grad, x.grad) for m, x in zip(mine, (q, k, v)))]
                    errors = [(a - shard(b, rank, w, layout)).abs().max().item() for a, b in pairs]
                    rows.append({"ranks": w, "length": length, "causal": causal, "layout": layout,
                                 "out": errors[0], "dq": errors[1], "dk": errors[2], "dv": errors[3]})  # fmt: skip
    return rows


def balance(
    length: int = 2048, *, heads: int = 4, dim: int = 64, repeats: int = 3
) -> dict[str, dict[str, Any]]:
    """On every rank: a causal forward over ``length`` positions in each layout: the tiles and scores this rank
    computed, and its CPU seconds attending (the fastest of ``repeats``)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, heads, length, dim, generator=g) for _ in range(3))
    found = {}
    for layout in LAYOUTS:
        mine = [shard(x, rank, world, layout) for x in (q, k, v)]
        best = None
        for _ in range(repeats):
            stats = RingStats()
            ring_attention(*mine, is_causal=True, layout=layout, stats=stats)
            best = stats if best is None or stats.compute_s < best.compute_s else best
        found[layout] = {"tiles": best.tiles, "scores": best.scores, "compute_s": best.compute_s}
    return found


def scaling(per_rank: int = 256, *, heads: int = 4, dim: int = 64) -> list[dict[str, Any]]:
    """On every rank: with ``per_rank`` positions on each of the first ``w`` ranks, for ``w`` = 1 to all, the
    bytes rank 0 sends and the key/value bytes it holds at once, for the ring and for an all-gather."""
    rank, world = dist.get_rank(), dist.get_world_size()
    rows = []
    for w, group in _subgroups(range(1, world + 1)).items():
        g = torch.Generator().manual_seed(w)
        q, k, v = (torch.randn(1, heads, w * per_rank, dim, generator=g) for _ in range(3))
        if rank >= w:
            continue
        mine = [shard(x, rank, w) for x in (q, k, v)]
        ring, gathered = RingStats(), RingStats()
        ring_attention(*mine, is_causal=True, group=group, stats=ring)
        allgather_attention(*mine, is_causal=True, group=group, stats=gathered)
        rows.append({"ranks": w, "length": w * per_rank, "ring_sent": ring.bytes_sent, "ring_held": ring.kv_bytes_held,
                     "gather_sent": gathered.bytes_sent, "gather_held": gathered.kv_bytes_held})  # fmt: skip
    return rows


def measure_all(
    length: int = 2048,
    per_rank: int = 256,
    world_sizes: Sequence[int] = (2, 3, 4),
    lengths: Sequence[int] = (13, 16),
    repeats: int = 3,
) -> dict[str, Any]:
    """:func:`compare_with_full` (``world_sizes`` x ``lengths``), :func:`balance` (over ``length`` positions, the
    fastest of ``repeats``) and :func:`scaling` (``per_rank`` positions a rank), one after the other on every
    rank."""
    start = time.perf_counter()
    found = {
        "equal": compare_with_full(world_sizes, lengths),
        "balance": balance(length, repeats=repeats),
        "scaling": scaling(per_rank),
    }
    found["seconds"] = time.perf_counter() - start
    return found


def merge(per_rank: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Every rank's :func:`measure_all` in one: the equality rows reduced to their largest error over ranks, the
    balance per rank, the scaling rows of rank 0."""
    worst: dict[tuple, dict[str, Any]] = {}
    for rows in (found["equal"] for found in per_rank):
        for row in rows:
            key = (row["ranks"], row["length"], row["causal"], row["layout"])
            kept = worst.setdefault(key, dict(row))
            for name in ("out", "dq", "dk", "dv"):
                kept[name] = max(kept[name], row[name])
    return {
        "equal": list(worst.values()),
        "balance": [found["balance"] for found in per_rank],
        "scaling": per_rank[0]["scaling"],
        "seconds": max(found["seconds"] for found in per_rank),
    }


def tables(merged: dict[str, Any]) -> str:
    """The three tables as text."""
    lines = ["largest |ring - full| over ranks (float32): output and gradients"]
    lines.append(
        f"{'ranks':>5} {'length':>6} {'causal':>6} {'layout':<10} {'out':>8} {'dq':>8} {'dk':>8} {'dv':>8}"
    )
    for r in merged["equal"]:
        errors = " ".join(f"{r[n]:8.1e}" for n in ("out", "dq", "dk", "dv"))
        lines.append(
            f"{r['ranks']:>5} {r['length']:>6} {'yes' if r['causal'] else 'no':>6} {r['layout']:<10} {errors}"
        )
    lines += ["", "causal forward: tiles and CPU ms per rank"]
    for layout in LAYOUTS:
        cells = [f"{b[layout]['tiles']} ({1000 * b[layout]['compute_s']:.0f} ms)" for b in merged["balance"]]
        lines.append(f"{layout:<10} " + "  ".join(cells))
    lines += [
        "",
        "per rank, fixed positions per rank: KiB sent and KiB of keys/values held at once, ring vs all-gather",
    ]
    for r in merged["scaling"]:
        lines.append(f"{r['ranks']} ranks, {r['length']:>5} positions: sent {r['ring_sent'] / 1024:6.0f} vs "
                     f"{r['gather_sent'] / 1024:6.0f}, held {r['ring_held'] / 1024:5.0f} vs {r['gather_held'] / 1024:5.0f}")  # fmt: skip
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m attn_edu.bench ring", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--length", type=int, default=2048, help="positions in the load-balance run")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    merged = merge(launch(measure_all, args.ranks, args.length))
    print(tables(merged))
    print(f"\n{args.ranks} processes, {time.perf_counter() - start:.1f} s with their start")
    return 0
