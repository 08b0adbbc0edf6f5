"""Build the course as a static website from the notebooks' stored outputs: ``python scripts/build_site.py``.

    python scripts/build_site.py [--out build/site]      (``make site``)

Nothing is executed: every page shows what its notebook stores (plots, tables, printed text, equations),
so the site is exactly what the committed notebooks hold and builds in seconds. What a reader gets:

- one page per course notebook (``course/NN_*.html``) and per exercise notebook (``exercises/NN_*.html``),
  a sidebar in course order with each notebook's exercises under it, previous / next links, and an index;
- equations typeset by MathJax 3, served with the site (``static/mathjax/``, from the ``mathjax`` files of
  the ``site`` extra): nothing is fetched from another host, at build time or when a page is read;
- each interactive explorer as the picture its notebook saved (ipywidgets store their last state in the
  notebook's metadata: the controls' values and the Output widget's figure), its controls drawn disabled,
  with a note that Colab or Binder makes it move;
- the designed diagrams of ``course/figures/`` (SVG, shown by the notebooks' Markdown) copied beside the
  pages, so that ``![alt](figures/query_path.svg)`` shows on the site as in JupyterLab;
- an "Open in Colab" and a "Launch Binder" button on every page, made from ``attn_edu.links.REPOSITORY``
  (plain links: the badges' pictures would be fetched from their hosts);
- a notebook named in the text (``exercises/04_masks_exercises.ipynb``) links to its page, and a notebook's links
  (``[notebook 05](05_multi_head.ipynb)``, ``../README.md#...``) reach that page, or the file on GitHub.

The Colab install cell is left out, and a cell whose source the notebook collapses (JupyterLab's
``jupyter.source_hidden``: plotting and other helpers) shows its output, with its code folded under "Show the
code", as JupyterLab shows it. ``tests/ui/test_site_in_browser.py`` builds the site and reads every page in Chromium.
"""

from __future__ import annotations

import argparse
import base64
import html
import importlib.resources
import json
import math
import re
import shutil
import string
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
from nbconvert.filters.ansi import ansi2html
from nbconvert.filters.markdown_mistune import markdown2html_mistune
from pygments import highlight
from pygments.formatters import HtmlFormatter

from attn_edu import links

try:
    from ipython_pygments_lexers import IPython3Lexer
except ImportError:  # IPython < 9 kept its lexers itself
    from IPython.lib.lexers import IPython3Lexer

ROOT = Path(__file__).resolve().parents[1]
ASSETS = Path(__file__).resolve().with_name("site_assets")
MATHJAX_FILES = ("es5/tex-svg-full.js", "LICENSE")  # one file: the TeX input, SVG output and its fonts
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# A link (its href, then the rest of it), or, outside any link, a notebook's name shown as code.
LINK_OR_NOTEBOOK_NAME = re.compile(
    r'<a href="(?P<href>[^"]*)"(?P<rest>[^>]*>.*?</a>)|<code>(?P<named>(?:[\w.]+/)*\d\d_\w+\.ipynb)</code>',
    re.S,
)


@dataclass(frozen=True)
class Page:
    """One notebook's page."""

    notebook: str  # the notebook, relative to the repository: "course/04_masks.ipynb"
    title: str  # its first heading: "04 · Masks"

    @property
    def kind(self) -> str:  # "course" or "exercises"
        return self.notebook.split("/")[0]

    @property
    def number(self) -> str:
        return Path(self.notebook).name[:2]

    @property
    def href(self) -> str:  # relative to the site's root
        return self.notebook.removesuffix(".ipynb") + ".html"


def _title(nb: nbformat.NotebookNode, path: Path) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            first = cell.source.strip().split("\n")[0]
            if first.startswith("# "):
                return first[2:].strip()
    return path.stem.replace("_", " ")


