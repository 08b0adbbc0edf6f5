"""Designed diagrams for the course's hard ideas, and the command that stores them as SVG for the notebooks' text.

Every plot elsewhere in :mod:`attn_edu.viz` shows data; these show mechanisms. They share one visual language
(:mod:`attn_edu.viz.diagrams_kit`: the role colours of :data:`attn_edu.viz.common.ROLE_COLORS`, the shape
legend's letters, one font and one arrow) and are drawn by code, so a diagram's sizes are those of the example
it sits beside. :data:`DIAGRAMS` lists each one: its function, the sizes of that example, the notebook and
section it belongs to, and its alt text (what a screen reader says, and what the website shows when the
picture cannot load).

    python -m attn_edu.viz.diagrams build [--out DIR]     (default: course/figures)

writes every diagram as ``DIR/<name>.svg``, byte for byte the same on every run (a fixed ``svg.hashsalt``, no
date; text kept as text), so that a stored figure differs from a fresh one only when its code or sizes
changed. A Markdown cell shows one with ``![alt text](figures/query_path.svg)``.
"""

from __future__ import annotations

import argparse
import io
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from attn_edu.viz.diagrams_attention import (
    cache_alignment,
    kv_grouping,
    mask_kinds,
    query_path,
    self_vs_cross,
    split_heads,
)
from attn_edu.viz.diagrams_blocks import architectures, norm_placement, rope_pair, sinusoidal_clock
from attn_edu.viz.diagrams_steps import (
    backward_recompute,
    flash_tile_loop,
    induction_circuit,
    kv_cache_steps,
    sparsity_patterns,
)

FIGURES = Path(__file__).resolve().parents[2] / "course" / "figures"  # where the course's Markdown finds them
SVG_SALT = "attn-edu"  # svg.hashsalt: the ids of clip paths and glyphs, the same on every run
SVG_METADATA = {"Date": None, "Creator": "attn_edu.viz.diagrams"}  # no date, no matplotlib version
FALLBACK_FONTS = "'Bitstream Vera Sans', 'Verdana', 'Arial', 'Helvetica', sans-serif"  # after DejaVu Sans
LONE_FONT = re.compile(r"font-family: '([^']+)'(?=[;\"])")  # a font named with no fallback after it


@dataclass(frozen=True)
class Diagram:
    """One diagram of the course: how to draw it, where it goes, what it says in words."""

    draw: Callable[..., Figure]  # the function; keyword arguments only
    sizes: dict[str, Any] = field(default_factory=dict)  # the sizes of the example beside it (the defaults)
    notebook: str = ""  # the course notebook it belongs in
    section: str = ""  # the section there, and the cell it follows
    alt: str = ""  # alt text: what the picture shows, in one or two sentences

    def figure(self, **overrides: Any) -> Figure:
        """The diagram at its example's sizes, or with some of them changed."""
        return self.draw(**{**self.sizes, **overrides})


