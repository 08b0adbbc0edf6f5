"""Ring attention: the online softmax across processes (Liu, Zaharia and Abbeel, 2023, "Ring Attention with
Blockwise Transformers for Near-Infinite Context").

Each process (a *rank*) holds one shard of the sequence: its own queries, keys and values. Every query needs every
key, so the key/value blocks travel round a ring. At each of ``W`` steps a rank attends its queries to the block it
holds, while it sends that block on to the next rank and receives the next one from the previous rank. Each block's
partial output and log-sum-exp merge into the running result with FlashAttention's rescale
(:func:`attn_edu.flash.combine_splits`): the same (max, sum) bookkeeping as notebook 12's tiles, across processes.

The backward (:func:`ring_attention` is differentiable) runs the ring again. The blocks travel with their dK and
dV accumulators; each rank adds what its queries contribute (:func:`attn_edu.flash.tiled_attention_backward`,
given the whole forward's output and log-sum-exp), and after ``W`` steps every block is home with its gradient.

**Causal load balance.** Under a causal mask, contiguous shards give rank ``r`` tiles against ``r + 1`` blocks:
rank 0 idles while rank ``W - 1`` works. The *zigzag* layout of context-parallel training cuts the sequence into
``2W`` chunks and gives rank ``r`` chunks ``r`` and ``2W - 1 - r``, an early and a late one, so every rank
computes ``2W + 1`` chunk tiles (Striped Attention, Brandon et al., 2023, deals single tokens round the same way).

**Where it runs.** ``torch.distributed`` with the gloo backend on CPU processes (:func:`launch`, which joins them
on 127.0.0.1 only) and, unchanged, with NCCL on GPUs: every tensor stays on the input's device. Every collective
and every receive has a timeout, and the shards' shapes are compared across ranks before any block moves, so bad
input raises a clear error on every rank instead of hanging.

Shapes: each rank passes its shard ``q, k, v (B, H, T_r, D)``; ``T_r`` may differ by one between ranks when
``W`` does not divide the length (:func:`shard_chunks`).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from attn_edu._validate import check_floating, check_positive_int, check_qkv, check_scale
from attn_edu.flash import combine_splits, tiled_attention_backward, tiled_attention_forward

LAYOUTS = ("contiguous", "zigzag")
TIMEOUT_S = 60.0  # the default wait for any collective or block, in seconds
Chunks = list[tuple[int, int]]  # (start, end) ranges of global positions, in the order a shard holds them


def shard_chunks(length: int, world_size: int, layout: str = "contiguous") -> list[Chunks]:
    """Per rank, the ``(start, end)`` ranges of the sequence it holds.

    ``"contiguous"``: ``W`` near-equal consecutive pieces. ``"zigzag"``: ``2W`` near-equal chunks, rank ``r``
    holding chunks ``r`` and ``2W - 1 - r``.

    Example:
        >>> shard_chunks(10, 2)
        [[(0, 5)], [(5, 10)]]
        >>> shard_chunks(8, 2, "zigzag")
        [[(0, 2), (6, 8)], [(2, 4), (4, 6)]]
    """
    check_positive_int("length", length)
    check_positive_int("world_size", world_size)
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")
    pieces = world_size if layout == "contiguous" else 2 * world_size
    if length < pieces:
        raise ValueError(
            f"length: {layout} shards over {world_size} ranks need at least {pieces} positions, got {length}"
        )
    bounds = [i * length // pieces for i in range(pieces + 1)]
    chunks = list(zip(bounds[:-1], bounds[1:]))
    if layout == "contiguous":
        return [[chunk] for chunk in chunks]
    return [[chunks[r], chunks[pieces - 1 - r]] for r in range(world_size)]


def shard(x: torch.Tensor, rank: int, world_size: int, layout: str = "contiguous") -> torch.Tensor:
    """Rank ``rank``'s shard of ``x`` along its sequence dimension (the second to last).

    Shapes:
        x ``(..., T, D)``; returns ``(..., T_r, D)``.
    """
    chunks = shard_chunks(x.shape[-2], world_size, layout)
    if not 0 <= rank < world_size:
        raise ValueError(f"rank: expected 0 <= rank < world_size = {world_size}, got {rank}")
    return torch.cat([x[..., start:end, :] for start, end in chunks[rank]], dim=-2)


def unshard(shards: Sequence[torch.Tensor], layout: str = "contiguous") -> torch.Tensor:
    """The whole sequence back from every rank's shard (in rank order): the inverse of :func:`shard`.

    Example:
        >>> x = torch.arange(7.0).view(7, 1)
        >>> [shard(x, r, 3, "zigzag").flatten().tolist() for r in range(3)]
        [[0.0, 5.0, 6.0], [1.0, 4.0], [2.0, 3.0]]
        >>> torch.equal(unshard([shard(x, r, 3, "zigzag") for r in range(3)], "zigzag"), x)
        True
    """
    length = sum(s.shape[-2] for s in shards)
    chunks = shard_chunks(length, len(shards), layout)
    pieces = {}
    for rank, (x, held) in enumerate(zip(shards, chunks)):
        expected = sum(end - start for start, end in held)
        if x.shape[-2] != expected:
            raise ValueError(
                f"shards[{rank}]: expected {expected} positions ({layout}, {len(shards)} ranks), got {x.shape[-2]}"
            )
        offset = 0
        for start, end in held:
            pieces[start] = x[..., offset : offset + end - start, :]
            offset += end - start
    return torch.cat([pieces[start] for start in sorted(pieces)], dim=-2)


@dataclass
class RingStats:
    """What one rank did in one :func:`ring_attention` call (forward, and backward when it runs)."""

    tiles: int = 0  # (query chunk, key chunk) tiles computed; fully masked ones are skipped
    scores: int = 0  # query-key scores computed in those tiles, per (batch, head)
    bytes_sent: int = 0  # bytes this rank sent to the next
    kv_bytes_held: int = (
        0  # most key/value bytes held at once: its own block, the one in hand, the one arriving
    )
    compute_s: float = 0.0  # CPU seconds attending (thread time: not waiting, not other processes' turns)
    seconds: float = 0.0  # the whole call
    tiles_per_step: list[int] = field(default_factory=list)


@dataclass
class _Ring:
    group: Any
    rank: int
    world: int
    chunks: list[Chunks]  # every rank's positions
    is_causal: bool
    scale: float
    timeout: timedelta
    stats: RingStats


def _peer(ring: _Ring, offset: int) -> int:
    """The global rank ``offset`` places along the ring."""
    member = (ring.rank + offset) % ring.world
    return member if ring.group is None else dist.get_global_rank(ring.group, member)


def _wait(works: Sequence[Any], ring: _Ring, what: str) -> None:
    for work in works:
        try:
            work.wait(ring.timeout)
        except RuntimeError as error:
            raise RuntimeError(
                f"ring_attention, rank {ring.rank}: {what} did not complete: {error}"
            ) from error


def _exchange(
    tensors: Sequence[torch.Tensor], origin: int, ring: _Ring, template: torch.Tensor
) -> tuple[list, list]:
    """Start sending ``tensors`` to the next rank and receiving the previous rank's block of ``origin``."""
    length = sum(end - start for start, end in ring.chunks[origin])
    incoming = [template.new_empty((*t.shape[:-2], length, t.shape[-1])) for t in tensors]
    works = [dist.isend(t.contiguous(), _peer(ring, 1), group=ring.group) for t in tensors]
    works += [dist.irecv(t, _peer(ring, -1), group=ring.group) for t in incoming]
    ring.stats.bytes_sent += sum(t.numel() * t.element_size() for t in tensors)
    return works, incoming


