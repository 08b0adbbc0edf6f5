"""FlashAttention-2 in Triton: the tiled attention of :mod:`attn_edu.flash`, as a GPU kernel.

This is :func:`attn_edu.flash.tiled_attention` moved onto the GPU. The two loops of
FlashAttention-2 (Dao 2023, Algorithms 1 and 2) become *programs*: Triton launches one program per
query block (forward) or per key block (backward), all running in parallel, and each program runs
the inner loop itself with its tiles held in registers and shared memory (the fast "SRAM" of the
paper). The variable names (``q_block``, ``k_block``, ``v_block``, ``scores``, ``p``, ``m_i``,
``l_i``, ``acc``, ``lse``) are those of the PyTorch version, so the two files read side by side.

Four kernels, in data-flow order:

1. ``_flash_forward_kernel``: online softmax over key blocks; writes ``out`` and the log-sum-exp
   ``lse`` (one float per query), which is all the backward needs (Algorithm 1).
2. ``_flash_backward_preprocess_kernel``: ``delta = rowsum(dO ∘ O)`` (Algorithm 2, line 4).
3. ``_flash_backward_dkdv_kernel``: one program per key block accumulates ``dK_j`` and ``dV_j``.
4. ``_flash_backward_dq_kernel``: one program per query block accumulates ``dQ_i``. Computing dQ
   in a pass of its own, as the Triton fused-attention tutorial does (its ``_attn_bwd_dq`` loop), means
   no two programs write the same rows, so no atomic additions are needed. The FlashAttention-2 CUDA
   code instead adds each program's share of ``dQ`` into a float32 buffer with ``atomicAdd``, which
   saves recomputing ``P`` and ``dS`` a second time.

Conventions (those of :mod:`attn_edu.attention`):

- ``is_causal`` is **bottom-right aligned**: query ``t`` sits at absolute position ``S - T + t`` and
  sees keys ``0 .. S - T + t``. PyTorch's ``is_causal`` is top-left (query ``t`` sees keys
  ``0 .. t``); the two agree only when ``T == S``.
- A query that sees no key (causal with ``T > S``) returns zeros, never NaN, and gets zero gradient.
- Head dim ``D`` from 1 to 128. Tiles use ``BLOCK_D``, the next power of two (at least 16, the
  smallest matrix-multiply size); the extra columns are masked on load and store, so ``D`` need not
  be a power of two. ``T`` and ``S`` are arbitrary: rows past the end are masked the same way.
- Grouped-query attention: ``k`` and ``v`` may have ``H_kv`` heads with ``H_kv`` dividing ``H``.
- Learned sink logits (gpt-oss): ``sinks`` ``(H,)`` adds one score per query head to every softmax
  denominator, with no value. In the forward kernel that is its first two lines: the running max starts at
  the sink and the running sum at 1. The log-sum-exp then includes the sink, so the backward kernels need
  no change; the sinks' own gradient, ``-sum exp(sink - lse) · delta``, is one line of PyTorch.
- ``float16``, ``bfloat16`` and ``float32``. Matrix products accumulate in float32. For float32
  inputs the products use ``input_precision="ieee"``: a GPU would otherwise round them to TF32
  (10-bit mantissa), which is fast but ~1e-3 off the reference.

Running without a GPU: set ``TRITON_INTERPRET=1`` **before the first** ``import triton`` of the
process (Triton decides when it defines a ``@triton.jit`` function, its own ``tl.zeros``, ``tl.max``...
included, whether to compile or interpret it) and pass CPU tensors. The
interpreter runs each program in NumPy: correct, and slow (milliseconds per tile pair). It multiplies
bfloat16 tiles wrongly (Triton issue #11584: ``tl.dot`` reads the raw bits), so when interpreting,
bfloat16 inputs run through the kernels as float32 and the results are rounded back to bfloat16.

Section 3 names the forward kernel's bookkeeping (which tile is ours, masked tile loads and stores,
causal block skipping) once; the backward kernels call those helpers, and so does the fast path,
:func:`attn_edu.kernels.triton_flash_fast.flash_attention_fast` (same algorithm, autotuned tile
sizes, ``exp2`` instead of ``exp``, masks only on the tiles that need them; it reuses the backward
below). Read these teaching kernels first. The file is longer than the house limit of a few hundred
lines on purpose: a kernel file reads best whole, forward and backward side by side.
"""

from __future__ import annotations

import os

import torch

from attn_edu._validate import check_floating, check_same_dtype, check_scale, check_shape, check_sinks
from attn_edu.kernels import require_triton

require_triton()  # a clear message (what to install) instead of a bare ModuleNotFoundError

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

# Read once, at import, like Triton itself: `@triton.jit` below already chose compile vs interpret.
INTERPRETING = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
if INTERPRETING and isinstance(tl.zeros, triton.runtime.JITFunction):
    # Triton's own library functions (tl.zeros, tl.max, ...) were compiled-mode: the interpreter
    # would fail on the first kernel launch with an obscure message. Say what happened instead.
    raise ImportError(
        "TRITON_INTERPRET=1 was set after `triton` had been imported, so Triton is only half in "
        "interpreter mode. Set it before the first `import triton` (in a notebook: restart the kernel "
        "and run `os.environ['TRITON_INTERPRET'] = '1'` first)."
    )

