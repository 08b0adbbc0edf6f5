"""Schematic diagrams of inference and of the kernels, notebooks 10 to 13: the KV cache over decode steps,
sparse patterns, FlashAttention's tile loop, the backward's recomputation, the induction circuit.

Two of them step through time: :func:`kv_cache_steps` and :func:`flash_tile_loop` take a ``step`` (their last
step by default, the static picture of the website); the explorers of :mod:`attn_edu.widgets.steps` move it.
Conventions as in :mod:`attn_edu.viz.diagrams_attention`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from matplotlib.figure import Figure

from attn_edu.viz.common import ROLE_COLORS
from attn_edu.viz.diagrams_kit import (
    HIDDEN,
    INK,
    SMALL,
    arrow,
    box,
    canvas,
    check_int,
    frame,
    grid,
    legend_row,
    text,
    tint,
)

Q, K, V, SC, M, O = (ROLE_COLORS[r] for r in ("query", "key", "value", "scores", "mask", "output"))  # noqa: E741


def kv_cache_steps(*, prompt_len: int = 8, new_tokens: int = 4, step: int | None = None) -> Figure:
    """Decoding with and without a KV cache, step by step: what each step computes, what it reuses.

    Row ``i`` is decode step ``i`` (step 0 is the prompt, the *prefill*), column ``s`` is position ``s``. With a
    cache a step computes keys and values for its new token only and reads the stored ones; without, it
    recomputes every position. ``step`` (default: the last) shows the steps up to it. Defaults: notebook 10 §2,
    an 8-token prompt and the 4 steps after the prefill of its decoding loop.
    """
    check_int("prompt_len", prompt_len, 1, 24)
    check_int("new_tokens", new_tokens, 1, 12)
    step = new_tokens if step is None else check_int("step", step, 0, new_tokens)
    n = prompt_len + new_tokens
    c = min(0.28, 4.1 / n)
    fig, ax = canvas(
        10.0, 1.75 + (new_tokens + 1) * c, f"decode step {step} of {new_tokens}: prompt of {prompt_len}"
    )
    y_top = 0.95 + (new_tokens + 1) * c
    fed = {"with a cache": 0, "without a cache": 0}
    for panel, x0 in (("with a cache", 0.7), ("without a cache", 5.6)):
        cells = [[None] * n for _ in range(new_tokens + 1)]
        for i in range(step + 1):
            length = prompt_len + i  # positions that exist at step i
            for s in range(length):
                new = s >= length - (prompt_len if i == 0 else 1)
                if panel == "with a cache":
                    cells[i][s] = K if new else tint(K, 0.25)
                else:
                    cells[i][s] = SC if i > 0 and not new else K
            fed[panel] += (prompt_len if i == 0 else 1) if panel == "with a cache" else length
        grid(
            ax,
            x0,
            y_top,
            new_tokens + 1,
            n,
            c,
            [[x if x is not None else "white" for x in row] for row in cells],
        )
        frame(ax, x0, y_top - (new_tokens + 1) * c, n * c, (new_tokens + 1) * c, color=INK, lw=0.6)
        frame(ax, x0, y_top - (step + 1) * c, n * c, c, color=INK, lw=1.8)
        text(ax, x0 + n * c / 2, y_top + 0.22, panel, weight="bold", size=10)
        for i in range(new_tokens + 1):
            text(
                ax,
                x0 - 0.3,
                y_top - (i + 0.5) * c,
                "prefill" if i == 0 else f"step {i}",
                ha="right" if False else "center",
            )
        text(
            ax,
            x0 + n * c / 2,
            y_top - (new_tokens + 1) * c - 0.2,
            f"position s → (S = {prompt_len + step} keys at step {step})",
        )
        text(ax, x0 + n * c / 2, 0.55, f"positions computed so far: {fed[panel]}", color=INK)
    legend_row(ax, 0.7, 0.2, [("K, V computed this step", K), ("K, V read from the cache", tint(K, 0.25)),
                              ("recomputed (wasted)", SC)])  # fmt: skip
    return fig


def sparsity_patterns(
    *, T: int = 32, window: int = 3, global_positions: Sequence[int] = (0,), num_random: int = 2,
    query: int = 16, seed: int = 0,
) -> Figure:  # fmt: skip
    """Which keys one query reads under a sliding window, Longformer (+ global tokens) and BigBird (+ random).

    The keys come from :mod:`attn_edu.sparse` (``bigbird_mask`` with ``torch.Generator().manual_seed(seed)``).
    Defaults: notebook 11 §3, ``T = 32``, ``window = 3``, token 0 global, 2 random keys per query, seed 0.
    """
    from attn_edu.sparse import bigbird_mask, global_tokens_mask, sliding_window_mask

    check_int("T", T, 2, 32)
    check_int("window", window, 1, T)
    check_int("num_random", num_random, 0, T)
    check_int("query", query, 0, T - 1)
    check_int("seed", seed, 0, 2**31)
    positions = list(global_positions)
    if any(isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < T for p in positions):
        raise ValueError(f"global_positions: expected ints in 0 .. T-1 = {T - 1}, got {positions!r}")
    local = sliding_window_mask(T, window=window, causal=False)  # (T, T)
    longformer = local | global_tokens_mask(T, global_positions=positions)  # (T, T)
    g = torch.Generator().manual_seed(seed)
    bigbird = bigbird_mask(T, window=window, global_positions=positions, num_random=num_random, generator=g)
    c = min(0.26, 8.0 / T)
    fig, ax = canvas(10.0, 3.9, f"the keys query {query} reads, T = {T}: window, + global, + random")
    rows = [("window", local[query], None), ("Longformer", longformer[query], local[query]),
            ("BigBird", bigbird[query], longformer[query])]  # fmt: skip
    for r, (name, reads, before) in enumerate(rows):
        y = 2.9 - r * 1.05
        cells = []
        for s in range(T):
            if s == query:
                cells.append(Q)
            elif not reads[s]:
                cells.append(HIDDEN)
            elif s in positions and r > 0:
                cells.append(M)
            elif before is not None and not before[s]:
                cells.append(SC)
            else:
                cells.append(K)
        grid(ax, 0.9, y, 1, T, c, [cells])
        text(ax, 0.45, y - c / 2, name, size=SMALL)
        text(ax, 0.9 + T * c + 0.05, y - c / 2, f"{int(reads.sum())} keys", ha="left")
        for s in np.flatnonzero(reads.numpy()):
            if s != query:
                bend = 0.5 if s < query else -0.5  # arcs above the row
                arrow(ax, (0.9 + (query + 0.5) * c, y), (0.9 + (s + 0.5) * c, y), bend=bend * min(1, 3 / abs(s - query)),
                      color=tint(INK, 0.6))  # fmt: skip
    legend_row(ax, 0.9, 0.35, [("the query", Q), (f"window |t - s| < {window}", K), ("global token", M),
                               ("random key", SC), ("not read", HIDDEN)])  # fmt: skip
    return fig


def flash_tile_loop(
    *, num_q_blocks: int = 4, num_k_blocks: int = 4, query_block: int = 1, step: int | None = None,
    causal: bool = False, block: int = 4,
) -> Figure:  # fmt: skip
    """FlashAttention's inner loop for one query block: Q_i stays on chip, K_j and V_j stream past, and the
    running max ``m`` and sum ``ℓ`` of one query row are updated after every tile.

    Left: the (T, S) scores in tiles (done, this step, still to come, skipped by the causal mask). Right: the
    running statistics after each key block, computed here on a fixed example row of ``num_k_blocks · block``
    scores. ``step`` (default: the last) counts the key blocks read. Defaults: notebook 12 §4, 4 × 4 blocks,
    query block 1 (as :func:`attn_edu.viz.plot_flash_dataflow` beside it).
    """
    check_int("num_q_blocks", num_q_blocks, 1, 8)
    check_int("num_k_blocks", num_k_blocks, 1, 8)
    check_int("query_block", query_block, 0, num_q_blocks - 1)
    check_int("block", block, 1, 16)
    visits = min(num_k_blocks, query_block + 1) if causal else num_k_blocks  # key blocks this program reads
    step = visits if step is None else check_int("step", step, 1, visits)
    scores = np.round(np.random.default_rng(12).normal(size=num_k_blocks * block) * 1.5, 2)  # one query row
    fig, ax = canvas(
        10.0,
        4.2,
        f"query block {query_block}: key/value block {step} of {visits}" + (" (causal)" if causal else ""),
    )
    c = min(0.6, 3.0 / max(num_q_blocks, num_k_blocks))
    cells = []
    for i in range(num_q_blocks):
        row = []
        for j in range(num_k_blocks):
            skipped = causal and j > i
            if i != query_block:
                row.append(HIDDEN if skipped else tint(INK, 0.08))
            else:
                row.append(
                    HIDDEN
                    if skipped
                    else (tint(SC, 0.45) if j < step - 1 else SC if j == step - 1 else "white")
                )
        cells.append(row)
    x0, top = 0.9, 3.5
    grid(ax, x0, top, num_q_blocks, num_k_blocks, c, cells, edge=INK, lw=0.6)
    frame(ax, x0 + (step - 1) * c, top - (query_block + 1) * c, c, c, color=INK, lw=2.2)
    text(ax, x0 + num_k_blocks * c / 2, top + 0.15, "key blocks j →")
    text(ax, x0 - 0.3, top - num_q_blocks * c / 2, "query blocks i →", rotation=90)
    # the chip: Q_i held, K_j and V_j streaming in, the statistics
    cx = 3.6
    box(ax, cx, 0.9, 3.0, 2.6, "", "value", dashed=True)
    ax.patches[-1].set_facecolor("white")
    text(ax, cx + 1.5, 3.3, "on chip (SRAM), one program", weight="bold")
    box(ax, cx + 0.2, 2.35, 0.8, 0.6, f"$Q_{{{query_block}}}$", "query", shape="held")
    box(ax, cx + 1.1, 2.35, 0.8, 0.6, f"$K_{{{step - 1}}}$", "key", shape="streamed")
    box(ax, cx + 2.0, 2.35, 0.8, 0.6, f"$V_{{{step - 1}}}$", "value", shape="streamed")
    box(ax, cx + 0.2, 1.2, 1.3, 0.7, f"$S_{{{query_block}{step - 1}}}$", "scores", shape="used, dropped")
    box(ax, cx + 1.6, 1.2, 1.2, 0.7, r"$m,\ \ell,\ acc$", "output", shape="kept")
    # the running statistics of one row
    tx = 7.0
    text(ax, tx + 1.4, 3.3, "one query row, after block j", weight="bold")
    text(ax, tx + 0.3, 2.95, "$j$", ha="center")
    text(ax, tx + 1.2, 2.95, "max $m$", ha="center")
    text(ax, tx + 2.3, 2.95, r"sum $\ell$", ha="center")
    m, total = -np.inf, 0.0
    for j in range(visits):
        part = scores[j * block : (j + 1) * block]
        m_new = max(m, float(part.max()))
        total = total * np.exp(m - m_new) + float(np.exp(part - m_new).sum())
        m = m_new
        shown = j < step
        color = INK if shown else HIDDEN
        y = 2.6 - j * 0.32
        text(ax, tx + 0.3, y, str(j), color=color)
        text(ax, tx + 1.2, y, f"{m:.2f}" if shown else "…", color=color)
        text(ax, tx + 2.3, y, f"{total:.2f}" if shown else "…", color=color)
    text(ax, tx + 1.4, 2.6 - visits * 0.32 - 0.3, "a new max rescales the old sum\n" r"by $\exp(m_{old} - m_{new})$",
         size=SMALL)  # fmt: skip
    legend_row(ax, 0.3, 0.25, [("done", tint(SC, 0.45)), ("this step", SC), ("to come", "white"),
                               ("skipped", HIDDEN)])  # fmt: skip
    return fig


def backward_recompute(*, T: int = 20, S: int = 28, D: int = 16, block: int = 8) -> Figure:
    """What FlashAttention's forward keeps for the backward (O and one lse per query, not P), and how each tile of
    P is recomputed from Q_i, K_j and lse_i. Defaults: notebook 12 §7, ``T = 20``, ``S = 28``, ``D = 16``,
    8 × 8 tiles.
    """
    for name, value in (("T", T), ("S", S), ("D", D), ("block", block)):
        check_int(name, value, 1, 1 << 20)
    fig, ax = canvas(
        10.0,
        4.0,
        f"the backward recomputes P, tile by tile: T = {T}, S = {S}, D = {D}, {block} × {block} tiles",
    )
    text(ax, 1.6, 3.45, "forward keeps", weight="bold")
    box(ax, 0.3, 2.4, 1.2, 0.7, "O", "output", shape=f"(T, D) = ({T}, {D})")
    box(ax, 1.7, 2.4, 1.2, 0.7, "lse", "scores", shape=f"(T,) = ({T},)")
    box(ax, 0.3, 1.2, 2.6, 0.8, "not P", shape=f"(T, S) = ({T}, {S}): {T * S} numbers", dashed=True)
    text(ax, 1.6, 0.85, f"{T * S} → {T} numbers kept\nper head for the softmax")
    text(ax, 6.3, 3.45, f"backward, tile (i, j): {-(-T // block)} × {-(-S // block)} tiles", weight="bold")
    steps = [
        (r"$S_{ij} = Q_i K_j^\top / \sqrt{D}$", "scores", 3.4),
        (r"$P_{ij} = \exp(S_{ij} - lse_i)$", "scores", 5.5),
        (r"$dV_j$ += $P_{ij}^\top dO_i$", "value", 7.6),
    ]
    for label, role, x in steps:
        box(ax, x, 2.5, 1.9, 0.55, label, role, size=SMALL)
    arrow(ax, (5.3, 2.77), (5.5, 2.77))
    arrow(ax, (7.4, 2.77), (7.6, 2.77))
    arrow(ax, (2.9, 2.75), (3.4, 2.75), color=SC, bend=0.0)
    lower = [
        (r"$dP_{ij} = dO_i V_j^\top$", "value", 3.4),
        (r"$dS_{ij} = P_{ij} \circ (dP_{ij} - \delta_i)$", "scores", 5.5),
        (r"$dQ_i$ += $dS_{ij} K_j / \sqrt{D}$" "\n" r"$dK_j$ += $dS_{ij}^\top Q_i / \sqrt{D}$", "query", 7.6),
    ]
    for label, role, x in lower:
        box(ax, x, 1.45, 1.9, 0.7, label, role, size=SMALL)
    arrow(ax, (6.45, 2.5), (6.45, 2.15))
    arrow(ax, (5.3, 1.8), (5.5, 1.8))
    arrow(ax, (7.4, 1.8), (7.6, 1.8))
    text(ax, 6.5, 0.85, r"$\delta_i = \mathrm{rowsum}(dO_i \circ O_i)$: one number per query, computed before the "
         "loop,\n" r"because $\mathrm{rowsum}(P \circ dP)$ needs a whole row of $P$, which no tile holds")  # fmt: skip
    return fig


def induction_circuit(
    *, tokens: Sequence[int] = (36, 22, 2, 32, 13, 4, 36, 22, 2, 32, 13, 4), query: int = 8
) -> Figure:
    """The induction circuit: a previous-token head (layer 0) writes "my previous token was A" at each position;
    an induction head (layer 1) builds its keys from that (K-composition), so the query "A" finds the position
    after the earlier A and copies its token. Defaults: notebook 13 §1, the training row printed there
    (6 tokens, repeated), the query at position 8.
    """
    tokens = list(tokens)
    if not 2 <= len(tokens) <= 24 or any(isinstance(t, bool) or not isinstance(t, int) for t in tokens):
        raise ValueError(f"tokens: expected 2 to 24 token ids (ints), got {tokens!r}")
    check_int("query", query, 1, len(tokens) - 1)
    earlier = [p for p in range(query) if tokens[p] == tokens[query]]
    if not earlier or earlier[-1] + 1 >= query:
        raise ValueError(
            f"query: expected a position whose token occurred earlier, at least 2 back; got {query}"
        )
    source = earlier[-1] + 1  # the position after the previous occurrence: where the induction head looks
    n = len(tokens)
    c = min(0.6, 8.4 / n)
    fig, ax = canvas(
        10.0, 4.3, f"the induction circuit on {tokens[query]} at position {query}: predict {tokens[source]}"
    )
    x0 = 1.3
    for layer, y in (("tokens", 0.7), ("layer 0", 1.35), ("layer 1", 3.0)):
        text(ax, 0.6, y, layer, weight="bold")
    for p, tok in enumerate(tokens):
        x = x0 + p * c
        box(ax, x + 0.04, 0.5, c - 0.08, 0.4, str(tok), size=SMALL, role=None)
        ax.patches[-1].set_facecolor(Q if p == query else K if p == source else "white")
        text(ax, x + c / 2, 0.3, str(p), size=SMALL, color=tint(INK, 0.7))
    xs, xp, xq = (x0 + (p + 0.5) * c for p in (source, source - 1, query))
    # layer 0: the previous-token head at `source` reads position source - 1
    arrow(ax, (xs, 1.0), (xp, 1.0), bend=0.9, color=K)
    text(ax, xs + 0.15, 1.35, f"previous-token head: {source} reads {source - 1}", ha="left", color=K)
    # what it writes becomes the layer-1 key at `source` (K-composition)
    arrow(ax, (xs, 1.55), (xs, 2.85), color=K, dashed=True)
    text(ax, xs + 0.15, 2.2, f"K-composition: key {source} now\nsays 'after a {tokens[source - 1]}'", ha="left",
         color=K)  # fmt: skip
    # layer 1: the induction head's query at `query` finds that key
    arrow(ax, (xq, 0.95), (xq, 2.85), color=Q, dashed=True)
    text(ax, xq + 0.15, 1.9, f"query {query}:\n'I am {tokens[query]}'", ha="left", color=Q)
    arrow(ax, (xq, 3.0), (xs, 3.0), f"induction head: who came after a {tokens[query]}?", bend=0.3,
          color=SC, offset=(0.0, 0.62))  # fmt: skip
    text(ax, 5.0, 0.05, f"the head attends to position {source} and copies its token: predicts {tokens[source]} "
         f"at position {query + 1}", size=SMALL)  # fmt: skip
    return fig