DIAGRAMS: dict[str, Diagram] = {
    "query_path": Diagram(
        query_path,
        {"T": 6, "S": 6, "D": 4, "Dv": 5, "query": 2, "causal": False, "token": "sat"},
        "02_qkv_scaled_dot_product",
        "§3 Scaled dot-product attention, one step at a time (before step 1, cell 12)",
        "One query's path through attention: the query row (1, 4) meets the keys (4, 6) in 6 scores, which are "
        "divided by the square root of 4, masked, turned by softmax into 6 weights that sum to 1, and used to mix "
        "the 6 rows of V (6, 5) into one output row (1, 5).",
    ),
    "self_vs_cross": Diagram(
        self_vs_cross,
        {"T": 6, "S": 6, "T_cross": 3, "C": 8, "C_cross": 12, "D": 4},
        "02_qkv_scaled_dot_product",
        "§6 Self-attention and cross-attention (in its first paragraph, before the French example, cell 35)",
        "Left, self-attention: Q, K and V are three projections of one sequence X (6 tokens), so the attention is "
        "6 by 6. Right, cross-attention: Q comes from 3 French tokens of size 12, K and V from the 6 English "
        "tokens; the attention is 3 by 6 and only the key size D = 4 must match.",
    ),
    "mask_kinds": Diagram(
        mask_kinds,
        {"T": 6, "lengths": (6, 4, 2), "sequence": 1},
        "04_masks",
        "§3 Combining masks (after its first paragraph, cell 15)",
        "Three 6 by 6 masks, dark cells may attend: the causal mask (a lower triangle), the padding mask of a "
        "sequence of 4 real tokens (the last 2 key columns hidden), and both combined (the triangle, cut after "
        "key 3).",
    ),
    "cache_alignment": Diagram(
        cache_alignment,
        {"T": 2, "S": 6},
        "04_masks",
        "§6 Bottom-right vs top-left (after its first paragraph, cell 32)",
        "Two new queries against 6 keys, 4 of them cached. Bottom-right alignment lets the query at position 5 "
        "see all 6 keys and the one at 4 see 5; top-left alignment, PyTorch's is_causal, lets them see only "
        "keys 0 and 0 to 1, ignoring the cache.",
    ),
    "split_heads": Diagram(
        split_heads,
        {"T": 5, "C": 12, "H": 3},
        "05_multi_head",
        "§3 W^O mixes the heads (after the equation, cell 10)",
        "The projected queries (5 tokens by 12 channels) are cut into 3 heads of 4 channels; each head attends on "
        "its own; the outputs are concatenated back into 12 channels and multiplied by W^O, where head h meets "
        "only row block h, so the result is a sum over heads that writes into all 12 channels.",
    ),
    "kv_grouping": Diagram(
        kv_grouping,
        {"H": 6, "H_kv": 2},
        "05_multi_head",
        "§4 Sharing keys and values: GQA and MQA (after its paragraph, cell 12)",
        "Six query heads reading key/value heads: in MHA each reads its own (6 kv heads), in GQA with 2 groups "
        "heads 0 to 2 share kv head 0 and heads 3 to 5 share kv head 1, in MQA all six share one.",
    ),
    "sinusoidal_clock": Diagram(
        sinusoidal_clock,
        {"dim": 64, "pairs": (0, 4, 8, 16), "position": 3, "shift": 2},
        "06_positional_encodings",
        "§2 Sinusoidal encodings: a clock with many hands (after the equation and its paragraph, cell 7)",
        "Four clock faces, pairs 0, 4, 8 and 16 of a 64-dimensional encoding. Each hand turns by its own angle "
        "per token, fast for pair 0 (wavelength 6 tokens) and slow for pair 16 (628 tokens); moving from "
        "position 3 to 5 turns each hand by twice its angle, whatever the starting position.",
    ),
    "rope_pair": Diagram(
        rope_pair,
        {"pair": (1.0, 0.4), "theta": 0.5, "m": 3, "n": 1},
        "07_rope",
        "§2 The score depends only on m − n (after the equation, cell 7)",
        "One pair of a query and a key, before and after RoPE: the query at position 3 turns by 1.5 radians, the "
        "key at position 1 by 0.5, so the angle between them changes by (n − m)·θ = −1 radian and their lengths "
        "stay the same; the score depends only on the offset.",
    ),
    "norm_placement": Diagram(
        norm_placement,
        {"B": 16, "T": 12, "C": 32},
        "08_transformer_blocks",
        "§6 Pre-norm vs post-norm, trained side by side (after the formulas and their gloss, cell 22)",
        "One block drawn twice. Post-norm puts a LayerNorm on the residual stream after each sum, so the skip "
        "path crosses two norms per block; pre-norm normalises only the branch into attention and the "
        "feed-forward network, so the skip path is a plain sum from the input to the output.",
    ),
    "architectures": Diagram(
        architectures,
        {"S": 6, "S_real": 5, "T": 4},
        "09_architectures",
        "§1 Three ways to wire attention (after the table, cell 3)",
        "An encoder (BERT) runs self-attention over the source under a padding mask; a decoder (GPT) runs causal "
        "self-attention over the output so far; an encoder-decoder (T5) has both stacks, and each decoder block "
        "adds cross-attention whose keys and values come from the encoder's output, computed once.",
    ),
    "kv_cache_steps": Diagram(
        kv_cache_steps,
        {"prompt_len": 8, "new_tokens": 4},
        "10_kv_cache",
        "§2 The cache, step by step (after the first paragraph, cell 5; its explorer follows)",
        "Decode steps as rows, positions as columns. With a cache, the prefill computes keys and values for the 8 "
        "prompt tokens and each of the 4 later steps computes them for its one new token, reading the rest from "
        "the cache (12 positions in all); without a cache every step recomputes every position (50 in all).",
    ),
    "sparsity_patterns": Diagram(
        sparsity_patterns,
        {"T": 32, "window": 3, "global_positions": (0,), "num_random": 2, "query": 16, "seed": 0},
        "11_efficient_attention",
        "§3 Longformer and BigBird (after its paragraph, cell 9)",
        "The keys that query 16 of 32 reads: a window of its 5 neighbours; Longformer adds the global token 0; "
        "BigBird adds 2 random keys, drawn as in the notebook.",
    ),
    "flash_tile_loop": Diagram(
        flash_tile_loop,
        {"num_q_blocks": 4, "num_k_blocks": 4, "query_block": 1, "causal": False, "block": 4},
        "12_flash_attention",
        "§4 Tiled attention in PyTorch (after the data-flow figure, cell 19; its explorer follows)",
        "The score matrix in 4 by 4 tiles; query block 1 walks along its row of tiles, one key block at a time. "
        "On chip: the query tile, held; the current key and value tiles, streamed; the score tile, discarded "
        "after use; and the running max, sum and accumulator, kept. A table gives one row's running max and sum "
        "after each block.",
    ),
    "backward_recompute": Diagram(
        backward_recompute,
        {"T": 20, "S": 28, "D": 16, "block": 8},
        "12_flash_attention",
        "§7 The backward pass: recompute, don't store (after the equations, cell 36)",
        "The forward pass keeps the output and one log-sum-exp per query (20 numbers) instead of the 20 by 28 "
        "weights. The backward recomputes each tile of weights as exp(S − lse), then the gradients of V, of the "
        "weights and scores, and of Q and K, tile by tile.",
    ),
    "induction_circuit": Diagram(
        induction_circuit,
        {"tokens": (36, 22, 2, 32, 13, 4, 36, 22, 2, 32, 13, 4), "query": 8},
        "13_interpretability",
        "§7(b) A less striking head that everything depends on (in cell 36, after K-composition is named)",
        "Tokens 36 22 2 32 13 4, repeated. In layer 0 a previous-token head at position 3 reads position 2 and "
        "writes 'token 2 came before me'; the layer-1 induction head builds its key from that (K-composition), so "
        "its query at position 8, the second 2, attends to position 3 and copies 32, the next token.",
    ),
}