# Tile sizes of the teaching kernels. A program holds a (BLOCK_M, BLOCK_D) query tile and streams
# (BLOCK_N, BLOCK_D) key and value tiles; 64 x 64 fits comfortably in registers and shared memory
# for 16-bit inputs up to D = 128. Every choice below was measured with
# `python -m attn_edu.kernels.compile_report` (Triton 3.6 and 3.9, for sm_80 and sm_90): none spills.
BLOCK_M = 64  # query rows per program
BLOCK_N = 64  # key rows per inner-loop step
# float32 products run on the CUDA cores, not the tensor cores (input_precision="ieee"), and Triton holds whole
# rows of both operands in registers for them: smaller tiles. With 32 x 32 the forward kernel spilled a few
# bytes on sm_90 (4 at D = 64 with Triton 3.9, 36-48 at D = 128 with Triton 3.6); 32 x 16 needs 64-168.
BLOCK_M_FP32 = 32  # query rows per program, float32 inputs
BLOCK_N_FP32 = 16  # key rows per inner-loop step, float32 inputs
# The dK/dV kernel keeps two (BLOCK_N, BLOCK_D) float32 accumulators for the whole loop and streams query
# tiles past them. Before Hopper it streams 16-bit tiles of at most 32 rows: with 64 it needs all 255
# registers a thread may have and spills on sm_80 at D = 128; with 32, 194-198 and no spills. On Hopper
# (sm_90) 64-row tiles stay (212-248 registers): wgmma multiplies 64 rows per warp group, and 32-row
# products would fall back to the older mma.sync.
DKDV_BLOCK_M = 32
# float32 dK/dV: its four products per step spilled 2-7 KB per thread with 32-row query tiles, and still
# hundreds of bytes with 16 while the next tiles were prefetched. 16 rows, no prefetching: 60-72 registers.
DKDV_BLOCK_M_FP32 = 16
DKDV_NUM_STAGES_FP32 = 1
NUM_STAGES = 2  # how many key tiles the compiler may prefetch ahead (software pipelining)
MAX_HEAD_DIM = 128  # larger heads would need smaller tiles to fit in shared memory

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


# ----------------------------------------------------------------------------------------------
# 1. Which (query, key) pairs of a tile may attend
# ----------------------------------------------------------------------------------------------


@triton.jit
def _tile_allowed(rows, cols, T, S, IS_CAUSAL: tl.constexpr):
    """Boolean (BLOCK_M, BLOCK_N) tile: True where query ``rows[i]`` may attend key ``cols[j]``.

    Rows and columns past the end of the sequences (the last, partial tiles) are never allowed.
    Causal, bottom-right aligned: query t sits at position S - T + t and sees keys s <= S - T + t.
    """
    allowed = (rows[:, None] < T) & (cols[None, :] < S)
    if IS_CAUSAL:
        allowed = allowed & (cols[None, :] <= rows[:, None] + (S - T))
    return allowed


# ----------------------------------------------------------------------------------------------
# 2. Forward kernel (FlashAttention-2, Algorithm 1)
# ----------------------------------------------------------------------------------------------


