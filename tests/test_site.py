"""The website builder's links (``scripts/build_site.py``), without a browser.

A notebook's Markdown links are written for the notebook's folder (``[notebook 05](05_multi_head.ipynb)``,
``../README.md#...``); on the site each must reach the page of that notebook, or the file on GitHub.
``tests/ui/test_site_in_browser.py`` follows every link of the built site in Chromium.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from attn_edu import links

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def build_site():
    pytest.importorskip("nbconvert")
    spec = importlib.util.spec_from_file_location("build_site", REPO / "scripts" / "build_site.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def renderer(build_site, tmp_path_factory):
    pages, _ = build_site.find_pages(REPO)
    page = next(p for p in pages if p.notebook == "course/04_masks.ipynb")
    return build_site.Renderer(page, pages, tmp_path_factory.mktemp("site"), state={})


def hrefs(html: str) -> list[str]:
    return re.findall(r'<a href="([^"]*)"', html)


def test_a_link_to_a_notebook_reaches_its_page(renderer) -> None:
    html = renderer.markdown(
        "Next, [notebook 05](05_multi_head.ipynb) and [its set](../exercises/05_multi_head_exercises.ipynb)."
    )
    assert hrefs(html) == ["../course/05_multi_head.html", "../exercises/05_multi_head_exercises.html"]


def test_a_link_to_a_repository_file_goes_to_github_with_its_heading(renderer) -> None:
    html = renderer.markdown("See the [grading section](../README.md#grading-instructors).")
    assert hrefs(html) == [links.source_url("README.md") + "#grading-instructors"]


def test_other_links_are_left_as_written(renderer) -> None:
    written = ["https://arxiv.org/abs/1706.03762", "#summary", "no_such_file.ipynb"]
    html = renderer.markdown(" ".join(f"[{i}]({href})" for i, href in enumerate(written)))
    assert hrefs(html) == written


def test_a_notebook_named_as_code_becomes_one_link_never_a_link_in_a_link(renderer) -> None:
    html = renderer.markdown(
        "Open `exercises/04_masks_exercises.ipynb`, or [`exercises/04_masks_exercises.ipynb`](../exercises/04_masks_exercises.ipynb)."
    )
    assert hrefs(html) == ["../exercises/04_masks_exercises.html", "../exercises/04_masks_exercises.html"]
    assert "</a></a>" not in html and html.count("<a ") == html.count("</a>") == 2


def test_a_collapsed_cell_shows_its_output_and_folds_its_code(renderer) -> None:
    import nbformat

    shown = nbformat.v4.new_code_cell("plot_it()")
    hidden = nbformat.v4.new_code_cell("plot_it()", metadata={"jupyter": {"source_hidden": True}})
    for cell in (shown, hidden):
        cell.outputs = [nbformat.v4.new_output("stream", text="the picture\n")]
    page = renderer.cells(nbformat.v4.new_notebook(cells=[shown, hidden]))
    first, second = page.split('<section class="cell code">')[1:]
    assert "<details>" not in first and "the picture" in first
    assert "<details><summary>Show the code</summary>" in second and "the picture" in second
