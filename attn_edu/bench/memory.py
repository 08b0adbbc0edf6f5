"""Peak extra memory of naive vs tiled attention on the CPU: ``O(T·S)`` against ``O(T·D)``, measured.

Usage::

    python -m attn_edu.bench memory [--sizes 1024 2048 4096 8192] [--block 128] [--threads 1] [--json FILE]

For each sequence length ``N`` the benchmark runs two forward passes under ``torch.no_grad()`` with
``B=1, H=8, D=64`` in float32: the reference :func:`attn_edu.attention.scaled_dot_product_attention`
(which builds the ``(N, N)`` score and weight matrices per head) and
:func:`attn_edu.flash.tiled_attention` (which keeps one ``(block, block)`` tile per head).

How the memory is measured. Every measurement runs in a fresh Python process, so nothing cached by
an earlier run (allocator pools, freed-but-kept pages) can hide or inflate a result. In that process:

1. import torch, allocate q, k, v, and run the function once at a tiny size, so that thread pools
   and lazily loaded kernels already exist;
2. read the *baseline*: the resident set size (RSS) now;
3. run the attention call once and read the *peak* RSS reached during it;
4. report ``extra = peak - baseline`` in MiB (it includes the ``(B, H, N, D)`` output).

On Linux step 3 is exact: writing ``5`` to ``/proc/self/clear_refs`` resets the kernel's high-water
mark ``VmHWM`` to the current RSS, and ``VmHWM`` read from ``/proc/self/status`` after the call is
the peak during the call. Elsewhere a background thread polls the RSS every millisecond with
``psutil`` (a very short spike could slip between polls), and without psutil the process's
lifetime peak from ``resource.getrusage`` is used. The JSON output records which method ran.

The figure to look at is the ratio column: naive memory grows 4x each time ``N`` doubles, tiled
memory stays flat. The target line checks tiled <= 5% of naive at ``N = 8192``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BATCH, HEADS, HEAD_DIM = 1, 8, 64
TARGET_N, TARGET_RATIO = 8192, 0.05
MIB = 1024 * 1024


# ----------------------------------------------------------------------------------------------
# Inside the measuring process
# ----------------------------------------------------------------------------------------------


def _status_mib(field: str) -> float:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``) in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def _reset_peak() -> bool:
    """Reset the kernel's peak-RSS counter; ``False`` where the system has no such counter."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        _status_mib("VmHWM")
        return True
    except (OSError, KeyError):
        return False


class _RssPoller:
    """Fallback peak tracker: sample the RSS every millisecond in a background thread."""

    def __init__(self, process) -> None:
        self.process, self.peak, self.running = process, 0, True
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while self.running:
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.001)

    def __enter__(self) -> _RssPoller:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.running = False
        self.thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)


def _lifetime_peak_mib() -> float:
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / MIB if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


def measure(impl: str, n: int, block: int, threads: int) -> dict:
    """Run one attention call in this process and return its extra peak memory (see module docstring)."""
    import gc
    from functools import partial

    import torch

    from attn_edu.attention import scaled_dot_product_attention
    from attn_edu.flash import tiled_attention

    fn = {
        "naive": scaled_dot_product_attention,
        "tiled": partial(tiled_attention, block_q=block, block_k=block),
    }[impl]
    # One thread: the tiled loop runs many small ops, and on a shared machine thread synchronisation
    # would dominate its time. Threads barely change memory, which is what this benchmark measures.
    torch.set_num_threads(threads)
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(BATCH, HEADS, n, HEAD_DIM, generator=generator) for _ in range(3))
    with torch.no_grad():
        fn(q[..., :64, :], k[..., :64, :], v[..., :64, :])  # warm-up: thread pools, kernels
    gc.collect()

    process = None
    if _reset_peak():
        method, baseline = "VmHWM after /proc/self/clear_refs", _status_mib("VmRSS")
    else:
        try:
            import psutil

            process = psutil.Process()
            method, baseline = "psutil RSS polling (1 ms)", process.memory_info().rss / MIB
        except ImportError:  # only the lifetime peak is known: extra is a lower bound
            method, baseline = "getrusage ru_maxrss (lifetime peak)", _lifetime_peak_mib()

    start = time.perf_counter()
    if process is not None:
        with _RssPoller(process) as poller, torch.no_grad():
            out = fn(q, k, v)
        peak = poller.peak / MIB
    else:
        with torch.no_grad():
            out = fn(q, k, v)
        peak = _status_mib("VmHWM") if method.startswith("VmHWM") else _lifetime_peak_mib()
    seconds = time.perf_counter() - start
    assert out.shape == (BATCH, HEADS, n, HEAD_DIM)
    return {
        "impl": impl,
        "n": n,
        "extra_mib": max(0.0, peak - baseline),
        "seconds": seconds,
        "method": method,
    }


def return_freed_memory() -> None:
    """Give the memory that glibc keeps after frees back to the system (Linux; elsewhere do nothing).

    Allocators keep freed memory for reuse, so a call measured after another one could look free; trimming
    first makes each measurement in one process start from what is really in use.
    """
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # another C library
            pass