@triton.jit
def _flash_forward_kernel(
    Q, K, V, OUT, LSE, SINKS,  # pointers; LSE is a contiguous float32 (B * H, T) buffer, SINKS float32 (H,)
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_ks, stride_kd,
    stride_vb, stride_vh, stride_vs, stride_vd,
    stride_ob, stride_oh, stride_ot, stride_od,
    H, GROUP, T, S, D, scale,  # GROUP = H // H_kv query heads share one key/value head
    IS_CAUSAL: tl.constexpr, HAS_SINKS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    # Which tile is ours: query block `pid_m` of head (b, h). Algorithm 1's outer loop over query
    # blocks (line 3) is not a loop here: every block is its own program, run in parallel.
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = (pid_bh // H).to(tl.int64)  # int64: b * stride_b overflows int32 for big tensors
    h = (pid_bh % H).to(tl.int64)
    h_kv = h // GROUP
    q_start = pid_m * BLOCK_M
    rows = q_start + tl.arange(0, BLOCK_M)  # query indices of this tile
    dims = tl.arange(0, BLOCK_D)  # head-dim indices; columns >= D are padding

    # Move each base pointer to the start of this head's (T, D) or (S, D) matrix.
    Q += b * stride_qb + h * stride_qh
    K += b * stride_kb + h_kv * stride_kh
    V += b * stride_vb + h_kv * stride_vh
    OUT += b * stride_ob + h * stride_oh

    # Load Q_i once (line 4); padding rows and columns read as 0.
    q_mask = (rows[:, None] < T) & (dims[None, :] < D)
    q_block = tl.load(Q + rows[:, None] * stride_qt + dims[None, :] * stride_qd, mask=q_mask, other=0.0)

    # Running statistics of the online softmax, one per query row (line 5), kept in float32.
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running max of the scores
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum of exp(scores - m_i)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)  # running sum of exp(scores - m_i) · v
    if HAS_SINKS:  # gpt-oss: the head's sink logit is one more score, seen first, whose value is 0
        m_i = tl.zeros([BLOCK_M], dtype=tl.float32) + tl.load(SINKS + h)  # the max so far: the sink
        l_i = tl.full([BLOCK_M], 1.0, dtype=tl.float32)  # exp(sink - m_i) = 1; acc gains 1 · 0

    # Causal block skipping: the last row of the tile sees keys up to S - T + q_start + BLOCK_M - 1,
    # so key blocks from `key_stop` on lie entirely in the future: never loaded, never computed.
    key_stop = S
    if IS_CAUSAL:
        key_stop = tl.minimum(S, tl.maximum(0, S - T + q_start + BLOCK_M))

    for k_start in range(0, key_stop, BLOCK_N):  # inner loop over key blocks (line 6)
        # Load K_j and V_j (line 7).
        cols = k_start + tl.arange(0, BLOCK_N)
        kv_mask = (cols[:, None] < S) & (dims[None, :] < D)
        k_block = tl.load(K + cols[:, None] * stride_ks + dims[None, :] * stride_kd, mask=kv_mask, other=0.0)
        v_block = tl.load(V + cols[:, None] * stride_vs + dims[None, :] * stride_vd, mask=kv_mask, other=0.0)

        # S_ij = Q_i K_jᵀ · scale (line 8); hidden pairs get -inf, i.e. zero weight after exp.
        scores = tl.dot(q_block, tl.trans(k_block), input_precision=DOT_PRECISION) * scale
        scores = tl.where(_tile_allowed(rows, cols, T, S, IS_CAUSAL), scores, float("-inf"))

        # Online softmax update (lines 9-10). m_safe: a row that has seen only hidden keys keeps
        # m = -inf; subtracting 0 instead keeps p = exp(-inf) = 0 rather than exp(-inf + inf) = NaN.
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(scores - m_safe[:, None])  # P~_ij
        alpha = tl.exp(m_i - m_safe)  # how much the old max overestimated: rescale old sums
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v_block.dtype), v_block, input_precision=DOT_PRECISION)
        m_i = m_new

    # Lines 12-13: normalise once, at the end, and keep lse = m + log(l) for the backward.
    # A row with l_i = 0 saw no key: output zeros and lse = -inf (log 0), never 0 / 0. With a sink
    # l_i >= 1: a row that saw no key puts all its weight on the sink, outputs zeros and has lse = sink.
    has_key = l_i > 0
    l_safe = tl.where(has_key, l_i, 1.0)
    out = acc / l_safe[:, None]
    lse = tl.where(has_key, m_i + tl.log(l_safe), float("-inf"))
    out_ptrs = OUT + rows[:, None] * stride_ot + dims[None, :] * stride_od
    tl.store(out_ptrs, out.to(OUT.dtype.element_ty), mask=q_mask)
    tl.store(LSE + pid_bh.to(tl.int64) * T + rows, lse, mask=rows < T)


# ----------------------------------------------------------------------------------------------
# 3. The forward kernel's bookkeeping, named: shared by the backward kernels and the fast path
# ----------------------------------------------------------------------------------------------
# The forward kernel above spells each of these steps out, because it is the lesson (notebook 12
# shows its source). The kernels below and attn_edu.kernels.triton_flash_fast call them by name.

tile_allowed = _tile_allowed  # section 1's mask, under the name the fast path imports


