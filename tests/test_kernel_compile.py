"""The Triton kernels compile for real GPUs (A100's sm_80, H100's sm_90) on a machine without one.

`attn_edu.kernels.compile_report` compiles ahead of time exactly what the launchers would launch. Here it
compiles, once per test session (a process per CPU; pytest-xdist workers share the result), the teaching
kernels (forward, the backward's preprocess, dK/dV and dQ) and every configuration the autotuned fast forward
may pick, in bfloat16 and float32, at D = 64 and 128, causal and not, for both targets: 92 kernels. (float16
launches exactly as bfloat16 does, tiles, warps and stages, which a test checks without compiling; `make
kernel-report` compiles it too: 140 kernels in all.) Each must compile; keep every value in
registers (ptxas spills nothing, no local memory); use the tensor cores of its target in 16-bit
(``mma.sync`` on sm_80, Hopper's ``wgmma`` on sm_90) wherever it multiplies matrices, and exact float32
products (no tensor cores, no TF32) in float32; and fit at least one program per SM.

Where the installed Triton cannot compile ahead of time (no ``triton.compile``/``ASTSource``/
``GPUTarget`` of this form, or no ``cuobjdump`` in its wheel), the tests skip and say why.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import once_per_run

from attn_edu.kernels import triton_available

pytestmark = pytest.mark.skipif(
    not triton_available(), reason="needs triton (Linux): pip install -e '.[triton]'"
)

TEACHING = ["forward", "preprocess", "dkdv", "dq"]
KERNELS = (*TEACHING, "fast_forward")
# the preprocess kernel only sums dO * O: no tl.dot
MATMUL_KERNELS = {"forward", "dkdv", "dq", "fast_forward"}
# bfloat16 and float32: float16 gets the same tiles, warps and stages as bfloat16
# (test_float16_launches_as_bfloat16_does) and compiles to the same registers, shared memory and instructions
# (every kernel, in the full report: `make kernel-report`), so here it would add 28 kernels and nothing else.
DTYPES = ("bfloat16", "float32")
HEAD_DIMS = (64, 128)
TARGETS = (80, 90)


def _ahead_of_time_or_skip():  # noqa: ANN202
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        pytest.skip(
            "TRITON_INTERPRET is set in this process: compiling for a GPU needs Triton's compiler mode"
        )
    try:
        import triton
        from triton.backends.compiler import GPUTarget  # noqa: F401
        from triton.compiler import ASTSource  # noqa: F401
    except ImportError as error:
        pytest.skip(
            f"this Triton cannot compile ahead of time ({error}); the kernels are not checked for GPUs"
        )
    from attn_edu.kernels import compile_report

    cuobjdump = Path(compile_report.tool_path("cuobjdump"))
    if not cuobjdump.is_file():
        pytest.skip(
            f"Triton {triton.__version__} ships no cuobjdump at {cuobjdump}: registers cannot be read"
        )
    return compile_report


@pytest.fixture(scope="module")
def report():  # noqa: ANN201
    return _ahead_of_time_or_skip()


def _variants(report) -> list:  # noqa: ANN001
    variants = report.capture(["fast_forward"], DTYPES, HEAD_DIMS, TARGETS)  # the longest compiles first
    return variants + report.capture(TEACHING, DTYPES, HEAD_DIMS, TARGETS)


def _compile_everything(report) -> list[dict]:  # noqa: ANN001
    """Every variant for both targets as the report's rows: from the record `make kernel-report` keeps while the
    kernels and Triton are those it was made from, else compiled by the report (one process per CPU)."""
    from attn_edu.kernels import compile_record

    variants = _variants(report)
    recorded = compile_record.recorded_rows(variants)
    if recorded is not None:
        return recorded
    return [result.row() for result in report.compile_all(variants)]


@pytest.fixture(scope="session")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """The report's rows, compiled once per test session: pytest-xdist workers share them through a file
    lock in their common temporary folder."""
    report = _ahead_of_time_or_skip()
    return once_per_run(tmp_path_factory, "kernel-compile-rows", lambda: _compile_everything(report))


def _rows(compiled: list[dict], kernel: str, target: int) -> list[dict]:
    return [r for r in compiled if r["kernel"] == kernel and r["target"] == f"sm_{target}"]


def _name(row: dict) -> str:
    return (
        f"{row['kernel']} {row['dtype']} D={row['D']} causal={row['causal']} {row['config']} {row['target']}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS, ids=["sm_80", "sm_90"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_every_variant_compiles_without_spills_on_tensor_cores(
    compiled: list[dict], kernel: str, target: int
) -> None:
    rows = _rows(compiled, kernel, target)
    # every dtype x head size x causality is there (preprocess has no causal switch; the fast forward may
    # have several configurations for each)
    causal = [None] if kernel == "preprocess" else [False, True]
    expected = {(dtype, D, c) for dtype in DTYPES for D in HEAD_DIMS for c in causal}
    assert {(r["dtype"], r["D"], r["causal"]) for r in rows} == expected
    if kernel != "fast_forward":
        assert len(rows) == len(expected), [_name(r) for r in rows]
    failed = [f"{_name(r)}: {r['error']}" for r in rows if r["error"]]
    assert not failed, "\n".join(failed)
    problems = []
    for r in rows:
        name = _name(r)
        if not 0 < r["registers"] <= 255:
            problems.append(f"{name}: {r['registers']} registers")
        if r["spill_stores"] or r["spill_loads"] or r["local_bytes"]:
            problems.append(f"{name} spills {r['spill_stores']} bytes per thread, local {r['local_bytes']}")
        if not all(o["programs"] >= 1 for o in r["occupancy"].values()):
            problems.append(f"{name} does not fit on an SM: {r['occupancy']}")
        if kernel in MATMUL_KERNELS and r["dtype"] != "float32":
            wanted, other = ("wgmma", "mma_sync") if target == 90 else ("mma_sync", "wgmma")
            if not (r[wanted] > 0 and r[other] == 0):
                problems.append(f"{name}: wgmma {r['wgmma']}, mma.sync {r['mma_sync']}")
        elif r["wgmma"] or r["mma_sync"]:  # float32 products in IEEE precision, on the CUDA cores
            problems.append(f"{name}: wgmma {r['wgmma']}, mma.sync {r['mma_sync']}")
    assert not problems, "\n".join(problems)


def test_the_dkdv_query_tile_depends_on_the_target_and_the_dtype(report) -> None:  # noqa: ANN001
    def query_rows(dtype: str) -> dict[int, int]:
        return {v.target: v.constexprs["BLOCK_M"] for v in report.capture(["dkdv"], [dtype], [128])}

    assert query_rows("bfloat16") == {80: 32, 90: 64}
    assert query_rows("float32") == {80: 16, 90: 16}


def test_float16_launches_as_bfloat16_does(report) -> None:  # noqa: ANN001
    """Why the compile test leaves float16 to `make kernel-report`: every kernel, head size, causality, target
    and fast-forward configuration launches with the same constants, warps and stages in both 16-bit types, and
    only the pointers' element type differs."""

    def launches(dtype: str) -> list[tuple]:
        return [
            (
                v.kernel,
                v.target,
                v.head_dim,
                v.causal,
                v.config,
                v.constexprs,
                v.num_warps,
                v.num_stages,
                v.attrs,
            )
            for v in report.capture(list(KERNELS), [dtype], list(HEAD_DIMS), list(TARGETS))
        ]

    assert launches("float16") == launches("bfloat16")
    types = lambda dtype: {
        t for v in report.capture(["forward"], [dtype], [64], [90]) for t in v.signature.values()
    }  # noqa: E731
    assert "*fp16" in types("float16") and "*bf16" in types("bfloat16") and "*bf16" not in types("float16")


