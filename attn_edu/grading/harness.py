"""The given code around an exercise, owned by the grader: what the learner wrote is what is graded.

For the Triton exercises, the eight steps of notebook 12's ladder (12.11, 12.4, 12.12, 12.5, 12.13, 12.14, 12.7,
12.8), the check does not call the learner's launcher: it finds the learner's ``@triton.jit`` function by name
(:data:`KERNELS`) and launches it here, with the grid and block sizes of the notebook's given launcher, on
tensors on the input's device. A launcher rewritten in PyTorch (``return
torch.softmax(x, -1)``) therefore grades nothing but the kernel beside it. Exercise 12.1 likewise: the learner
writes ``online_softmax_update`` and the notebook gives the driver ``online_softmax`` around it; the check runs
its own copy of the driver (:func:`online_softmax`) on the learner's update, so an edited driver grades nothing. In Triton's interpreter the loads
are watched as well (:func:`attn_edu.grading.bounds.bounds_checked`): a masked lane loaded without ``other=``
reads NaN, as a GPU leaves it undefined, and the attention kernels (12.13, 12.14, 12.7) must load keys one block
at a time, their causal programs skipping the key blocks above their diagonal (:func:`_check_skipping`).

No answer is here: these are the notebook's given launchers. The check modules and the grading command's
worker both use them, so they live outside the answer key.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

import torch

BLOCK_M = 16  # query rows per program (12.13, 12.14, 12.7, 12.8); rows of a tile of 12.12
BLOCK_N = 16  # keys per step of the loop (12.13, 12.14, 12.7, 12.8); columns of a tile of 12.12
BLOCK_K = 16  # head dims per step of 12.12's loop (tl.dot needs 16 or more on each side)
LSE_BLOCK = 16  # columns per step of 12.5's loop
TILE_T, TILE_S = 16, 32  # the (queries, keys) sides of a tile of 12.11
DRAWN_KERNELS = ("12.13", "12.14", "12.7")  # attention kernels whose traffic show_traffic draws (traffic.py)


class KernelAlgorithmError(RuntimeError):
    """The kernel computed the right numbers the wrong way: what the exercise asks for is not what it does."""


def _next_power_of_2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _block_d(D: int) -> int:
    return max(16, _next_power_of_2(D))


def masked_scores(kernel: Any, scores: torch.Tensor, column_major: bool = False) -> torch.Tensor:
    """12.11: one program per ``(TILE_T, TILE_S)`` tile of ``scores (T, S)``, read through its strides (stored
    column by column when ``column_major``, as a transposed view is); the output is contiguous."""
    T, S = scores.shape
    if column_major:
        scores = scores.T.contiguous().T  # the same values, strides (1, T)
    out = torch.empty(T, S, dtype=scores.dtype, device=scores.device)
    grid = (math.ceil(T / TILE_T), math.ceil(S / TILE_S))
    kernel[grid](
        scores, out, T, S, scores.stride(0), scores.stride(1), BLOCK_T=TILE_T, BLOCK_S=TILE_S
    )  # fmt: skip
    return out


def softmax_rows(kernel: Any, x: torch.Tensor) -> torch.Tensor:
    """12.4: one program per row of ``x (R, N)``; the block spans the row."""
    x = x.contiguous()
    out = torch.empty_like(x)
    kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=_next_power_of_2(x.shape[1]))
    return out


def row_logsumexp(kernel: Any, x: torch.Tensor) -> torch.Tensor:
    """12.5: one program per row of ``x (R, N)``, streaming it ``LSE_BLOCK`` columns at a time; returns (R,)."""
    x = x.contiguous()
    lse = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    kernel[(x.shape[0],)](x, lse, x.shape[1], x.stride(0), BLOCK=LSE_BLOCK)
    return lse


def tiled_scores(kernel: Any, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """12.12: one program per ``(BLOCK_M, BLOCK_N)`` tile of the scores ``q kᵀ`` for ``q (T, D)`` and
    ``k (S, D)``, its loop over the head dims ``BLOCK_K`` at a time; returns ``(T, S)``."""
    q, k = q.contiguous(), k.contiguous()
    T, D = q.shape
    S = k.shape[0]
    out = torch.empty(T, S, dtype=q.dtype, device=q.device)
    grid = (math.ceil(T / BLOCK_M), math.ceil(S / BLOCK_N))
    kernel[grid](q, k, out, T, S, D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)
    return out


def _one_sequence(
    kernel: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool
) -> torch.Tensor:
    """12.13 and 12.14: one program per query block of ``q (T, D)`` against ``k``, ``v (S, D)``, D a power of
    two from 16 (the kernel loads whole rows); the keys each program loads are checked."""
    from attn_edu.grading.bounds import recorded_loads

    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    T, D = q.shape
    S = k.shape[0]
    if D < 16 or D & (D - 1):
        raise ValueError(f"q: the head dimension D must be a power of two from 16, got D={D}")
    if causal and T > S:
        raise ValueError(f"q: causal_attention takes T <= S (every query sees a key), got T={T}, S={S}")
    out = torch.empty_like(q)
    with recorded_loads() as loads:
        kernel[(math.ceil(T / BLOCK_M),)](
            q, k, v, out, T, S, 1 / math.sqrt(D), D=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N
        )  # fmt: skip
    _check_skipping(loads, T, S, D, causal)
    return out


def block_attention(kernel: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """12.13: softmax(q kᵀ / sqrt(D)) v, each program one query block against every key block."""
    return _one_sequence(kernel, q, k, v, causal=False)


def causal_attention(kernel: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """12.14: the same with the bottom-right causal mask, each program stopping at its diagonal."""
    return _one_sequence(kernel, q, k, v, causal=True)


def online_softmax(update: Any, x: torch.Tensor, block_size: int) -> torch.Tensor:
    """12.1: the notebook's driver, around the learner's ``online_softmax_update``: one streaming pass over the
    blocks for the running max and sum, then one pass to normalise."""
    m_i = torch.full(x.shape[:-1], float("-inf"), device=x.device)  # (...)
    l_i = torch.zeros(x.shape[:-1], device=x.device)  # (...)
    for start in range(0, x.shape[-1], block_size):
        m_i, l_i = update(m_i, l_i, x[..., start : start + block_size])
    return torch.exp(x - m_i[..., None]) / l_i[..., None]  # (..., N)


def flash_forward(
    kernel: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool = False
) -> torch.Tensor:
    """12.7: one program per (query block, sequence) for ``q (N, T, D)``, ``k`` and ``v (N, S, D)``; in the
    interpreter, the keys each program loads are checked (:func:`_check_skipping`)."""
    from attn_edu.grading.bounds import recorded_loads

    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    N, T, D = q.shape
    S = k.shape[1]
    out = torch.empty_like(q)
    grid = (math.ceil(T / BLOCK_M), N)
    with recorded_loads() as loads:
        kernel[grid](
            q, k, v, out, T, S, D, 1 / math.sqrt(D),
            IS_CAUSAL=is_causal, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=_block_d(D),
        )  # fmt: skip
    _check_skipping(loads, T, S, D, is_causal)
    return out


def flash_dq(
    kernel: Any,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    grad_out: torch.Tensor,
    is_causal: bool = False,
) -> torch.Tensor:
    """12.8: one program per (query block, sequence); the log-sum-exp of each query's scores is computed here,
    as the forward would have stored it."""
    q, k, v, out, grad_out = (t.contiguous() for t in (q, k, v, out, grad_out))
    N, T, D = q.shape
    S = k.shape[1]
    scale = 1 / math.sqrt(D)
    scores = q @ k.transpose(-2, -1) * scale  # (N, T, S)
    if is_causal:
        allowed = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(S - T)  # on the scores' device
        scores = scores.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1).contiguous()  # (N, T)
    dq = torch.empty_like(q)
    grid = (math.ceil(T / BLOCK_M), N)
    kernel[grid](
        q, k, v, out, grad_out, lse, dq, T, S, D, scale,
        IS_CAUSAL=is_causal, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=_block_d(D),
    )  # fmt: skip
    return dq


def _check_skipping(
    loads: list[tuple[tuple[int, ...], str, Any]], T: int, S: int, D: int, causal: bool
) -> None:
    """Each program loads keys one block of ``BLOCK_N`` at a time and, when causal, none from a block that lies
    wholly above its diagonal; ``loads`` are ``(program id, tensor name, element indices)`` of the live lanes,
    the keys ``(N, S, D)`` or ``(S, D)``, contiguous (the program's second id is the sequence, 0 for one)."""
    for where, name, elements in loads:
        if name != "k_ptr" or len(elements) == 0:
            continue
        block, n = (tuple(int(i) for i in where) + (0, 0))[:2]
        rows = sorted({int(e) % (S * D) // D for e in elements})
        if len(rows) > BLOCK_N:
            raise KernelAlgorithmError(
                f"program ({block}, {n}) loads {len(rows)} keys in one tl.load: load BLOCK_N = {BLOCK_N} keys "
                "per step of the loop, never the whole (T, S) score tile"
            )
        if causal:
            stop = min(S, max(0, S - T + block * BLOCK_M + BLOCK_M))  # past it, every key is hidden
            limit = min(S, math.ceil(stop / BLOCK_N) * BLOCK_N)
            if rows[-1] >= limit:
                raise KernelAlgorithmError(
                    f"causal block skipping: program ({block}, {n}) loads keys {rows[0]}..{rows[-1]}, but its "
                    f"queries see no key past {stop - 1}: its key loop should end after the block that holds "
                    "the last key its last query sees"
                )


# exercise id -> (the learner's kernel or function, by name; the given code here that runs it)
KERNELS: dict[str, tuple[str, Callable[..., torch.Tensor]]] = {
    "12.1": ("online_softmax_update", online_softmax),
    "12.11": ("masked_scores_kernel", masked_scores),
    "12.4": ("softmax_kernel", softmax_rows),
    "12.12": ("tiled_scores_kernel", tiled_scores),
    "12.5": ("logsumexp_kernel", row_logsumexp),
    "12.13": ("block_attention_kernel", block_attention),
    "12.14": ("causal_attention_kernel", causal_attention),
    "12.7": ("flash_forward_kernel", flash_forward),
    "12.8": ("flash_dq_kernel", flash_dq),
}


def is_triton_kernel(obj: Any) -> bool:
    """Whether ``obj`` is a kernel as ``@triton.jit`` makes it: Triton's own ``JITFunction`` (compiled) or
    ``InterpretedFunction`` (``TRITON_INTERPRET=1``), possibly under ``@triton.autotune`` or
    ``@triton.heuristics``, or the stand-in of a notebook without Triton. Their exact types: an object of
    another class that can be indexed by a grid is not a kernel, whatever it computes when launched."""
    from attn_edu.grading.stand_in import is_stand_in_kernel

    if is_stand_in_kernel(obj):
        return True
    try:
        from triton.runtime.autotuner import Autotuner, Heuristics
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction
    except ImportError:
        return False
    while type(obj) in (Autotuner, Heuristics):
        obj = obj.fn
    return type(obj) in (JITFunction, InterpretedFunction)


def kernel_of(exercise_id: str, fn: Any, namespace: dict[str, Any] | None = None) -> Callable[..., Any]:
    """What the check calls for an exercise of :data:`KERNELS`: the given code here, bound to the learner's
    kernel (or function), found in ``namespace`` (the worker's notebook) or beside the learner's ``fn`` (the
    variables it closes over, its module's globals), or ``fn`` itself when it is that kernel. A function that
    raises :class:`LookupError` when there is none, or :class:`TypeError` when what has the kernel's name is not
    a Triton kernel (:func:`is_triton_kernel`)."""
    name, launcher = KERNELS[exercise_id]
    found = None
    if (hasattr(fn, "__getitem__") and hasattr(fn, "fn")) or getattr(fn, "__name__", None) == name:
        found = fn  # the kernel (a JITFunction, or the stand-in) or the function itself was passed
    elif namespace is not None:
        found = namespace.get(name)
    elif hasattr(fn, "__globals__"):  # the launcher's module, or the variables it closes over
        found = inspect.getclosurevars(fn).nonlocals.get(name) or fn.__globals__.get(name)
    if found is None:

        def missing(*args: Any, **kwargs: Any) -> torch.Tensor:
            if exercise_id == "12.1":
                raise LookupError(
                    f"no function named `{name}` in the notebook: the check runs the given driver itself, "
                    "around your update (keep the update's name)"
                )
            raise LookupError(
                f"no @triton.jit function named `{name}` in the notebook: the check launches your kernel "
                "itself, with the given launcher's grid and blocks (keep the kernel's name)"
            )

        return missing
    if exercise_id != "12.1" and not is_triton_kernel(found):  # 12.1 asks for a Python function

        def not_a_kernel(*args: Any, **kwargs: Any) -> torch.Tensor:
            raise TypeError(
                f"`{name}` is a {type(found).__name__}, not a @triton.jit function: the check launches the "
                "kernel the exercise asks for, written with triton.language, not whatever indexing it returns"
            )

        return not_a_kernel
    return lambda *args, **kwargs: launcher(found, *args, **kwargs)
