"""Benchmark the Triton FlashAttention kernel against PyTorch's FlashAttention and the naive reference.

    python -m attn_edu.bench flash [--json FILE] [--plot FILE] [--quick] [--budget-s SECONDS]

On a GPU it times, forward and backward, in bfloat16:

- ``triton``: :func:`attn_edu.kernels.triton_flash.flash_attention` (the teaching kernels),
- ``triton_fast``: :func:`~attn_edu.kernels.triton_flash_fast.flash_attention_fast` (autotuned forward),
- ``torch_flash``: :func:`torch.nn.functional.scaled_dot_product_attention` with the FlashAttention
  backend forced (``torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION)``),
- ``naive``: :func:`attn_edu.attention.scaled_dot_product_attention`, which builds the ``(T, S)``
  matrix (skipped where it would not fit in memory),

for the FlashAttention-2 paper's setting: ``B · N = 16k`` tokens, hidden size 2048, head dim 64 and
128 (``H = 2048 / D``), ``N = 512 .. 16k``, causal and not. Throughput counts ``4 · B · H · N² · D``
FLOPs forward (halved when causal) and 2.5x that backward, the papers' convention. Every query here
has ``T == S``, so PyTorch's top-left ``is_causal`` equals the course's bottom-right one.

Without a GPU it runs the same kernels in Triton's interpreter on tiny sizes: those timings measure
the interpreter (NumPy), not the kernel, and say so. This module only times: whether the kernels are
right is for ``tests/test_triton_flash.py`` (``pytest tests/test_triton_flash.py -m triton``, which
``gpu_check.sh`` runs before this benchmark).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from attn_edu import attention
from attn_edu.attention import scaled_dot_product_attention as reference_attention
from attn_edu.bench.timing import best_time

TOKENS = 16 * 1024  # B · N: the batch shrinks as the sequence grows
HIDDEN = 2048  # H · D
HEAD_DIMS = (64, 128)
SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384)
QUICK_SEQ_LENS = (1024, 4096, 16384)
CPU_SEQ_LENS = (64, 128)  # interpreter: milliseconds per tile pair, so tiny sizes only
QUICK_CPU_SEQ_LENS = (64,)
BACKWARD_FACTOR = 2.5  # backward FLOPs / forward FLOPs (FlashAttention papers)
NAIVE_BYTES_PER_SCORE = 24  # ~6 float32 (T, S) tensors alive at the naive backward's peak


# ----------------------------------------------------------------------------------------------
# Loading the kernels (the interpreter must be chosen before the import)
# ----------------------------------------------------------------------------------------------


def load_kernels(on_gpu: bool) -> Any:
    """Import :mod:`attn_edu.kernels.triton_flash`; without a GPU, in Triton's interpreter."""
    if not on_gpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the first `import triton`
    import attn_edu.kernels.triton_flash as kernels  # raises the install hint without Triton

    if not on_gpu and not kernels.INTERPRETING:
        raise RuntimeError("attn_edu.kernels.triton_flash was imported before TRITON_INTERPRET=1 was set")
    return kernels


# ----------------------------------------------------------------------------------------------
# The contenders
# ----------------------------------------------------------------------------------------------


def _torch_flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool) -> torch.Tensor:
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)


def _torch_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal)


def providers(kernels: Any, on_gpu: bool) -> dict[str, Callable[..., torch.Tensor]]:
    """Name -> ``fn(q, k, v, is_causal)``, in the order they are timed.

    ``kernels`` is :mod:`attn_edu.kernels.triton_flash` as :func:`load_kernels` returns it; the fast
    path, :mod:`attn_edu.kernels.triton_flash_fast`, is imported here, after it (same Triton mode).
    """
    from attn_edu.kernels.triton_flash_fast import flash_attention_fast

    return {
        "triton": lambda q, k, v, c: kernels.flash_attention(q, k, v, is_causal=c),
        # PyTorch's FlashAttention backend exists on CUDA only; on CPU its default SDPA stands in.
        ("torch_flash" if on_gpu else "torch_sdpa"): _torch_flash if on_gpu else _torch_sdpa,
        "triton_fast": lambda q, k, v, c: flash_attention_fast(q, k, v, is_causal=c),
        "naive": lambda q, k, v, c: reference_attention(q, k, v, is_causal=c),
    }


# ----------------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------------