def test_launches_are_captured_as_the_jit_specialises_them(report) -> None:  # noqa: ANN001
    (variant,) = [v for v in report.capture(["forward"], ["float16"], [128], [90]) if v.causal]
    assert variant.num_warps == 8 and variant.constexprs["BLOCK_D"] == 128  # launch_options for D = 128
    assert variant.num_stages == 2
    assert variant.constexprs["IS_CAUSAL"] is True
    for name in ("stride_qd", "stride_kd", "stride_vd", "stride_od"):  # contiguous: the last stride is 1
        assert variant.signature[name] == "constexpr" and variant.constexprs[name] == 1
    names = list(variant.signature)
    for name in ("Q", "K", "V", "OUT", "LSE", "stride_qt"):  # pointers and strides divisible by 16
        assert variant.attrs[(names.index(name),)] == [["tt.divisibility", 16]], name
    assert variant.signature["Q"] == "*fp16" and variant.signature["LSE"] == "*fp32"
    # GROUP = 1 (one query head per key/value head) becomes a constant; H = 2 is not divisible by 16.
    assert variant.signature["GROUP"] == "constexpr" and variant.constexprs["GROUP"] == 1
    assert variant.signature["H"] == "i32" and variant.attrs[(names.index("H"),)] == []
    # float32: 32 x 16 tiles, and the dK/dV kernel without prefetching; the delta kernel: 4 warps, 1 stage
    float32 = {v.kernel: v for v in report.capture(["forward", "dkdv", "dq"], ["float32"], [64], [90])}
    assert {
        k: (v.constexprs["BLOCK_M"], v.constexprs["BLOCK_N"], v.num_stages) for k, v in float32.items()
    } == {"forward": (32, 16, 2), "dkdv": (16, 16, 1), "dq": (32, 16, 2)}
    (delta,) = report.capture(["preprocess"], ["bfloat16"], [64], [80])
    assert (delta.num_warps, delta.num_stages) == (4, 1)


