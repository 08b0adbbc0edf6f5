"""Every course notebook, opened the way a learner opens it: JupyterLab in a real (headless) browser.

For each ``course/*.ipynb`` (new notebooks are picked up automatically) the test

1. opens the notebook in JupyterLab and waits for its kernel,
2. runs all cells ("Run > Run All Cells") and fails on any error output (a cell tagged
   ``raises-exception`` may raise, as in JupyterLab itself), any code cell left unexecuted,
   a traceback printed to stderr, or a widget that failed to display; then compares every output
   with the stored one as nbval would (``stored_outputs.py``); ``make ui`` runs the kernels as another
   CPU computes (the Makefile's OTHER_CPU), so this run is the course's proof that its stored outputs
   reproduce, and ``make nbval`` skips its own pass over the notebooks compared here,
3. moves one widget control and waits until the widget's Output area (its figure or text) changes,
   which proves the browser, the widget manager and the kernel-side callback all work together,
4. checks that every diagram (a markdown image from ``figures/``) loaded and has alt text, and saves each one's
   screenshot to ``artifacts/ui/figures/NN-<name>.png``,
5. saves a screenshot to ``artifacts/ui/<notebook>.png`` and records the seconds it took
   (``artifacts/ui/timings.json``, also printed at the end of the run): to open the notebook and run every
   cell, what a learner waits for, and for the whole test, comparing and the widget included.

Which widget is moved. An *explorer* is a widget box that holds an ``ipywidgets.Output`` together
with its controls (every ``attn_edu.widgets`` explorer is one). By convention the test takes the
first explorer in the notebook that has a control, and in it the first slider, else the first
dropdown, else the first checkbox. A notebook may choose otherwise in its metadata::

    "metadata": {"attn_edu": {"ui_widget": {"kind": "dropdown", "explorer": 1, "control": 0}}}

``kind`` is ``"slider"``, ``"dropdown"`` or ``"checkbox"``; ``explorer`` counts (from 0, in page order)
the explorers that have a control of that kind; ``control`` counts those controls inside it. A slider
is moved with the keyboard (one step right, or left when already at its maximum), a dropdown picks the
next option, a checkbox is clicked.

``ATTN_EDU_UI_NOTEBOOKS=folder`` runs the same checks on another folder of notebooks.
The browser is the system Chromium driven by the ``playwright`` package; the whole file is skipped
when either is missing (``tests/ui/conftest.py``). Run it alone with ``pytest tests/ui -v``.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
from stored_outputs import cpu_settings, key, output_differences, sha256

from tests.notebook_order import lanes, longest_first

pytestmark = pytest.mark.ui
# Ask the page twice a second, not on every animation frame (Playwright's default): Chromium's
# polling otherwise takes a share of the cores the notebook's kernel needs.
POLL_MS = 500

# ATTN_EDU_UI_NOTEBOOKS=folder tests another folder of notebooks (read by conftest.py too).
COURSE = Path(os.environ.get("ATTN_EDU_UI_NOTEBOOKS") or Path(__file__).resolve().parents[2] / "course")
# The site and the exercise tests run first in lane 0 (tests/ui/conftest.py), for about this many seconds of a
# notebook's stored run time: the site build is the heaviest of them.
OTHER_TESTS_S = 15.0
# One lane of notebooks per worker (pytest-xdist's loadgroup keeps a group on one worker, in this order), of
# near-equal stored run time, a long notebook beside a short one (tests/notebook_order.py).
NOTEBOOKS = longest_first(sorted(COURSE.glob("*.ipynb")))
LANES = lanes(NOTEBOOKS, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")), head_start=OTHER_TESTS_S)
PARAMS = [
    pytest.param(path, marks=pytest.mark.xdist_group(f"notebooks-{i}"), id=path.stem)
    for i, lane in enumerate(LANES)
    for path in lane
]
CONTROL_KINDS = ("slider", "dropdown", "checkbox")
OPEN_TIMEOUT_MS = 90_000  # load JupyterLab, open the notebook, start its kernel
RUN_ALL_TIMEOUT_MS = 240_000  # every notebook runs in well under a minute on two cores
WIDGET_TIMEOUT_MS = 60_000  # the kernel recomputes and redraws after a control moves

# CSS selectors of the ipywidgets 8 views, by control kind.
CONTROL_SELECTORS = {
    "slider": ".widget-slider .noUi-handle",
    "dropdown": ".widget-dropdown select",
    "checkbox": ".widget-checkbox input[type=checkbox]",
}

# JavaScript run in the page. `window.jupyterapp` is exposed by --LabApp.expose_app_in_browser.
# Find the notebook's panel among the open tabs, make it the current one and keep it as window.__uiPanel.
JS_NOTEBOOK_OPEN = """(path) => {
    const app = window.jupyterapp;
    if (!app || !app.shell) { return false; }
    for (const widget of app.shell.widgets('main')) {
        if (widget.context && widget.context.path === path && widget.content) {
            app.shell.activateById(widget.id);
            window.__uiPanel = widget;
            return app.shell.currentWidget === widget;
        }
    }
    return false;
}"""

JS_KERNEL_READY = """async () => {
    const panel = window.__uiPanel;
    await panel.context.ready;
    await panel.sessionContext.ready;
    return panel.sessionContext.session.kernel.name;
}"""

# Start "Run All Cells" and keep its promise's result; Python polls it with its own timeout.
JS_START_RUN_ALL = """() => {
    window.__uiRunAll = undefined;
    window.jupyterapp.commands.execute('notebook:run-all-cells').then(
        (ok) => { window.__uiRunAll = ok ? 'ok' : 'a cell failed'; },
        (err) => { window.__uiRunAll = 'error: ' + err; },
    );
}"""

# One entry per code cell that did not run cleanly, read from the notebook model (what is saved).
JS_CELL_PROBLEMS = r"""() => {
    const panel = window.__uiPanel;
    const problems = [];
    panel.content.widgets.forEach((cell, index) => {
        const model = cell.model;
        if (model.type !== 'code' || model.sharedModel.getSource().trim() === '') { return; }
        const tags = model.getMetadata('tags') || [];
        if (model.executionCount === null) { problems.push(`cell ${index}: not executed`); }
        for (const output of model.outputs.toJSON()) {
            if (output.output_type === 'error' && !tags.includes('raises-exception')) {
                problems.push(`cell ${index}: ${output.ename}: ${output.evalue}`);
            }
            const text = Array.isArray(output.text) ? output.text.join('') : (output.text || '');
            if (output.name === 'stderr' && /Traceback \(most recent call last\)/.test(text)) {
                problems.push(`cell ${index}: traceback on stderr: ${text.slice(-300)}`);
            }
        }
    });
    const page = panel.content.node.innerText;
    for (const message of ['Error displaying widget', 'Error rendering']) {
        if (page.includes(message)) { problems.push(`the page shows "${message}"`); }
    }
    return problems;
}"""

# The cells as JupyterLab holds them after the run (nbformat JSON), images left out (they are not compared).
JS_EXECUTED_CELLS = """() => window.__uiPanel.context.model.toJSON().cells.map((cell) => ({
    cell_type: cell.cell_type,
    outputs: (cell.outputs || []).map((output) => {
        if (!output.data) { return output; }
        const data = Object.fromEntries(Object.entries(output.data).filter(([mime]) => !mime.startsWith('image/')));
        return { ...output, data };
    }),
}))"""

# The notebook's diagrams (markdown images from figures/): their source, alt text, and whether they loaded.
JS_FIGURES = """() => [...window.__uiPanel.content.node.querySelectorAll('.jp-MarkdownOutput img')]
    .filter((img) => (img.getAttribute('src') || '').includes('figures/'))
    .map((img) => ({ src: img.getAttribute('src'), alt: img.alt, loaded: img.complete && img.naturalWidth > 0 }))"""

# Find the explorer and control to move, mark them with data-ui-test attributes for the locators.
JS_MARK_WIDGET = """([kind, explorerIndex, controlIndex, selectors]) => {
    const panel = window.__uiPanel;
    panel.content.node.querySelectorAll('[data-ui-test]').forEach((el) => el.removeAttribute('data-ui-test'));
    const explorers = [];
    for (const output of panel.content.node.querySelectorAll('.widget-output')) {
        const box = output.parentElement && output.parentElement.closest('.widget-box');
        if (box && !explorers.includes(box)) { explorers.push(box); }
    }
    const kinds = kind ? [kind] : Object.keys(selectors);
    const withKind = (box, k) => box.querySelectorAll(selectors[k]);
    const candidates = explorers.filter((box) => kinds.some((k) => withKind(box, k).length > 0));
    if (candidates.length <= explorerIndex) {
        return `found ${explorers.length} widget(s) with an Output area, ${candidates.length} with a `
            + `${kinds.join('/')} control; wanted explorer ${explorerIndex}`;
    }
    const box = candidates[explorerIndex];
    const chosen = kinds.find((k) => withKind(box, k).length > controlIndex);
    if (!chosen) { return `explorer ${explorerIndex} has no ${kinds.join('/')} control number ${controlIndex}`; }
    box.setAttribute('data-ui-test', 'explorer');
    withKind(box, chosen)[controlIndex].setAttribute('data-ui-test', 'control');
    box.querySelector('.widget-output').setAttribute('data-ui-test', 'output');
    return chosen;
}"""

# What the Output area shows: image sources plus text.
JS_OUTPUT_SIGNATURE = """() => {
    const output = document.querySelector('[data-ui-test=output]');
    const images = [...output.querySelectorAll('img')].map((img) => img.src).join('|');
    return images + '||' + output.innerText;
}"""

JS_OUTPUT_CHANGED = """(before) => {
    const output = document.querySelector('[data-ui-test=output]');
    if (!output || output.querySelector('img') === null && output.innerText.trim() === '') { return false; }
    const images = [...output.querySelectorAll('img')].map((img) => img.src).join('|');
    return images + '||' + output.innerText !== before;
}"""

# Shut the kernel down and close the tab without the "save changes?" dialog (the copy is temporary).
JS_CLOSE = """async () => {
    const panel = window.__uiPanel;
    window.__uiPanel = undefined;
    if (!panel || panel.isDisposed) { return; }
    // The shutdown request goes out now; the kernel's exit (about 1.5 s) is not waited for.
    panel.sessionContext.shutdown().catch(() => { /* already gone */ });
    panel.context.model.dirty = false;
    panel.dispose();
}"""


def widget_choice(notebook: Path) -> tuple[str | None, int, int]:
    """``(kind, explorer, control)`` from the notebook's ``attn_edu.ui_widget`` metadata, else the convention."""
    metadata = json.loads(notebook.read_text(encoding="utf-8")).get("metadata", {})
    choice = metadata.get("attn_edu", {}).get("ui_widget") or {}
    kind = choice.get("kind")
    if kind is not None and kind not in CONTROL_KINDS:
        raise ValueError(f"{notebook.name}: metadata attn_edu.ui_widget.kind must be one of {CONTROL_KINDS}")
    return kind, int(choice.get("explorer", 0)), int(choice.get("control", 0))