def find_pages(root: Path) -> tuple[list[Page], dict[str, nbformat.NotebookNode]]:
    """The course pages in order, then the exercise pages; and each notebook, read."""
    notebooks, pages = {}, []
    for kind in ("course", "exercises"):
        for path in sorted((root / kind).glob("[0-9][0-9]_*.ipynb")):
            nb = nbformat.v4.reads(path.read_text(encoding="utf-8"))  # read, not validated (nbval does that)
            page = Page(f"{kind}/{path.name}", _title(nb, path))
            notebooks[page.notebook] = nb
            pages.append(page)
    return pages, notebooks


# ---------------------------------------------------------------------------------------------------------
# Cells and outputs


def _control(name: str, s: dict[str, Any]) -> str:
    """A control as its state saved it, drawn disabled: a slider with its value, a checkbox, a drop-down."""
    if name in ("IntSliderModel", "FloatSliderModel", "FloatLogSliderModel", "SelectionSliderModel"):
        if name == "SelectionSliderModel":
            shown = s["_options_labels"][s["index"]]
            low, high, step, value = 0, len(s["_options_labels"]) - 1, 1, s["index"]
        elif name == "FloatLogSliderModel":  # the slider moves the exponent
            shown = f"{s['value']:.3g}"
            low, high, step = s["min"], s["max"], s.get("step", 0.1)
            value = math.log(s["value"], s.get("base", 10))
        else:
            shown = f"{s['value']:g}"
            low, high, step, value = s["min"], s["max"], s.get("step", 1), s["value"]
        slider = f'<input type="range" min="{low}" max="{high}" step="{step}" value="{value}" disabled>'
        return f"{slider}<output>{html.escape(shown)}</output>"
    if name == "CheckboxModel":
        return f'<input type="checkbox" disabled{" checked" if s.get("value") else ""}>'
    if name in ("DropdownModel", "ToggleButtonsModel", "RadioButtonsModel", "SelectModel"):
        options = "".join(
            f"<option{' selected' if i == s.get('index') else ''}>{html.escape(text)}</option>"
            for i, text in enumerate(s.get("_options_labels", []))
        )
        return f"<select disabled>{options}</select>"
    return ""