def _tiles(ring: _Ring, origin: int) -> list[tuple[slice, slice, torch.Tensor | None]]:
    """The tiles of this rank's queries against the block of ``origin``: (query rows, key rows, mask or None),
    fully masked (future) chunk pairs left out."""
    tiles = []
    q_offset = 0
    for q_start, q_end in ring.chunks[ring.rank]:
        k_offset = 0
        for k_start, k_end in ring.chunks[origin]:
            rows, cols = (
                slice(q_offset, q_offset + q_end - q_start),
                slice(k_offset, k_offset + k_end - k_start),
            )
            k_offset += k_end - k_start
            if ring.is_causal and k_start >= q_end:
                continue  # every key after every query: nothing to compute
            mask = None
            if ring.is_causal and k_end - 1 > q_start:  # straddles the diagonal
                mask = torch.arange(k_start, k_end)[None, :] <= torch.arange(q_start, q_end)[:, None]
            tiles.append((rows, cols, mask))
        q_offset += q_end - q_start
    return tiles


def _ring_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ring: _Ring
) -> tuple[torch.Tensor, torch.Tensor]:
    out = torch.zeros(*q.shape[:-1], v.shape[-1], device=q.device)  # (B, H, T_r, Dv), float32
    lse = torch.full(q.shape[:-1], float("-inf"), device=q.device)  # (B, H, T_r)
    block, origin = [k, v], ring.rank
    for step in range(ring.world):
        works, incoming = [], []
        if step < ring.world - 1:  # send this block on while computing with it
            works, incoming = _exchange(block, (origin - 1) % ring.world, ring, k)
        held = sum(
            t.numel() * t.element_size() for t in [k, v] + (block if origin != ring.rank else []) + incoming
        )
        ring.stats.kv_bytes_held = max(ring.stats.kv_bytes_held, held)
        start = time.thread_time()
        tiles = _tiles(ring, origin)
        for rows, cols, mask in tiles:
            q_t, k_t, v_t = q[..., rows, :], block[0][..., cols, :], block[1][..., cols, :]
            o, m = tiled_attention_forward(
                q_t,
                k_t,
                v_t,
                mask=None if mask is None else mask.to(q.device),
                scale=ring.scale,
                block_q=q_t.shape[-2],
                block_k=k_t.shape[-2],
            )  # one tile: (B, H, rows, Dv) and its log-sum-exp (B, H, rows)
            out[..., rows, :], lse[..., rows] = combine_splits(
                torch.stack([out[..., rows, :], o.float()]), torch.stack([lse[..., rows], m])
            )
            ring.stats.scores += q_t.shape[-2] * k_t.shape[-2]
        ring.stats.tiles += len(tiles)
        ring.stats.tiles_per_step.append(len(tiles))
        ring.stats.compute_s += time.thread_time() - start
        _wait(works, ring, f"step {step}'s key/value block")
        if incoming:
            block, origin = incoming, (origin - 1) % ring.world
    return out.to(q.dtype), lse