def test_the_fast_forward_autotunes_only_configurations_that_compile_without_spills(report) -> None:  # noqa: ANN001
    def configs(dtype: str, head_dim: int, target: int = 90) -> set[str]:
        return {
            v.config for v in report.capture(["fast_forward"], [dtype], [head_dim], [target]) if not v.causal
        }

    # float32: one small tile each (larger ones spilled kilobytes per thread in the compile report)
    assert configs("float32", 64) == configs("float32", 64, 80) == {"32x32 w4 s2"}
    assert configs("float32", 128) == configs("float32", 128, 80) == {"32x16 w8 s2"}
    # 16-bit: tiles of 64 rows and up, but not 128 x 64 with 4 warps at D = 128 (255 registers, spills)
    assert configs("bfloat16", 64) == {"128x64 w4 s3", "128x64 w8 s3", "128x128 w8 s3", "64x64 w4 s3"}
    assert configs("bfloat16", 128) == {"128x64 w8 s3", "128x128 w8 s3", "64x64 w4 s3"}
    # on an A100 (sm_80) two more spill: 128 x 128 with 8 warps at D = 128, 128 x 64 with 4 warps at D = 64
    assert configs("bfloat16", 64, 80) == {"128x64 w8 s3", "128x128 w8 s3", "64x64 w4 s3"}
    assert configs("bfloat16", 128, 80) == {"128x64 w8 s3", "64x64 w4 s3"}


def test_the_record_holds_what_this_triton_compiles_now(report, tmp_path: Path) -> None:  # noqa: ANN001
    """The record the compile test reads, checked against fresh compiles of two variants (both targets' quickest),
    in an empty cache; and a record made from other sources is not read."""
    from triton import knobs

    from attn_edu.kernels import compile_record

    variants = [
        *report.capture(["preprocess"], ["float32"], [64], [80]),
        *report.capture(["dq"], ["bfloat16"], [64], [90]),
    ]
    recorded = compile_record.recorded_rows(variants)
    if recorded is None:
        pytest.skip(
            "attn_edu/kernels/compile_record.json was made from other kernels or another Triton: the "
            "compile test compiles everything instead (make kernel-report writes a new record)"
        )
    with knobs.cache.scope():
        knobs.cache.dir = str(tmp_path / "cache")
        fresh = [report.compile_variant(v).row() for v in variants]
    assert [{k: v for k, v in row.items() if k not in compile_record.VOLATILE} for row in fresh] == recorded
    stale = tmp_path / "record.json"
    document = json.loads(compile_record.RECORD.read_text())
    stale.write_text(json.dumps({**document, "fingerprint": "0" * 64}))
    assert compile_record.recorded_rows(variants, stale) is None


def test_a_second_compile_comes_from_tritons_cache_with_the_same_figures(report, tmp_path: Path) -> None:  # noqa: ANN001
    """``make test`` keeps Triton's cache in ``build/triton-cache``: a second run compiles nothing, and what
    a cached kernel reports (its spills come from a record beside it) equals what compiling it reported."""
    from triton import knobs

    (variant,) = report.capture(["preprocess"], ["float32"], [64], [80])  # the quickest compile
    with knobs.cache.scope():
        knobs.cache.dir = str(tmp_path)
        fresh = report.compile_variant(variant)
        again = report.compile_variant(variant)
    assert not fresh.error and not again.error, (fresh.error, again.error)
    assert (fresh.cached, again.cached) == (False, True)
    assert len(list(tmp_path.rglob("*.cubin"))) == 1
    assert len(list(tmp_path.rglob(report.SPILLS_FILE))) == 1
    ignored = ("seconds", "cached")
    assert {k: v for k, v in again.row().items() if k not in ignored} == {
        k: v for k, v in fresh.row().items() if k not in ignored
    }
