"""The course website (``make site``) read in a real browser, offline.

The site is built into a temporary folder (``scripts/build_site.py``, as ``make site`` does) and opened from
disk (``file://``) in headless Chromium. Every page (each course notebook, each exercise notebook, the index):

- sends no request anywhere but to its own files (every other request is recorded and refused);
- typesets its equations: MathJax's output elements are there, at least one per formula in the notebook's
  text, none is a TeX error, and no ``$...$`` is left in the text where a formula was;
- shows every picture its notebook stores (each plot, and each explorer's saved figure), loaded;
- links only to files that exist, and its Colab and Binder buttons open its own notebook
  (``attn_edu.links``).

Following the sidebar from the index, then each page's "next" link, visits every course notebook in course
order. Screenshots of two pages go to ``artifacts/site/``. Skipped without Chromium or playwright
(``tests/ui/conftest.py``), or without the site's MathJax files (``pip install -e ".[site]"``).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

import nbformat
import pytest

from attn_edu import links

pytestmark = pytest.mark.ui

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "artifacts" / "site"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# A formula in a notebook's Markdown: $$...$$ (displayed) or $...$ (inline), once code is taken out.
FORMULA = re.compile(r"\$\$.+?\$\$|\$[^$\n]+?\$", re.S)
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)
LEFT_OVER = re.compile(r"\$[^$\s][^$]*?\$")  # a pair of dollars MathJax did not turn into a formula

JS_MATH_READY = """async () => {
    await new Promise((done) => {
        const wait = () => (window.MathJax && MathJax.startup && MathJax.startup.promise) ? done() : setTimeout(wait, 20);
        wait();
    });
    await MathJax.startup.promise;
    return true;
}"""
# The text of the page's Markdown, outside formulas and code, as the reader sees it.
JS_PROSE = """() => [...document.querySelectorAll('.cell.markdown')].map((cell) => {
    const copy = cell.cloneNode(true);
    copy.querySelectorAll('mjx-container, code, pre, script').forEach((node) => node.remove());
    return copy.textContent;
}).join('\\n')"""
JS_IMAGES = """() => [...document.querySelectorAll('article img')].map(
    (img) => ({src: img.getAttribute('src'), loaded: img.complete && img.naturalWidth > 0}))"""
JS_LINKS = """() => [...document.querySelectorAll('a[href]')].map((a) => ({
    href: a.getAttribute('href'), url: a.href, cls: a.className}))"""


def _notebooks(kind: str) -> list[str]:
    return [f"{kind}/{p.name}" for p in sorted((REPO / kind).glob("[0-9][0-9]_*.ipynb"))]


def _saved_pictures(state: dict, model_id: str) -> int:
    """The figures an explorer's widgets saved: its Output widgets' PNGs, through every box it holds."""
    model = state.get(model_id.removeprefix("IPY_MODEL_"))
    if model is None:
        return 0
    inside = sum(_saved_pictures(state, child) for child in model["state"].get("children", []))
    outputs = model["state"].get("outputs", []) if model["model_name"] == "OutputModel" else []
    return inside + sum("image/png" in o.get("data", {}) for o in outputs)


DIAGRAM = re.compile(r"!\[[^\]]*\]\(figures/[^)\s]+\)")


def _expected(notebook: str) -> dict[str, int]:
    """What the notebook holds, counted here from the notebook itself: formulas and pictures (stored outputs and
    the diagrams its text shows)."""
    nb = nbformat.read(REPO / notebook, as_version=4)
    formulas = sum(
        len(FORMULA.findall(CODE.sub("", c.source))) for c in nb.cells if c.cell_type == "markdown"
    )
    state = (
        nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    )
    pictures = 0
    for cell in nb.cells:
        if cell.cell_type == "markdown":  # the diagrams: ![alt](figures/name.svg)
            pictures += len(DIAGRAM.findall(cell.source))
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if WIDGET_VIEW in data:  # an explorer: the figures it saved
                pictures += _saved_pictures(state, data[WIDGET_VIEW]["model_id"])
            elif "image/png" in data and "text/html" not in data and "image/svg+xml" not in data:
                pictures += 1
    return {"formulas": formulas, "pictures": pictures}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The site, built as ``make site`` builds it, into a temporary folder."""
    pytest.importorskip("mathjax", reason='the site serves MathJax itself: pip install -e ".[site]"')
    out = tmp_path_factory.mktemp("site") / "site"
    started = time.monotonic()
    build = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "build_site.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    return {
        "root": out,
        "seconds": time.monotonic() - started,
        "manifest": json.loads((out / "site.json").read_text()),
    }