@triton.jit
def program_tile(H, GROUP, BLOCK: tl.constexpr, BLOCK_D: tl.constexpr):
    """Which tile is ours, in a grid of (row block, batch·head) programs.

    Returns ``pid_bh = b * H + h``; the batch ``b``, query head ``h`` and key/value head ``h_kv``
    (int64: ``b * stride_b`` overflows int32 for big tensors); the first row of our block, its
    ``BLOCK`` row indices, and the ``BLOCK_D`` head-dim indices (columns ``>= D`` are padding).
    """
    pid_bh = tl.program_id(1)
    b = (pid_bh // H).to(tl.int64)
    h = (pid_bh % H).to(tl.int64)
    start = tl.program_id(0) * BLOCK
    return pid_bh, b, h, h // GROUP, start, start + tl.arange(0, BLOCK), tl.arange(0, BLOCK_D)


@triton.jit
def load_tile(ptr, rows, dims, n_rows, D, stride_row, stride_d):
    """Rows ``rows`` of an ``(n_rows, D)`` matrix as a tile; padding rows and columns read as 0."""
    mask = (rows[:, None] < n_rows) & (dims[None, :] < D)
    return tl.load(ptr + rows[:, None] * stride_row + dims[None, :] * stride_d, mask=mask, other=0.0)


@triton.jit
def store_tile(ptr, tile, rows, dims, n_rows, D, stride_row, stride_d):
    """Write ``tile`` to rows ``rows`` of an ``(n_rows, D)`` matrix, in its dtype; padding is not written."""
    mask = (rows[:, None] < n_rows) & (dims[None, :] < D)
    ptrs = ptr + rows[:, None] * stride_row + dims[None, :] * stride_d
    tl.store(ptrs, tile.to(ptr.dtype.element_ty), mask=mask)


@triton.jit
def causal_key_stop(q_start, T, S, BLOCK_M: tl.constexpr, IS_CAUSAL: tl.constexpr):
    """End of the key blocks that the query block starting at ``q_start`` may see.

    Causal block skipping: the block's last row sees keys up to ``S - T + q_start + BLOCK_M - 1``,
    so key blocks from the returned index on lie entirely in the future.
    """
    key_stop = S
    if IS_CAUSAL:
        key_stop = tl.minimum(S, tl.maximum(0, S - T + q_start + BLOCK_M))
    return key_stop


# ----------------------------------------------------------------------------------------------
# 4. Backward kernels (FlashAttention-2, Algorithm 2)
# ----------------------------------------------------------------------------------------------


@triton.jit
def _flash_backward_preprocess_kernel(
    OUT, DO, DELTA,  # DELTA is a contiguous float32 (B * H, T) buffer
    stride_ob, stride_oh, stride_ot, stride_od,
    stride_dob, stride_doh, stride_dot, stride_dod,
    H, T, D,
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
):  # fmt: skip
    """delta_i = rowsum(dO_i ∘ O_i) (line 4), which equals rowsum(P ∘ dP): the softmax backward's
    correction term, computed once per query instead of once per (query, key) tile."""
    pid_bh, b, h, h_kv, q_start, rows, dims = program_tile(H, 1, BLOCK_M, BLOCK_D)
    OUT += b * stride_ob + h * stride_oh
    DO += b * stride_dob + h * stride_doh
    out_block = load_tile(OUT, rows, dims, T, D, stride_ot, stride_od).to(tl.float32)
    do_block = load_tile(DO, rows, dims, T, D, stride_dot, stride_dod).to(tl.float32)
    delta = tl.sum(out_block * do_block, axis=1)
    tl.store(DELTA + pid_bh.to(tl.int64) * T + rows, delta, mask=rows < T)


@triton.jit
def _flash_backward_dkdv_kernel(
    Q, K, V, DO, LSE, DELTA, DK, DV,  # DK, DV: one (S, D) matrix per *query* head
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_ks, stride_kd,
    stride_vb, stride_vh, stride_vs, stride_vd,
    stride_dob, stride_doh, stride_dot, stride_dod,
    stride_dkb, stride_dkh, stride_dks, stride_dkd,
    H, GROUP, T, S, D, scale,
    IS_CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    # One program per key block j (Algorithm 2's outer loop, line 5, run in parallel).
    pid_bh, b, h, h_kv, k_start, cols, dims = program_tile(H, GROUP, BLOCK_N, BLOCK_D)
    Q += b * stride_qb + h * stride_qh
    K += b * stride_kb + h_kv * stride_kh
    V += b * stride_vb + h_kv * stride_vh
    DO += b * stride_dob + h * stride_doh
    DK += b * stride_dkb + h * stride_dkh  # DK and DV share one layout (same strides)
    DV += b * stride_dkb + h * stride_dkh
    LSE += pid_bh.to(tl.int64) * T
    DELTA += pid_bh.to(tl.int64) * T

    # Load K_j, V_j once (line 6) and keep dK_j, dV_j in fast memory for the whole loop (line 7).
    k_block = load_tile(K, cols, dims, S, D, stride_ks, stride_kd)
    v_block = load_tile(V, cols, dims, S, D, stride_vs, stride_vd)
    dk_block = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv_block = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)

    # Causal block skipping: the first query that sees key k_start is t = k_start - (S - T);
    # start at the query block that contains it.
    first_q = 0
    if IS_CAUSAL:
        first_q = tl.maximum(0, k_start - (S - T)) // BLOCK_M * BLOCK_M

    for q_start in range(first_q, T, BLOCK_M):  # inner loop over query blocks (line 8)
        rows = q_start + tl.arange(0, BLOCK_M)
        q_block = load_tile(Q, rows, dims, T, D, stride_qt, stride_qd)
        do_block = load_tile(DO, rows, dims, T, D, stride_dot, stride_dod)
        lse = tl.load(LSE + rows, mask=rows < T, other=0.0)
        delta = tl.load(DELTA + rows, mask=rows < T, other=0.0)
        lse_safe = tl.where(lse == float("-inf"), 0.0, lse)  # no-key rows: p = exp(-inf - 0) = 0

        # Recompute P_ij from the saved log-sum-exp (lines 9-11): exp(S_ij - lse) is already
        # normalised, so no running max is needed on the way back.
        scores = tl.dot(q_block, tl.trans(k_block), input_precision=DOT_PRECISION) * scale
        scores = tl.where(_tile_allowed(rows, cols, T, S, IS_CAUSAL), scores, float("-inf"))
        p = tl.exp(scores - lse_safe[:, None])

        # dV_j += P_ijᵀ dO_i (line 12).
        dv_block += tl.dot(tl.trans(p.to(do_block.dtype)), do_block, input_precision=DOT_PRECISION)
        # dP_ij = dO_i V_jᵀ (line 13), then the softmax backward dS_ij = P_ij ∘ (dP_ij - delta_i) (line 14).
        dp = tl.dot(do_block, tl.trans(v_block), input_precision=DOT_PRECISION)
        ds = p * (dp - delta[:, None])
        # dK_j += dS_ijᵀ Q_i (line 16); the factor `scale` is applied once, after the loop.
        dk_block += tl.dot(tl.trans(ds.to(q_block.dtype)), q_block, input_precision=DOT_PRECISION)

    # Write dK_j, dV_j back (line 18).
    store_tile(DK, dk_block * scale, cols, dims, S, D, stride_dks, stride_dkd)
    store_tile(DV, dv_block, cols, dims, S, D, stride_dks, stride_dkd)


@triton.jit
def _flash_backward_dq_kernel(
    Q, K, V, DO, LSE, DELTA, DQ,
    stride_qb, stride_qh, stride_qt, stride_qd,
    stride_kb, stride_kh, stride_ks, stride_kd,
    stride_vb, stride_vh, stride_vs, stride_vd,
    stride_dob, stride_doh, stride_dot, stride_dod,
    stride_dqb, stride_dqh, stride_dqt, stride_dqd,
    H, GROUP, T, S, D, scale,
    IS_CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    # One program per query block i: Algorithm 2's line 15 (dQ_i += dS_ij K_j), with the loops
    # swapped so that dQ_i stays in fast memory and no other program writes to it.
    pid_bh, b, h, h_kv, q_start, rows, dims = program_tile(H, GROUP, BLOCK_M, BLOCK_D)
    Q += b * stride_qb + h * stride_qh
    K += b * stride_kb + h_kv * stride_kh
    V += b * stride_vb + h_kv * stride_vh
    DO += b * stride_dob + h * stride_doh
    DQ += b * stride_dqb + h * stride_dqh

    q_block = load_tile(Q, rows, dims, T, D, stride_qt, stride_qd)
    do_block = load_tile(DO, rows, dims, T, D, stride_dot, stride_dod)
    lse = tl.load(LSE + pid_bh.to(tl.int64) * T + rows, mask=rows < T, other=0.0)
    delta = tl.load(DELTA + pid_bh.to(tl.int64) * T + rows, mask=rows < T, other=0.0)
    lse_safe = tl.where(lse == float("-inf"), 0.0, lse)
    dq_block = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    key_stop = causal_key_stop(q_start, T, S, BLOCK_M, IS_CAUSAL)  # the forward's block skipping
    for k_start in range(0, key_stop, BLOCK_N):
        cols = k_start + tl.arange(0, BLOCK_N)
        k_block = load_tile(K, cols, dims, S, D, stride_ks, stride_kd)
        v_block = load_tile(V, cols, dims, S, D, stride_vs, stride_vd)

        # Recompute P_ij, then dS_ij, exactly as in the dK/dV kernel (lines 10-14).
        scores = tl.dot(q_block, tl.trans(k_block), input_precision=DOT_PRECISION) * scale
        scores = tl.where(_tile_allowed(rows, cols, T, S, IS_CAUSAL), scores, float("-inf"))
        p = tl.exp(scores - lse_safe[:, None])
        dp = tl.dot(do_block, tl.trans(v_block), input_precision=DOT_PRECISION)
        ds = p * (dp - delta[:, None])
        # dQ_i += dS_ij K_j (line 15); `scale` is applied once, after the loop.
        dq_block += tl.dot(ds.to(k_block.dtype), k_block, input_precision=DOT_PRECISION)

    store_tile(DQ, dq_block * scale, rows, dims, T, D, stride_dqt, stride_dqd)


# ----------------------------------------------------------------------------------------------
# 5. Python side: checks, launch settings, kernel launches
# ----------------------------------------------------------------------------------------------


def check_inputs(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None, sinks: torch.Tensor | None = None
) -> tuple[dict[str, int], float]:
    """Validate q, k, v (and sinks) for the kernels; return the sizes (B, H, H_kv, T, S, D) and the scale.

    Shapes:
        q ``(B, H, T, D)``, k and v ``(B, H_kv, S, D)``, sinks ``(H,)``; each error names the argument and
        the shape.
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_floating(name, x)
    check_same_dtype(q=q, k=k, v=v)
    if q.dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"q: expected dtype float16, bfloat16 or float32, got {q.dtype}")
    sizes = check_shape("q", q, "B H T D")
    kv_sizes = check_shape("k", k, "B H_kv S D", B=sizes["B"], D=sizes["D"])
    check_shape("v", v, "B H_kv S D", **kv_sizes)
    sizes.update(kv_sizes)
    if sizes["H"] % sizes["H_kv"]:
        raise ValueError(
            f"k: expected H_kv key/value heads dividing H={sizes['H']} query heads, got H_kv={sizes['H_kv']} "
            f"(k shape {tuple(k.shape)})"
        )
    if not 1 <= sizes["D"] <= MAX_HEAD_DIM:
        raise ValueError(
            f"q: expected head dim D between 1 and {MAX_HEAD_DIM}, got shape {tuple(q.shape)}; "
            "use attn_edu.flash.tiled_attention for larger heads"
        )
    if min(sizes["T"], sizes["S"], sizes["B"], sizes["H"]) == 0:
        raise ValueError(
            f"q, k: expected non-empty (B, H, T, D) and (B, H_kv, S, D), got {tuple(q.shape)}, {tuple(k.shape)}"
        )
    if sinks is not None:
        check_sinks(sinks, (sizes["B"], sizes["H"]))
    devices = {x.device for x in (q, k, v, sinks) if x is not None}
    if len(devices) > 1:
        raise ValueError(f"q, k, v, sinks: expected tensors on one device, got {sorted(map(str, devices))}")
    if q.device.type == "cpu" and not INTERPRETING:
        raise ValueError(
            "q: got CPU tensors, but Triton kernels run on a GPU. To run them on the CPU, set "
            "TRITON_INTERPRET=1 before importing triton or this module, in a fresh Python process "
            "(slow, for learning), or use attn_edu.flash.tiled_attention."
        )
    return sizes, check_scale(scale, sizes["D"])


def _block_sizes(dtype: torch.dtype, block_m: int | None, block_n: int | None) -> tuple[int, int]:
    """The teaching kernels' tile sizes: the named constants above unless given explicitly."""
    if block_m is None:
        block_m = BLOCK_M_FP32 if dtype == torch.float32 else BLOCK_M
    if block_n is None:
        block_n = BLOCK_N_FP32 if dtype == torch.float32 else BLOCK_N
    for name, value in (("block_m", block_m), ("block_n", block_n)):
        # tl.arange needs a power of two, and tl.dot at least 16 rows.
        if isinstance(value, bool) or not isinstance(value, int) or value < 16 or value & (value - 1):
            raise ValueError(f"{name}: expected a power of two >= 16, got {value!r}")
    return block_m, block_n


def launch_options(q: torch.Tensor) -> dict:
    """Compile-time settings shared by the kernels."""
    D = q.shape[-1]
    block_d = max(16, triton.next_power_of_2(D))
    return {
        "BLOCK_D": block_d,
        # float32 products in full precision (not TF32); the argument does nothing for 16-bit inputs.
        "DOT_PRECISION": "ieee" if q.dtype == torch.float32 else "tf32",
        # Wide heads hold more accumulator registers per program: spread them over more warps.
        "num_warps": 4 if block_d <= 64 else 8,
        "num_stages": NUM_STAGES,
    }


def device_capability(device: torch.device) -> tuple[int, int] | None:
    """``(major, minor)`` compute capability of a CUDA device (9.0: Hopper); ``None`` elsewhere."""
    return torch.cuda.get_device_capability(device) if device.type == "cuda" else None


def dkdv_block_m(q: torch.Tensor, block_m: int) -> int:
    """Query rows per inner step of the dK/dV kernel: ``block_m``, capped at :data:`DKDV_BLOCK_M_FP32` for float32
    and at :data:`DKDV_BLOCK_M` for 16-bit inputs before Hopper."""
    if q.dtype == torch.float32:
        return min(block_m, DKDV_BLOCK_M_FP32)
    capability = device_capability(q.device)
    return block_m if capability is not None and capability[0] >= 9 else min(block_m, DKDV_BLOCK_M)


def as_kernel_dtype(*tensors: torch.Tensor) -> list[torch.Tensor]:
    """bfloat16 -> float32 under the interpreter only (Triton issue #11584); no-op otherwise."""
    if INTERPRETING and tensors[0].dtype == torch.bfloat16:
        return [t.float() for t in tensors]
    return list(tensors)


def flash_attention_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
    sinks: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the forward kernel: attention output and the log-sum-exp of each query's scores.

    ``lse[b, h, t] = log(sum_s exp(scores[t, s]))`` over the visible keys (``-inf`` when none is
    visible), plus ``exp(sinks[h])`` inside the sum when ``sinks`` are given; the backward recomputes the
    attention weights from it as ``exp(scores - lse)``.

    Shapes:
        q ``(B, H, T, D)``, k and v ``(B, H_kv, S, D)``, sinks ``(H,)``; returns out ``(B, H, T, D)``
        (dtype of q) and lse ``(B, H, T)`` (float32).
    """
    sizes, scale = check_inputs(q, k, v, scale, sinks)
    B, H, H_kv, T, S, D = (sizes[n] for n in ("B", "H", "H_kv", "T", "S", "D"))
    block_m, block_n = _block_sizes(q.dtype, block_m, block_n)
    dtype = q.dtype
    q, k, v = as_kernel_dtype(q, k, v)

    out = torch.empty_like(q, memory_format=torch.contiguous_format)  # (B, H, T, D)
    lse = torch.empty(B, H, T, dtype=torch.float32, device=q.device)  # (B, H, T)
    grid = (triton.cdiv(T, block_m), B * H)  # one program per (query block, batch·head)
    sink_logits = (
        lse if sinks is None else sinks.detach().float().contiguous()
    )  # (H,); never read without sinks
    _flash_forward_kernel[grid](
        q, k, v, out, lse, sink_logits,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        H, H // H_kv, T, S, D, scale,
        IS_CAUSAL=bool(is_causal), HAS_SINKS=sinks is not None, BLOCK_M=block_m, BLOCK_N=block_n,
        **launch_options(q),
    )  # fmt: skip
    return out.to(dtype), lse


def flash_attention_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    grad_out: torch.Tensor,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
    sinks: torch.Tensor | None = None,
) -> tuple[torch.Tensor, ...]:
    """Run the three backward kernels: ``delta``, then ``dK, dV`` per key block, then ``dQ`` per query block.

    With grouped-query attention each query head writes its own ``dK, dV`` and the heads of a group
    are summed afterwards (in float32), so no two programs ever write the same memory. With ``sinks``
    (the forward's ``lse`` then includes them) the kernels are unchanged, and the sinks' gradient is
    ``dsink_h = -sum_{b,t} p_sink · delta``: a sink's score has no value, so its ``dP`` is 0.

    Shapes:
        q, out and grad_out ``(B, H, T, D)``, k and v ``(B, H_kv, S, D)``, lse ``(B, H, T)``, sinks ``(H,)``;
        returns dq, dk, dv with the shapes and dtype of q, k, v, and dsinks ``(H,)`` when sinks are given.
    """
    sizes, scale = check_inputs(q, k, v, scale, sinks)
    B, H, H_kv, T, S, D = (sizes[n] for n in ("B", "H", "H_kv", "T", "S", "D"))
    check_shape("out", out, "B H T D", B=B, H=H, T=T, D=D)
    check_shape("grad_out", grad_out, "B H T D", B=B, H=H, T=T, D=D)
    check_shape("lse", lse, "B H T", B=B, H=H, T=T)
    block_m, block_n = _block_sizes(q.dtype, block_m, block_n)
    dtype, group = q.dtype, H // H_kv
    q, k, v, out, grad_out = as_kernel_dtype(q, k, v, out, grad_out.to(q.dtype))
    lse = lse.float().contiguous()  # (B, H, T)
    options = launch_options(q)

    # Algorithm 2, line 4: delta = rowsum(dO ∘ O).
    delta = torch.empty(B, H, T, dtype=torch.float32, device=q.device)  # (B, H, T)
    _flash_backward_preprocess_kernel[(triton.cdiv(T, block_m), B * H)](
        out, grad_out, delta, *out.stride(), *grad_out.stride(), H, T, D,
        BLOCK_M=block_m, BLOCK_D=options["BLOCK_D"],
        num_warps=4, num_stages=1,  # one tile per program and no loop: nothing to prefetch
    )  # fmt: skip

    # dK, dV: one program per (key block, batch·head). Grouped heads get a float32 buffer per
    # query head, summed over each group below.
    grad_dtype = q.dtype if group == 1 else torch.float32
    dk = torch.empty(B, H, S, D, dtype=grad_dtype, device=q.device)  # (B, H, S, D)
    dv = torch.empty(B, H, S, D, dtype=grad_dtype, device=q.device)  # (B, H, S, D)
    dkdv_options = {**options, "num_stages": DKDV_NUM_STAGES_FP32} if q.dtype == torch.float32 else options
    _flash_backward_dkdv_kernel[(triton.cdiv(S, block_n), B * H)](
        q, k, v, grad_out, lse, delta, dk, dv,
        *q.stride(), *k.stride(), *v.stride(), *grad_out.stride(), *dk.stride(),
        H, group, T, S, D, scale,
        IS_CAUSAL=bool(is_causal), BLOCK_M=dkdv_block_m(q, block_m), BLOCK_N=block_n, **dkdv_options,
    )  # fmt: skip

    # dQ: one program per (query block, batch·head).
    dq = torch.empty(B, H, T, D, dtype=q.dtype, device=q.device)  # (B, H, T, D)
    _flash_backward_dq_kernel[(triton.cdiv(T, block_m), B * H)](
        q, k, v, grad_out, lse, delta, dq,
        *q.stride(), *k.stride(), *v.stride(), *grad_out.stride(), *dq.stride(),
        H, group, T, S, D, scale,
        IS_CAUSAL=bool(is_causal), BLOCK_M=block_m, BLOCK_N=block_n, **options,
    )  # fmt: skip

    if group > 1:
        dk = dk.view(B, H_kv, group, S, D).sum(dim=2)  # (B, H_kv, S, D)
        dv = dv.view(B, H_kv, group, S, D).sum(dim=2)  # (B, H_kv, S, D)
    if sinks is None:
        return dq.to(dtype), dk.to(dtype), dv.to(dtype)
    p_sink = torch.exp(sinks.detach().float()[:, None] - lse)  # (B, H, T): the sink's weight in each row
    dsinks = -(p_sink * delta).sum(dim=(0, 2))  # (H,)
    return dq.to(dtype), dk.to(dtype), dv.to(dtype), dsinks.to(sinks.dtype)


# ----------------------------------------------------------------------------------------------
# 6. Autograd glue and the public function
# ----------------------------------------------------------------------------------------------


class _FlashAttention(torch.autograd.Function):
    """Saves q, k, v, out and lse (``O(T + S)`` rows per head), never the ``(T, S)`` attention matrix."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal, scale, block_m, block_n, sinks):  # type: ignore[override]
        options = {"is_causal": is_causal, "scale": scale, "block_m": block_m, "block_n": block_n}
        out, lse = flash_attention_forward(q, k, v, sinks=sinks, **options)
        ctx.save_for_backward(q, k, v, out, lse, sinks)
        ctx.options = options
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):  # type: ignore[override]
        q, k, v, out, lse, sinks = ctx.saved_tensors
        grads = flash_attention_backward(q, k, v, out, lse, grad_out, sinks=sinks, **ctx.options)
        dsinks = grads[3] if sinks is not None else None
        return *grads[:3], None, None, None, None, dsinks


def refuse_mask(mask: object) -> None:
    """Raise a ValueError naming ``mask`` unless it is None: the kernels support only ``is_causal``."""
    if mask is not None:
        raise ValueError(
            "mask: this kernel supports only is_causal (no boolean mask tensor); use "
            "attn_edu.flash.tiled_attention or attn_edu.attention.scaled_dot_product_attention for masks"
        )


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """FlashAttention-2 on the GPU: exact attention without the ``(T, S)`` matrix, with gradients.

    ``softmax(q kᵀ · scale) v`` computed tile by tile (Dao 2023, "FlashAttention-2", Algorithms 1-2;
    Dao et al. 2022, "FlashAttention"). Same result as
    :func:`attn_edu.attention.scaled_dot_product_attention` and the same conventions: ``is_causal``
    bottom-right aligned (``torch.nn.functional.scaled_dot_product_attention`` aligns top-left when
    ``T != S``), zeros for a query that sees no key. ``mask`` exists only so that every attention
    function shares one signature: it must be ``None`` (use ``is_causal``). ``block_m`` and
    ``block_n`` override the tile sizes (powers of two >= 16; defaults :data:`BLOCK_M`,
    :data:`BLOCK_N`, or :data:`BLOCK_M_FP32`, :data:`BLOCK_N_FP32` for float32); the dK/dV kernel streams query tiles of at
    most :data:`DKDV_BLOCK_M` rows before Hopper and :data:`DKDV_BLOCK_M_FP32` for float32 (:func:`dkdv_block_m`).
    ``sinks`` ``(H,)`` are gpt-oss's learned sink logits, one per query head, with their own gradient (as
    :func:`attn_edu.attention.scaled_dot_product_attention`'s ``sinks``).

    Shapes:
        q ``(B, H, T, D)``, k and v ``(B, H_kv, S, D)`` with ``H_kv`` dividing ``H``, ``1 <= D <= 128``;
        returns ``(B, H, T, D)``.

    Example (needs a GPU, or CPU tensors with ``TRITON_INTERPRET=1``; plain doctest runs skip it,
    ``tests/test_triton_flash.py`` runs it in the interpreter):
        >>> from attn_edu.attention import scaled_dot_product_attention
        >>> device = "cpu" if INTERPRETING else "cuda"
        >>> q, k, v = (torch.randn(1, 2, 20, 16, device=device) for _ in range(3))  # doctest: +SKIP
        >>> out = flash_attention(q, k, v, is_causal=True)  # (B, H, T, D)  # doctest: +SKIP
        >>> ref = scaled_dot_product_attention(q, k, v, is_causal=True)  # doctest: +SKIP
        >>> torch.allclose(out, ref, atol=1e-5)  # doctest: +SKIP
        True
    """
    refuse_mask(mask)
    check_inputs(q, k, v, scale, sinks)  # fail here with a clear message, not inside autograd
    _block_sizes(q.dtype, block_m, block_n)
    return _FlashAttention.apply(q, k, v, bool(is_causal), scale, block_m, block_n, sinks)


__all__ = [
    "BLOCK_M",
    "BLOCK_M_FP32",
    "BLOCK_N",
    "BLOCK_N_FP32",
    "INTERPRETING",
    "flash_attention",
    "flash_attention_backward",
    "flash_attention_forward",
    # building blocks that attn_edu.kernels.triton_flash_fast shares
    "as_kernel_dtype",
    "causal_key_stop",
    "check_inputs",
    "launch_options",
    "load_tile",
    "program_tile",
    "refuse_mask",
    "store_tile",
    "tile_allowed",
]
