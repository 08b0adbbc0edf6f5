"""What a GPU would run: every Triton kernel compiled ahead of time for sm_80 and sm_90, without a GPU.

Usage::

    python -m attn_edu.kernels.compile_report [--targets 80 90] [--kernels forward dkdv ...]
                                              [--dtypes float16 ...] [--head-dims 64 128]
                                              [--causal both|yes|no] [--jobs N] [--json FILE]
                                              [--ptx-dir DIR]

Triton compiles in stages (Python → TTIR → TTGIR → LLVM IR → PTX → cubin) and needs no GPU to do so:
``triton.compile(ASTSource(kernel, signature, constexprs, attrs), target=GPUTarget("cuda", 90, 32))``
runs every stage for an H100, with the ``ptxas`` that the triton wheel ships. This module

1. **captures the launches**: it calls the course's own launchers (:func:`triton_flash.flash_attention_forward`,
   :func:`triton_flash.flash_attention_backward`, :func:`triton_flash_fast.flash_attention_fast_forward`)
   on ``meta`` tensors (shapes, strides and dtypes, no memory) with each kernel replaced by a recorder,
   so the report compiles exactly the arguments, tile sizes, warps and stages a real launch passes;
2. **specialises them as the JIT would** for contiguous CUDA tensors, with Triton's own rule
   (``native_specialize_impl``): an integer equal to 1 becomes a constant, one divisible by 16 and
   every pointer (CUDA allocations are 256-byte aligned) gets ``tt.divisibility = 16``;
3. **compiles** each variant for each target, in parallel processes;
4. **reads the results**: registers, stack and local bytes per thread, and static shared memory
   from ``cuobjdump --dump-resource-usage`` on the cubin; the bytes ``ptxas`` spilled from registers
   to local memory (stores and loads, from its ``-v`` log); the dynamic shared memory Triton
   asks for at launch from the kernel's metadata; tensor-core instructions (``mma.sync`` on sm_80,
   ``wgmma.mma_async`` on sm_90) and asynchronous copies (``cp.async``, TMA ``cp.async.bulk.tensor``)
   counted in the PTX;
5. **derives the occupancy**: programs (thread blocks) per SM allowed by registers, shared memory,
   threads and blocks, with A100 (sm_80) and H100/H200 (sm_90) limits (:data:`GPUS`).

:func:`roofline` adds what the hardware bounds each pass at: its FLOPs (FlashAttention-2 counting:
``4·N²·D`` per head forward, 2.5 times that backward, half of each when causal) and its minimum bytes
(every input read once, every output written once) against H100/H200 peaks.

Nothing here runs a kernel; a GPU run is ``gpu_check.sh``'s job. Shapes: the captured launches use
``q, k, v (B=1, H=2, T=S=256, D)``; tile sizes depend on the dtype and ``D``, not on ``T``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from attn_edu.hardware import GPUS
from attn_edu.kernels.compile_record import ptx_summary

# Per-SM limits, SM counts and peaks: attn_edu.hardware (cited there).
REGISTERS_PER_SM = 65536
REGISTER_UNIT = 256  # registers are given to a warp in blocks of 256
THREADS_PER_SM = 2048
BLOCKS_PER_SM = 32
RESERVED_SHARED_PER_BLOCK = 1024

KERNELS = ("forward", "preprocess", "dkdv", "dq", "fast_forward")
DTYPES = ("float16", "bfloat16", "float32")
HEAD_DIMS = (64, 128)
TARGETS = (80, 90)
CAPTURE_SHAPE = {"B": 1, "H": 2, "T": 256}


@dataclass(frozen=True)
class Variant:
    """One kernel launch to compile: which kernel, on what inputs, with which compile-time settings."""

    kernel: str  # one of KERNELS
    target: int  # compute capability it is compiled for: 80 (A100), 90 (H100/H200)
    module: str  # where the @triton.jit function lives
    function: str  # its name there
    dtype: str
    head_dim: int
    causal: bool | None  # None: the kernel has no causal switch (preprocess)
    config: str  # e.g. "64x64 w4 s2": tile rows x columns, warps, pipeline stages
    signature: dict[str, str]
    constexprs: dict[str, Any]
    attrs: dict[tuple[int, ...], list]
    num_warps: int
    num_stages: int


@dataclass
class Compiled:
    """What one variant compiles to on one target."""

    variant: Variant
    target: int
    seconds: float
    registers: int = 0
    stack_bytes: int = 0
    local_bytes: int = 0  # per thread, local arrays (cuobjdump's LOCAL)
    spill_stores: int = 0  # bytes per thread that ptxas spilled to (slow) local memory: 0 is the goal
    spill_loads: int = 0
    static_shared: int = 0
    dynamic_shared: int = 0
    mma_sync: int = 0
    wgmma: int = 0
    cp_async: int = 0
    tma: int = 0
    error: str = ""
    occupancy: dict[str, dict[str, Any]] = field(default_factory=dict)
    cached: bool = False  # taken from Triton's cache (compiled by an earlier run), not compiled now
    ptx: dict[str, Any] = field(default_factory=dict)  # compile_record.ptx_summary of its PTX

    def row(self) -> dict[str, Any]:
        v = self.variant
        return {
            "kernel": v.kernel, "dtype": v.dtype, "D": v.head_dim, "causal": v.causal, "config": v.config,
            "target": f"sm_{self.target}", "registers": self.registers, "local_bytes": self.local_bytes,
            "stack_bytes": self.stack_bytes, "spill_stores": self.spill_stores, "spill_loads": self.spill_loads,
            "static_shared": self.static_shared,
            "dynamic_shared": self.dynamic_shared, "mma_sync": self.mma_sync, "wgmma": self.wgmma,
            "cp_async": self.cp_async, "tma": self.tma, "occupancy": self.occupancy,
            "seconds": round(self.seconds, 2), "cached": self.cached, "error": self.error, "ptx": self.ptx,
        }  # fmt: skip


# --- 1-2. capturing the launches, specialised as the JIT would --------------------------------------


class _Recorder:
    """Stands in for a ``@triton.jit`` (or autotuned) kernel: ``kernel[grid](*args, **kwargs)`` is recorded."""

    def __init__(self, kernel: Any, calls: list[tuple[Any, tuple, dict]]) -> None:
        self.kernel = kernel
        self.calls = calls

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        return lambda *args, **kwargs: self.calls.append((self.kernel, args, kwargs))


@contextmanager
def _recording(module: Any, names: Sequence[str]) -> Iterator[list[tuple[Any, tuple, dict]]]:
    calls: list[tuple[Any, tuple, dict]] = []
    saved = {name: getattr(module, name) for name in names}
    for name, kernel in saved.items():
        setattr(module, name, _Recorder(kernel, calls))
    try:
        yield calls
    finally:
        for name, kernel in saved.items():
            setattr(module, name, kernel)


@contextmanager
def _capability(module: Any, target: int) -> Iterator[None]:
    """Make ``module.device_capability`` answer ``target`` (e.g. 90 -> (9, 0)) for any device."""
    saved = module.device_capability
    module.device_capability = lambda device: (target // 10, target % 10)
    try:
        yield
    finally:
        module.device_capability = saved


def specialise(fn: Any, args: tuple, kwargs: dict) -> tuple[dict, dict, dict, dict]:
    """``(signature, constexprs, attrs, options)`` the JIT would compile ``fn(*args, **kwargs)`` with."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    kwargs = dict(kwargs)
    options = {"num_warps": kwargs.pop("num_warps", 4), "num_stages": kwargs.pop("num_stages", 3)}
    signature, constexprs, attrs = {}, {}, {}
    for index, param in enumerate(fn.params):
        value = args[index] if index < len(args) else kwargs[param.name]
        if param.is_constexpr:
            signature[param.name], constexprs[param.name] = "constexpr", value
            continue
        kind, attr = native_specialize_impl(
            BaseBackend, value, False, not param.do_not_specialize, not param.do_not_specialize_on_alignment
        )
        signature[param.name] = kind
        if kind == "constexpr":  # an integer equal to 1
            constexprs[param.name] = value
        elif isinstance(attr, str):
            attrs[(index,)] = BaseBackend.parse_attr(attr)
    return signature, constexprs, attrs, options