def _resolves(url: str) -> bool:
    parsed = urlparse(url)
    return parsed.scheme == "file" and Path(unquote(parsed.path)).is_file()


def test_every_page_reads_offline_with_equations_pictures_and_links(browser, site: dict) -> None:  # noqa: ANN001
    root: Path = site["root"]
    course, exercises = _notebooks("course"), _notebooks("exercises")
    assert len(course) == 15 and len(exercises) == 14
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    outside: list[str] = []

    def only_local(route) -> None:  # noqa: ANN001
        if route.request.url.startswith(("file://", "data:")):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", only_local)
    started = time.monotonic()
    try:
        # The index's sidebar lists the course in order; each page's "next" link leads to the one after it.
        page.goto((root / "index.html").as_uri())
        sidebar = [a["href"] for a in page.evaluate(JS_LINKS) if a["cls"] == "page"]
        assert sidebar[: len(course)] == [n.replace(".ipynb", ".html") for n in course]
        visited, url = [], (root / sidebar[0]).as_uri()
        for notebook in course + exercises:
            if notebook == exercises[0]:
                url = (root / notebook.replace(".ipynb", ".html")).as_uri()  # the exercises' own chain
            page.goto(url)
            page.evaluate(JS_MATH_READY)
            visited.append(str(Path(unquote(urlparse(page.url).path)).relative_to(root)))
            _check_page(page, notebook)
            following = page.locator('a[rel="next"]')
            url = following.evaluate("(a) => a.href") if following.count() else None
        assert visited == [n.replace(".ipynb", ".html") for n in course + exercises]
        assert url is None, "the last exercise page links to a next page"
        seconds = time.monotonic() - started
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.goto((root / "course" / "03_scaling_variance.html").as_uri())
        page.evaluate(JS_MATH_READY)
        page.screenshot(path=str(ARTIFACTS / "03_scaling_variance.png"))
        page.goto((root / "course" / "04_masks.html").as_uri())
        page.evaluate(JS_MATH_READY)
        page.locator(".widget-snapshot").first.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "04_masks-explorer.png"))
    finally:
        context.close()
    assert outside == [], f"pages asked for files from elsewhere: {outside[:5]}"
    manifest = site["manifest"]
    print(
        f"\nsite: built in {site['seconds']:.1f} s ({manifest['files']} files, {manifest['bytes'] / 2**20:.1f} MB); "
        f"{len(visited)} pages read in Chromium in {seconds:.1f} s; screenshots in {ARTIFACTS}"
    )


def _check_page(page, notebook: str) -> None:  # noqa: ANN001
    expected = _expected(notebook)
    where = f"{notebook}: "
    formulas = page.locator("mjx-container").count()
    assert formulas >= expected["formulas"], (
        where + f"{formulas} typeset formulas, the notebook has {expected['formulas']}"
    )
    assert page.locator("mjx-merror").count() == 0, where + "a formula MathJax could not read"
    left = LEFT_OVER.findall(page.evaluate(JS_PROSE))
    assert not left, where + f"text left between dollars: {left[:3]}"
    images = page.evaluate(JS_IMAGES)
    assert len(images) == expected["pictures"], (
        where + f"{len(images)} pictures, the notebook stores {expected['pictures']}"
    )
    assert all(image["loaded"] for image in images), (
        where + f"not loaded: {[i['src'] for i in images if not i['loaded']]}"
    )
    hrefs = page.evaluate(JS_LINKS)
    broken = [a["href"] for a in hrefs if a["url"].startswith("file:") and not _resolves(a["url"])]
    assert not broken, where + f"links to missing files: {broken}"
    buttons = {a["cls"]: a["href"] for a in hrefs if a["cls"].startswith("button")}
    assert buttons["button colab"] == links.colab_url(notebook)
    assert buttons["button binder"] == links.binder_url(notebook)
    twin = "exercises" if notebook.startswith("course/") else "course"
    if (REPO / twin / Path(notebook).name).is_file():  # the lecture links its exercises, and back
        assert _resolves(next(a["url"] for a in hrefs if a["cls"] == f"button {twin}"))