def _ring_backward(q, k, v, out, lse, grad_out, ring: _Ring) -> tuple[torch.Tensor, ...]:  # noqa: ANN001
    dq = torch.zeros(q.shape, device=q.device)  # float32 accumulators
    block = [k, v, torch.zeros(k.shape, device=q.device), torch.zeros(v.shape, device=q.device)]
    origin = ring.rank
    for step in range(ring.world):  # W steps and W sends: the last one brings each block's gradient home
        works, incoming = (
            _exchange(block[:2], (origin - 1) % ring.world, ring, k) if step < ring.world - 1 else ([], [])
        )
        start = time.thread_time()
        for rows, cols, mask in _tiles(ring, origin):
            q_t, k_t, v_t = q[..., rows, :], block[0][..., cols, :], block[1][..., cols, :]
            dq_t, dk_t, dv_t = tiled_attention_backward(
                q_t,
                k_t,
                v_t,
                out[..., rows, :],
                lse[..., rows],
                grad_out[..., rows, :],
                mask=None if mask is None else mask.to(q.device),
                scale=ring.scale,
                block_q=q_t.shape[-2],
                block_k=k_t.shape[-2],
            )  # the tile's share of every gradient, from the whole forward's out and lse
            dq[..., rows, :] += dq_t
            block[2][..., cols, :] += dk_t
            block[3][..., cols, :] += dv_t
        ring.stats.compute_s += time.thread_time() - start
        grads, arriving = _exchange(block[2:], (origin - 1) % ring.world, ring, block[2])
        _wait(works + grads, ring, f"backward step {step}'s block")
        block = (incoming or block[:2]) + arriving
        origin = (origin - 1) % ring.world
    return dq.to(q.dtype), block[2].to(k.dtype), block[3].to(v.dtype)


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ring: _Ring) -> torch.Tensor:
        out, lse = _ring_forward(q, k, v, ring)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.ring = ring
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        return (*_ring_backward(*ctx.saved_tensors, grad_out, ctx.ring), None)


DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _agree(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ring: _Ring, layout: str, problem: str) -> None:
    """Compare every rank's shard with the others (one small all-gather) and raise the same error on every rank
    when a shard is wrong anywhere; then fill ``ring.chunks``."""
    dtype = DTYPES.index(q.dtype) if not problem and q.dtype in DTYPES else -1
    shape = list(q.shape) if not problem else [0, 0, 0, 0]
    dv = v.shape[-1] if not problem else 0
    device = q.device if isinstance(q, torch.Tensor) else torch.device("cpu")
    mine = [int(bool(problem)), *shape, dv, dtype, int(ring.is_causal), LAYOUTS.index(layout)]
    mine = torch.tensor(mine, device=device)  # (9,): the same size on every rank, whatever it holds
    everyone = [torch.zeros_like(mine) for _ in range(ring.world)]
    work = dist.all_gather(everyone, mine, group=ring.group, async_op=True)
    _wait([work], ring, "comparing the shards")
    rows = [row.tolist() for row in everyone]
    if problem:
        raise ValueError(problem)
    bad = [r for r, row in enumerate(rows) if row[0]]
    if bad:
        raise ValueError(f"ring_attention: rank {bad[0]}'s shard was rejected (its own error says why)")
    names = "(B, H, D, Dv, dtype, is_causal, layout)"
    keys = {
        r: (
            row[1],
            row[2],
            row[4],
            row[5],
            str(DTYPES[row[6]]) if row[6] >= 0 else "?",
            bool(row[7]),
            LAYOUTS[row[8]],
        )
        for r, row in enumerate(rows)
    }  # (B, H, D, Dv, dtype, is_causal, layout) of each rank
    for r, key in keys.items():
        if key != keys[0]:
            raise ValueError(
                f"ring_attention: every rank must pass the same {names}; rank 0 has {keys[0]}, rank {r} {key}"
            )
    lengths = [row[3] for row in rows]
    total = sum(lengths)
    expected = (
        shard_chunks(total, ring.world, layout) if total >= ring.world * (1 + (layout == "zigzag")) else None
    )
    if expected is None or [sum(e - s for s, e in held) for held in expected] != lengths:
        want = None if expected is None else [sum(e - s for s, e in held) for held in expected]
        raise ValueError(
            f"ring_attention: the shards hold {lengths} positions; {layout} shards of {total} over {ring.world} "
            f"ranks hold {want} (cut the sequence with attn_edu.distributed.shard)"
        )
    ring.chunks = expected


def ring_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    is_causal: bool = False,
    layout: str = "contiguous",
    group: Any = None,
    world_size: int | None = None,
    scale: float | None = None,
    timeout: float = TIMEOUT_S,
    stats: RingStats | None = None,
) -> torch.Tensor:
    """Attention of this rank's queries over the whole sequence, its keys and values passed round the ring.

    Call it on every rank of ``group`` (default: all ranks) with that rank's shard (:func:`shard` with the
    same ``layout``); it returns this rank's rows of ``softmax(q kᵀ · scale + causal mask) v`` over the whole
    sequence. ``world_size``, when given, must be the group's size. ``stats`` (a :class:`RingStats`) is filled
    with what this rank computed, sent and held. Differentiable: the backward passes gradients round the ring.

    Shapes:
        q ``(B, H, T_r, D)``, k ``(B, H, T_r, D)``, v ``(B, H, T_r, Dv)``; returns ``(B, H, T_r, Dv)``.
    """
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            "ring_attention: torch.distributed is not initialised (start the ranks with launch())"
        )
    group_size = dist.get_world_size(group)
    if world_size is not None and world_size != group_size:
        raise ValueError(f"world_size: expected the group's size, {group_size}, got {world_size}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")
    ring = _Ring(
        group,
        dist.get_rank(group),
        group_size,
        [],
        is_causal,
        1.0,
        timedelta(seconds=timeout),
        stats or RingStats(),
    )
    problem = ""
    try:  # checked here, reported on every rank by _agree
        for name, x in (("q", q), ("k", k), ("v", v)):
            check_floating(name, x)
            if x.dim() != 4:
                raise ValueError(f"{name}: expected a shard of shape (B, H, T_r, D), got {tuple(x.shape)}")
        sizes = check_qkv(q, k, v)
        if sizes["T"] != sizes["S"] or q.shape[:2] != k.shape[:2] or k.shape[:-1] != v.shape[:-1]:
            raise ValueError(
                f"q, k, v: one shard of self-attention shares (B, H, T_r); got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
            )
        ring.scale = check_scale(scale, q.shape[-1])
    except (TypeError, ValueError) as error:
        problem = f"rank {ring.rank}: {error}"
    start = time.perf_counter()
    _agree(q, k, v, ring, layout, problem)
    out = _RingAttention.apply(q, k, v, ring)
    ring.stats.seconds += time.perf_counter() - start
    return out


