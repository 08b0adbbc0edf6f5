"""FlashAttention in plain PyTorch: online softmax and tiled attention that never builds the (T, S) matrix.

Standard attention writes the full score matrix ``softmax(Q Kᵀ)`` to memory: ``O(T·S)`` numbers.
FlashAttention (Dao et al. 2022; FlashAttention-2, Dao 2023) computes the *same* result tile by tile:

1. **Online softmax** (Milakov & Gimelshein 2018): a softmax can be computed in one streaming pass
   by keeping a running maximum ``m_i`` and a running sum ``l_i`` and *rescaling* the sum whenever
   the maximum grows.
2. **Tiling**: split the queries into blocks of ``block_q`` rows and the keys/values into blocks of
   ``block_k`` rows. For each query block, stream over the key blocks, keeping only ``m_i``, ``l_i``
   and an output accumulator ``acc``. Memory is ``O(T·D)``, not ``O(T·S)``.
3. **Recomputation in the backward**: instead of storing the attention matrix for autograd, keep
   one number per query, the log-sum-exp ``lse``, and recompute each tile of ``P`` when needed.

The variable names (``m_i``, ``l_i``, ``acc``, ``lse``, ``q_block``, ``k_block``, ``v_block``,
``scores``, ``p``) are those of the Triton kernel in :mod:`attn_edu.kernels.triton_flash`, which
follows this file line by line. Conventions are those of :mod:`attn_edu.attention`: boolean masks
with ``True`` = may attend, bottom-right causal alignment, and zeros (never NaN) for a query that
sees no key. At a little over 600 lines it reads best whole: its sections are the kernel's, in order.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from attn_edu._validate import (
    check_floating,
    check_mask,
    check_positive_int,
    check_qkv,
    check_scale,
    check_shape,
    check_sinks,
)
from attn_edu.masks import causal_mask

NEG_INF = float("-inf")


# ----------------------------------------------------------------------------------------------
# 1. Online softmax
# ----------------------------------------------------------------------------------------------


def _safe_max(m: torch.Tensor) -> torch.Tensor:
    """``m`` with ``-inf`` replaced by 0, to subtract from scores without computing ``-inf - -inf = NaN``.

    A row whose running maximum is still ``-inf`` has seen only hidden entries; subtracting 0
    leaves them at ``exp(-inf) = 0``, which is the right answer.
    """
    return torch.where(torch.isneginf(m), torch.zeros_like(m), m)


def online_softmax_steps(x: torch.Tensor, block_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Stream over ``x`` in blocks and yield the running max ``m_i`` and running sum ``l_i`` after each.

    After the block ``x[j*b : (j+1)*b]``::

        m_new = max(m_i, max(x_block))
        l_i   = l_i · exp(m_i - m_new) + sum(exp(x_block - m_new))      # rescale, then add
        m_i   = m_new

    Invariant: ``l_i = sum(exp(x_seen - m_i))`` over every element seen so far. When the max grows,
    every old term ``exp(x - m_old)`` must become ``exp(x - m_new)``: one multiplication by
    ``exp(m_old - m_new)`` fixes the whole sum at once (Milakov & Gimelshein 2018, Algorithm 3).

    Shapes:
        x ``(..., N)``; yields ``m_i`` and ``l_i`` of shape ``(...)``, float32.

    Example:
        >>> for m_i, l_i in online_softmax_steps(torch.tensor([1.0, 3.0, 2.0]), block_size=2):
        ...     print(round(m_i.item(), 3), round(l_i.item(), 3))
        3.0 1.135
        3.0 1.503
    """
    check_floating("x", x)
    sizes = check_shape("x", x, "... N")
    if sizes["N"] == 0:
        raise ValueError(f"x: expected shape (..., N) with N >= 1, got {tuple(x.shape)}")
    check_positive_int("block_size", block_size)
    return _online_softmax_steps(x, block_size)


