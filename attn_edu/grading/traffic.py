"""A learner's attention kernel drawn as it ran: the tiles each program loaded, in order, and the rows it stored.

    show_traffic("12.14", causal_attention)    # what did my kernel read? (Triton's interpreter only)

For the attention steps of notebook 12's Triton ladder (12.13, 12.14 and the forward, 12.7) the check launches
the learner's kernel itself (:mod:`attn_edu.grading.harness`); :func:`show_traffic` does the same on one small
example whose lengths are not multiples of the block, records every load and store
(:func:`attn_edu.grading.bounds.recorded_loads`) and draws them with
:func:`attn_edu.viz.diagrams_traffic.plot_kernel_traffic`, the picture notebook 12 draws of the course's kernel.
What a right kernel never does shows in red: a key block loaded that causal skipping would leave alone, a tile
loaded twice, rows read past the end. A kernel stopped by the bounds watch is drawn up to the stray access, and
the title says where it stopped.
"""

from __future__ import annotations

from typing import Any

import torch
from matplotlib.figure import Figure

from attn_edu.grading.bounds import OutOfBounds, bounds_checked, recorded_loads, recorded_stores
from attn_edu.grading.harness import BLOCK_M, BLOCK_N, DRAWN_KERNELS, KernelAlgorithmError, kernel_of
from attn_edu.grading.run import kernel_device, learner_error

# exercise -> (T, S, D, causal): lengths that leave a ragged last block on both sides
EXAMPLES = {"12.13": (40, 56, 16, False), "12.14": (40, 56, 16, True), "12.7": (40, 56, 16, True)}
assert set(EXAMPLES) == set(DRAWN_KERNELS)
NAMES = {"q_ptr": "Q", "k_ptr": "K", "v_ptr": "V", "out_ptr": "OUT"}  # the kernels' arguments, as drawn


def show_traffic(exercise_id: str, fn: Any, *, seed: int = 0) -> Figure:
    """Run the kernel of ``exercise_id`` found beside ``fn`` (the launcher, or the kernel itself) once, as the
    check would, and draw what each program loaded and stored. Needs Triton's interpreter
    (``TRITON_INTERPRET=1`` before Triton is imported): a compiled kernel's addresses cannot be watched."""
    if exercise_id not in EXAMPLES:
        raise ValueError(f"exercise_id: expected one of {sorted(EXAMPLES)}, got {exercise_id!r}")
    from attn_edu.viz.diagrams_traffic import plot_kernel_traffic

    T, S, D, causal = EXAMPLES[exercise_id]
    generator = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(n, D, generator=generator).to(kernel_device()) for n in (T, S, S))  # (T|S, D)
    launch = kernel_of(exercise_id, fn)
    stopped = ""
    with bounds_checked() as watched, recorded_loads() as loads, recorded_stores() as stores:
        if not watched:
            raise RuntimeError(
                "show_traffic needs Triton's interpreter: set TRITON_INTERPRET=1 before importing triton (a "
                "compiled kernel's loads and stores cannot be recorded)"
            )
        try:
            if exercise_id == "12.7":  # one sequence of (N, T, D)
                launch(q[None], k[None], v[None], is_causal=causal)
            else:
                launch(q, k, v)
        except KernelAlgorithmError:
            pass  # the picture is the explanation
        except Exception as raised:  # noqa: BLE001 - drawn up to where the kernel stopped
            err = learner_error(raised)
            if isinstance(err, LookupError):
                raise err from None
            stopped = f"; stopped: {type(err).__name__}" + (
                " (a stray load or store)" if isinstance(err, OutOfBounds) else ""
            )
    rename = [
        [(where, NAMES.get(name, name), rows) for where, name, rows in records] for records in (loads, stores)
    ]
    title = f"exercise {exercise_id}: T = {T}, S = {S}, blocks {BLOCK_M} x {BLOCK_N}, {'causal' if causal else 'not causal'}{stopped}"
    return plot_kernel_traffic(
        *rename,
        lengths={"Q": T, "K": S, "V": S, "OUT": T},
        row_size=D,
        block_m=BLOCK_M,
        block_n=BLOCK_N,
        is_causal=causal,
        title=title,
    )
