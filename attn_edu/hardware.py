"""Figures of real GPUs that the course's models of speed use: one table, each number cited.

Per-SM limits (NVIDIA CUDA C++ Programming Guide, "Technical Specifications per Compute Capability"; the
A100 and H100 tuning guides): 64 K 32-bit registers, at most 255 per thread, allocated per warp in units of
256; 2,048 threads and 32 blocks; shared memory usable per SM and per block, of which the runtime reserves
1 KB per block. SM counts, peaks and memory from the A100 (SXM 80 GB), H100 (SXM) and H200 datasheets
(dense tensor-core bf16, no sparsity; HBM bandwidth in TB/s; memory in GB).
"""

from __future__ import annotations

from typing import Any

GPUS: dict[str, dict[str, Any]] = {
    "A100": {"target": 80, "sms": 108, "shared_per_sm": 164 * 1024, "shared_per_block": 163 * 1024,
             "bf16_tflops": 312.0, "hbm_tb_s": 2.039, "memory_gb": 80},
    "H100": {"target": 90, "sms": 132, "shared_per_sm": 228 * 1024, "shared_per_block": 227 * 1024,
             "bf16_tflops": 989.0, "hbm_tb_s": 3.35, "memory_gb": 80},
    "H200": {"target": 90, "sms": 132, "shared_per_sm": 228 * 1024, "shared_per_block": 227 * 1024,
             "bf16_tflops": 989.0, "hbm_tb_s": 4.8, "memory_gb": 141},
}  # fmt: skip
