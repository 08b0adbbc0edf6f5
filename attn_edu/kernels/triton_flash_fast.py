"""FlashAttention-2 in Triton, the fast path: the teaching kernels' algorithm, tuned for speed.

Read :mod:`attn_edu.kernels.triton_flash` first: this file changes only the forward kernel, and only
in the usual sources of speed (``python -m attn_edu.bench flash`` measures them side by side):

- ``exp2`` instead of ``exp``: the GPU's special-function unit computes ``2^x`` natively, and
  ``exp(x) = 2^(x · log2 e)``, so the factor ``log2 e`` is folded into the score scale once.
- The key loop runs in two phases: tiles entirely visible to every query row skip the mask
  arithmetic; only the tiles that straddle the causal diagonal or the end of ``S`` pay for it.
- Tile sizes, warps and pipeline depth are autotuned per shape (``triton.autotune`` times each
  configuration on the first call and caches the winner), among the configurations that
  :func:`configs_for` keeps for the dtype and head size (those that compile without spills).

Everything else is the teaching file's: its input checks, launch settings and tile helpers (which
tile is ours, masked loads and stores, causal block skipping, the causal mask), and its backward
kernels, :func:`~attn_edu.kernels.triton_flash.flash_attention_backward`, which work unchanged because
the forward stores the same natural-log ``lse``.

Running without a GPU: as for the teaching kernels, set ``TRITON_INTERPRET=1`` before the first
``import triton`` and pass CPU tensors. The interpreter cannot time anything, so the autotuner gets a
single configuration there.
"""

from __future__ import annotations

import torch

from attn_edu.kernels import require_triton

require_triton()  # a clear message (what to install) instead of a bare ModuleNotFoundError

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from attn_edu.kernels import triton_flash  # noqa: E402  (device_capability, looked up at each call)
from attn_edu.kernels.triton_flash import (  # noqa: E402
    INTERPRETING,
    as_kernel_dtype,
    causal_key_stop,
    check_inputs,
    flash_attention_backward,
    launch_options,
    load_tile,
    program_tile,
    refuse_mask,
    store_tile,
    tile_allowed,
)

# log2(e): exp(x) == exp2(x * LOG2E). A tl.constexpr so that kernels may read it as a global.
LOG2E = tl.constexpr(1.4426950408889634)

if INTERPRETING:
    # The interpreter cannot time configurations (no GPU): give the autotuner a single one.
    _FAST_CONFIGS = [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32}, num_warps=4, num_stages=1)]
else:
    _FAST_CONFIGS = [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
        for bm, bn, w, s in [
            (128, 64, 4, 3),
            (128, 64, 8, 3),
            (128, 128, 8, 3),
            (64, 64, 4, 3),
            (32, 32, 4, 2),  # float32 at D <= 64
            (32, 16, 8, 2),  # float32 at D = 128
        ]
    ]


def configs_for(configs: list, named_args: dict, **kwargs: object) -> list:
    """The autotuner's candidates for these inputs: only configurations that keep their values in registers.

    Measured with ``python -m attn_edu.kernels.compile_report`` (Triton 3.9, sm_90, D = 128): every
    16-bit tile of 64 rows and up compiles without spills except 128 x 64 with 4 warps (255 registers,
    416 bytes spilled per thread). float32 tiles hold twice the bytes: at 64 x 64 and up they spilled
    9-141 KB per thread and took 20-80 s each to compile (an autotuner pays that at the first call).
    float32 keeps one small tile: 32 x 32 with 4 warps at D <= 64, and 32 x 16 with 8 warps at D = 128,
    where 32 x 32 spilled about 500 bytes on sm_90; no spills on sm_80 or sm_90 (Triton 3.6 and 3.9).
    """
    wide = kwargs.get("BLOCK_D", 0) > 64
    capability = triton_flash.device_capability(named_args["Q"].device)  # None on a CPU
    ampere = capability is not None and capability[0] < 9
    if named_args["Q"].dtype == torch.float32:
        chosen = [c for c in configs if c.kwargs["BLOCK_M"] == 32 and c.num_warps == (8 if wide else 4)]
    else:
        chosen = [
            c for c in configs
            if c.kwargs["BLOCK_M"] > 32 and not (wide and c.kwargs["BLOCK_M"] == 128 and c.num_warps == 4)
            and not (ampere and _spills_on_ampere(c, wide))
        ]  # fmt: skip
    return chosen or configs[:1]  # the interpreter's single configuration


