"""A Triton kernel's memory traffic, drawn from a real run: which tiles each program read, in order, and what it
wrote.

Triton's interpreter records every address a kernel touches (:func:`attn_edu.grading.bounds.recorded_loads` and
:func:`~attn_edu.grading.bounds.recorded_stores`, inside :func:`~attn_edu.grading.bounds.bounds_checked`); this
module turns those records into a picture, one panel per program. It knows nothing of how they were made, so the
same picture shows the course's kernel and a learner's. A run in notebook 12::

    os.environ["TRITON_INTERPRET"] = "1"          # before the first import of triton
    from attn_edu.grading.bounds import bounds_checked, recorded_loads, recorded_stores
    from attn_edu.kernels.triton_flash import flash_attention_forward

    with bounds_checked(), recorded_loads() as loads, recorded_stores() as stores:
        flash_attention_forward(q, k, v, is_causal=True, block_m=64, block_n=64)   # q, k, v (1, 1, 200, D)
    plot_kernel_traffic(loads, stores, lengths={"Q": 200, "K": 200, "V": 200, "OUT": 200}, row_size=D,
                        block_m=64, block_n=64, is_causal=True)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from attn_edu.viz.common import HIDDEN_COLOR, ROLE_COLORS
from attn_edu.viz.diagrams_kit import INK, SMALL, check_int

ROLES = {"Q": "query", "K": "key", "V": "value", "OUT": "output"}  # the forward kernel's argument names
WRONG = "#d62728"  # what a correct kernel never does: rows past the end, a block it could have skipped


@dataclass(frozen=True)
class Access:
    """One load or store of one program, in the order the program made it."""

    program: int  # tl.program_id(0): the query block
    name: str  # the kernel argument ("Q", "K", "V", "OUT")
    store: bool  # False: a load
    rows: np.ndarray  # the sequence rows its live lanes touched, sorted, unique
    block: int  # the tile's first row, a multiple of its block size
    size: int  # the tile's rows: block_m for Q and OUT, block_n for K and V
    repeat: int  # 1 for the first time this program touched this tile, 2 for the second, ...


def kernel_traffic(
    loads: Sequence[tuple[tuple[int, ...], str, Any]],
    stores: Sequence[tuple[tuple[int, ...], str, Any]],
    *,
    row_size: int,
    rows_allocated: Mapping[str, int],
    block_m: int,
    block_n: int,
    head: int = 0,
) -> list[Access]:
    """The records of one run as :class:`Access` es of the programs of batch·head ``head``, in order.

    Element ``e`` of a ``(B·H, rows, row_size)`` tensor is row ``(e // row_size) % rows``, head
    ``e // (rows · row_size)``; ``rows_allocated`` gives ``rows`` per argument (more than the sequence's length
    when a tensor is a slice of a longer buffer). Loads and stores of other arguments (``LSE``) are left out.
    """
    check_int("row_size", row_size, 1)
    check_int("block_m", block_m, 1)
    check_int("block_n", block_n, 1)
    missing = sorted(set(ROLES) - set(rows_allocated))
    if missing:
        raise ValueError(f"rows_allocated: expected rows for {sorted(ROLES)}, missing {missing}")
    events = sorted(
        [(i, False, r) for i, r in enumerate(loads)]
        + [(i + len(loads), True, r) for i, r in enumerate(stores)],
        key=lambda e: (int(e[2][0][0]) if e[2][0] else 0, e[0]),
    )  # by program; loads before stores: the interpreter runs one program at a time, loads then its stores
    accesses, seen = [], {}
    for _, store, (program, name, elements) in events:
        if name not in ROLES or not program or int(program[1] if len(program) > 1 else 0) != head:
            continue
        rows_per_head = rows_allocated[name]
        elements = np.asarray(elements, dtype=np.int64)
        rows = np.unique((elements // row_size) % rows_per_head)
        size = block_m if name in ("Q", "OUT") else block_n
        block = int(rows.min()) // size * size
        key = (int(program[0]), name, store, block)
        seen[key] = seen.get(key, 0) + 1
        accesses.append(Access(int(program[0]), name, store, rows, block, size, seen[key]))
    return accesses


def _last_query(program: int, T: int, block_m: int) -> int:
    return min(T, (program + 1) * block_m) - 1  # the program's last real query row


def traffic_marks(
    accesses: Sequence[Access], *, lengths: Mapping[str, int], block_m: int, is_causal: bool
) -> dict[str, int]:
    """How many accesses a correct kernel would not make: reads ``past the end`` of their sequence (a load
    without its mask), K/V tiles wholly in the future of the program's queries (``skippable`` under causal
    skipping), and tiles a program touched again (``repeated``). The picture marks each of them in red."""
    T, S = lengths["Q"], lengths["K"]
    marks = {"past the end": 0, "skippable": 0, "repeated": 0}
    for a in accesses:
        marks["past the end"] += bool((a.rows >= lengths[a.name]).any())
        marks["skippable"] += _skippable(a, T, S, block_m, is_causal)
        marks["repeated"] += a.repeat > 1
    return marks


def _skippable(a: Access, T: int, S: int, block_m: int, is_causal: bool) -> bool:
    # bottom-right causal: query t sees keys up to t + S - T; a key tile past that for every query is never needed
    return (
        is_causal
        and a.name in ("K", "V")
        and not a.store
        and a.block > _last_query(a.program, T, block_m) + S - T
    )


def plot_kernel_traffic(
    loads: Sequence[tuple[tuple[int, ...], str, Any]],
    stores: Sequence[tuple[tuple[int, ...], str, Any]],
    *,
    lengths: Mapping[str, int],
    row_size: int,
    block_m: int,
    block_n: int,
    is_causal: bool,
    rows_allocated: Mapping[str, int] | None = None,
    head: int = 0,
    title: str | None = None,
) -> Figure:
    """Per program (one panel each), every tile it read and wrote, left to right in the order it did so.

    A bar spans the rows a load's live lanes read (Q blue, K orange, V purple) or a store wrote (O green). The
    rest of the tile, its masked lanes past the sequence's end, is hatched grey. Marked in red: rows past the
    end that *were* read (a load without its mask), a K/V block wholly in the future of the program's queries
    under ``is_causal`` (causal skipping would never load it), and a tile loaded a second time. ``lengths``
    gives each argument's sequence length (``T`` for Q and OUT, ``S`` for K and V).
    """
    missing = sorted(set(ROLES) - set(lengths))
    if missing:
        raise ValueError(
            f"lengths: expected the sequence length of each of {sorted(ROLES)}, missing {missing}"
        )
    for name, n in lengths.items():
        check_int(f"lengths[{name!r}]", n, 1)
    rows_allocated = dict(lengths) if rows_allocated is None else {**lengths, **rows_allocated}
    accesses = kernel_traffic(
        loads,
        stores,
        row_size=row_size,
        rows_allocated=rows_allocated,
        block_m=block_m,
        block_n=block_n,
        head=head,
    )
    if not accesses:
        raise ValueError("loads: no load or store of Q, K, V or OUT recorded (was the kernel run inside "
                         "bounds_checked(), in Triton's interpreter?)")  # fmt: skip
    T, S = lengths["Q"], lengths["K"]
    programs = sorted({a.program for a in accesses})
    height = max(math.ceil(S / block_n) * block_n, math.ceil(T / block_m) * block_m)
    width = min(10.0, 0.8 + 2.3 * len(programs))
    fig, axes = plt.subplots(
        1, len(programs), figsize=(width, 4.6), sharey=True, layout="constrained", squeeze=False
    )
    wrong = traffic_marks(accesses, lengths=lengths, block_m=block_m, is_causal=is_causal)
    for ax, program in zip(axes[0], programs):
        mine = [a for a in accesses if a.program == program]
        last_query = _last_query(program, T, block_m)
        for x, a in enumerate(mine):
            color = ROLE_COLORS[ROLES[a.name]]
            length = lengths[a.name]
            inside = a.rows[a.rows < length]
            past = a.rows[a.rows >= length]
            if inside.size:
                ax.add_patch(Rectangle((x, inside.min()), 0.8, inside.max() + 1 - inside.min(), facecolor=color,
                                       edgecolor="white", lw=0.5))  # fmt: skip
            masked_from = max(int(a.rows.max()) + 1, a.block)
            if masked_from < a.block + a.size:  # lanes of the tile that the mask switched off
                ax.add_patch(Rectangle((x, masked_from), 0.8, a.block + a.size - masked_from, facecolor="white",
                                       edgecolor=HIDDEN_COLOR, hatch="////", lw=0.5))  # fmt: skip
            if past.size:
                ax.add_patch(Rectangle((x, past.min()), 0.8, past.max() + 1 - past.min(), facecolor=WRONG,
                                       edgecolor=WRONG, lw=0.5))  # fmt: skip
            if _skippable(a, T, S, block_m, is_causal):
                ax.add_patch(Rectangle((x - 0.05, a.block), 0.9, a.size, fill=False, edgecolor=WRONG, lw=1.8))
            if a.repeat > 1:
                ax.text(
                    x + 0.4,
                    a.block - 2,
                    f"×{a.repeat}",
                    ha="center",
                    va="bottom",
                    color=WRONG,
                    fontsize=SMALL,
                )
            ax.text(x + 0.4, -2, "O" if a.name == "OUT" else a.name, ha="center", va="bottom", fontsize=SMALL,
                    color=INK, weight="bold" if a.store else "normal")  # fmt: skip
        for boundary in range(0, height + 1, math.gcd(block_m, block_n)):
            ax.axhline(boundary, color=HIDDEN_COLOR, lw=0.6, zorder=0)
        ax.axhline(S, color=INK, lw=1.0, ls="--")
        ax.set(xlim=(-0.3, max(len(mine), 3)), ylim=(height + 2, -12), xticks=[])
        ax.set_title(f"program {program}: queries {program * block_m}..{last_query}", fontsize=SMALL + 1)
        ax.set_xlabel("loads and stores, in order", fontsize=SMALL)
    axes[0][0].set_ylabel(f"row of the sequence (dashed: end, S = {S})", fontsize=SMALL)
    handles = [Patch(color=ROLE_COLORS[ROLES[n]], label=f"{'store' if n == 'OUT' else 'load'} {n if n != 'OUT' else 'O'}")
               for n in ROLES]  # fmt: skip
    handles += [Patch(facecolor="white", edgecolor=HIDDEN_COLOR, hatch="////", label="masked lanes (not read)"),
                Patch(color=WRONG, label="read past the end / skippable block")]  # fmt: skip
    fig.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=SMALL, frameon=False)
    problems = ", ".join(f"{n} {k}" for k, n in wrong.items() if n) or "no stray, skippable or repeated load"
    fig.suptitle(title or f"T = {T}, S = {S}, blocks {block_m} × {block_n}{', causal' if is_causal else ''}: {problems}",
                 fontsize=SMALL + 2)  # fmt: skip
    return fig