def _jit_function(kernel: Any) -> Any:
    """The ``@triton.jit`` function behind a kernel object (an autotuned kernel wraps one)."""
    from triton.runtime.autotuner import Autotuner

    return kernel.fn if isinstance(kernel, Autotuner) else kernel


def _config_name(constexprs: dict, options: dict) -> str:
    return f"{constexprs['BLOCK_M']}x{constexprs.get('BLOCK_N', '-')} w{options['num_warps']} s{options['num_stages']}"


def capture(kernels: Sequence[str] = KERNELS, dtypes: Sequence[str] = DTYPES,
            head_dims: Sequence[int] = HEAD_DIMS, targets: Sequence[int] = TARGETS) -> list[Variant]:  # fmt: skip
    """Every launch the course's launchers make for these kernels, dtypes, head sizes and GPUs, causal and not.

    The launchers ask :func:`triton_flash.device_capability` which GPU they launch on (some tile sizes
    depend on it); here it answers each target in turn.

    Example:
        >>> [(v.target, v.config) for v in capture(["dkdv"], ["float16"], [64]) if v.causal]
        [(80, '32x64 w4 s2'), (90, '64x64 w4 s2')]
    """
    variants: list[Variant] = []
    for target in targets:
        variants += _capture_for(target, kernels, dtypes, head_dims)
    return variants


