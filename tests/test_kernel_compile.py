"""The Triton kernels compile for real GPUs (A100's sm_80, H100's sm_90) on a machine without one.

`attn_edu.kernels.compile_report` compiles ahead of time exactly what the launchers would launch. Here
every teaching kernel (forward, the backward's preprocess, dK/dV and dQ) is compiled in bfloat16 (the
dtype models train in), at D = 64 and 128, causal and not, for both targets, and must: compile; keep
every value in registers (ptxas spills nothing, no local memory); use the tensor cores of its target
(``mma.sync`` on sm_80, Hopper's ``wgmma`` on sm_90) wherever it multiplies matrices; and fit at least
one program per SM. So must every configuration the autotuned fast forward may pick on each GPU
(bfloat16, not causal). float16, float32 and the causal fast forward are in the full report
(``make kernel-report``), which would make these tests too slow.

Where the installed Triton cannot compile ahead of time (no ``triton.compile``/``ASTSource``/
``GPUTarget`` of this form, or no ``cuobjdump`` in its wheel), the tests skip and say why.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from attn_edu.kernels import triton_available

pytestmark = pytest.mark.skipif(
    not triton_available(), reason="needs triton (Linux): pip install -e '.[triton]'"
)

TEACHING = ("forward", "preprocess", "dkdv", "dq")
DTYPES = ("bfloat16",)
MATMUL_KERNELS = {"forward", "dkdv", "dq"}  # the preprocess kernel only sums dO * O: no tl.dot


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


@pytest.mark.parametrize("target", [80, 90], ids=["sm_80", "sm_90"])
@pytest.mark.parametrize("kernel", TEACHING)
def test_teaching_kernel_compiles_without_spills_on_tensor_cores(report, kernel: str, target: int) -> None:  # noqa: ANN001
    variants = report.capture([kernel], DTYPES, [64, 128], [target])
    expected = len(DTYPES) * 2 * (1 if kernel == "preprocess" else 2)  # dtypes x head sizes x causal
    assert len(variants) == expected, [v.config for v in variants]
    results = report.compile_all(variants, jobs=1)
    failed = [
        f"{r.variant.dtype} D={r.variant.head_dim} causal={r.variant.causal}: {r.error}"
        for r in results
        if r.error
    ]
    assert not failed, "\n".join(failed)
    for r in results:
        name = f"{kernel} {r.variant.dtype} D={r.variant.head_dim} causal={r.variant.causal} sm_{target}"
        assert 0 < r.registers <= 255, name
        assert r.spill_stores == r.spill_loads == 0, f"{name} spills {r.spill_stores} bytes per thread"
        assert r.local_bytes == 0, f"{name}: {r.local_bytes} bytes of local memory"
        assert all(o["programs"] >= 1 for o in r.occupancy.values()), f"{name}: {r.occupancy}"
        if kernel in MATMUL_KERNELS and target == 90:
            assert r.wgmma > 0 and r.mma_sync == 0, f"{name}: wgmma {r.wgmma}, mma.sync {r.mma_sync}"
        elif kernel in MATMUL_KERNELS:
            assert r.mma_sync > 0 and r.wgmma == 0, f"{name}: wgmma {r.wgmma}, mma.sync {r.mma_sync}"
        else:
            assert r.wgmma == r.mma_sync == 0, name


def test_the_dkdv_query_tile_depends_on_the_target(report) -> None:  # noqa: ANN001
    by_target = {v.target: v.constexprs["BLOCK_M"] for v in report.capture(["dkdv"], ["bfloat16"], [128])}
    assert by_target == {80: 32, 90: 64}


def test_launches_are_captured_as_the_jit_specialises_them(report) -> None:  # noqa: ANN001
    (variant,) = [v for v in report.capture(["forward"], ["float16"], [128], [90]) if v.causal]
    assert variant.num_warps == 8 and variant.constexprs["BLOCK_D"] == 128  # launch_options for D = 128
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


def test_the_fast_forward_autotunes_only_configurations_that_compile_without_spills(report) -> None:  # noqa: ANN001
    def configs(dtype: str, head_dim: int) -> set[str]:
        return {v.config for v in report.capture(["fast_forward"], [dtype], [head_dim], [90]) if not v.causal}

    # float32: 32 x 32 tiles only (64 x 64 and up spilled 9-141 KB per thread in the compile report)
    assert configs("float32", 64) == {"32x32 w4 s2"}
    assert configs("float32", 128) == {"32x32 w8 s2"}
    # 16-bit: tiles of 64 rows and up, but not 128 x 64 with 4 warps at D = 128 (255 registers, spills)
    assert configs("bfloat16", 64) == {"128x64 w4 s3", "128x64 w8 s3", "128x128 w8 s3", "64x64 w4 s3"}
    assert configs("bfloat16", 128) == {"128x64 w8 s3", "128x128 w8 s3", "64x64 w4 s3"}

    # on an A100 (sm_80) two more spill: 128 x 128 with 8 warps at D = 128, 128 x 64 with 4 warps at D = 64
    def on_ampere(head_dim: int) -> set[str]:
        return {
            v.config for v in report.capture(["fast_forward"], ["bfloat16"], [head_dim], [80]) if not v.causal
        }

    assert on_ampere(64) == {"128x64 w8 s3", "128x128 w8 s3", "64x64 w4 s3"}
    assert on_ampere(128) == {"128x64 w8 s3", "64x64 w4 s3"}


@pytest.mark.slow
@pytest.mark.parametrize("target", [80, 90], ids=["sm_80", "sm_90"])
def test_every_fast_forward_candidate_compiles_without_spills_on_tensor_cores(report, target: int) -> None:  # noqa: ANN001
    """What the autotuner may pick on each GPU (bfloat16, D = 64 and 128, not causal): no spills, tensor cores."""
    variants = [
        v for v in report.capture(["fast_forward"], ["bfloat16"], [64, 128], [target]) if not v.causal
    ]
    assert len(variants) == (5 if target == 80 else 7), [v.config for v in variants]
    for r in report.compile_all(variants, jobs=1):
        name = f"fast_forward {r.variant.config} D={r.variant.head_dim} sm_{target}"
        assert not r.error, f"{name}: {r.error}"
        assert r.spill_stores == r.spill_loads == 0 and r.local_bytes == 0, (
            f"{name} spills {r.spill_stores} bytes"
        )
        assert (r.wgmma > 0) if target == 90 else (r.mma_sync > 0), name