def time_ms(fn: Callable[[], Any], on_gpu: bool, quick: bool, grad_to_none: list | None = None) -> float:
    """Time of ``fn()`` in milliseconds.

    CUDA: the median of triton's ``do_bench``, which synchronises the GPU and clears ``grad_to_none``'s
    gradients between runs. CPU: :func:`attn_edu.bench.timing.best_time`, the fastest of a few
    wall-clock runs after a warm-up.
    """
    if on_gpu:
        from triton.testing import do_bench

        warmup, rep = (5, 20) if quick else (10, 50)
        return float(do_bench(fn, warmup=warmup, rep=rep, grad_to_none=grad_to_none, return_mode="median"))
    fn()  # warm-up: the interpreter rewrites each kernel on first use
    return best_time(fn, repeats=1 if quick else 3) * 1e3


def naive_fits(B: int, H: int, N: int, device: torch.device) -> bool:
    """Whether the naive reference's ``(B, H, N, N)`` float32 tensors fit in the free GPU memory."""
    if device.type != "cuda":
        return True
    free, _ = torch.cuda.mem_get_info(device)
    return B * H * N * N * NAIVE_BYTES_PER_SCORE < 0.9 * free


def attention_flops(B: int, H: int, N: int, D: int, is_causal: bool) -> float:
    """Forward FLOPs: ``4 · B · H · N² · D`` (:func:`attn_edu.attention.attention_flops`), halved when causal
    (FlashAttention papers)."""
    flops = float(attention.attention_flops(B, H, N, N, D))
    return flops / 2 if is_causal else flops