def _capture_for(
    target: int, kernels: Sequence[str], dtypes: Sequence[str], head_dims: Sequence[int]
) -> list[Variant]:
    """:func:`capture` for one target."""
    import torch

    from attn_edu.kernels import triton_flash, triton_flash_fast

    teaching = ["_flash_forward_kernel", "_flash_backward_preprocess_kernel",
                "_flash_backward_dkdv_kernel", "_flash_backward_dq_kernel"]  # fmt: skip
    names = {
        "_flash_forward_kernel": "forward", "_flash_backward_preprocess_kernel": "preprocess",
        "_flash_backward_dkdv_kernel": "dkdv", "_flash_backward_dq_kernel": "dq",
        "_flash_forward_fast_kernel": "fast_forward",
    }  # fmt: skip
    variants: dict[tuple, Variant] = {}
    B, H, T = (CAPTURE_SHAPE[n] for n in ("B", "H", "T"))
    for dtype_name in dtypes:
        dtype = getattr(torch, dtype_name)
        for D in head_dims:
            q, k, v, out, grad = (torch.empty(B, H, T, D, dtype=dtype, device="meta") for _ in range(5))
            lse = torch.empty(B, H, T, dtype=torch.float32, device="meta")
            for causal in (False, True):
                with _recording(triton_flash, teaching) as calls, _capability(triton_flash, target):
                    triton_flash.flash_attention_forward(q, k, v, is_causal=causal)
                    triton_flash.flash_attention_backward(q, k, v, out, lse, grad, is_causal=causal)
                with (
                    _recording(triton_flash_fast, ["_flash_forward_fast_kernel"]) as fast_calls,
                    _capability(triton_flash, target),
                ):  # configs_for asks which GPU it prunes for
                    triton_flash_fast.flash_attention_fast_forward(q, k, v, is_causal=causal)
                launches = [
                    (_jit_function(kernel).__name__, kernel, a, kw) for kernel, a, kw in calls + fast_calls
                ]
                for fn_name, kernel, args, kwargs in launches:
                    name = names[fn_name]
                    if name not in kernels:
                        continue
                    module = triton_flash_fast if name == "fast_forward" else triton_flash
                    configs = getattr(kernel, "configs", [None])  # an autotuned kernel: every config it tries
                    prune = getattr(kernel, "early_config_prune", None)
                    if prune is not None:
                        named = dict(zip(_jit_function(kernel).arg_names, args))
                        with _capability(triton_flash, target):  # configs_for prunes for this GPU
                            configs = prune(configs, named, **kwargs)
                    for config in configs:
                        kw = dict(kwargs)
                        if config is not None:
                            kw.update(config.kwargs, num_warps=config.num_warps, num_stages=config.num_stages)
                        fn = _jit_function(kernel)
                        signature, constexprs, attrs, options = specialise(fn, args, kw)
                        has_causal = "IS_CAUSAL" in constexprs
                        key = (
                            name,
                            dtype_name,
                            D,
                            causal if has_causal else None,
                            _config_name(constexprs, options),
                        )
                        variants[key] = Variant(
                            kernel=name, target=target, module=module.__name__, function=fn_name, dtype=dtype_name,
                            head_dim=D, causal=key[3], config=key[4], signature=signature,
                            constexprs=constexprs, attrs=attrs, **options,
                        )  # fmt: skip
    return list(variants.values())