class Renderer:
    """Turns one notebook's cells into HTML; writes its pictures next to the page."""

    def __init__(self, page: Page, pages: list[Page], out: Path, state: dict[str, Any]) -> None:
        self.page, self.pages, self.out, self.state = page, pages, out, state
        self.images = 0
        self.stem = Path(page.notebook).stem

    # -- text ----------------------------------------------------------------------------------------------

    def _target(self, named: str) -> Page | None:
        """The page of a notebook named as a path (``exercises/04_masks_exercises.ipynb``) or a bare file name."""
        by_path = {p.notebook: p for p in self.pages}
        by_name = {Path(p.notebook).name: p for p in self.pages if p.kind == self.page.kind}
        return by_path.get(named) or by_path.get(f"{self.page.kind}/{named}") or by_name.get(named)

    def _href(self, href: str) -> str:
        """A link written for the notebook's folder, for the page: a notebook's page, or the file on GitHub.

        ``[notebook 05](05_multi_head.ipynb)`` from ``course/04_masks.ipynb`` -> ``../course/05_multi_head.html``;
        ``../README.md#grading-instructors`` -> the README on GitHub at that heading (the site holds no README).
        """
        if re.match(r"^(?:[a-z][a-z0-9+.-]*:|#|/)", href):  # another site, an anchor, or a site path
            return href
        path, hash_, fragment = href.partition("#")
        try:
            named = (ROOT / self.page.notebook).parent.joinpath(path).resolve().relative_to(ROOT).as_posix()
        except ValueError:  # outside the repository
            return href
        target = self._target(named)
        if target is not None:
            return f"../{target.href}{hash_}{fragment}"
        if (ROOT / named).exists():
            return f"{links.source_url(named)}{hash_}{fragment}"
        return href

    def _link_notebooks(self, text: str) -> str:
        """Links to notebooks and repository files made right for the page (``_href``), and a notebook named in
        the text (``<code>exercises/04_masks_exercises.ipynb</code>``, outside a link) made a link to its page."""

        def link(found: re.Match) -> str:
            if found.group("href") is not None:
                href = html.escape(self._href(html.unescape(found.group("href"))))
                return f'<a href="{href}"{found.group("rest")}'
            target = self._target(found.group("named"))
            if target is None:
                return found.group(0)
            return f'<a href="../{target.href}">{found.group(0)}</a>'

        return LINK_OR_NOTEBOOK_NAME.sub(link, text)

    def markdown(self, source: str) -> str:
        return self._link_notebooks(markdown2html_mistune(source))

    @staticmethod
    def code(source: str, hidden: bool = False) -> str:
        shown = highlight(source, IPython3Lexer(), HtmlFormatter(cssclass="highlight"))
        return f"<details><summary>Show the code</summary>{shown}</details>" if hidden else shown

    @staticmethod
    def _terminal(text: str) -> str:
        """Printed text as a terminal shows it: a carriage return overwrites its line (progress bars)."""
        lines = [line.rsplit("\r", 1)[-1] for line in text.split("\n")]
        return f"<pre>{ansi2html(chr(10).join(lines))}</pre>"

    # -- pictures ------------------------------------------------------------------------------------------

    def _image(self, data: str, alt: str) -> str:
        self.images += 1
        name = f"img/{self.stem}-{self.images}.png"
        target = self.out / self.page.kind / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(base64.b64decode(data))
        return f'<img src="{name}" alt="{html.escape(alt)}">'

    # -- outputs -------------------------------------------------------------------------------------------

    def output(self, output: nbformat.NotebookNode, where: str) -> str:
        kind = output.output_type
        if kind == "stream":
            return f'<div class="output stream {output.name}">{self._terminal(output.text)}</div>'
        if kind == "error":
            return f'<div class="output error">{self._terminal(chr(10).join(output.traceback))}</div>'
        data = output.get("data", {})
        if WIDGET_VIEW in data and data[WIDGET_VIEW]["model_id"] in self.state:
            return self.widget(data[WIDGET_VIEW]["model_id"], where)
        if "text/html" in data:
            return f'<div class="output output_html">{self._link_notebooks(data["text/html"])}</div>'
        if "image/svg+xml" in data:
            return f'<div class="output image">{data["image/svg+xml"]}</div>'
        if "image/png" in data:
            return f'<div class="output image">{self._image(data["image/png"], f"a figure {where}")}</div>'
        if "text/markdown" in data:
            return f'<div class="output markdown">{self.markdown(data["text/markdown"])}</div>'
        if "text/latex" in data and data["text/latex"].lstrip().startswith("$"):
            return f'<div class="output latex">{html.escape(data["text/latex"])}</div>'
        if "text/plain" in data:
            return f'<div class="output text">{self._terminal(data["text/plain"])}</div>'
        return ""

    # -- widgets -------------------------------------------------------------------------------------------

    def widget(self, model_id: str, where: str) -> str:
        """An explorer as its notebook saved it: its controls (disabled) and its last figure."""
        body = self._widget(model_id, where)
        note = (
            "The interactive explorer as its notebook saved it. Open the notebook in Colab or Binder "
            "(buttons at the top) to move its controls."
        )
        return f'<figure class="output widget-snapshot">{body}<figcaption>{note}</figcaption></figure>'

    def _widget(self, model_id: str, where: str) -> str:
        model = self.state.get(model_id.removeprefix("IPY_MODEL_"))
        if model is None:
            return ""
        name, s = model["model_name"], model["state"]
        if name in ("VBoxModel", "HBoxModel", "BoxModel", "GridBoxModel"):
            children = "".join(self._widget(child, where) for child in s.get("children", []))
            return f'<div class="widget {name.removesuffix("Model").lower()}">{children}</div>'
        if name in ("HTMLModel", "HTMLMathModel"):
            return f'<div class="widget html">{s.get("value", "")}</div>'
        if name == "LabelModel":
            return f'<div class="widget html">{html.escape(s.get("value", ""))}</div>'
        if name == "OutputModel":
            return "".join(self.output(nbformat.from_dict(o), where) for o in s.get("outputs", []))
        control, label = _control(name, s), f"<span>{html.escape(s.get('description', ''))}</span>"
        if not control:
            return ""
        parts = control + label if name == "CheckboxModel" else label + control  # a box before its label
        return f'<label class="widget control">{parts}</label>'

    # -- cells ---------------------------------------------------------------------------------------------

    def cells(self, nb: nbformat.NotebookNode) -> str:
        parts = []
        for index, cell in enumerate(nb.cells, 1):
            if cell.cell_type == "markdown":
                parts.append(f'<section class="cell markdown">{self.markdown(cell.source)}</section>')
            elif cell.cell_type == "code":
                if "google.colab" in cell.source and "%pip install" in cell.source:
                    continue  # the Colab install line: the buttons at the top do its job here
                where = f"from cell {index} of {Path(self.page.notebook).name}"
                outputs = "".join(self.output(o, where) for o in cell.outputs)
                outputs = f'<div class="outputs">{outputs}</div>' if outputs else ""
                hidden = bool(cell.metadata.get("jupyter", {}).get("source_hidden"))
                code = self.code(cell.source, hidden)
                parts.append(f'<section class="cell code"><div class="input">{code}</div>{outputs}</section>')
        return "\n".join(parts)


