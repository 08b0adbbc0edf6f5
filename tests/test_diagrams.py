"""The schematic diagrams (attn_edu.viz.diagrams*), their stored SVGs, the two step explorers, and the kernel's
traffic picture drawn from a real run in Triton's interpreter."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from matplotlib.text import Text

from attn_edu.kernels import triton_available
from attn_edu.viz import diagrams
from attn_edu.viz.common import ROLE_COLORS
from attn_edu.viz.diagrams import DIAGRAMS, FIGURES, build
from attn_edu.viz.diagrams_kit import MAX_WIDTH, SMALL
from attn_edu.viz.heatmaps import MASK_COLORS

REPO = Path(__file__).resolve().parents[1]
NUMBER = re.compile(r"-?\d+\.\d+")


def _normalised(svg: str) -> str:
    """An SVG with every decimal rounded to 2 places: float noise in the last digits (another CPU's sin and cos)
    is not staleness."""
    return NUMBER.sub(lambda m: f"{float(m.group()):.2f}", svg)


def stale_figures(stored: Path, fresh: Path) -> list[str]:
    """The file names that differ between two folders of diagrams, or exist in only one of them."""
    names = sorted({p.name for p in stored.glob("*.svg")} | {p.name for p in fresh.glob("*.svg")})
    return [
        name
        for name in names
        if not (stored / name).exists()
        or not (fresh / name).exists()
        or _normalised((stored / name).read_text()) != _normalised((fresh / name).read_text())
    ]


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("figures")
    build(out)
    return out


def test_stored_diagrams_are_fresh(fresh: Path) -> None:
    stale = stale_figures(FIGURES, fresh)
    assert not stale, (
        f"course/figures is stale: {stale} differ from a fresh drawing (or exist on one side only); "
        "run `python -m attn_edu.viz.diagrams build`"
    )


def test_a_stale_file_is_named(fresh: Path, tmp_path: Path) -> None:
    for path in fresh.glob("*.svg"):
        (tmp_path / path.name).write_text(path.read_text())
    assert stale_figures(tmp_path, fresh) == []
    target = tmp_path / "rope_pair.svg"
    target.write_text(target.read_text().replace("</svg>", "<!-- an older drawing --></svg>"))
    (tmp_path / "removed_diagram.svg").write_text("<svg/>")
    assert stale_figures(tmp_path, fresh) == ["removed_diagram.svg", "rope_pair.svg"]


def test_building_twice_writes_the_same_bytes(fresh: Path, tmp_path: Path) -> None:
    build(tmp_path, ["query_path", "kv_cache_steps"])
    for name in ("query_path.svg", "kv_cache_steps.svg"):
        assert (tmp_path / name).read_bytes() == (fresh / name).read_bytes(), name
        assert "<dc:date>" not in (tmp_path / name).read_text()


@pytest.mark.parametrize("name", list(DIAGRAMS))
def test_each_diagram_fits_a_notebook_and_says_where_it_goes(name: str) -> None:
    entry = DIAGRAMS[name]
    defaults = {k: p.default for k, p in inspect.signature(entry.draw).parameters.items()}
    for key, value in entry.sizes.items():  # the registry's sizes are the function's own defaults
        assert defaults[key] == value, (
            f"{name}: registry says {key}={value!r}, the function {defaults[key]!r}"
        )
    assert (REPO / "course" / f"{entry.notebook}.ipynb").exists(), entry.notebook
    assert entry.section.startswith("§") and len(entry.alt.split()) >= 20
    fig = entry.figure()
    try:
        width, _ = fig.get_size_inches()
        assert width <= MAX_WIDTH
        sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_text().strip()]
        assert sizes and min(sizes) >= SMALL, f"{name}: text of {min(sizes)} pt, below {SMALL}"
    finally:
        plt.close(fig)


BAD_INPUT = [
    ("query_path", {"query": 6}, "query"),
    ("query_path", {"D": 0}, "D"),
    ("self_vs_cross", {"T_cross": 0}, "T_cross"),
    ("mask_kinds", {"lengths": (6, 9)}, "lengths"),
    ("mask_kinds", {"sequence": 3}, "sequence"),
    ("cache_alignment", {"T": 7}, "T"),
    ("split_heads", {"C": 13}, "C"),
    ("kv_grouping", {"H_kv": 4}, "H_kv"),
    ("sinusoidal_clock", {"dim": 63}, "dim"),
    ("sinusoidal_clock", {"pairs": (0, 32)}, "pairs"),
    ("rope_pair", {"pair": (0.0, 0.0)}, "pair"),
    ("rope_pair", {"theta": 4.0}, "theta"),
    ("norm_placement", {"C": 2.5}, "C"),
    ("architectures", {"S_real": 7}, "S_real"),
    ("kv_cache_steps", {"step": 6}, "step"),
    ("sparsity_patterns", {"global_positions": (32,)}, "global_positions"),
    ("flash_tile_loop", {"query_block": 4}, "query_block"),
    ("flash_tile_loop", {"causal": True, "step": 3}, "step"),
    ("backward_recompute", {"block": True}, "block"),
    ("induction_circuit", {"query": 2}, "query"),
    ("induction_circuit", {"tokens": [1, "a"]}, "tokens"),
]


@pytest.mark.parametrize(("name", "change", "argument"), BAD_INPUT)
def test_bad_sizes_name_the_argument(name: str, change: dict, argument: str) -> None:
    with pytest.raises(ValueError, match=rf"^{re.escape(argument)}: "):
        DIAGRAMS[name].figure(**change)
    plt.close("all")


def test_every_diagram_is_tried_with_bad_input() -> None:
    assert {name for name, _, _ in BAD_INPUT} == set(DIAGRAMS)


def test_masks_are_drawn_in_the_mask_role_colour() -> None:
    assert MASK_COLORS[1] == ROLE_COLORS["mask"]
    assert len(set(ROLE_COLORS.values())) == len(ROLE_COLORS)  # one colour per role, none shared


def test_the_build_command_writes_every_diagram(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "attn_edu.viz.diagrams", "build", "--out", str(tmp_path), "rope_pair"],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "MPLBACKEND": "Agg"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["rope_pair.svg"]
    with pytest.raises(ValueError, match="^names: "):
        diagrams.build(tmp_path, ["no_such_diagram"])


# ---------------------------------------------------------------------------------------------------------
# Each diagram sits in its notebook's text, once

IMAGE = re.compile(r"!\[(?P<alt>[^\]]*)\]\((?P<src>[^)\s]+)\)")  # ![alt text](figures/name.svg)


def placements(course: Path) -> dict[str, list[tuple[str, int, str]]]:
    """Every diagram that the markdown of ``course/*.ipynb`` shows: its file name's stem ->
    [(notebook, cell index, alt text)], one entry per time it is shown."""
    found: dict[str, list[tuple[str, int, str]]] = {}
    for path in sorted(course.glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        for index, cell in enumerate(cells):
            if cell["cell_type"] != "markdown":
                continue
            for image in IMAGE.finditer("".join(cell["source"])):
                if image["src"].startswith("figures/"):
                    found.setdefault(Path(image["src"]).stem, []).append((path.stem, index, image["alt"]))
    return found


def placement_problems(name: str, shown: list[tuple[str, int, str]]) -> list[str]:
    """What is wrong with where diagram ``name`` is shown: missing, shown twice, in another notebook, or with
    alt text other than the registry's."""
    entry = DIAGRAMS[name]
    if not shown:
        return [
            f"{name}: not shown in {entry.notebook} (expected ![alt](figures/{name}.svg) in a markdown cell)"
        ]
    problems = []
    if len(shown) > 1:
        problems.append(f"{name}: shown {len(shown)} times, at {[(nb, cell) for nb, cell, _ in shown]}")
    problems += [f"{name}: shown in {nb} (cell {cell}), not in {entry.notebook}"
                 for nb, cell, _ in shown if nb != entry.notebook]  # fmt: skip
    problems += [f"{name}: the alt text in {nb} (cell {cell}) is not the registry's" for nb, cell, alt in shown
                 if alt != entry.alt]  # fmt: skip
    return problems


@pytest.fixture(scope="module")
def shown() -> dict[str, list[tuple[str, int, str]]]:
    return placements(REPO / "course")


@pytest.mark.parametrize("name", list(DIAGRAMS))
def test_each_diagram_is_shown_once_in_its_notebook(name: str, shown: dict) -> None:
    problems = placement_problems(name, shown.get(name, []))
    assert not problems, "\n".join(problems)


def test_every_figure_the_course_shows_is_a_stored_diagram(shown: dict) -> None:
    assert set(shown) <= set(DIAGRAMS), f"not in the registry: {sorted(set(shown) - set(DIAGRAMS))}"
    assert all((FIGURES / f"{name}.svg").is_file() for name in shown)


def test_a_missing_or_doubled_diagram_is_named(tmp_path: Path) -> None:
    entry = DIAGRAMS["rope_pair"]
    image = f"![{entry.alt}](figures/rope_pair.svg)"

    def notebook(name: str, *texts: str) -> None:
        cells = [{"cell_type": "markdown", "metadata": {}, "source": text} for text in texts]
        (tmp_path / f"{name}.ipynb").write_text(json.dumps({"cells": cells}))

    notebook(entry.notebook, "# 07", f"Before.\n\n{image}")
    assert placement_problems("rope_pair", placements(tmp_path)["rope_pair"]) == []
    notebook("06_positional_encodings", image.replace("One pair", "A pair"))  # shown again, elsewhere
    problems = placement_problems("rope_pair", placements(tmp_path)["rope_pair"])
    assert len(problems) == 3 and "shown 2 times" in problems[0] and "not in 07_rope" in problems[1]
    assert "alt text" in problems[2]
    notebook(entry.notebook, "# 07")
    (tmp_path / "06_positional_encodings.ipynb").unlink()
    assert placement_problems("rope_pair", placements(tmp_path).get("rope_pair", [])) == [
        "rope_pair: not shown in 07_rope (expected ![alt](figures/rope_pair.svg) in a markdown cell)"
    ]


# ---------------------------------------------------------------------------------------------------------
# The two explorers that step through time


def test_kv_cache_explorer_counts_one_position_per_cached_step() -> None:
    from attn_edu.widgets import kv_cache_explorer

    ex = kv_cache_explorer(8, 5)
    cached, uncached = [], []
    for step in range(6):
        ex.set(step=step)
        cached.append(ex.state["computed_with_cache"])
        uncached.append(ex.state["computed_without_cache"])
    assert [b - a for a, b in zip(cached, cached[1:])] == [1] * 5  # one new position per step
    assert [b - a for a, b in zip(uncached, uncached[1:])] == [9, 10, 11, 12, 13]  # the whole sequence again
    assert ex.figure is not None and not plt.fignum_exists(ex.figure.number)


def test_flash_tile_explorer_follows_causal_skipping() -> None:
    from attn_edu.viz.flash import causal_tile_kinds
    from attn_edu.widgets import flash_tile_explorer

    ex = flash_tile_explorer(4)
    kinds = causal_tile_kinds(4 * 16, 16)  # (4, 4): 0 = a tile causal attention skips
    for i in range(4):
        ex.set(causal=True, query_block=i)
        assert ex.controls["step"].max == int((kinds[i] > 0).sum())  # the loop ends where the tiles do
    ex.set(causal=False, query_block=0, step=4)
    assert ex.state["visits"] == 4 and ex.state["key_block"] == 3


# ---------------------------------------------------------------------------------------------------------
# The kernel's traffic, from a real run of the course's forward kernel in Triton's interpreter

TRAFFIC_RUN = textwrap.dedent(
    """
    import importlib.util, inspect, json, os, sys, tempfile
    import torch
    from attn_edu.attention import scaled_dot_product_attention
    from attn_edu.grading.bounds import bounds_checked, recorded_loads, recorded_stores
    from attn_edu.kernels import triton_flash as tf
    from attn_edu.viz.diagrams_traffic import kernel_traffic, plot_kernel_traffic, traffic_marks

    T, D, BLOCK, PAD = 200, 16, 64, 256

    def planted(name, old, new):  # the course's kernel with one line changed
        src = inspect.getsource(tf._flash_forward_kernel.fn)
        assert src.count(old) == 1, old
        path = os.path.join(tempfile.mkdtemp(), name + ".py")
        with open(path, "w") as f:
            f.write("import triton\\nimport triton.language as tl\\n"
                    "from attn_edu.kernels.triton_flash import _tile_allowed\\n\\n" + src.replace(old, new))
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module._flash_forward_kernel

    kernels = {
        "course": tf._flash_forward_kernel,
        "no_skipping": planted("no_skipping", "key_stop = tl.minimum(S, tl.maximum(0, S - T + q_start + BLOCK_M))",
                               "key_stop = S"),
        "unmasked_edge": planted("unmasked_edge", "kv_mask = (cols[:, None] < S) & (dims[None, :] < D)",
                                 "kv_mask = dims[None, :] < D"),
    }
    result = {}
    for name, kernel in kernels.items():
        g = torch.Generator().manual_seed(0)
        q = torch.randn(1, 1, T, D, generator=g)
        # K and V are slices of longer buffers: a load past row T reads memory that exists, and is recorded
        k, v = (torch.randn(1, 1, PAD, D, generator=g)[:, :, :T] for _ in range(2))
        out, lse = torch.empty_like(q), torch.empty(1, 1, T)
        with bounds_checked() as watched, recorded_loads() as loads, recorded_stores() as stores:
            kernel[(-(-T // BLOCK), 1)](
                q, k, v, out, lse, lse, *q.stride(), *k.stride(), *v.stride(), *out.stride(),
                1, 1, T, T, D, D ** -0.5, IS_CAUSAL=True, HAS_SINKS=False, BLOCK_M=BLOCK, BLOCK_N=BLOCK,
                BLOCK_D=16, DOT_PRECISION="ieee")
        lengths = {"Q": T, "K": T, "V": T, "OUT": T}
        accesses = kernel_traffic(loads, stores, row_size=D, rows_allocated={**lengths, "K": PAD, "V": PAD},
                                  block_m=BLOCK, block_n=BLOCK)
        fig = plot_kernel_traffic(loads, stores, lengths=lengths, rows_allocated={"K": PAD, "V": PAD}, row_size=D,
                                  block_m=BLOCK, block_n=BLOCK, is_causal=True)
        result[name] = {
            "watched": watched,
            "error": float((out - scaled_dot_product_attention(q, k, v, is_causal=True)).abs().max()),
            "marks": traffic_marks(accesses, lengths=lengths, block_m=BLOCK, is_causal=True),
            "kv_tiles": [sorted({a.block for a in accesses if a.program == p and a.name == "K"}) for p in range(4)],
            "o_rows": sorted(int(r) for a in accesses if a.store for r in a.rows),
            "panels": len(fig.axes),
        }
    print(json.dumps(result))
    """
)


@pytest.fixture(scope="module")
def traffic() -> dict:
    if not triton_available():
        pytest.skip("Triton is not installed")
    env = {**os.environ, "TRITON_INTERPRET": "1", "MPLBACKEND": "Agg"}
    run = subprocess.run(
        [sys.executable, "-c", TRAFFIC_RUN], capture_output=True, text=True, env=env, cwd=REPO
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_course_kernel_reads_only_the_tiles_causal_attention_needs(traffic: dict) -> None:
    from attn_edu.viz.flash import causal_tile_kinds

    course = traffic["course"]
    assert course["watched"] and course["error"] < 1e-5
    assert course["marks"] == {"past the end": 0, "skippable": 0, "repeated": 0}
    kinds = causal_tile_kinds(200, 64)  # (4, 4): the tiles a causal 200 x 200 attention computes
    for program, tiles in enumerate(course["kv_tiles"]):
        assert tiles == [64 * j for j in range(4) if kinds[program, j] > 0], program
    assert course["o_rows"] == list(range(200))  # every output row written once, none past the end
    assert course["panels"] == 4


@pytest.mark.slow
def test_the_picture_marks_a_planted_wrong_kernel(traffic: dict) -> None:
    from attn_edu.viz.flash import causal_tile_kinds

    skipped = int((causal_tile_kinds(200, 64) == 0).sum())  # tiles causal skipping never loads
    no_skipping, unmasked = traffic["no_skipping"], traffic["unmasked_edge"]
    assert (
        no_skipping["error"] < 1e-5 and unmasked["error"] < 1e-5
    )  # right answers: only the picture shows it
    assert no_skipping["marks"] == {"past the end": 0, "skippable": 2 * skipped, "repeated": 0}  # K and V
    assert unmasked["marks"]["past the end"] == 2 and unmasked["marks"]["skippable"] == 0  # K_3 and V_3