def move_control(page, kind: str) -> str:  # noqa: ANN001
    """Move the marked control like a learner would; returns a description of the move."""
    control = page.locator("[data-ui-test=control]")
    control.scroll_into_view_if_needed()
    if kind == "slider":
        before = control.get_attribute("aria-valuenow")
        at_top = float(before) >= float(control.get_attribute("aria-valuemax"))
        key = "ArrowLeft" if at_top else "ArrowRight"
        control.press(key)
        after = control.get_attribute("aria-valuenow")
        return f"slider {key}: position {before} -> {after}"
    if kind == "dropdown":
        options = control.locator("option").all_text_contents()
        current = control.evaluate("(select) => select.selectedIndex")
        target = (current + 1) % len(options)
        control.select_option(index=target)
        return f"dropdown {options[current]!r} -> {options[target]!r}"
    control.click()
    return "checkbox clicked"


def close_notebook(page, reload_lab) -> None:  # noqa: ANN001
    """Close the notebook and its kernel; if the page is in a bad state, load JupyterLab afresh."""
    try:
        for _ in range(3):  # a dialog left by a failure (e.g. "kernel restarting") would block the next test
            if page.locator(".jp-Dialog").count() == 0:
                break
            page.keyboard.press("Escape")
        page.evaluate(JS_CLOSE)
    except Exception:
        reload_lab()


