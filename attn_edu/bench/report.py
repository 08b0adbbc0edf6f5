"""One report of the course's performance figures: a table, a JSON file and a plot.

Usage::

    python -m attn_edu.bench report [--json FILE] [--plot FILE] [--skip SECTION ...]
                                    [--notebooks NB ...] [--memory-sizes N ...] [--kv-tokens N ...]

Sections, each produced by the benchmark module that owns the measurement (this file only collects):

- ``notebooks``: seconds to execute each course notebook top to bottom (nbclient, a fresh kernel each);
- ``kv_cache``: decoding with and without the key/value cache, :mod:`attn_edu.bench.kv_cache`;
- ``memory``: peak extra memory of naive vs tiled attention, :mod:`attn_edu.bench.memory`
  (smaller sizes than that benchmark's default, so the report stays quick);
- ``interpreter``: the Triton kernel run by Triton's CPU interpreter, :mod:`attn_edu.bench.flash`
  (it times NumPy emulating the kernel, not the kernel: useful to know how long the CPU path of
  notebook 12 takes, never as a speed figure);
- ``gpu``: the Triton kernel against PyTorch's FlashAttention on a CUDA GPU, :mod:`attn_edu.bench.flash`.

A section whose module or package is missing is marked ``not available`` with the reason; ``gpu`` is
marked ``absent`` without a CUDA GPU. The report never fails because one section could not run.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SECTIONS = ("notebooks", "kv_cache", "memory", "interpreter", "gpu")
# The module that owns each measurement; tests point one at a missing module to see "not available".
SECTION_MODULES = {
    "kv_cache": "attn_edu.bench.kv_cache",
    "memory": "attn_edu.bench.memory",
    "interpreter": "attn_edu.bench.flash",
    "gpu": "attn_edu.bench.flash",
}
NOTEBOOK_CELL_TIMEOUT_S = 300
INTERPRETER_SHAPE = (1, 2, 128, 64)  # (B, H, N, D): ~50 ms per forward in the interpreter


def _section(name: str, status: str, rows: list[dict] | None = None, note: str = "") -> dict[str, Any]:
    """status: "ok", "not available" (a module or package is missing), "absent" (no GPU) or "error"."""
    return {"name": name, "status": status, "note": note, "rows": rows or []}


def _import(section: str) -> Any:
    return importlib.import_module(SECTION_MODULES[section])


# ----------------------------------------------------------------------------------------------
# The sections
# ----------------------------------------------------------------------------------------------


def notebook_times(notebooks: list[Path], cell_timeout_s: int = NOTEBOOK_CELL_TIMEOUT_S) -> dict[str, Any]:
    """Execute each notebook in a fresh kernel (in memory: the file is not changed) and time it."""
    try:
        import nbformat
        from nbclient import NotebookClient
    except ImportError as err:
        return _section("notebooks", "not available", note=f"needs nbclient: {err}")
    rows = []
    for path in notebooks:
        notebook = nbformat.read(path, as_version=4)
        client = NotebookClient(
            notebook,
            timeout=cell_timeout_s,
            kernel_name="python3",
            resources={"metadata": {"path": str(path.parent)}},
        )
        start = time.perf_counter()
        try:
            client.execute(stderr=subprocess.DEVNULL)  # the kernel's own log lines, not the notebook's
            status = "ok"
        except Exception as err:  # a failing notebook is a result to report, not a reason to stop
            status = f"error: {type(err).__name__}: {str(err).strip().splitlines()[-1][:120]}"
        rows.append(
            {"notebook": path.name, "seconds": round(time.perf_counter() - start, 1), "status": status}
        )
    failed = [row["notebook"] for row in rows if row["status"] != "ok"]
    return _section(
        "notebooks",
        "error" if failed else "ok",
        rows,
        f"failed: {', '.join(failed)}" if failed else f"total {sum(r['seconds'] for r in rows):.1f} s",
    )


def kv_cache_speedup(tokens: list[int], threads: int = 1) -> dict[str, Any]:
    """Seconds to generate ``tokens`` new tokens with and without the cache, and the speed-up."""
    results = _import("kv_cache").run(tokens, threads=threads)
    rows = [
        {
            "new_tokens": r["new_tokens"],
            "no_cache_s": round(r["no_cache_s"], 3),
            "cache_s": round(r["cache_s"], 3),
            "speedup": round(r["speedup"], 2),
            "same_tokens": r["same_tokens"],
        }
        for r in results["results"]
    ]
    # Different tokens with and without the cache is a bug, not a speed figure.
    same = all(row["same_tokens"] for row in rows)
    note = (
        results["note"] if same else "cached and uncached decoding gave DIFFERENT tokens; " + results["note"]
    )
    return _section("kv_cache", "ok" if same else "error", rows, note)


def memory_table(sizes: list[int], block: int, threads: int) -> dict[str, Any]:
    """Peak extra MiB of naive vs tiled attention, each measured in a fresh process by the memory benchmark."""
    module = _import("memory")
    rows = []
    for n in sizes:
        naive = module.run_in_subprocess("naive", n, block, threads)
        tiled = module.run_in_subprocess("tiled", n, block, threads)
        rows.append(
            {
                "N": n,
                "naive_mib": round(naive["extra_mib"], 1),
                "tiled_mib": round(tiled["extra_mib"], 1),
                "naive_s": round(naive["seconds"], 3),
                "tiled_s": round(tiled["seconds"], 3),
            }
        )
    note = f"B={module.BATCH} H={module.HEADS} D={module.HEAD_DIM} float32, block {block}, {naive['method']}"
    return _section("memory", "ok", rows, note)


def _interpreter_worker(B: int, H: int, N: int, D: int) -> dict[str, Any]:
    """In a fresh process: time the Triton kernel in the interpreter (TRITON_INTERPRET is set first)."""
    os.environ["TRITON_INTERPRET"] = "1"  # before the first `import triton` of this process
    import torch

    flash = _import("interpreter")
    kernels = flash.load_kernels(on_gpu=False)
    rows = []
    for name, fn in flash.providers(kernels, on_gpu=False).items():
        if name == "triton_fast":
            continue  # the same algorithm; in the interpreter its timing says nothing new
        for causal in (False, True):
            timing = flash.measure(fn, B, H, N, D, causal, torch.float32, torch.device("cpu"), False, False)
            rows.append({"provider": name, "causal": causal, "forward_ms": round(timing["forward_ms"], 2),
                         "backward_ms": round(timing["backward_ms"], 2)})  # fmt: skip
    return {"rows": rows, "triton": flash.environment(False)["triton"]}


def interpreter_time(shape: tuple[int, int, int, int] = INTERPRETER_SHAPE) -> dict[str, Any]:
    """The teaching kernel in Triton's CPU interpreter, next to PyTorch's SDPA and the naive reference."""
    from attn_edu.kernels import triton_available

    if not triton_available():
        return _section("interpreter", "not available", note="Triton is not installed")
    _import("interpreter")  # a missing benchmark module is reported before starting a process
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    env.pop("TRITON_INTERPRET", None)
    code = (
        "import json, sys; from attn_edu.bench.report import _interpreter_worker; "
        "print(json.dumps(_interpreter_worker(*map(int, sys.argv[1:]))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, *map(str, shape)], capture_output=True, text=True, env=env, timeout=600
    )
    if result.returncode != 0:
        return _section("interpreter", "error", note=result.stderr.strip().splitlines()[-1][:200])
    payload = json.loads(result.stdout.strip().splitlines()[-1])
    B, H, N, D = shape
    note = (
        f"B={B} H={H} N={N} D={D} float32, triton {payload['triton']}: times the INTERPRETER (NumPy), "
        "not the kernel"
    )
    return _section("interpreter", "ok", payload["rows"], note)


def gpu_table(quick: bool = True, budget_s: float | None = 120.0) -> dict[str, Any]:
    """On a CUDA GPU, the flash benchmark's forward/backward table (Triton vs PyTorch's FlashAttention)."""
    import torch

    if not torch.cuda.is_available():
        return _section("gpu", "absent", note="no CUDA GPU on this machine")
    flash = _import("gpu")
    kernels = flash.load_kernels(on_gpu=True)
    payload = flash.run_benchmark(kernels, True, quick, budget_s, None)
    keys = ("provider", "D", "causal", "N", "forward_ms", "backward_ms", "forward_tflops", "backward_tflops")
    rows = [
        {key: round(r[key], 3) if isinstance(r.get(key), float) else r.get(key) for key in keys}
        for r in payload["results"]
        if "skipped" not in r
    ]
    return _section("gpu", "ok", rows, f"{payload['environment']['device']}, {payload['dtype']}")


# ----------------------------------------------------------------------------------------------
# Collecting, printing, saving
# ----------------------------------------------------------------------------------------------


def _guarded(name: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run one section; a missing module or package becomes "not available", anything else "error"."""
    start = time.perf_counter()
    try:
        section = fn()
    except ImportError as err:  # also attn_edu.kernels.TritonNotInstalledError
        section = _section(name, "not available", note=str(err).strip().splitlines()[0])
    except Exception as err:
        section = _section(name, "error", note=f"{type(err).__name__}: {err}"[:300])
    section["seconds"] = round(time.perf_counter() - start, 1)
    return section


