"""Notebooks 10 and 12: step through two diagrams in time, the KV cache filling and FlashAttention's tile loop.

The pictures are :func:`attn_edu.viz.diagrams_steps.kv_cache_steps` and
:func:`attn_edu.viz.diagrams_steps.flash_tile_loop`; the website shows their last step, stored as SVG by
``python -m attn_edu.viz.diagrams build``.
"""

from __future__ import annotations

from functools import partial

import ipywidgets as widgets
from matplotlib.figure import Figure

from attn_edu.viz.diagrams_kit import check_int
from attn_edu.viz.diagrams_steps import flash_tile_loop, kv_cache_steps
from attn_edu.widgets.explorer import WIDE_LABELS, Explorer


def _kv_cache_view(prompt_len: int, new_tokens: int, *, step: int) -> tuple[dict, Figure]:
    figure = kv_cache_steps(prompt_len=prompt_len, new_tokens=new_tokens, step=step)
    state = {
        "step": step,
        "keys": prompt_len + step,  # keys stored after this step
        "computed_with_cache": prompt_len + step,  # the prefill, then one position per step
        "computed_without_cache": sum(prompt_len + i for i in range(step + 1)),  # every position, every step
    }
    return state, figure


def kv_cache_explorer(prompt_len: int = 8, new_tokens: int = 5) -> Explorer:
    """Move through decode steps: with a cache each step computes one position, without it every position.

    Example:
        >>> ex = kv_cache_explorer(8, 5)
        >>> ex.set(step=3)
        >>> ex.state["computed_with_cache"], ex.state["computed_without_cache"]
        (11, 38)
    """
    check_int("prompt_len", prompt_len, 1, 24)
    check_int("new_tokens", new_tokens, 1, 12)
    controls = {
        "step": widgets.IntSlider(
            value=0,
            min=0,
            max=new_tokens,
            description="decode step",
            continuous_update=False,
            style=WIDE_LABELS,
        ),  # fmt: skip
    }
    return Explorer(
        controls,
        partial(_kv_cache_view, prompt_len, new_tokens),
        title="The KV cache, one decode step at a time",
    )


def _visits(num_k_blocks: int, query_block: int, causal: bool) -> int:
    """Key blocks that query block ``query_block`` reads (causal: up to the diagonal, square tiles)."""
    return min(num_k_blocks, query_block + 1) if causal else num_k_blocks


def _flash_view(num_blocks: int, *, query_block: int, causal: bool, step: int) -> tuple[dict, Figure]:
    visits = _visits(num_blocks, query_block, causal)
    step = min(step, visits)
    figure = flash_tile_loop(
        num_q_blocks=num_blocks, num_k_blocks=num_blocks, query_block=query_block, causal=causal, step=step
    )
    state = {
        "query_block": query_block,
        "causal": causal,
        "step": step,
        "key_block": step - 1,
        "visits": visits,
    }
    return state, figure


def _sync_flash_steps(num_blocks: int, controls: dict[str, widgets.ValueWidget]) -> None:
    # The step slider ends at the last key block this query block reads (fewer when causal).
    controls["step"].max = _visits(num_blocks, controls["query_block"].value, controls["causal"].value)


def flash_tile_explorer(num_blocks: int = 4) -> Explorer:
    """Step through one program of FlashAttention: its query tile stays, key/value tiles stream past.

    Example:
        >>> ex = flash_tile_explorer(4)
        >>> ex.set(causal=True, query_block=2, step=3)
        >>> ex.state["visits"], ex.state["key_block"]
        (3, 2)
    """
    check_int("num_blocks", num_blocks, 1, 8)
    slider = partial(widgets.IntSlider, continuous_update=False, style=WIDE_LABELS)
    controls = {
        "query_block": slider(
            value=min(1, num_blocks - 1), min=0, max=num_blocks - 1, description="query block i"
        ),
        "causal": widgets.Checkbox(value=False, description="causal"),
        "step": slider(value=1, min=1, max=num_blocks, description="key blocks read"),
    }
    return Explorer(
        controls,
        partial(_flash_view, num_blocks),
        title="FlashAttention: one query block's tile loop",
        sync=partial(_sync_flash_steps, num_blocks),
    )