@pytest.mark.parametrize("notebook", PARAMS)
def test_notebook_runs_and_its_widget_responds(
    notebook: Path, lab_page, reload_lab, artifacts_dir, ui_timings, ui_compared
):  # noqa: ANN001
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

    page = lab_page
    start = time.perf_counter()
    ran = None  # seconds to open the notebook and run every cell, once they have run
    kind, explorer_index, control_index = widget_choice(notebook)
    (artifacts_dir / f"{notebook.stem}.failed.png").unlink(missing_ok=True)  # from an earlier run
    try:
        page.evaluate(
            "(path) => { window.jupyterapp.commands.execute('docmanager:open', {path, factory: 'Notebook'}); }",
            notebook.name,
        )
        page.wait_for_function(JS_NOTEBOOK_OPEN, arg=notebook.name, polling=POLL_MS, timeout=OPEN_TIMEOUT_MS)
        page.evaluate(JS_KERNEL_READY)
        page.evaluate(JS_START_RUN_ALL)
        page.wait_for_function(
            "() => window.__uiRunAll !== undefined", polling=POLL_MS, timeout=RUN_ALL_TIMEOUT_MS
        )
        ran = time.perf_counter() - start  # open, start the kernel, run every cell: what a learner waits for
        problems = page.evaluate(JS_CELL_PROBLEMS)
        result = page.evaluate("window.__uiRunAll")
        if result != "ok" and not problems:
            problems = [f"Run All Cells reported: {result}"]
        assert not problems, f"{notebook.name} did not run cleanly in JupyterLab:\n" + "\n".join(problems)
        differences = output_differences(notebook, page.evaluate(JS_EXECUTED_CELLS))
        assert not differences, (
            f"{notebook.name}: in the browser (CPU settings {cpu_settings() or 'native'}) the outputs differ "
            "from the stored ones (nbval's comparison and sanitizers):\n" + "\n\n".join(differences)
        )
        ui_compared[key(notebook)] = sha256(notebook)

        # Each diagram shows (its file loaded) and gets a screenshot of its own: artifacts/ui/figures/.
        figures = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            figures = page.evaluate(JS_FIGURES)
            if all(figure["loaded"] for figure in figures):
                break
            time.sleep(0.5)
        broken = [figure["src"] for figure in figures if not figure["loaded"]]
        assert not broken, f"{notebook.name}: diagrams that did not load in JupyterLab: {broken}"
        assert all(figure["alt"].strip() for figure in figures), (
            f"{notebook.name}: a diagram without alt text"
        )
        for figure in figures:
            shot = artifacts_dir / "figures" / f"{notebook.stem[:2]}-{Path(figure['src']).stem}.png"
            shot.parent.mkdir(parents=True, exist_ok=True)
            image = page.locator(f".jp-MarkdownOutput img[src='{figure['src']}']").first
            image.scroll_into_view_if_needed()
            image.screenshot(path=str(shot))

        # Widgets render a moment after their cell finishes: wait for the explorer to appear.
        chosen = None
        deadline = time.monotonic() + WIDGET_TIMEOUT_MS / 1000
        while time.monotonic() < deadline:
            chosen = page.evaluate(JS_MARK_WIDGET, [kind, explorer_index, control_index, CONTROL_SELECTORS])
            if chosen in CONTROL_KINDS:
                break
            time.sleep(0.5)
        assert chosen in CONTROL_KINDS, f"{notebook.name}: no widget to move: {chosen}"

        page.wait_for_function(
            JS_OUTPUT_CHANGED, arg="", polling=POLL_MS, timeout=WIDGET_TIMEOUT_MS
        )  # first drawing
        before = page.evaluate(JS_OUTPUT_SIGNATURE)
        move = move_control(page, chosen)
        try:
            page.wait_for_function(JS_OUTPUT_CHANGED, arg=before, polling=POLL_MS, timeout=WIDGET_TIMEOUT_MS)
        except PlaywrightTimeoutError:
            pytest.fail(
                f"{notebook.name}: {move}, but the widget's output did not change within "
                f"{WIDGET_TIMEOUT_MS // 1000} s (a failing callback shows its traceback in JupyterLab's log console)"
            )

        problems = page.evaluate(JS_CELL_PROBLEMS)
        assert not problems, f"{notebook.name}: after moving a widget ({move}):\n" + "\n".join(problems)
        page.locator("[data-ui-test=explorer]").scroll_into_view_if_needed()
        page.screenshot(path=str(artifacts_dir / f"{notebook.stem}.png"))
    except Exception:
        page.screenshot(path=str(artifacts_dir / f"{notebook.stem}.failed.png"))
        raise
    finally:
        close_notebook(page, reload_lab)  # free the kernel's memory before the next notebook
        whole = round(time.perf_counter() - start, 1)
        ui_timings[notebook.stem] = {"run": whole if ran is None else round(ran, 1), "whole": whole}


def test_widget_choice_reads_metadata_and_falls_back_to_the_convention(tmp_path: Path) -> None:
    plain = tmp_path / "plain.ipynb"
    plain.write_text(json.dumps({"cells": [], "metadata": {}}))
    assert widget_choice(plain) == (None, 0, 0)
    chosen = tmp_path / "chosen.ipynb"
    metadata = {"attn_edu": {"ui_widget": {"kind": "dropdown", "explorer": 1}}}
    chosen.write_text(json.dumps({"cells": [], "metadata": metadata}))
    assert widget_choice(chosen) == ("dropdown", 1, 0)
    wrong = tmp_path / "wrong.ipynb"
    wrong.write_text(json.dumps({"cells": [], "metadata": {"attn_edu": {"ui_widget": {"kind": "knob"}}}}))
    with pytest.raises(ValueError, match=re.escape("ui_widget.kind")):
        widget_choice(wrong)