def measure_here(sizes: list[int], *, block: int = 128) -> tuple[dict[str, list[float]], str]:
    """Extra peak memory (MiB) of the reference and the tiled attention at each size, in this process.

    Calls :func:`measure` for ``"naive"`` and ``"tiled"`` at every ``n`` of ``sizes``, one torch thread,
    trimming freed memory before each, and puts the thread count back afterwards. Quicker than one process per
    measurement (:func:`run_in_subprocess`), good enough at small sizes. Returns ``({"naive": [...], "tiled":
    [...]}, method)``, the method being how the peak was read.
    """
    import torch

    threads = torch.get_num_threads()
    measured: dict[str, list[float]] = {"naive": [], "tiled": []}
    method = ""
    try:
        for n in sizes:
            for impl in measured:
                return_freed_memory()
                result = measure(impl, n, block=block, threads=1)
                measured[impl].append(result["extra_mib"])
                method = result["method"]
    finally:
        torch.set_num_threads(threads)  # measure sets its own thread count
    return measured, method


def saved_for_backward_mib(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> float:
    """MiB of the tensors that autograd keeps for the backward pass of ``fn(*args, **kwargs)``.

    Counted exactly with PyTorch's saved-tensor hooks (``torch.autograd.graph.saved_tensors_hooks``): each
    tensor that an operation saves for its backward is counted once per time it is saved.

    Example:
        >>> import torch
        >>> x = torch.ones(1024, 256, requires_grad=True)  # 1 MiB of float32
        >>> saved_for_backward_mib(torch.exp, x)  # exp saves its result, the same size as x
        1.0
    """
    import torch

    saved: list[int] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        saved.append(tensor.numel() * tensor.element_size())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        fn(*args, **kwargs)
    return sum(saved) / MIB


def _worker(argv: list[str]) -> int:
    impl, n, block, threads = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    print(json.dumps(measure(impl, n, block, threads)))
    return 0


# ----------------------------------------------------------------------------------------------
# The driver: one fresh process per measurement
# ----------------------------------------------------------------------------------------------


def run_in_subprocess(impl: str, n: int, block: int, threads: int) -> dict:
    """:func:`measure` in a fresh Python process, so one measurement's peak cannot hide another's."""
    package_root = str(Path(__file__).resolve().parents[2])  # so the child imports this attn_edu
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))
    )
    code = "import sys; from attn_edu.bench.memory import _worker; sys.exit(_worker(sys.argv[1:]))"
    result = subprocess.run(
        [sys.executable, "-c", code, impl, str(n), str(block), str(threads)],
        capture_output=True,
        text=True,
        env=env,
    )
    if result.returncode != 0:
        raise RuntimeError(f"measuring {impl} at N={n} failed:\n{result.stderr.strip()}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m attn_edu.bench memory",
        description="Peak extra RSS (MiB) of naive vs tiled attention, forward only, CPU, "
        f"B={BATCH} H={HEADS} D={HEAD_DIM} float32.",
    )
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[1024, 2048, 4096, 8192], help="sequence lengths N"
    )
    parser.add_argument("--block", type=int, default=128, help="block_q = block_k of the tiled version")
    parser.add_argument("--threads", type=int, default=1, help="torch threads in each measuring process")
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    if any(n <= 0 for n in args.sizes) or args.block <= 0 or args.threads <= 0:
        parser.error("--sizes, --block and --threads must be positive integers")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    print(
        f"peak extra memory (RSS, MiB), forward under no_grad, B={BATCH} H={HEADS} D={HEAD_DIM} float32, CPU"
    )
    print(f"{'N':>6} {'naive MiB':>10} {'tiled MiB':>10} {'tiled/naive':>12} {'naive s':>8} {'tiled s':>8}")
    rows, method = [], None
    for n in args.sizes:
        naive = run_in_subprocess("naive", n, args.block, args.threads)
        tiled = run_in_subprocess("tiled", n, args.block, args.threads)
        method = naive["method"]
        ratio = tiled["extra_mib"] / naive["extra_mib"] if naive["extra_mib"] > 0 else float("nan")
        rows.append(
            {
                "n": n,
                "naive_mib": round(naive["extra_mib"], 1),
                "tiled_mib": round(tiled["extra_mib"], 1),
                "ratio": round(ratio, 4),
                "naive_seconds": round(naive["seconds"], 3),
                "tiled_seconds": round(tiled["seconds"], 3),
            }
        )
        print(
            f"{n:>6} {naive['extra_mib']:>10.1f} {tiled['extra_mib']:>10.1f} {ratio:>12.3f} "
            f"{naive['seconds']:>8.2f} {tiled['seconds']:>8.2f}"
        )
    print(f"method: {method}; each measurement in a fresh process")

    at_target = [row for row in rows if row["n"] == TARGET_N]
    passed = None
    if at_target:
        passed = at_target[0]["ratio"] <= TARGET_RATIO
        verdict = "PASS" if passed else "FAIL"
        print(
            f"{verdict}: tiled uses {at_target[0]['ratio']:.1%} of naive's extra memory at N={TARGET_N} "
            f"(target <= {TARGET_RATIO:.0%})"
        )
    else:
        print(
            f"SKIP: target (tiled <= {TARGET_RATIO:.0%} of naive) is checked at N={TARGET_N}, not in --sizes"
        )

    if args.json is not None:
        report = {
            "benchmark": "memory",
            "config": {
                "batch": BATCH,
                "heads": HEADS,
                "head_dim": HEAD_DIM,
                "dtype": "float32",
                "device": "cpu",
                "block": args.block,
                "threads": args.threads,
            },
            "method": method,
            "results": rows,
            "target": {"n": TARGET_N, "max_ratio": TARGET_RATIO, "passed": passed},
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 1 if passed is False else 0


if __name__ == "__main__":
    sys.exit(main())
