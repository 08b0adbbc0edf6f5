"""Notebook 09 (T5 span corruption): choose how much of a sentence to hide and how long the spans are."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import ipywidgets as widgets
import torch
from matplotlib.figure import Figure

from attn_edu import viz
from attn_edu.objectives import span_corruption, span_uncorrupt
from attn_edu.widgets.explorer import WIDE_LABELS, Explorer

SPAN_SENTENCE = (
    "a small model learns to fill the gaps in a sentence by reading the words on both sides of each gap "
    "and then writing out only the missing words after a sentinel that marks where each gap was"
)  # 38 words: at T5's settings round(0.15 · 38) = 6 hidden words in round(6 / 3) = 2 spans


def _span_view(
    words: list[str], *, noise_density: float, mean_span_length: float, seed: int
) -> tuple[dict, Figure]:
    n = len(words)
    sentinel_start_id = n + 99  # 100 sentinels after the words, counting down: <X0> = n + 99
    names = words + [f"<X{sentinel_start_id - i}>" for i in range(n, n + 100)]
    ids = torch.arange(n)  # (T,) every word its own id, so a word's position is its id
    inputs, targets = span_corruption(
        ids,
        noise_density=noise_density,
        mean_span_length=mean_span_length,
        sentinel_start_id=sentinel_start_id,
        generator=torch.Generator().manual_seed(seed),
    )
    noise = torch.isin(ids, targets)  # (T,) the hidden words are exactly the targets' plain tokens
    is_sentinel_in, is_sentinel_out = inputs >= n, targets >= n
    round_trip = torch.equal(span_uncorrupt(inputs, targets, sentinel_start_id=sentinel_start_id), ids)
    state = {
        "inputs": [names[i] for i in inputs.tolist()],
        "targets": [names[i] for i in targets.tolist()],
        "noise": noise,
        "num_noise": int(noise.sum()),
        "num_spans": int(is_sentinel_in.sum()),
        "input_length": len(inputs),
        "target_length": len(targets),
        "round_trip": round_trip,
    }
    figure = viz.plot_token_rows(
        {"original": words, "encoder input": state["inputs"], "decoder target": state["targets"]},
        highlight={"original": noise, "encoder input": is_sentinel_in, "decoder target": ~is_sentinel_out},
        title=(
            f"{state['num_noise']} of {n} words hidden in {state['num_spans']} spans: "
            f"{n} tokens become {len(inputs)} in + {len(targets)} out"
        ),
    )
    return state, figure


def span_corruption_explorer(words: Sequence[str] | str = SPAN_SENTENCE, *, seed: int = 0) -> Explorer:
    """T5's span corruption on a sentence: choose how much to hide and how long the spans are.

    The sliders set ``noise_density`` (fraction of words hidden), ``mean_span_length`` and the random
    ``seed`` of :func:`attn_edu.objectives.span_corruption`. The picture shows the sentence with the
    hidden words in orange, the encoder input (each span replaced by one sentinel ``<Xk>``, T5's
    ``<extra_id_k>``) and the decoder target (each sentinel followed by the words it hides).
    ``state["round_trip"]`` says whether :func:`~attn_edu.objectives.span_uncorrupt` rebuilds the sentence.

    Example:
        >>> ex = span_corruption_explorer("one two three four five six seven eight nine ten")
        >>> ex.set(noise_density=0.3, mean_span_length=1.0)
        >>> ex.state["num_noise"], ex.state["num_spans"], ex.state["round_trip"]
        (3, 3, True)
    """
    if isinstance(words, str):
        words = words.split()
    if isinstance(words, torch.Tensor) or not isinstance(words, Sequence) or len(words) < 2:
        raise ValueError(f"words: expected a sentence or a list of at least 2 words, got {words!r}")
    words = [str(w) for w in words]
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed: expected an int >= 0, got {seed!r}")
    float_slider = partial(widgets.FloatSlider, continuous_update=False, style=WIDE_LABELS)
    controls = {
        "noise_density": float_slider(value=0.15, min=0.05, max=0.5, step=0.05, description="noise density"),
        "mean_span_length": float_slider(
            value=3.0, min=1.0, max=5.0, step=0.5, description="mean span length"
        ),
        "seed": widgets.IntSlider(
            value=seed, min=0, max=max(20, seed), continuous_update=False, description="seed"
        ),
    }
    return Explorer(controls, partial(_span_view, words), title="T5 span corruption")