def _online_softmax_steps(x: torch.Tensor, block_size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    N = x.shape[-1]
    m_i = torch.full(x.shape[:-1], NEG_INF, device=x.device)  # (...)
    l_i = torch.zeros(x.shape[:-1], device=x.device)  # (...)
    for start in range(0, N, block_size):
        x_block = x[..., start : start + block_size].float()  # (..., b)
        m_new = torch.maximum(m_i, x_block.amax(dim=-1))  # (...)
        m_safe = _safe_max(m_new)
        l_i = l_i * torch.exp(m_i - m_safe) + torch.exp(x_block - m_safe[..., None]).sum(dim=-1)
        m_i = m_new
        yield m_i, l_i


def online_softmax(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """Softmax over the last dim in two passes: one streaming pass for (max, sum), one to normalise.

    The textbook "safe" softmax reads ``x`` three times (max, then sum, then divide); the online
    version fuses the first two (see :func:`online_softmax_steps`). Equal to ``torch.softmax(x, -1)``;
    a row that is entirely ``-inf`` gives zeros instead of NaN, as in the rest of the course.

    Shapes:
        x ``(..., N)``; returns ``(..., N)`` in ``x.dtype`` (computed in float32).

    Example:
        >>> x = torch.tensor([1.0, 3.0, 2.0, 0.5, -1.0])
        >>> torch.allclose(online_softmax(x, block_size=2), torch.softmax(x, dim=-1))
        True
    """
    m_i = l_i = torch.empty(0)
    for step in online_softmax_steps(x, block_size):
        m_i, l_i = step  # only the state after the last block is needed
    probs = torch.exp(x.float() - _safe_max(m_i)[..., None])  # (..., N)
    probs = probs / torch.where(l_i > 0, l_i, torch.ones_like(l_i))[..., None]  # (..., N)
    return probs.to(x.dtype)


def logsumexp_from_stats(m_i: torch.Tensor, l_i: torch.Tensor) -> torch.Tensor:
    """``log Σ_j exp(x_j)`` of each row from its running max ``m_i`` and running sum ``l_i``.

    Since ``l_i = Σ_j exp(x_j − m_i)``, ``log Σ_j exp(x_j) = m_i + log l_i``, and ``exp(m_i)`` is never
    formed (it overflows float32 beyond 88). A row that saw no visible entry (``l_i = 0``, ``m_i = −inf``)
    gets ``−inf``, the log of an empty sum. This is the one number per query that FlashAttention keeps
    for the backward pass (Algorithm 1, line 13).

    Shapes:
        m_i, l_i ``(...)``; returns ``(...)``.

    Example:
        >>> x = torch.tensor([[1.0, 3.0, 2.0, 80.0, 95.0]])
        >>> m_i, l_i = list(online_softmax_steps(x, block_size=2))[-1]
        >>> torch.allclose(logsumexp_from_stats(m_i, l_i), torch.logsumexp(x, dim=-1))
        True
    """
    has_key = l_i > 0
    return torch.where(has_key, m_i + torch.log(torch.where(has_key, l_i, torch.ones_like(l_i))), NEG_INF)


# ----------------------------------------------------------------------------------------------
# 2. Input checks and masks for one tile
# ----------------------------------------------------------------------------------------------


def _check_inputs(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float | None,
    block_q: int,
    block_k: int,
) -> tuple[tuple[int, ...], float]:
    """Validate the arguments; return the broadcast batch shape and the softmax scale."""
    sizes = check_qkv(q, k, v)
    batch = sizes["batch"]
    if mask is not None:
        check_mask("mask", mask, (*batch, sizes["T"], sizes["S"]))
    check_positive_int("block_q", block_q)
    check_positive_int("block_k", block_k)
    return batch, check_scale(scale, sizes["D"])


def _tile_allowed(
    q_start: int,
    q_end: int,
    k_start: int,
    k_end: int,
    T: int,
    S: int,
    is_causal: bool,
    mask: torch.Tensor | None,
    device: torch.device,
) -> torch.Tensor | None:
    """Which (query, key) pairs of one tile may attend; ``None`` when all of them may.

    Causal is bottom-right aligned: query ``t`` sits at absolute position ``S - T + t`` and sees keys
    ``s <= S - T + t``. Only the tile's own ``(block_q, block_k)`` piece is built, never ``(T, S)``.
    """
    allowed = None
    # A tile needs the causal test only if its last key lies after its first query's position.
    if is_causal and k_end - 1 > S - T + q_start:
        rows = torch.arange(q_start, q_end, device=device)[:, None] + (S - T)  # (block_q, 1)
        cols = torch.arange(k_start, k_end, device=device)[None, :]  # (1, block_k)
        allowed = cols <= rows  # (block_q, block_k)
    if mask is not None:
        tile = mask[..., q_start:q_end, k_start:k_end]  # (..., block_q, block_k)
        allowed = tile if allowed is None else allowed & tile
    return allowed


def _key_stop(q_end: int, T: int, S: int, is_causal: bool) -> int:
    """One past the last key any query in ``[.., q_end)`` may see: later key blocks are skipped."""
    if not is_causal:
        return S
    return max(0, min(S, S - T + q_end))  # last query q_end - 1 sees keys <= S - T + q_end - 1


def _query_start(k_start: int, T: int, S: int, is_causal: bool) -> int:
    """The first query that may see key ``k_start``: earlier query blocks are skipped in the backward."""
    if not is_causal:
        return 0
    return min(T, max(0, k_start - (S - T)))


# ----------------------------------------------------------------------------------------------
# 3. Tiled forward (FlashAttention-2, Algorithm 1)
# ----------------------------------------------------------------------------------------------


def tiled_attention_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    block_q: int = 64,
    block_k: int = 64,
    sinks: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tiled attention forward pass; also returns the log-sum-exp the backward needs.

    For each query block (outer loop) and each key block (inner loop), FlashAttention-2
    (Dao 2023, Algorithm 1, lines 8-10) updates three running quantities per query row::

        scores = q_block k_blockᵀ · scale
        m_new  = max(m_i, rowmax(scores))
        p      = exp(scores - m_new)
        l_i    = l_i · exp(m_i - m_new) + rowsum(p)
        acc    = acc · exp(m_i - m_new) + p v_block
        m_i    = m_new

    and at the end (lines 12-13) ``out = acc / l_i`` and ``lse = m_i + log(l_i)``.
    With ``is_causal`` key blocks that lie entirely in the future of a query block are skipped
    (never loaded), and only tiles that straddle the diagonal are masked. A query with no visible key
    keeps ``l_i = 0``: its output is zeros and its ``lse`` is ``-inf``.

    ``mask`` (optional, bool, broadcastable to ``(..., T, S)``) is read one tile at a time.
    Accumulation is in float32; ``out`` is returned in the input dtype, ``lse`` in float32.

    Learned sink logits (``sinks``, ``(H,)``, gpt-oss; see
    :func:`attn_edu.attention.scaled_dot_product_attention`) change one line: the running statistics start
    from the sink instead of from nothing, ``m_i = sink`` and ``l_i = 1`` (the sink's own ``exp(sink - m_i)``),
    with nothing added to ``acc`` since the sink has no value. ``lse`` then includes the sink, and a query
    with no visible key returns zeros with ``lse = sink``.

    Shapes:
        q ``(..., T, D)``, k ``(..., S, D)``, v ``(..., S, Dv)`` (leading dims broadcast), sinks ``(H,)``
        for q ``(..., H, T, D)``; returns out ``(..., T, Dv)`` and lse ``(..., T)``.

    Example:
        >>> q, k, v = torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 3)
        >>> out, lse = tiled_attention_forward(q, k, v, block_q=2, block_k=3)
        >>> out.shape, lse.shape
        (torch.Size([2, 5, 3]), torch.Size([2, 5]))
        >>> torch.allclose(lse, torch.logsumexp(q @ k.mT / 8**0.5, dim=-1), atol=1e-6)
        True
    """
    batch, scale = _check_inputs(q, k, v, mask, scale, block_q, block_k)
    T, S, Dv = q.shape[-2], k.shape[-2], v.shape[-1]
    sink = (
        None if sinks is None else check_sinks(sinks, batch).float().expand(*batch, block_q)
    )  # (..., block_q)
    q = q.expand(*batch, *q.shape[-2:])  # (..., T, D)
    k = k.expand(*batch, *k.shape[-2:])  # (..., S, D)
    v = v.expand(*batch, *v.shape[-2:])  # (..., S, Dv)
    if mask is not None:
        mask = mask.expand(*batch, T, S)  # (..., T, S), a view: no copy

    out = torch.empty(*batch, T, Dv, dtype=q.dtype, device=q.device)  # (..., T, Dv)
    lse = torch.empty(*batch, T, dtype=torch.float32, device=q.device)  # (..., T)

    for q_start in range(0, T, block_q):  # outer loop: one query block at a time (Alg. 1, line 3)
        q_end = min(q_start + block_q, T)
        q_block = q[..., q_start:q_end, :].float()  # (..., block_q, D): load Q_i (line 4)
        m_i = torch.full((*batch, q_end - q_start), NEG_INF, device=q.device)  # (..., block_q)
        l_i = torch.zeros(*batch, q_end - q_start, device=q.device)  # (..., block_q)
        acc = torch.zeros(*batch, q_end - q_start, Dv, device=q.device)  # (..., block_q, Dv)
        if sink is not None:  # a learned sink: the softmax starts from it (one term, no value)
            m_i, l_i = sink[..., : q_end - q_start].clone(), torch.ones_like(l_i)

        # Inner loop over key blocks (line 6); causal block skipping stops at the last visible key.
        for k_start in range(0, _key_stop(q_end, T, S, is_causal), block_k):
            k_end = min(k_start + block_k, S)
            k_block = k[..., k_start:k_end, :].float()  # (..., block_k, D): load K_j (line 7)
            v_block = v[..., k_start:k_end, :].float()  # (..., block_k, Dv): load V_j

            scores = (q_block @ k_block.transpose(-2, -1)) * scale  # (..., block_q, block_k): S_ij (line 8)
            allowed = _tile_allowed(q_start, q_end, k_start, k_end, T, S, is_causal, mask, q.device)
            if allowed is not None:  # only diagonal tiles (or a user mask) pay for masking
                scores = scores.masked_fill(~allowed, NEG_INF)  # (..., block_q, block_k)

            m_new = torch.maximum(m_i, scores.amax(dim=-1))  # (..., block_q): m_ij (line 9)
            m_safe = _safe_max(m_new)  # rows that have seen no key yet keep p = 0, not NaN
            p = torch.exp(scores - m_safe[..., None])  # (..., block_q, block_k): P~_ij
            alpha = torch.exp(m_i - m_safe)  # (..., block_q): how much the old max overestimated
            l_i = l_i * alpha + p.sum(dim=-1)  # (..., block_q): l_ij (line 9)
            acc = acc * alpha[..., None] + p @ v_block  # (..., block_q, Dv): O_ij (line 10)
            m_i = m_new

        # Lines 12-13: normalise once at the end, and keep lse = m + log(l) for the backward.
        # A row with l_i = 0 saw no key: output zeros, lse = -inf (log 0), never 0/0.
        l_safe = torch.where(l_i > 0, l_i, torch.ones_like(l_i))  # (..., block_q)
        out[..., q_start:q_end, :] = (acc / l_safe[..., None]).to(out.dtype)  # (..., block_q, Dv)
        lse[..., q_start:q_end] = logsumexp_from_stats(m_i, l_i)  # (..., block_q)
    return out, lse


# ----------------------------------------------------------------------------------------------
# 4. Tiled backward (FlashAttention-2, Algorithm 2)
# ----------------------------------------------------------------------------------------------


def tiled_attention_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    grad_out: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    block_q: int = 64,
    block_k: int = 64,
    sinks: torch.Tensor | None = None,
) -> tuple[torch.Tensor, ...]:
    """Gradients of tiled attention, recomputing each tile of ``P`` from ``q``, ``k`` and ``lse``.

    FlashAttention-2 (Dao 2023, Algorithm 2) loops over key blocks (outer: ``dK_j`` and ``dV_j``
    stay in fast memory) and query blocks (inner), with ``delta = rowsum(dO ∘ O)`` precomputed::

        p   = exp(q_block k_blockᵀ · scale - lse)      # the forward's P_ij, recomputed (line 11)
        dV_j += pᵀ dO_i                                  # line 12
        dP   = dO_i V_jᵀ                                 # line 13
        dS   = p ∘ (dP - delta_i)                        # softmax backward (line 14)
        dQ_i += dS K_j · scale                           # line 15
        dK_j += dSᵀ Q_i · scale                          # line 16

    ``delta_i = rowsum(dO_i ∘ O_i)`` equals ``rowsum(P ∘ dP)``, so the softmax backward needs no
    full row of ``P``. Rows with ``lse = -inf`` (no visible key) get ``p = 0`` and zero gradients.
    Gradients of broadcast leading dims are summed back to each input's shape.

    With ``sinks`` (the forward's ``lse`` then includes them) nothing in the loop changes: the sink is one
    more softmax term with no value, so its logit's gradient is ``dsink = -Σ p_sink · delta`` over batch and
    queries, with ``p_sink = exp(sink - lse)``, and it is returned as a fourth gradient.

    Shapes:
        q ``(..., T, D)``, k ``(..., S, D)``, v ``(..., S, Dv)``, out and grad_out ``(..., T, Dv)``,
        lse ``(..., T)``, sinks ``(H,)``; returns dq, dk, dv with the shapes (and dtype) of q, k, v, and
        dsinks ``(H,)`` when sinks are given.

    Example:
        >>> q, k, v = (torch.randn(3, 4, requires_grad=True) for _ in range(3))
        >>> out, lse = tiled_attention_forward(q, k, v, block_q=2, block_k=2)
        >>> dq, dk, dv = tiled_attention_backward(q, k, v, out, lse, torch.ones(3, 4), block_q=2, block_k=2)
        >>> torch.nn.functional.scaled_dot_product_attention(q, k, v).sum().backward()
        >>> torch.allclose(dq, q.grad, atol=1e-6) and torch.allclose(dv, v.grad, atol=1e-6)
        True
    """
    batch, scale = _check_inputs(q, k, v, mask, scale, block_q, block_k)
    T, S, D, Dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    check_shape("out", out, "... T Dv", T=T, Dv=Dv)
    check_shape("grad_out", grad_out, "... T Dv", T=T, Dv=Dv)
    check_shape("lse", lse, "... T", T=T)
    q_full = q.expand(*batch, T, D)  # (..., T, D)
    k_full = k.expand(*batch, S, D)  # (..., S, D)
    v_full = v.expand(*batch, S, Dv)  # (..., S, Dv)
    grad_out = grad_out.expand(*batch, T, Dv)  # (..., T, Dv)
    if mask is not None:
        mask = mask.expand(*batch, T, S)  # (..., T, S), a view

    # Preprocessing: delta = rowsum(dO ∘ O) (Alg. 2, line 4), one number per query.
    delta = (grad_out.float() * out.float()).sum(dim=-1).expand(*batch, T)  # (..., T)
    lse = lse.float().expand(*batch, T)  # (..., T)
    lse_safe = _safe_max(lse)  # rows that saw no key: scores are all -inf, so p = exp(-inf) = 0

    dq = torch.zeros(*batch, T, D, device=q.device)  # (..., T, D), float32 accumulator
    dk = torch.zeros(*batch, S, D, device=q.device)  # (..., S, D)
    dv = torch.zeros(*batch, S, Dv, device=q.device)  # (..., S, Dv)

    for k_start in range(0, S, block_k):  # outer loop over key blocks (line 5)
        k_end = min(k_start + block_k, S)
        k_block = k_full[..., k_start:k_end, :].float()  # (..., block_k, D)
        v_block = v_full[..., k_start:k_end, :].float()  # (..., block_k, Dv)
        dk_block = torch.zeros_like(k_block)  # (..., block_k, D): dK_j in fast memory (line 7)
        dv_block = torch.zeros_like(v_block)  # (..., block_k, Dv): dV_j

        # Causal block skipping: query blocks that end before the first query seeing k_start.
        first_q = _query_start(k_start, T, S, is_causal) // block_q * block_q
        for q_start in range(first_q, T, block_q):  # inner loop over query blocks (line 8)
            q_end = min(q_start + block_q, T)
            q_block = q_full[..., q_start:q_end, :].float()  # (..., block_q, D)
            do_block = grad_out[..., q_start:q_end, :].float()  # (..., block_q, Dv)

            scores = (q_block @ k_block.transpose(-2, -1)) * scale  # (..., block_q, block_k) (line 10)
            allowed = _tile_allowed(q_start, q_end, k_start, k_end, T, S, is_causal, mask, q.device)
            if allowed is not None:
                scores = scores.masked_fill(~allowed, NEG_INF)  # (..., block_q, block_k)
            p = torch.exp(scores - lse_safe[..., q_start:q_end, None])  # (..., block_q, block_k) (line 11)

            dv_block += p.transpose(-2, -1) @ do_block  # (..., block_k, Dv) (line 12)
            dp = do_block @ v_block.transpose(-2, -1)  # (..., block_q, block_k) (line 13)
            ds = p * (dp - delta[..., q_start:q_end, None])  # (..., block_q, block_k) (line 14)
            dq[..., q_start:q_end, :] += (ds @ k_block) * scale  # (..., block_q, D) (line 15)
            dk_block += (ds.transpose(-2, -1) @ q_block) * scale  # (..., block_k, D) (line 16)

        dk[..., k_start:k_end, :] = dk_block  # write dK_j, dV_j back (line 18)
        dv[..., k_start:k_end, :] = dv_block

    # Leading dims that were broadcast (e.g. one k shared by every head) get their gradients summed.
    dq = dq.sum_to_size(q.shape).to(q.dtype)  # (..., T, D)
    dk = dk.sum_to_size(k.shape).to(k.dtype)  # (..., S, D)
    dv = dv.sum_to_size(v.shape).to(v.dtype)  # (..., S, Dv)
    if sinks is None:
        return dq, dk, dv
    p_sink = torch.exp(check_sinks(sinks, batch).float() - lse)  # (..., H, T): the sink's share of each row
    dsinks = -(p_sink * delta).sum(dim=-1).sum_to_size(sinks.shape)  # (H,): summed over batch and queries
    return dq, dk, dv, dsinks.to(sinks.dtype)


# ----------------------------------------------------------------------------------------------
# 5. Autograd glue and the public function
# ----------------------------------------------------------------------------------------------


class _TiledAttention(torch.autograd.Function):
    """Saves only q, k, v, out and lse (``O(T + S)`` rows), never the ``(T, S)`` attention matrix."""

    @staticmethod
    def forward(ctx, q, k, v, mask, is_causal, scale, block_q, block_k, sinks):  # type: ignore[override]
        options = {"is_causal": is_causal, "scale": scale, "block_q": block_q, "block_k": block_k}
        out, lse = tiled_attention_forward(q, k, v, mask=mask, sinks=sinks, **options)
        ctx.save_for_backward(q, k, v, out, lse, sinks)
        ctx.mask, ctx.options = mask, options
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):  # type: ignore[override]
        q, k, v, out, lse, sinks = ctx.saved_tensors
        grads = tiled_attention_backward(
            q, k, v, out, lse, grad_out, mask=ctx.mask, sinks=sinks, **ctx.options
        )
        dsinks = grads[3] if sinks is not None else None
        return *grads[:3], None, None, None, None, None, dsinks


def tiled_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    block_q: int = 64,
    block_k: int = 64,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """FlashAttention in PyTorch: the same output as the reference, in ``O(T·D)`` extra memory.

    Forward: :func:`tiled_attention_forward` (online softmax over key blocks). Backward:
    :func:`tiled_attention_backward` (recomputes ``P`` tile by tile from the saved log-sum-exp).
    Same arguments and conventions as :func:`attn_edu.attention.scaled_dot_product_attention`
    (bool ``mask`` with True = may attend, bottom-right ``is_causal``, zeros for a query with no
    visible key), plus the tile sizes ``block_q`` and ``block_k``, which need not divide T or S, and
    learned sink logits ``sinks`` ``(H,)`` (gpt-oss), which get their own gradient.

    This is a teaching version: the loops run in Python, so it is slower than the reference on a
    CPU. What it shows is the memory: notebook 12 and ``python -m attn_edu.bench memory`` measure it.

    Shapes:
        q ``(..., T, D)``, k ``(..., S, D)``, v ``(..., S, Dv)``, mask broadcastable to
        ``(..., T, S)``; returns ``(..., T, Dv)``.

    Example:
        >>> from attn_edu.attention import scaled_dot_product_attention
        >>> q, k, v = torch.randn(2, 3, 37, 8), torch.randn(2, 3, 53, 8), torch.randn(2, 3, 53, 8)
        >>> out = tiled_attention(q, k, v, is_causal=True, block_q=16, block_k=16)   # (B, H, T, D)
        >>> ref = scaled_dot_product_attention(q, k, v, is_causal=True)
        >>> torch.allclose(out, ref, atol=1e-5)
        True
    """
    batch, _ = _check_inputs(q, k, v, mask, scale, block_q, block_k)  # fail here, not inside autograd
    if sinks is not None:
        check_sinks(sinks, batch)
    return _TiledAttention.apply(q, k, v, mask, bool(is_causal), scale, block_q, block_k, sinks)


# ----------------------------------------------------------------------------------------------
# 6. Split-KV decoding (FlashDecoding)
# ----------------------------------------------------------------------------------------------


def combine_splits(outs: torch.Tensor, lses: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge attention computed separately over disjoint groups of keys into attention over all of them.

    Split ``j`` saw keys ``K_j`` and returned ``out_j = Σ_{s∈K_j} e^{x_s} v_s / Σ_{s∈K_j} e^{x_s}`` and
    ``lse_j = log Σ_{s∈K_j} e^{x_s}``. The whole softmax's denominator is ``Σ_j e^{lse_j}``, so

        lse = logsumexp_j(lse_j),    out = Σ_j e^{lse_j − lse} · out_j

    the same rescaling as the online softmax, done once across splits instead of step by step. A split
    with no visible key (``lse_j = −inf``) gets weight 0; a query that saw nothing anywhere gets zeros.

    Shapes:
        outs ``(splits, ..., T, Dv)``, lses ``(splits, ..., T)``; returns ``(..., T, Dv)`` and ``(..., T)``.

    Example:
        >>> x, v = torch.randn(1, 6), torch.randn(6, 2)                     # one query's scores, 6 values
        >>> halves = [(torch.softmax(x[:, i:i + 3], -1) @ v[i:i + 3], torch.logsumexp(x[:, i:i + 3], -1))
        ...           for i in (0, 3)]
        >>> out, lse = combine_splits(*map(torch.stack, zip(*halves)))
        >>> torch.allclose(out, torch.softmax(x, -1) @ v, atol=1e-6)
        True
    """
    check_floating("outs", outs)
    check_floating("lses", lses)
    if lses.dim() < 2 or tuple(outs.shape[:-1]) != tuple(lses.shape):
        raise ValueError(
            f"lses: expected shape {tuple(outs.shape[:-1])} (outs without its last dim), got {tuple(lses.shape)}"
        )
    lse = torch.logsumexp(lses.float(), dim=0)  # (..., T); -inf where no split saw a key
    weights = torch.exp(lses.float() - _safe_max(lse))  # (J, ..., T): e^{lse_j - lse}, 0 for empty splits
    out = (weights[..., None] * outs.float()).sum(dim=0)  # (..., T, Dv)
    return out.to(outs.dtype), lse


def split_kv_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    num_splits: int,
    is_causal: bool = False,
    scale: float | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention over a long cache cut into ``num_splits`` pieces that can run side by side (FlashDecoding).

    While decoding, ``T = 1``: FlashAttention parallelises over batch, heads and query blocks, which is one
    program per (batch, head), too few to fill a GPU at batch 1. FlashDecoding (Dao, Haziza, Massa and
    Sizov, 2023, "Flash-Decoding for long-context inference") splits the *keys* instead: each piece runs
    :func:`tiled_attention_forward` on its keys and returns its output and log-sum-exp, and
    :func:`combine_splits` merges them exactly. The pieces are computed one after another here; on a GPU
    they are separate programs. ``mask`` and ``is_causal`` (bottom-right) refer to the whole ``(T, S)``.
    Learned sink logits (``sinks``, ``(H,)``) join as one more split: output zeros, log-sum-exp the sink.

    Shapes:
        q ``(..., T, D)``, k ``(..., S, D)``, v ``(..., S, Dv)``; returns ``(..., T, Dv)``.

    Example:
        >>> from attn_edu.attention import scaled_dot_product_attention
        >>> q, k, v = torch.randn(1, 8, 1, 16), torch.randn(1, 8, 1000, 16), torch.randn(1, 8, 1000, 16)
        >>> torch.allclose(split_kv_attention(q, k, v, num_splits=7), scaled_dot_product_attention(q, k, v), atol=1e-5)
        True
    """
    batch, _ = _check_inputs(q, k, v, mask, scale, 1, 1)
    check_positive_int("num_splits", num_splits)
    T, S = q.shape[-2], k.shape[-2]
    if num_splits > S:
        raise ValueError(f"num_splits: expected at most S = {S} (one key per split), got {num_splits}")
    if is_causal:
        causal = causal_mask(T, S, device=q.device)  # (T, S), bottom-right
        mask = causal if mask is None else mask & causal
    if mask is not None:
        mask = mask.expand(*batch, T, S)  # (..., T, S)
    bounds = [round(j * S / num_splits) for j in range(num_splits + 1)]  # near-equal pieces of the keys
    outs, lses = [], []
    for start, end in zip(bounds[:-1], bounds[1:]):
        piece_mask = None if mask is None else mask[..., start:end]  # (..., T, S_j)
        out_j, lse_j = tiled_attention_forward(
            q, k[..., start:end, :], v[..., start:end, :], mask=piece_mask, scale=scale, block_k=end - start
        )  # (..., T, Dv), (..., T)
        outs.append(out_j)
        lses.append(lse_j)
    if sinks is not None:  # the sink is a split of its own: no value, so its output is zeros
        outs.append(torch.zeros_like(outs[0]))
        lses.append(check_sinks(sinks, batch).float().expand_as(lses[0]))  # (..., H, T)
    return combine_splits(torch.stack(outs), torch.stack(lses))[0]  # (..., T, Dv)


def causal_tile_count(T: int, S: int, block_q: int, block_k: int) -> int:
    """How many (query block, key block) tiles a causal tiled forward computes; fully masked ones are skipped.

    The count of :func:`tiled_attention_forward`'s key loop (and the Triton kernel's): query block ``i``
    ends at ``q_end = min((i + 1)·block_q, T)`` and its last query sees keys ``<= S - T + q_end - 1``
    (bottom-right), so it computes ``⌈min(S, S - T + q_end) / block_k⌉`` tiles, none if that is ``<= 0``;
    ragged last blocks are whole tiles. ``T == S == n·b`` gives ``n(n + 1)/2`` of the ``n²`` tiles.

    Shapes:
        ``T``, ``S``, ``block_q``, ``block_k`` ints; returns an int.

    Example:
        >>> causal_tile_count(10, 10, 4, 3), causal_tile_count(5, 9, 4, 4), causal_tile_count(9, 2, 4, 4)
        (9, 5, 2)
    """
    for name, value in (("T", T), ("S", S), ("block_q", block_q), ("block_k", block_k)):
        check_positive_int(name, value)
    stops = [_key_stop(min(q_start + block_q, T), T, S, True) for q_start in range(0, T, block_q)]
    return sum(-(-stop // block_k) for stop in stops)  # ceil division: a ragged key block is a whole tile


__all__ = [
    "combine_splits",
    "logsumexp_from_stats",
    "online_softmax",
    "online_softmax_steps",
    "split_kv_attention",
    "tiled_attention",
    "tiled_attention_backward",
    "tiled_attention_forward",
]