# --- 3-5. compiling, reading the results, occupancy ------------------------------------------------


def tool_path(name: str) -> str:
    import triton

    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name)


SPILL_RE = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
RESOURCE_RE = re.compile(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)")


def resource_usage(cubin: bytes) -> dict[str, int]:
    """Registers, stack, static shared and local bytes of the one function in ``cubin`` (cuobjdump)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as file:
        file.write(cubin)
        file.flush()
        text = subprocess.run(
            [tool_path("cuobjdump"), "--dump-resource-usage", file.name],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    match = RESOURCE_RE.search(text)
    if match is None:
        raise RuntimeError(f"cuobjdump printed no resource line:\n{text}")
    registers, stack, shared, local = map(int, match.groups())
    return {"registers": registers, "stack_bytes": stack, "static_shared": shared, "local_bytes": local}


def count_instructions(ptx: str) -> dict[str, int]:
    """Tensor-core and asynchronous-copy instructions in a PTX listing.

    Example:
        >>> count_instructions("wgmma.mma_async.sync.aligned.m64n64k16 ...\\ncp.async.cg.shared.global [a], [b];")
        {'mma_sync': 0, 'wgmma': 1, 'cp_async': 1, 'tma': 0}
    """
    return {
        "mma_sync": len(re.findall(r"\bmma\.sync\.", ptx)),
        "wgmma": len(re.findall(r"\bwgmma\.mma_async\.", ptx)),
        "cp_async": len(re.findall(r"\bcp\.async\.(?:ca|cg)\.", ptx)),
        "tma": len(re.findall(r"\bcp\.async\.bulk\.tensor\.", ptx)),
    }


def occupancy(registers: int, shared_bytes: int, num_warps: int, gpu: str) -> dict[str, Any]:
    """Programs per SM that registers, shared memory, threads and the block limit allow on ``gpu``.

    Example:
        >>> occupancy(255, 32 * 1024, 8, "H100")["programs"]       # 255 registers x 256 threads
        1
        >>> occupancy(128, 16 * 1024, 4, "H100")["limited_by"]
        'registers'
    """
    limits = GPUS[gpu]
    per_warp = math.ceil(registers * 32 / REGISTER_UNIT) * REGISTER_UNIT
    block_shared = shared_bytes + RESERVED_SHARED_PER_BLOCK
    by = {
        "registers": REGISTERS_PER_SM // (per_warp * num_warps) if per_warp else BLOCKS_PER_SM,
        "shared": limits["shared_per_sm"] // block_shared
        if shared_bytes <= limits["shared_per_block"]
        else 0,
        "threads": THREADS_PER_SM // (32 * num_warps),
        "blocks": BLOCKS_PER_SM,
    }
    limited_by = min(by, key=by.get)
    return {"programs": by[limited_by], "limited_by": limited_by, "warps_per_sm": by[limited_by] * num_warps}


def compile_variant(variant: Variant, ptx_dir: str | None = None) -> Compiled:
    """Compile one variant for its target (``80``: A100, ``90``: H100/H200) and read what it became."""
    import importlib

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    start = time.perf_counter()
    target = variant.target
    result = Compiled(variant, target, 0.0)
    try:
        fn = _jit_function(getattr(importlib.import_module(variant.module), variant.function))
        source = ASTSource(
            fn=fn, signature=variant.signature, constexprs=variant.constexprs, attrs=variant.attrs
        )
        options = {"num_warps": variant.num_warps, "num_stages": variant.num_stages}
        compiled, spills, result.cached = _compile_or_reuse(source, GPUTarget("cuda", target, 32), options)
        result.spill_stores, result.spill_loads = map(int, spills.groups())
        for name, value in {
            **resource_usage(compiled.asm["cubin"]),
            **count_instructions(compiled.asm["ptx"]),
        }.items():
            setattr(result, name, value)
        result.dynamic_shared = int(compiled.metadata.shared)
        result.ptx = ptx_summary(compiled.asm["ptx"])
        shared = max(result.dynamic_shared, result.static_shared)
        result.occupancy = {
            gpu: occupancy(result.registers, shared, variant.num_warps, gpu)
            for gpu, limits in GPUS.items()
            if limits["target"] == target and gpu != "H200"  # same SM as H100
        }
        if ptx_dir:
            causal = {None: "", True: "-causal", False: ""}[variant.causal]
            name = f"{variant.kernel}-{variant.dtype}-d{variant.head_dim}{causal}-{variant.config.replace(' ', '')}"
            (Path(ptx_dir) / f"{name}-sm_{target}.ptx").write_text(compiled.asm["ptx"])
    except Exception as error:  # noqa: BLE001 - the report names every failure and goes on
        result.error = f"{type(error).__name__}: {error}".strip()[:2000]
    result.seconds = time.perf_counter() - start
    return result


# Beside each kernel in Triton's cache: the spill line of the ptxas run that built it.
SPILLS_FILE = "ptxas-spills.txt"


def _compile_or_reuse(source: Any, target: Any, options: dict[str, int]) -> tuple[Any, re.Match, bool]:
    """Compile ``source`` for ``target``, or take it from Triton's cache: ``(kernel, spill line, cached)``.

    ``ptxas -v`` prints the spills, and Triton prints that log (when asked) only when it runs ptxas, that is,
    on a cache miss. So a fresh compile stores its spill line in the kernel's cache folder, and a cache hit
    reads it back; a kernel cached without that line (by a plain launch) is compiled again. Triton's cache
    folder is ``TRITON_CACHE_DIR`` (``make`` puts it in ``build/triton-cache``), else ``~/.triton/cache``.
    """
    import triton
    from triton import knobs
    from triton.runtime.cache import get_cache_manager

    for always in (False, True):
        log = io.StringIO()
        with knobs.nvidia.scope(), knobs.compilation.scope(), contextlib.redirect_stdout(log):
            knobs.nvidia.dump_ptxas_log = True
            knobs.compilation.always_compile = always
            compiled = triton.compile(source, target=target, options=options)
        cache = get_cache_manager(compiled.hash)
        spills = SPILL_RE.search(log.getvalue())
        if spills is not None:  # ptxas ran: a fresh compile
            cache.put(spills.group(0), SPILLS_FILE, binary=False)
            return compiled, spills, False
        saved = cache.get_file(SPILLS_FILE)
        if saved is not None and (spills := SPILL_RE.search(Path(saved).read_text())) is not None:
            return compiled, spills, True
    raise RuntimeError(f"ptxas printed no spill line:\n{log.getvalue()[-2000:]}")


def _compile_star(job: tuple[Variant, str | None]) -> Compiled:
    return compile_variant(*job)


def compile_all(variants: Sequence[Variant], *, jobs: int | None = None, ptx_dir: str | None = None,
                progress: bool = False) -> list[Compiled]:  # fmt: skip
    """Compile every variant for its target, ``jobs`` processes at a time (default: one per CPU)."""
    work = [(variant, ptx_dir) for variant in variants]
    if jobs is None:
        jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if jobs <= 1:
        results = []
        for job in work:
            results.append(_compile_star(job))
            if progress:
                print(f"  compiled {len(results)}/{len(work)}", end="\r", file=sys.stderr)
        return results
    import multiprocessing

    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(_compile_star, work))


# --- the roofline -----------------------------------------------------------------------------------


def roofline(lengths: Sequence[int] = (1024, 2048, 4096, 8192, 16384), head_dim: int = 128,
             tokens: int = 16384, model_dim: int = 2048) -> list[dict[str, Any]]:  # fmt: skip
    """The bound each pass meets on H100 and H200 in bf16, at FlashAttention-2's benchmark shapes.

    Batch ``tokens // N`` sequences of ``N`` tokens, ``model_dim // head_dim`` heads (FlashAttention-2,
    Dao 2023, §4.1). FLOPs: forward ``4·N²·D`` per head (two matrix products), backward 2.5 times that
    (five), half of each when causal. Bytes: forward reads Q, K, V and writes O (4 matrices of ``N x D``
    in bf16, plus the float32 log-sum-exp); backward reads Q, K, V, O, dO and writes dQ, dK, dV (8).
    The bound is ``max(FLOPs / peak, bytes / bandwidth)``; the attainable rate is FLOPs over that time.

    Example:
        >>> row = roofline([1024])[0]
        >>> row["bound"], round(row["intensity"])      # FLOPs per byte, past the ridge (989 / 3.35 = 295)
        ('compute', 510)
    """
    rows = []
    heads = model_dim // head_dim
    for N in lengths:
        batch = max(1, tokens // N)
        for direction, flop_factor, matrices in (("forward", 1.0, 4), ("backward", 2.5, 8)):
            for causal in (False, True):
                flops = 4 * N * N * head_dim * batch * heads * flop_factor * (0.5 if causal else 1.0)
                nbytes = (
                    batch * heads * N * (matrices * head_dim * 2 + 4 * (1 if direction == "forward" else 2))
                )
                row = {"N": N, "pass": direction, "causal": causal, "batch": batch, "heads": heads,
                       "gflop": flops / 1e9, "mbytes": nbytes / 1e6, "intensity": flops / nbytes}  # fmt: skip
                for gpu in ("H100", "H200"):
                    limits = GPUS[gpu]
                    seconds = max(
                        flops / (limits["bf16_tflops"] * 1e12), nbytes / (limits["hbm_tb_s"] * 1e12)
                    )
                    row[f"{gpu}_us"] = seconds * 1e6
                    row[f"{gpu}_tflops"] = flops / seconds / 1e12
                ridge = GPUS["H100"]["bf16_tflops"] / GPUS["H100"]["hbm_tb_s"]
                row["bound"] = "compute" if row["intensity"] >= ridge else "memory"
                rows.append(row)
    return rows


# --- the report ------------------------------------------------------------------------------------


def table(results: Sequence[Compiled]) -> str:
    """One line per variant and target: the figures the notebook and the README quote."""
    head = (f"{'kernel':<13}{'dtype':<10}{'D':>4} {'causal':<7}{'config':<14}{'target':<7}{'regs':>5}"
            f"{'spill':>6}{'smem KB':>8}{'mma':>5}{'wgmma':>6}{'cp.async':>9}{'tma':>4}  programs/SM")  # fmt: skip
    lines = [head, "-" * len(head)]
    for r in results:
        v = r.variant
        causal = "-" if v.causal is None else ("yes" if v.causal else "no")
        if r.error:
            lines.append(f"{v.kernel:<13}{v.dtype:<10}{v.head_dim:>4} {causal:<7}{v.config:<14}sm_{r.target:<4} "
                         f"FAILED: {r.error.splitlines()[0][:80]}")  # fmt: skip
            continue
        shared = max(r.dynamic_shared, r.static_shared) / 1024
        occ = ", ".join(f"{gpu} {o['programs']} ({o['limited_by']})" for gpu, o in r.occupancy.items())
        lines.append(
            f"{v.kernel:<13}{v.dtype:<10}{v.head_dim:>4} {causal:<7}{v.config:<14}sm_{r.target:<4}{r.registers:>5}"
            f"{r.spill_stores:>6}{shared:>8.1f}{r.mma_sync:>5}{r.wgmma:>6}{r.cp_async:>9}{r.tma:>4}  {occ}"
        )
    return "\n".join(lines)


def roofline_table(rows: Sequence[dict[str, Any]]) -> str:
    head = f"{'N':>6} {'pass':<9}{'causal':<7}{'GFLOP':>9}{'MB':>8}{'FLOP/B':>8}  {'H100 µs':>9}{'H200 µs':>9}  bound"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['N']:>6} {r['pass']:<9}{'yes' if r['causal'] else 'no':<7}{r['gflop']:>9.1f}{r['mbytes']:>8.1f}"
            f"{r['intensity']:>8.0f}  {r['H100_us']:>9.1f}{r['H200_us']:>9.1f}  {r['bound']}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attn_edu.kernels.compile_report",
                                     description=__doc__.splitlines()[0])  # fmt: skip
    parser.add_argument("--targets", type=int, nargs="+", default=list(TARGETS))
    parser.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=KERNELS)
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=DTYPES)
    parser.add_argument("--head-dims", type=int, nargs="+", default=list(HEAD_DIMS))
    parser.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    parser.add_argument("--jobs", type=int, default=None, help="compiler processes (default: one per CPU)")
    parser.add_argument("--json", default=None, help="write every figure to this file")
    parser.add_argument("--ptx-dir", default=None, help="also write each variant's PTX to this folder")
    parser.add_argument(
        "--record", action="store_true", help="store the figures beside the kernels (compile_record)"
    )
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        parser.error(
            "TRITON_INTERPRET is set: the report compiles for a GPU, so run it without the interpreter"
        )
    if args.ptx_dir:
        Path(args.ptx_dir).mkdir(parents=True, exist_ok=True)

    start = time.perf_counter()
    variants = capture(args.kernels, args.dtypes, args.head_dims, args.targets)
    if args.causal != "both":  # (preprocess has no causal switch: it stays)
        variants = [v for v in variants if v.causal in (None, args.causal == "yes")]
    results = compile_all(variants, jobs=args.jobs, ptx_dir=args.ptx_dir)
    seconds = time.perf_counter() - start
    import triton

    reused = sum(r.cached for r in results)
    print(f"Triton {triton.__version__}: {len(variants)} kernel variants for {len(args.targets)} targets, "
          f"compiled ahead of time in {seconds:.1f} s (no GPU needed; {reused} from Triton's cache)\n")  # fmt: skip
    print(table(results))
    rows = roofline()
    print("\nRoofline, bf16, D = 128, FlashAttention-2's shapes (16k tokens per batch, 16 heads):\n")
    print(roofline_table(rows))
    failures = [r for r in results if r.error]
    if args.json:
        document = {
            "triton": triton.__version__, "seconds": round(seconds, 1), "gpus": GPUS,
            "capture_shape": CAPTURE_SHAPE, "results": [r.row() for r in results], "roofline": rows,
            "variants": [{k: v for k, v in asdict(r.variant).items() if k != "attrs"} for r in results],
        }  # fmt: skip
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(document, indent=1, default=str) + "\n")
        print(f"\nwrote {args.json}")
    if failures:
        print(f"\n{len(failures)} variant(s) failed to compile", file=sys.stderr)
        return 1
    if args.record:
        from attn_edu.kernels import compile_record

        print(f"wrote {compile_record.write([r.row() for r in results])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