def allgather_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    is_causal: bool = False,
    layout: str = "contiguous",
    group: Any = None,
    timeout: float = TIMEOUT_S,
    stats: RingStats | None = None,
) -> torch.Tensor:
    """The plain alternative to the ring (forward only): gather every rank's keys and values, then attend.

    Each rank sends its block to the other ``W - 1`` as the ring does, but holds all ``W`` blocks at once and
    computes only after everything has arrived. Shapes as :func:`ring_attention`.
    """
    stats = stats or RingStats()
    ring = _Ring(
        group,
        dist.get_rank(group),
        dist.get_world_size(group),
        [],
        is_causal,
        check_scale(None, q.shape[-1]),
        timedelta(seconds=timeout),
        stats,
    )
    start = time.perf_counter()
    _agree(q, k, v, ring, layout, "")
    longest = max(sum(e - s for s, e in held) for held in ring.chunks)
    gathered = []
    for x in (k, v):  # all_gather needs equal sizes: pad to the longest shard, then cut
        padded = torch.zeros(*x.shape[:-2], longest, x.shape[-1], dtype=x.dtype, device=x.device)
        padded[..., : x.shape[-2], :] = x
        parts = [torch.empty_like(padded) for _ in range(ring.world)]
        _wait([dist.all_gather(parts, padded, group=group, async_op=True)], ring, "the all-gather")
        lengths = [sum(e - s for s, e in held) for held in ring.chunks]
        gathered.append(unshard([p[..., :n, :] for p, n in zip(parts, lengths)], layout))
        stats.bytes_sent += (ring.world - 1) * x.numel() * x.element_size()
    stats.kv_bytes_held = sum(t.numel() * t.element_size() for t in gathered)
    positions = torch.cat([torch.arange(s, e) for s, e in ring.chunks[ring.rank]])  # this rank's queries
    mask = (
        (torch.arange(gathered[0].shape[-2])[None, :] <= positions[:, None]).to(q.device)
        if is_causal
        else None
    )
    compute = time.thread_time()
    out, _ = tiled_attention_forward(
        q, *gathered, mask=mask, scale=ring.scale, block_q=q.shape[-2], block_k=gathered[0].shape[-2]
    )
    stats.compute_s += time.thread_time() - compute
    stats.scores += q.shape[-2] * gathered[0].shape[-2]
    stats.seconds += time.perf_counter() - start
    return out


# --- processes ---------------------------------------------------------------------------------------------------


def _worker(
    rank: int, world_size: int, store: str, fn: Callable, args: tuple, timeout: float, threads: int, out: str
) -> None:
    torch.set_num_threads(threads)
    if sys.platform.startswith("linux"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback only: 127.0.0.1
    result: dict[str, Any]
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"file://{store}",
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=timeout),
        )
        result = {"value": fn(*args)}
    except BaseException as error:  # noqa: BLE001 - reported to the parent, with its traceback
        result = {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
    torch.save(result, Path(out) / f"rank{rank}.pt")
    try:
        if "error" not in result:
            dist.destroy_process_group()
    finally:
        os._exit(1 if "error" in result else 0)  # never wait on a peer that failed


def _context() -> Any:
    """A fork server where the platform has one: it imports torch once, then forks each rank from a process
    that never started a thread pool (a fork of the notebook's own process could inherit OpenMP's threads in a
    broken state). Elsewhere (Windows), spawn: every rank imports torch afresh."""
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch", "attn_edu.distributed"])
    return context


def launch(
    fn: Callable, world_size: int, *args: Any, timeout: float = TIMEOUT_S, threads: int = 1
) -> list[Any]:
    """Run ``fn(*args)`` in ``world_size`` new CPU processes joined by gloo (``torch.distributed`` on
    127.0.0.1) and return each rank's result, in rank order.

    ``fn`` must be importable (a module's function, not a notebook's), as must its arguments and result. Inside,
    ``torch.distributed.get_rank()`` says which rank runs. ``timeout`` bounds every collective; when any rank
    raises, every rank ends (a peer that waits for it fails after ``timeout`` at most) and ``launch`` raises one
    ``RuntimeError`` with each rank's error.
    """
    check_positive_int("world_size", world_size)
    context = _context()
    with tempfile.TemporaryDirectory(prefix="attn-edu-ranks-") as folder:
        store = str(Path(folder) / "store")
        processes = [
            context.Process(
                target=_worker, args=(rank, world_size, store, fn, args, timeout, threads, folder)
            )
            for rank in range(world_size)
        ]
        for process in processes:
            process.start()
        deadline = time.monotonic() + 3 * timeout + 60  # start-up, then every collective's own timeout
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
        results, errors = [], []
        for rank, process in enumerate(processes):
            if process.is_alive():
                process.kill()
                process.join()
            path = Path(folder) / f"rank{rank}.pt"
            result = (
                torch.load(path, weights_only=False)
                if path.exists()
                else {"error": f"exit code {process.exitcode}"}
            )
            if "error" in result:
                errors.append(f"rank {rank}: {result['error']}")
            results.append(result.get("value"))
    if errors:
        raise RuntimeError(f"{len(errors)} of {world_size} ranks failed:\n" + "\n".join(errors))
    return results


__all__ = [
    "LAYOUTS",
    "RingStats",
    "allgather_attention",
    "launch",
    "ring_attention",
    "shard",
    "shard_chunks",
    "unshard",
]