def _with_fallback_fonts(svg: str) -> str:
    """Give every font that matplotlib names alone (mathtext's glyphs: ``'DejaVu Sans'``, ``'STIXSizeOneSym'``)
    the sans-serif fallbacks of its plain text, so that a browser without DejaVu draws them in a sans-serif font,
    not in its default serif one."""
    return LONE_FONT.sub(lambda m: f"font-family: '{m.group(1)}', {FALLBACK_FONTS}", svg)


def save_svg(fig: Figure, path: Path) -> None:
    """Write ``fig`` as an SVG that is byte for byte the same every run (same code, same matplotlib).

    Text stays text (``svg.fonttype`` ``"none"``): a reader's browser draws it in DejaVu Sans or the nearest
    sans-serif font, a screen reader and a search can read it, and a diagram is a few tens of kilobytes
    instead of the hundred or so that every glyph drawn as a path costs.
    """
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": SVG_SALT, "svg.fonttype": "none"}):
        fig.savefig(buffer, format="svg", metadata=SVG_METADATA)
    path.write_text(_with_fallback_fonts(buffer.getvalue()), encoding="utf-8")


def build(out: Path = FIGURES, names: list[str] | None = None) -> list[Path]:
    """Draw the diagrams (all, or ``names``) at their examples' sizes into ``out/<name>.svg``; return the paths."""
    unknown = sorted(set(names or []) - set(DIAGRAMS))
    if unknown:
        raise ValueError(f"names: unknown diagrams {unknown}; expected some of {sorted(DIAGRAMS)}")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names or list(DIAGRAMS):
        fig = DIAGRAMS[name].figure()
        try:
            save_svg(fig, out / f"{name}.svg")
        finally:
            plt.close(fig)
        written.append(out / f"{name}.svg")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m attn_edu.viz.diagrams", description=__doc__.split("\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    build_parser = commands.add_parser("build", help="write every diagram as SVG")
    build_parser.add_argument("--out", type=Path, default=FIGURES, help="default: course/figures")
    build_parser.add_argument("names", nargs="*", help="only these diagrams (default: all)")
    args = parser.parse_args(argv)
    written = build(args.out, args.names or None)
    print(f"wrote {len(written)} diagrams to {args.out}")
    return 0


if __name__ == "__main__":
    matplotlib.use("Agg")
    sys.exit(main())
