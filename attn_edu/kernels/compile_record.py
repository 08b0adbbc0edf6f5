"""The compile report's figures for the kernels as they stand, kept beside them: ``compile_record.json``.

Compiling every kernel variant ahead of time for two GPUs (:mod:`attn_edu.kernels.compile_report`) takes one to
two minutes on two cores, and what it finds (registers, spills, shared memory, tensor-core instructions) depends
on nothing but the kernels' sources and the Triton that compiles them: compiling is deterministic.
``make kernel-report`` therefore also writes the figures here, with a :func:`fingerprint` of exactly those
inputs: Triton's version, every source file of ``attn_edu/kernels/`` and ``attn_edu/hardware.py`` (the GPU
limits behind the occupancy). :func:`recorded_rows` hands a test the rows it asks for only while the fingerprint
still matches; after any change to a kernel, a launcher, the report or Triton it returns ``None`` and the test
compiles everything again. A test also compiles a few variants afresh and compares them with the record
(``tests/test_kernel_compile.py``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

RECORD = Path(__file__).with_name("compile_record.json")
SOURCES = (*sorted(Path(__file__).parent.glob("*.py")), Path(__file__).parent.parent / "hardware.py")
VOLATILE = ("seconds", "cached")  # how long a compile took and whether Triton's cache served it: not figures


def fingerprint() -> str:
    """sha256 of Triton's version and of every file the compiled figures depend on."""
    import triton

    digest = hashlib.sha256(f"triton {triton.__version__}\n".encode())
    for path in SOURCES:
        digest.update(f"{path.name}\n".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


LOG2E = "0f3FB8AA3B"  # log2(e) as PTX writes a float32 constant: exp(x) becomes ex2(x * log2(e))


def ptx_summary(ptx: str) -> dict[str, Any]:
    """What notebook 12 reads of a kernel's PTX without compiling it: the number of instructions (lines ending in
    ``;`` that are not directives: the line count itself moves with the paths in the debug sections), the ``ex2.approx``
    instructions and the multiplications by log2(e) (the exponentials), and five lines around the first
    tensor-core product (``wgmma.mma_async`` on an H100, ``mma.sync`` on an A100), or none.

    Example:
        >>> ptx = ["mov.f32 %f1, 0f3FB8AA3B;", "mul.f32 %f2, %f1, 0f3FB8AA3B;", "ex2.approx.f32 %f3, %f2;"]
        >>> summary = ptx_summary(chr(10).join(ptx))
        >>> summary["instructions"], summary["ex2"], summary["log2e_mul"], summary["excerpt"]
        (3, 1, 1, [])
    """
    lines = ptx.splitlines()
    first = next((i for i, line in enumerate(lines) if "wgmma.mma_async" in line or "mma.sync" in line), None)
    excerpt = [] if first is None else [line.strip() for line in lines[max(0, first - 2) : first + 3]]
    return {
        "instructions": sum(
            line.strip().endswith(";") and not line.strip().startswith((".", "//")) for line in lines
        ),
        "ex2": sum("ex2.approx" in line for line in lines),
        "log2e_mul": sum(line.strip().startswith("mul") and LOG2E in line for line in lines),
        "excerpt": excerpt,
    }


def key(row: Mapping[str, Any]) -> str:
    """A row's variant, e.g. ``"forward bfloat16 D=128 causal=True 64x64 w8 s2 sm_90"``."""
    return (
        f"{row['kernel']} {row['dtype']} D={row['D']} causal={row['causal']} {row['config']} {row['target']}"
    )


def variant_key(variant: Any) -> str:
    """:func:`key` of a :class:`attn_edu.kernels.compile_report.Variant` (which knows its target)."""
    return key(
        {
            "kernel": variant.kernel,
            "dtype": variant.dtype,
            "D": variant.head_dim,
            "causal": variant.causal,
            "config": variant.config,
            "target": f"sm_{variant.target}",
        }
    )


def write(rows: Sequence[Mapping[str, Any]], path: Path = RECORD) -> Path:
    """Store the rows of a compile that just ran (without :data:`VOLATILE`), with today's fingerprint."""
    if any(row["error"] for row in rows):
        raise ValueError("rows: a variant failed to compile; the record keeps only clean compiles")
    import triton

    kept = [{k: v for k, v in row.items() if k not in VOLATILE} for row in rows]
    document = {"fingerprint": fingerprint(), "triton": triton.__version__, "rows": sorted(kept, key=key)}
    path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return path


def recorded_rows(variants: Sequence[Any], path: Path = RECORD) -> list[dict[str, Any]] | None:
    """The record's rows for ``variants`` (in their order), or ``None`` when there is no record, it was made
    from other sources or another Triton, or it lacks one of them."""
    if not path.is_file():
        return None
    document = json.loads(path.read_text(encoding="utf-8"))
    if document.get("fingerprint") != fingerprint():
        return None
    rows = {key(row): row for row in document["rows"]}
    wanted = [variant_key(variant) for variant in variants]
    if any(name not in rows for name in wanted):
        return None
    return [rows[name] for name in wanted]


def recorded_table(
    kernels: Sequence[str], dtypes: Sequence[str], head_dim: int, causal: bool, path: Path = RECORD
) -> list[Any] | None:
    """The record's results for ``kernels`` x ``dtypes`` at ``head_dim`` (non-causal, or causal, kernels; the δ
    kernel has no mask), A100 rows first, as :func:`attn_edu.kernels.compile_report.table` prints them; ``None``
    while the record does not match these sources and this Triton. Needs no GPU build of Triton: a process
    whose Triton runs the interpreter (notebook 12) reads its figures here."""
    if not path.is_file():
        return None
    document = json.loads(path.read_text(encoding="utf-8"))
    if document.get("fingerprint") != fingerprint():
        return None
    import dataclasses
    from types import SimpleNamespace

    from attn_edu.kernels.compile_report import Compiled

    figures = {f.name for f in dataclasses.fields(Compiled)} - {"variant", "target", "seconds", "cached"}
    rows = [
        row
        for row in document["rows"]
        if row["kernel"] in kernels
        and row["dtype"] in dtypes
        and row["D"] == head_dim
        and row["causal"] in (causal, None)
    ]
    rows.sort(key=lambda r: (r["target"], dtypes.index(r["dtype"]), kernels.index(r["kernel"])))
    if not rows:
        return None
    return [
        Compiled(
            SimpleNamespace(
                kernel=r["kernel"], dtype=r["dtype"], head_dim=r["D"], causal=r["causal"], config=r["config"]
            ),
            int(r["target"].removeprefix("sm_")),
            0.0,
            cached=True,
            **{k: v for k, v in r.items() if k in figures},
        )  # fmt: skip
        for r in rows
    ]