# ---------------------------------------------------------------------------------------------------------
# Pages


def _sidebar(pages: list[Page], current: Page | None, base: str) -> str:
    exercises = {p.number: p for p in pages if p.kind == "exercises"}
    items = []
    for page in (p for p in pages if p.kind == "course"):
        here = ' aria-current="page"' if page == current else ""
        entry = f'<a class="page" href="{base}{page.href}"{here}>{html.escape(page.title)}</a>'
        if page.number in exercises:
            ex = exercises[page.number]
            ex_here = ' aria-current="page"' if ex == current else ""
            entry += f' <a class="exercises" href="{base}{ex.href}"{ex_here}>exercises</a>'
        items.append(f"<li>{entry}</li>")
    return "<ol>" + "".join(items) + "</ol>"


def _buttons(page: Page, pages: list[Page], base: str) -> str:
    buttons = [
        f'<a class="button colab" href="{links.colab_url(page.notebook)}">Open in Colab</a>',
        f'<a class="button binder" href="{links.binder_url(page.notebook)}">Launch Binder</a>',
        f'<a class="button source" href="{links.source_url(page.notebook)}">Notebook on GitHub</a>',
    ]
    other = "exercises" if page.kind == "course" else "course"
    twin = next((p for p in pages if p.kind == other and p.number == page.number), None)
    if twin is not None:
        text = f"Exercises {page.number}" if other == "exercises" else f"Lecture {page.number}"
        buttons.append(f'<a class="button {other}" href="{base}{twin.href}">{text}</a>')
    return '<div class="buttons">' + " ".join(buttons) + "</div>"


def _pager(page: Page, pages: list[Page], base: str) -> str:
    same = [p for p in pages if p.kind == page.kind]
    at = same.index(page)
    prev = (
        f'<a rel="prev" href="{base}{same[at - 1].href}">← {html.escape(same[at - 1].title)}</a>'
        if at
        else ""
    )
    nxt = (
        f'<a rel="next" href="{base}{same[at + 1].href}">{html.escape(same[at + 1].title)} →</a>'
        if at + 1 < len(same)
        else ""
    )
    return f'<nav class="pager">{prev}{nxt}</nav>'