def measure(
    fn: Callable[..., torch.Tensor],
    B: int,
    H: int,
    N: int,
    D: int,
    is_causal: bool,
    dtype: torch.dtype,
    device: torch.device,
    on_gpu: bool,
    quick: bool,
) -> dict[str, float]:
    """Forward and backward time (ms) and throughput (TFLOP/s) of one attention function."""
    shape = (B, H, N, D)
    q, k, v = (torch.randn(shape, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    grad_out = torch.randn(shape, device=device, dtype=dtype)  # (B, H, N, D)
    forward_ms = time_ms(lambda: fn(q, k, v, is_causal), on_gpu, quick)
    out = fn(q, k, v, is_causal)
    backward_ms = time_ms(
        lambda: out.backward(grad_out, retain_graph=True), on_gpu, quick, grad_to_none=[q, k, v]
    )
    flops = attention_flops(B, H, N, D, is_causal)
    return {
        "forward_ms": forward_ms,
        "backward_ms": backward_ms,
        "forward_tflops": flops / forward_ms * 1e-9,
        "backward_tflops": BACKWARD_FACTOR * flops / backward_ms * 1e-9,
    }


# ----------------------------------------------------------------------------------------------
# The benchmark sweep, its table, JSON and plot
# ----------------------------------------------------------------------------------------------


def environment(on_gpu: bool) -> dict[str, Any]:
    """Versions and device, stored with the results."""
    import triton

    return {
        "device": torch.cuda.get_device_name(0) if on_gpu else f"CPU ({platform.processor() or 'unknown'})",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "interpreter": not on_gpu,
    }


def _write_json(path: str | None, payload: dict[str, Any]) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(payload, indent=2))


def run_benchmark(
    kernels: Any, on_gpu: bool, quick: bool, budget_s: float | None, json_path: str | None
) -> dict[str, Any]:
    """Time every contender on every shape; the JSON file is rewritten after each row, so a run cut
    short still leaves its results."""
    device = torch.device("cuda" if on_gpu else "cpu")
    # bfloat16 on the GPU. The interpreter computes bfloat16 as float32 anyway (see triton_flash).
    dtype = torch.bfloat16 if on_gpu else torch.float32
    if on_gpu:
        seq_lens = QUICK_SEQ_LENS if quick else SEQ_LENS
    else:
        seq_lens = QUICK_CPU_SEQ_LENS if quick else CPU_SEQ_LENS
    payload: dict[str, Any] = {
        "environment": environment(on_gpu),
        "dtype": str(dtype).removeprefix("torch."),
        "setting": f"B*N = {TOKENS if on_gpu else 'tiny'}, hidden {HIDDEN}, FLOPs 4*B*H*N^2*D (causal /2), "
        f"backward x{BACKWARD_FACTOR}",
        "results": [],
    }
    if not on_gpu:
        payload["note"] = "Triton interpreter on CPU: these timings measure the interpreter, not the kernel"
    start = time.perf_counter()
    contenders = providers(kernels, on_gpu)
    print(format_header())
    for D in HEAD_DIMS:
        for is_causal in (False, True):
            for N in seq_lens:
                B, H = (max(1, TOKENS // N), HIDDEN // D) if on_gpu else (1, 2)
                for name, fn in contenders.items():
                    row: dict[str, Any] = {
                        "provider": name,
                        "D": D,
                        "causal": is_causal,
                        "N": N,
                        "B": B,
                        "H": H,
                    }
                    if budget_s is not None and time.perf_counter() - start > budget_s:
                        row["skipped"] = "time budget spent"
                    elif name == "naive" and not naive_fits(B, H, N, device):
                        row["skipped"] = "would run out of memory"
                    else:
                        try:
                            row.update(measure(fn, B, H, N, D, is_causal, dtype, device, on_gpu, quick))
                        except torch.cuda.OutOfMemoryError:
                            row["skipped"] = "ran out of memory"
                        if on_gpu:
                            torch.cuda.empty_cache()
                    payload["results"].append(row)
                    print(format_row(row), flush=True)
                    _write_json(json_path, payload)
    payload["elapsed_s"] = round(time.perf_counter() - start, 1)
    _write_json(json_path, payload)
    return payload


def format_header() -> str:
    """The column titles of :func:`format_row`'s table."""
    cols = f"{'provider':<12} {'D':>4} {'causal':>6} {'N':>6} {'B':>3} {'H':>3}"
    return f"{cols} {'fwd ms':>9} {'fwd TF/s':>9} {'bwd ms':>9} {'bwd TF/s':>9}"


def format_row(row: dict[str, Any]) -> str:
    """One measured configuration as a line of the benchmark's table."""
    cols = (
        f"{row['provider']:<12} {row['D']:>4} {row['causal']!s:>6} {row['N']:>6} {row['B']:>3} {row['H']:>3}"
    )
    if "skipped" in row:
        return f"{cols}  skipped: {row['skipped']}"
    return (
        f"{cols} {row['forward_ms']:>9.3f} {row['forward_tflops']:>9.3g} "
        f"{row['backward_ms']:>9.3f} {row['backward_tflops']:>9.3g}"
    )


def plot_results(payload: dict[str, Any], path: str) -> None:
    """TFLOP/s against N, one panel per (pass, head dim, causal), one line per contender."""
    try:
        import matplotlib
    except ImportError:
        print(f"matplotlib is not installed: no plot written to {path}")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in payload["results"] if "skipped" not in r]
    panels = [(p, D, c) for p in ("forward", "backward") for D in HEAD_DIMS for c in (False, True)]
    fig, axes = plt.subplots(2, 4, figsize=(18, 8), sharex=True)
    for ax, (pass_name, D, causal) in zip(axes.flat, panels):
        for name in dict.fromkeys(r["provider"] for r in payload["results"]):
            points = sorted((r["N"], r[f"{pass_name}_tflops"]) for r in rows
                            if r["provider"] == name and r["D"] == D and r["causal"] == causal)  # fmt: skip
            if points:
                ax.plot(*zip(*points), marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_title(f"{pass_name}, D={D}, {'causal' if causal else 'not causal'}")
        ax.set_xlabel("sequence length N")
        ax.set_ylabel("TFLOP/s")
        ax.grid(alpha=0.3)
    axes.flat[0].legend()
    env = payload["environment"]
    title = (
        f"FlashAttention, {payload['dtype']}, {env['device']} (torch {env['torch']}, triton {env['triton']})"
    )
    if env["interpreter"]:
        title += ": Triton INTERPRETER timings, not the kernel's"
    fig.suptitle(title)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"plot written to {path}")


# ----------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m attn_edu.bench flash", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--json", help="write the results to this JSON file")
    parser.add_argument("--plot", help="write a PNG plot of TFLOP/s against N to this file")
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repetitions")
    parser.add_argument("--budget-s", type=float, default=None, help="stop starting new timings after this")
    args = parser.parse_args(argv)

    on_gpu = torch.cuda.is_available()
    kernels = load_kernels(on_gpu)  # raises the install hint when Triton is missing
    if not on_gpu:
        print("No CUDA GPU: running the kernels in Triton's INTERPRETER on CPU, on tiny sizes.")
        print(
            "These timings measure the interpreter (NumPy), NOT the kernel. Run on a GPU for real TFLOP/s.\n"
        )
    env = environment(on_gpu)
    print(f"device: {env['device']} | torch {env['torch']} | triton {env['triton']}")

    payload = run_benchmark(kernels, on_gpu, args.quick, args.budget_s, args.json)
    if args.json:
        print(f"results written to {args.json}")
    if args.plot:
        plot_results(payload, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