def build_report(args: argparse.Namespace) -> dict[str, Any]:
    """Every section not in ``args.skip``, in the order of :data:`SECTIONS`."""
    import torch

    runners = {
        "notebooks": lambda: notebook_times(args.notebooks),
        "kv_cache": lambda: kv_cache_speedup(args.kv_tokens, args.threads),
        "memory": lambda: memory_table(args.memory_sizes, args.memory_block, args.threads),
        "interpreter": interpreter_time,
        "gpu": lambda: gpu_table(budget_s=args.gpu_budget_s),
    }
    sections = []
    for name in SECTIONS:
        if name in args.skip:
            sections.append(_section(name, "skipped", note="--skip"))
        else:
            print(f"[report] {name} ...", flush=True)
            sections.append(_guarded(name, runners[name]))
    environment = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "torch_threads": torch.get_num_threads(),
    }
    return {"report": "attn-edu performance", "environment": environment, "sections": sections}


def format_report(report: dict[str, Any]) -> str:
    """The report as plain-text tables, one per section."""
    env = report["environment"]
    lines = [f"attn-edu performance report: python {env['python']}, torch {env['torch']}, {env['device']}"]
    for section in report["sections"]:
        lines.append("")
        lines.append(
            f"== {section['name']}: {section['status']}"
            + (f" ({section['note']})" if section["note"] else "")
        )
        if section["rows"]:
            columns = list(section["rows"][0])
            cells = [[str(row.get(c, "")) for c in columns] for row in section["rows"]]
            widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
            lines.append("  ".join(c.rjust(w) for c, w in zip(columns, widths)))
            lines.extend("  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in cells)
    return "\n".join(lines)


def plot_report(report: dict[str, Any], path: Path) -> None:
    """One panel per section; a section without rows shows its status instead."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sections = {s["name"]: s for s in report["sections"]}
    fig, axes = plt.subplots(2, 3, figsize=(16, 8.5))
    for ax, name in zip(axes.flat, SECTIONS):
        section = sections[name]
        ax.set_title(name)
        if not section["rows"]:
            ax.text(
                0.5, 0.5, f"{section['status']}\n{section['note'][:60]}", ha="center", va="center", wrap=True
            )
            ax.set_axis_off()
            continue
        rows = section["rows"]
        if name == "notebooks":
            ax.barh([r["notebook"].removesuffix(".ipynb") for r in rows], [r["seconds"] for r in rows])
            ax.invert_yaxis()
            ax.set_xlabel("seconds to run all cells")
        elif name == "kv_cache":
            ax.plot([r["new_tokens"] for r in rows], [r["speedup"] for r in rows], marker="o")
            ax.set_xlabel("new tokens")
            ax.set_ylabel("speed-up with the cache (x)")
        elif name == "memory":
            for key in ("naive_mib", "tiled_mib"):
                ax.plot([r["N"] for r in rows], [r[key] for r in rows], marker="o", label=key.split("_")[0])
            ax.set_xscale("log", base=2)
            ax.set_xlabel("sequence length N")
            ax.set_ylabel("peak extra MiB")
            ax.legend()
        elif name == "interpreter":
            labels = [f"{r['provider']}{' causal' if r['causal'] else ''}" for r in rows]
            ax.barh(labels, [r["forward_ms"] for r in rows])
            ax.set_xscale("log")
            ax.invert_yaxis()
            ax.set_xlabel("forward ms (CPU; Triton = interpreter)")
        else:
            for provider in dict.fromkeys(r["provider"] for r in rows):
                points = sorted((r["N"], r["forward_tflops"]) for r in rows
                                if r["provider"] == provider and r["D"] == 64 and not r["causal"])  # fmt: skip
                if points:
                    ax.plot(*zip(*points), marker="o", label=provider)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("N (D=64, not causal)")
            ax.set_ylabel("forward TFLOP/s")
            ax.legend()
        ax.grid(alpha=0.3)
    axes.flat[-1].set_axis_off()
    env = report["environment"]
    fig.suptitle(f"attn-edu performance: torch {env['torch']}, {env['device']}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m attn_edu.bench report", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--json", type=Path, help="write the report to this JSON file")
    parser.add_argument("--plot", type=Path, help="write a PNG with one panel per section")
    parser.add_argument("--skip", nargs="+", default=[], choices=SECTIONS, help="sections to leave out")
    parser.add_argument("--notebooks", type=Path, nargs="+", default=sorted((REPO / "course").glob("*.ipynb")),
                        help="notebooks to time (default: course/*.ipynb)")  # fmt: skip
    parser.add_argument("--kv-tokens", type=int, nargs="+", default=[64, 256], help="new tokens to generate")
    parser.add_argument(
        "--memory-sizes", type=int, nargs="+", default=[512, 1024, 2048], help="sequence lengths"
    )
    parser.add_argument("--memory-block", type=int, default=128, help="tile size of the tiled attention")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads for the KV-cache and memory measurements"
    )
    parser.add_argument(
        "--gpu-budget-s", type=float, default=120.0, help="stop starting GPU timings after this"
    )
    args = parser.parse_args(argv)
    if min(args.kv_tokens + args.memory_sizes + [args.memory_block, args.threads]) <= 0:
        parser.error("--kv-tokens, --memory-sizes, --memory-block and --threads must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    report = build_report(args)
    print(format_report(report))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nJSON written to {args.json}")
    if args.plot is not None:
        plot_report(report, args.plot)
        print(f"plot written to {args.plot}")
    return 1 if any(s["status"] == "error" for s in report["sections"]) else 0


if __name__ == "__main__":
    sys.exit(main())