def _index(pages: list[Page], root: Path) -> str:
    """The front page: the README's title and opening paragraphs, then every notebook in course order."""
    readme = (root / "README.md").read_text(encoding="utf-8")
    head = readme.split("\n## ", 1)[0]  # the title and the paragraphs under it
    rows = []
    exercises = {p.number: p for p in pages if p.kind == "exercises"}
    for page in (p for p in pages if p.kind == "course"):
        ex = exercises.get(page.number)
        ex_link = f' · <a class="exercises" href="{ex.href}">exercises</a>' if ex else ""
        rows.append(f'<li><a class="page" href="{page.href}">{html.escape(page.title)}</a>{ex_link}</li>')
    start = next(p for p in pages if p.kind == "course")
    buttons = (
        f'<a class="button colab" href="{links.colab_url(start.notebook)}">Start in Colab</a> '
        f'<a class="button binder" href="{links.binder_url(start.notebook)}">Start on Binder</a> '
        f'<a class="button source" href="{links.REPOSITORY}">The course on GitHub</a>'
    )
    return (
        f'<section class="cell markdown">{markdown2html_mistune(head)}'
        "<p>Each page below is a notebook as it ran, with its stored outputs. To run it and move its "
        "explorers, open it in Colab or Binder (buttons on every page), or on your own machine with "
        "<code>make lab</code>.</p>"
        f'<div class="buttons">{buttons}</div><ul class="contents">{"".join(rows)}</ul></section>'
    )


def _style() -> str:
    return (ASSETS / "style.css").read_text(encoding="utf-8") + HtmlFormatter().get_style_defs(".highlight")


def copy_mathjax(out: Path) -> None:
    """MathJax 3's single-file TeX-to-SVG component and its licence, into ``out/static/mathjax/``."""
    try:
        source = importlib.resources.files("mathjax") / "static" / "mathjax"
    except ModuleNotFoundError:
        raise SystemExit(
            'the site serves MathJax itself: pip install -e ".[site]" (the mathjax files), then build again'
        ) from None
    target = out / "static" / "mathjax"
    target.mkdir(parents=True, exist_ok=True)
    for name in MATHJAX_FILES:
        (target / Path(name).name).write_bytes((source / name).read_bytes())


def copy_figures(out: Path, root: Path = ROOT) -> None:
    """The diagrams the notebooks' Markdown shows (``![alt](figures/query_path.svg)``, drawn by
    ``python -m attn_edu.viz.diagrams build``), next to the pages that show them: ``out/course/figures/``."""
    figures = root / "course" / "figures"
    if figures.is_dir():
        shutil.copytree(figures, out / "course" / "figures", dirs_exist_ok=True)


def build(out: Path, root: Path = ROOT) -> dict[str, Any]:
    """Write the site to ``out`` (emptied first); return what was written."""
    started = time.monotonic()
    if out.exists():
        shutil.rmtree(out)
    (out / "static").mkdir(parents=True)
    copy_mathjax(out)
    copy_figures(out, root)
    (out / "static" / "style.css").write_text(_style(), encoding="utf-8")
    template = string.Template((ASSETS / "page.html").read_text(encoding="utf-8"))
    pages, notebooks = find_pages(root)
    manifest: dict[str, Any] = {"pages": []}
    for page in pages:
        nb = notebooks[page.notebook]
        state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
        renderer = Renderer(page, pages, out, state)
        body = _buttons(page, pages, "../") + renderer.cells(nb) + _pager(page, pages, "../")
        text = template.substitute(
            title=html.escape(page.title), base="../", sidebar=_sidebar(pages, page, "../"), body=body
        )
        target = out / page.href
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        manifest["pages"].append({"notebook": page.notebook, "href": page.href, "images": renderer.images})
    index = template.substitute(
        title="attn-edu", base="", sidebar=_sidebar(pages, None, ""), body=_index(pages, root)
    )
    (out / "index.html").write_text(index, encoding="utf-8")
    files = [p for p in out.rglob("*") if p.is_file()]
    manifest.update(
        seconds=round(time.monotonic() - started, 2),
        files=len(files),
        bytes=sum(p.stat().st_size for p in files),
    )
    (out / "site.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "site", help="default: build/site")
    args = parser.parse_args(argv)
    manifest = build(args.out)
    pages = len(manifest["pages"])
    print(
        f"wrote {pages} pages and an index to {args.out} ({manifest['files']} files, "
        f"{manifest['bytes'] / 2**20:.1f} MB) in {manifest['seconds']:.1f} s; open {args.out / 'index.html'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
