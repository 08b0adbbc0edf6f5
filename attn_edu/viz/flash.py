"""FlashAttention's online softmax, one block at a time: the running max and sum, and the estimate so far.

Used by notebook 12's explorer, which computes the numbers with
:func:`attn_edu.flash.online_softmax_steps`. Every colour is a role's (:data:`attn_edu.viz.common.ROLE_COLORS`):
scores and the tiles of scores a program computes in the scores' red, a mask in its grey, what is skipped or
not read yet in light grey; queries, keys, values and outputs in their own colours. What only holds numbers
(SRAM, the running statistics) is neutral grey.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from attn_edu._validate import check_positive_int
from attn_edu.viz.common import HIDDEN_COLOR, NEUTRAL_DARK, ROLE_COLORS, as_numbers, lighter, text_color_on


def plot_online_softmax(
    x: torch.Tensor | np.ndarray | Sequence[float],
    m_values: torch.Tensor | np.ndarray | Sequence[float],
    l_values: torch.Tensor | np.ndarray | Sequence[float],
    *,
    block_size: int,
    step: int,
    title: str | None = None,
) -> Figure:
    """One streaming pass of the online softmax, stopped after ``step`` blocks.

    Left: the scores ``x`` as bars, coloured by block (read, being read, not read yet), with the
    running maximum ``m_i`` as a line. Right: the softmax estimate so far, ``exp(x - m_i) / l_i`` on the
    entries already read, beside the final softmax (outlined). Each new block that raises the maximum
    shrinks every earlier estimate by the same factor ``exp(m_old - m_new)`` (Milakov & Gimelshein 2018);
    after the last block the estimate *is* the softmax.

    Shapes:
        x ``(N,)``; m_values and l_values ``(n_blocks,)``: the running max and sum after each block,
        ``n_blocks = ceil(N / block_size)``.

    Example:
        >>> fig = plot_online_softmax([1.0, 3.0, 2.0], [3.0, 3.0], [1.135, 1.503], block_size=2, step=1)
        >>> len(fig.axes)
        2
        >>> plt.close(fig)
    """
    xs, sizes = as_numbers("x", x, "N")
    N = sizes["N"]
    check_positive_int("block_size", block_size)
    n_blocks = math.ceil(N / block_size)
    m_run, _ = as_numbers("m_values", m_values, "n_blocks", n_blocks=n_blocks)
    l_run, _ = as_numbers("l_values", l_values, "n_blocks", n_blocks=n_blocks)
    if isinstance(step, bool) or not isinstance(step, int) or not 1 <= step <= n_blocks:
        raise ValueError(f"step: expected an int in 1..{n_blocks} (the blocks read so far), got {step!r}")
    if (l_run <= 0).any():
        raise ValueError(f"l_values: expected positive running sums, got min {l_run.min()}")
    seen = min(step * block_size, N)
    block_of = np.arange(N) // block_size
    read, current = lighter(ROLE_COLORS["scores"], 0.55), ROLE_COLORS["scores"]  # scores: the scores' red
    colors = np.where(block_of < step - 1, read, np.where(block_of == step - 1, current, HIDDEN_COLOR))
    estimate = np.exp(xs[:seen] - m_run[step - 1]) / l_run[step - 1]
    final = np.exp(xs - m_run[-1]) / l_run[-1]

    fig, (left, right) = plt.subplots(1, 2, figsize=(11.0, 3.6), layout="constrained")
    positions = np.arange(N)
    left.bar(positions, xs, color=colors)
    left.axhline(
        m_run[step - 1], color=NEUTRAL_DARK, linestyle="--", label=f"running max m_i = {m_run[step - 1]:.2f}"
    )
    for boundary in range(block_size, N, block_size):
        left.axvline(boundary - 0.5, color="grey", linewidth=0.8, alpha=0.6)
    left.set_xlabel("position (light red: read, red: this block, grey: not read yet)")
    left.set_ylabel("score x")
    left.legend(loc="best", fontsize=8)
    left.set_title(f"block {step} of {n_blocks} (block size {block_size})", fontsize=10)

    right.bar(positions[:seen], estimate, color=colors[:seen], label="exp(x - m_i) / l_i so far")
    right.bar(positions, final, fill=False, edgecolor="black", linestyle="--", label="final softmax")
    right.set_xlim(-0.6, N - 0.4)
    right.set_ylim(0, max(float(estimate.max()), float(final.max())) * 1.15)
    right.set_xlabel("position")
    right.set_ylabel("probability")
    right.legend(loc="upper left", fontsize=8)
    right.set_title(f"l_i = {l_run[step - 1]:.3f}: estimates sum to 1 over what was read", fontsize=10)
    if title is not None:
        fig.suptitle(title)
    return fig


# Skipped, computed without a mask, computed with one: a tile of scores computed is the scores' red (light, so
# the mask's hatching on the diagonal tiles shows), a skipped one recedes; MASK_HATCH in the mask's grey.
COMPUTED_TILE_COLOR = lighter(ROLE_COLORS["scores"], 0.45)
CAUSAL_TILE_COLORS = (HIDDEN_COLOR, COMPUTED_TILE_COLOR, COMPUTED_TILE_COLOR)
MASK_HATCH = "////"


def causal_tile_kinds(n: int, tile: int) -> torch.Tensor:
    """What a causal ``n × n`` attention does with each ``tile × tile`` tile: 0 skip, 1 compute, 2 compute masked.

    A tile is skipped when none of its (query, key) pairs may attend, computed without a mask when all may,
    and masked when some may: the tiles on the diagonal.

    Shapes:
        returns ``(ceil(n / tile), ceil(n / tile))``, int64, rows are query blocks, columns key blocks.

    Example:
        >>> causal_tile_kinds(4, 2).tolist()
        [[2, 0], [1, 2]]
    """
    from attn_edu.masks import causal_mask

    check_positive_int("n", n)
    check_positive_int("tile", tile)
    blocks = math.ceil(n / tile)
    visible = torch.zeros(blocks * tile, blocks * tile, dtype=torch.bool)
    visible[:n, :n] = causal_mask(n)
    real = torch.zeros_like(visible)
    real[:n, :n] = True  # pairs past n (a ragged last tile) do not exist
    by_tile = visible.reshape(blocks, tile, blocks, tile)
    any_visible = by_tile.any(dim=3).any(dim=1)
    all_visible = (by_tile | ~real.reshape(blocks, tile, blocks, tile)).all(dim=3).all(dim=1)
    return any_visible.long() + (any_visible & ~all_visible).long()


def plot_causal_tiles(n: int, tile: int, *, title: str | None = None) -> Figure:
    """The tiles a causal ``n × n`` attention skips, computes, and computes with a mask (the diagonal).

    Causal block skipping in FlashAttention (Dao 2023, §3.1.1): a key block entirely in the future of a query
    block is never loaded, and only the tiles that straddle the diagonal pay for a mask. The tiles come from
    :func:`causal_tile_kinds`: skipped tiles light grey, computed ones the scores' red, and the masked ones
    hatched in the mask's grey.

    Example:
        >>> fig = plot_causal_tiles(512, 64)
        >>> [t.get_text() for t in fig.axes[0].get_legend().get_texts()][0]
        'skipped (never loaded)'
        >>> plt.close(fig)
    """
    import matplotlib.colors
    import matplotlib.patches

    kinds = causal_tile_kinds(n, tile)
    palette = matplotlib.colors.ListedColormap(list(CAUSAL_TILE_COLORS))
    fig, ax = plt.subplots(figsize=(4.6, 4.2), layout="constrained")
    ax.imshow(kinds.numpy(), cmap=palette, vmin=0, vmax=2)
    for i, j in (kinds == 2).nonzero().tolist():  # the mask's hatching over the tiles that need one
        ax.add_patch(
            matplotlib.patches.Rectangle(
                (j - 0.5, i - 0.5),
                1,
                1,
                facecolor="none",
                edgecolor=ROLE_COLORS["mask"],
                hatch=MASK_HATCH,
                lw=0,
            )
        )
    ax.set(
        title=title or f"causal {n} × {n} in {tile} × {tile} tiles",
        xlabel="key block j",
        ylabel="query block i",
    )
    labels = ["skipped (never loaded)", "computed, no mask", "computed, masked (diagonal)"]
    hatches = (None, None, MASK_HATCH)
    handles = [
        matplotlib.patches.Patch(facecolor=color, edgecolor=ROLE_COLORS["mask"] if hatch else color, hatch=hatch,
                                 label=label)
        for color, hatch, label in zip(CAUSAL_TILE_COLORS, hatches, labels)
    ]  # fmt: skip
    ax.legend(handles=handles, loc="upper right", fontsize=8)
    return fig


def plot_ring_tiles(world_size: int = 4, *, title: str | None = None) -> Figure:
    """Which rank computes each tile of causal attention under ring attention's two layouts.

    The sequence is cut into ``2W`` chunks; a cell is (query chunk, key chunk), coloured by the rank that holds
    those queries, and blank where the mask skips it. Contiguous shards (rank ``r`` holds chunks ``2r`` and
    ``2r + 1``) give the last rank ``4W - 1`` cells and the first 3; the zigzag layout (chunks ``r`` and
    ``2W - 1 - r``, :func:`attn_edu.distributed.shard_chunks`) gives every rank ``2W + 1``.

    Example:
        >>> fig = plot_ring_tiles(2)
        >>> [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
        ['rank 0: 5 cells', 'rank 1: 5 cells']
        >>> plt.close(fig)
    """
    import matplotlib.patches

    from attn_edu.distributed import shard_chunks

    check_positive_int("world_size", world_size)
    chunks = 2 * world_size
    colors = plt.get_cmap("tab10").colors
    fig, axes = plt.subplots(1, 2, figsize=(9.2, 4.4), layout="constrained")
    for ax, layout in zip(axes, ("contiguous", "zigzag")):
        owner = {}
        for rank, held in enumerate(shard_chunks(chunks, world_size, layout)):
            for start, end in held:
                owner.update({c: rank for c in range(start, end)})  # chunk c of 2W -> its rank
        image = np.ones((chunks, chunks, 3))
        counts = [0] * world_size
        for i in range(chunks):
            for j in range(i + 1):
                image[i, j] = colors[owner[i] % len(colors)]
                counts[owner[i]] += 1
        ax.imshow(image)
        ax.set(
            title=f"{layout}",
            xlabel="key chunk",
            ylabel="query chunk",
            xticks=range(chunks),
            yticks=range(chunks),
        )
        handles = [matplotlib.patches.Patch(color=colors[r % len(colors)], label=f"rank {r}: {counts[r]} cells")
                   for r in range(world_size)]  # fmt: skip
        ax.legend(handles=handles, loc="upper right", fontsize=8)
    fig.suptitle(title or f"causal attention over {world_size} ranks, in {chunks} chunks: who computes what")
    return fig


def plot_attention_memory(
    sizes: Sequence[int],
    naive_mib: Sequence[float],
    tiled_mib: Sequence[float],
    *,
    heads: int = 8,
    title: str | None = None,
) -> Figure:
    """Measured extra memory of the reference and the tiled attention against n, with the paper's count.

    The count is two ``(heads, n, n)`` float32 matrices, the scores and the weights (Dao et al. 2022, §3.2:
    standard attention materialises S and P). It is drawn dashed, because it lies on the reference's measured
    curve. Log-log axes: a quadratic is a line of slope 2, a constant a flat line. A tiled value of 0 MiB (all
    of it below the measurement's resolution) is drawn at 0.1 MiB, so that the log axis can show it.

    Example:
        >>> fig = plot_attention_memory([512, 1024], [16.0, 64.0], [0.0, 2.0])
        >>> fig.axes[0].get_xscale(), fig.axes[0].get_yscale(), len(fig.axes[0].get_lines())
        ('log', 'log', 3)
        >>> plt.close(fig)
    """
    from attn_edu.viz.measurements import plot_curves

    sizes = [check_positive_int("sizes", n) for n in sizes]
    if not len(naive_mib) == len(tiled_mib) == len(sizes):
        raise ValueError(
            f"naive_mib, tiled_mib: expected one value per size ({len(sizes)}), "
            f"got {len(naive_mib)} and {len(tiled_mib)}"
        )
    paper = "two (n, n) matrices per head (paper)"
    fig = plot_curves(
        sizes,
        {
            "reference (measured)": list(naive_mib),
            "tiled (measured)": [max(m, 0.1) for m in tiled_mib],
            paper: [2 * heads * n * n * 4 / 2**20 for n in sizes],
        },
        xlabel="sequence length n",
        ylabel="extra peak memory (MiB)",
        logx=True,
        logy=True,
        title=title or f"attention forward, H={heads}, float32",
    )
    for line in fig.axes[0].get_lines():
        if line.get_label() == paper:
            line.set(linestyle="--", linewidth=2.5, alpha=0.7, marker="")
    fig.axes[0].legend(fontsize=8)
    return fig


def plot_flash_dataflow(*, num_blocks: int = 4, query_block: int = 1, key_block: int = 2) -> Figure:
    """Where FlashAttention's numbers live while one program computes query block ``i`` against key block ``j``.

    Left, HBM: ``Q``, ``K``, ``V`` and ``O``, each cut into ``num_blocks`` blocks of rows. ``Q_i`` is read once;
    ``K`` and ``V`` stream past one block at a time (pale: already read, the current block outlined); ``O_i``
    is written once, after the last key block. Right, SRAM (registers and shared memory of one SM): the tiles
    this step holds, the ``B_r × B_c`` score tile ``S_ij``, and the running ``m_i``, ``ℓ_i`` and ``acc``; no
    ``n × n`` matrix anywhere (Dao et al. 2022, Fig. 1; Dao 2023, Algorithm 1). Each of ``Q``, ``K``, ``V``,
    ``S`` and ``O`` has its role's colour; the memories and the running statistics are neutral grey.

    Example:
        >>> fig = plot_flash_dataflow(num_blocks=4, query_block=1, key_block=2)
        >>> sorted(t.get_text() for t in fig.axes[0].texts if t.get_text() in ("HBM", "SRAM (one program)"))
        ['HBM', 'SRAM (one program)']
        >>> plt.close(fig)
    """
    import matplotlib.patches as patches

    check_positive_int("num_blocks", num_blocks)
    for name, value in (("query_block", query_block), ("key_block", key_block)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < num_blocks:
            raise ValueError(f"{name}: expected an int in 0 .. {num_blocks - 1}, got {value!r}")
    colors = {
        name: ROLE_COLORS[role]
        for name, role in (("Q", "query"), ("K", "key"), ("V", "value"), ("O", "output"))
    }
    streamed = {name: lighter(colors[name], 0.6) for name in ("K", "V")}  # the blocks of K and V already read
    fig, ax = plt.subplots(figsize=(10.0, 4.2), layout="constrained")
    ax.set(xlim=(0, 10.6), ylim=(-0.9, 5.4), aspect="equal")
    ax.axis("off")
    block_h, width = 4.0 / num_blocks, 0.8
    columns = {"Q": 0.4, "K": 1.6, "V": 2.8, "O": 4.0}
    ax.add_patch(
        patches.FancyBboxPatch((0.1, -0.2), 5.0, 5.0, boxstyle="round,pad=0.05", fill=False, ls="--")
    )
    ax.text(2.6, 5.05, "HBM", ha="center", fontsize=12, weight="bold")
    for name, x in columns.items():
        ax.text(x + width / 2, 4.45, name, ha="center", fontsize=11, color=colors[name], weight="bold")
        for b in range(num_blocks):
            y = 4.0 - (b + 1) * block_h + 0.2
            face, edge, lw = "white", "0.4", 0.8
            if name == "Q" and b == query_block:
                face = colors["Q"]
            elif name in ("K", "V") and b < key_block:
                face = streamed[name]
            elif name in ("K", "V") and b == key_block:
                face, edge, lw = colors[name], NEUTRAL_DARK, 2.0
            elif name == "O" and b == query_block:
                face = "white"
                edge, lw = colors["O"], 2.0
            ax.add_patch(patches.Rectangle((x, y), width, block_h, facecolor=face, edgecolor=edge, lw=lw))
    y_i = 4.0 - (query_block + 0.5) * block_h + 0.2
    y_j = 4.0 - (key_block + 0.5) * block_h + 0.2
    for name, y, label, color in [
        ("Q", y_i, f"$Q_{{{query_block}}}$", text_color_on(colors["Q"])),
        ("K", y_j, f"$K_{{{key_block}}}$", text_color_on(colors["K"])),
        ("V", y_j, f"$V_{{{key_block}}}$", text_color_on(colors["V"])),
        ("O", y_i, f"$O_{{{query_block}}}$", colors["O"]),
    ]:
        ax.text(columns[name] + width / 2, y, label, ha="center", va="center", color=color, weight="bold")

    ax.add_patch(patches.FancyBboxPatch((6.2, 0.3), 4.2, 4.3, boxstyle="round,pad=0.05", fill=False, ls="--"))
    ax.text(8.3, 5.05, "SRAM (one program)", ha="center", fontsize=12, weight="bold")
    tiles = [
        ((6.4, 3.4), f"$Q_{{{query_block}}}$", colors["Q"]),
        ((7.8, 3.4), f"$K_{{{key_block}}}$", colors["K"]),
        ((9.2, 3.4), f"$V_{{{key_block}}}$", colors["V"]),
        ((6.4, 1.9), f"$S_{{{query_block}{key_block}}}$", COMPUTED_TILE_COLOR),  # a tile of scores
        ((7.8, 1.9), "$m_i$, $\\ell_i$", "0.95"),  # running statistics: numbers of no role
        ((9.2, 1.9), "acc", colors["O"]),  # the output being built
    ]
    for (x, y), label, face in tiles:
        ax.add_patch(patches.Rectangle((x, y), 1.0, 0.9, facecolor=face, edgecolor="0.3"))
        ax.text(x + 0.5, y + 0.45, label, ha="center", va="center", fontsize=10, color=text_color_on(face))
    ax.text(8.3, 0.95, "no n × n matrix: one $B_r \\times B_c$ tile at a time", ha="center", fontsize=9)
    arrow = {"arrowstyle": "->", "lw": 1.4}
    ax.annotate(
        "", xy=(6.4, 3.85), xytext=(columns["Q"] + width, y_i), arrowprops={**arrow, "color": colors["Q"]}
    )
    ax.annotate(
        "", xy=(7.8, 3.85), xytext=(columns["K"] + width, y_j), arrowprops={**arrow, "color": colors["K"]}
    )
    ax.annotate(
        "", xy=(9.2, 3.85), xytext=(columns["V"] + width, y_j), arrowprops={**arrow, "color": colors["V"]}
    )
    ax.annotate(
        "", xy=(columns["O"] + width, y_i), xytext=(9.2, 2.0), arrowprops={**arrow, "color": colors["O"]}
    )
    ax.text(
        5.6,
        -0.55,
        f"$Q_{{{query_block}}}$ read once · $K_j$, $V_j$ streamed, j = 0 … {num_blocks - 1} · "
        f"$O_{{{query_block}}}$ written once, after the last key block",
        ha="center",
        fontsize=9,
    )
    return fig