def _spills_on_ampere(config: object, wide: bool) -> bool:
    """16-bit tiles that spill on sm_80 though not on sm_90, measured with the compile report (Triton 3.9):
    128 x 128 with 8 warps at D = 128 (48-80 bytes per thread) and 128 x 64 with 4 warps at D = 64 (12)."""
    block_m, block_n, warps = config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"], config.num_warps
    return (block_m, block_n, warps) == ((128, 128, 8) if wide else (128, 64, 4))


# ----------------------------------------------------------------------------------------------
# 1. The forward kernel, in two phases, with exp2
# ----------------------------------------------------------------------------------------------


@triton.jit
def _attend_key_blocks(
    acc, l_i, m_i, q_block, K, V, rows, dims,
    stride_ks, stride_kd, stride_vs, stride_vd,
    T, S, D, qk_scale, lo, hi,
    MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr,
    BLOCK_N: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    """Online softmax over key blocks ``lo .. hi``; ``m_i`` and the scores are in log2 units."""
    for k_start in range(lo, hi, BLOCK_N):
        cols = k_start + tl.arange(0, BLOCK_N)
        k_block = load_tile(K, cols, dims, S, D, stride_ks, stride_kd)
        v_block = load_tile(V, cols, dims, S, D, stride_vs, stride_vd)
        scores = tl.dot(q_block, tl.trans(k_block), input_precision=DOT_PRECISION) * qk_scale
        if MASKED:
            scores = tl.where(tile_allowed(rows, cols, T, S, IS_CAUSAL), scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(scores - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v_block.dtype), v_block, input_precision=DOT_PRECISION)
        m_i = m_new
    return acc, l_i, m_i


@triton.autotune(
    configs=_FAST_CONFIGS,
    key=["T", "S", "BLOCK_D", "IS_CAUSAL"],
    prune_configs_by={"early_config_prune": configs_for},
)
@triton.jit
def _flash_forward_fast_kernel(
    Q, K, V, OUT, LSE,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_ks, stride_kd,
    stride_vb, stride_vh, stride_vs, stride_vd,
    stride_ob, stride_oh, stride_ot, stride_od,
    H, GROUP, T, S, D, scale,
    IS_CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    pid_bh, b, h, h_kv, q_start, rows, dims = program_tile(H, GROUP, BLOCK_M, BLOCK_D)
    Q += b * stride_qb + h * stride_qh
    K += b * stride_kb + h_kv * stride_kh
    V += b * stride_vb + h_kv * stride_vh
    OUT += b * stride_ob + h * stride_oh

    q_block = load_tile(Q, rows, dims, T, D, stride_qt, stride_qd)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    qk_scale = scale * LOG2E  # scores in log2 units, so that exp2 replaces exp

    # Phase 1: key blocks every row of the tile sees in full (no mask needed). Causal: keys up to
    # the first row's position S - T + q_start; always: only whole blocks before the end of S.
    key_stop = causal_key_stop(q_start, T, S, BLOCK_M, IS_CAUSAL)
    unmasked_stop = S
    if IS_CAUSAL:
        unmasked_stop = tl.minimum(S, tl.maximum(0, S - T + q_start + 1))
    unmasked_stop = unmasked_stop // BLOCK_N * BLOCK_N
    acc, l_i, m_i = _attend_key_blocks(
        acc, l_i, m_i, q_block, K, V, rows, dims, stride_ks, stride_kd, stride_vs, stride_vd,
        T, S, D, qk_scale, 0, unmasked_stop,
        MASKED=False, IS_CAUSAL=IS_CAUSAL, BLOCK_N=BLOCK_N, DOT_PRECISION=DOT_PRECISION,
    )  # fmt: skip
    # Phase 2: the blocks on the causal diagonal and the partial block at the end of S.
    acc, l_i, m_i = _attend_key_blocks(
        acc, l_i, m_i, q_block, K, V, rows, dims, stride_ks, stride_kd, stride_vs, stride_vd,
        T, S, D, qk_scale, unmasked_stop, key_stop,
        MASKED=True, IS_CAUSAL=IS_CAUSAL, BLOCK_N=BLOCK_N, DOT_PRECISION=DOT_PRECISION,
    )  # fmt: skip

    # A row with l_i = 0 saw no key: zeros and lse = -inf, as in the teaching kernel.
    has_key = l_i > 0
    l_safe = tl.where(has_key, l_i, 1.0)
    store_tile(OUT, acc / l_safe[:, None], rows, dims, T, D, stride_ot, stride_od)
    # Back to natural log for the shared backward: lse = (m_i + log2 l_i) / log2(e).
    lse = tl.where(has_key, (m_i + tl.log2(l_safe)) / LOG2E, float("-inf"))
    tl.store(LSE + pid_bh.to(tl.int64) * T + rows, lse, mask=rows < T)


# ----------------------------------------------------------------------------------------------
# 2. Python side: launch, autograd (the teaching backward) and the public function
# ----------------------------------------------------------------------------------------------


def flash_attention_fast_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, is_causal: bool = False, scale: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The autotuned forward kernel: same outputs as :func:`~attn_edu.kernels.triton_flash.flash_attention_forward`.

    Shapes:
        q ``(B, H, T, D)``, k and v ``(B, H_kv, S, D)``; returns out ``(B, H, T, D)`` and lse ``(B, H, T)``.
    """
    sizes, scale = check_inputs(q, k, v, scale)
    B, H, H_kv, T, S, D = (sizes[n] for n in ("B", "H", "H_kv", "T", "S", "D"))
    dtype = q.dtype
    q, k, v = as_kernel_dtype(q, k, v)
    out = torch.empty_like(q, memory_format=torch.contiguous_format)  # (B, H, T, D)
    lse = torch.empty(B, H, T, dtype=torch.float32, device=q.device)  # (B, H, T)
    options = launch_options(q)
    grid = lambda meta: (triton.cdiv(T, meta["BLOCK_M"]), B * H)  # BLOCK_M is chosen by the autotuner
    _flash_forward_fast_kernel[grid](
        q, k, v, out, lse,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        H, H // H_kv, T, S, D, scale,
        IS_CAUSAL=bool(is_causal), BLOCK_D=options["BLOCK_D"], DOT_PRECISION=options["DOT_PRECISION"],
    )  # fmt: skip
    return out.to(dtype), lse


class _FlashAttentionFast(torch.autograd.Function):
    """The autotuned forward with the teaching backward kernels."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal, scale):  # type: ignore[override]
        out, lse = flash_attention_fast_forward(q, k, v, is_causal=is_causal, scale=scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.options = {"is_causal": is_causal, "scale": scale}
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):  # type: ignore[override]
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = flash_attention_backward(q, k, v, out, lse, grad_out, **ctx.options)
        return dq, dk, dv, None, None


def flash_attention_fast(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """:func:`~attn_edu.kernels.triton_flash.flash_attention` with the autotuned, exp2-based forward kernel.

    Same arguments, result and conventions as the teaching function (no ``block_m``/``block_n``:
    the autotuner picks them). The backward pass is the teaching one.

    Shapes:
        q ``(B, H, T, D)``, k and v ``(B, H_kv, S, D)``; returns ``(B, H, T, D)``.

    Example (needs a GPU, or CPU tensors with ``TRITON_INTERPRET=1``; plain doctest runs skip it,
    ``tests/test_triton_flash.py`` runs it in the interpreter):
        >>> from attn_edu.attention import scaled_dot_product_attention
        >>> device = "cpu" if INTERPRETING else "cuda"
        >>> q, k, v = (torch.randn(1, 2, 20, 16, device=device) for _ in range(3))  # doctest: +SKIP
        >>> out = flash_attention_fast(q, k, v, is_causal=True)  # (B, H, T, D)  # doctest: +SKIP
        >>> ref = scaled_dot_product_attention(q, k, v, is_causal=True)  # doctest: +SKIP
        >>> torch.allclose(out, ref, atol=1e-5)  # doctest: +SKIP
        True
    """
    refuse_mask(mask)
    check_inputs(q, k, v, scale)  # fail here with a clear message, not inside autograd
    return _FlashAttentionFast.apply(q, k, v, bool(is_causal), scale)


__all__ = ["LOG2E", "flash_attention_fast", "flash_attention_fast_forward"]
