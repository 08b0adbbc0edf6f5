"""An exercise notebook as a learner works it, in JupyterLab in a real (headless) browser.

In ``exercises/03_scaling_variance_exercises.ipynb``, which must open unmodified (no "save changes?" when a learner
closes it untouched), the test runs every cell (each check says "not attempted"),
then types into the stub of exercise 03.3, with the keyboard, in the cell's editor:

1. a wrong answer (the entropy that turns a zero weight into NaN), runs it and its check: the check's
   line says "failed" and shows the hint that names the zero-weight property;
2. the right answer in its place: the check says "passed";
3. an answer to concept question 03.q2: a wrong letter shows what that choice misses, the right one the
   explanation and that the first answer, the wrong one, is the one graded.

Skipped, as the whole browser suite is, without Chromium or playwright (``tests/ui/conftest.py``).
"""

from __future__ import annotations

import pytest
from test_notebooks_in_browser import (
    JS_KERNEL_READY,
    JS_NOTEBOOK_OPEN,
    JS_START_RUN_ALL,
    OPEN_TIMEOUT_MS,
    RUN_ALL_TIMEOUT_MS,
    close_notebook,
)

from attn_edu.grading.registry import get_exercise, get_question

pytestmark = pytest.mark.ui
# Ask the page twice a second, not on every animation frame (Playwright's default): Chromium's
# polling otherwise takes a share of the cores the notebook's kernel needs.
POLL_MS = 500

NOTEBOOK = "exercises/03_scaling_variance_exercises.ipynb"
CHECK_TIMEOUT_MS = 60_000

STUB_HEAD = '''# Exercise 03.3: return the entropy in nats of each row of attention weights, with 0·log 0 = 0
def attention_entropy(weights):
    """Entropy (..., T) of each row of weights (..., T, S)."""
'''
WRONG = STUB_HEAD + "    return -(weights * weights.log()).sum(dim=-1)\n"  # 0 · log 0 = NaN
RIGHT = STUB_HEAD + "    return torch.special.entr(weights).sum(dim=-1)\n"

# Whether the notebook is marked modified, and if so its metadata as JupyterLab holds it (what changed on open).
JS_CHANGED_ON_OPEN = """() => window.__uiPanel.context.model.dirty
    ? JSON.stringify(window.__uiPanel.context.model.toJSON().metadata) : ''"""

JS_CELL_INDEX = """(prefix) => window.__uiPanel.content.widgets.findIndex(
    (cell) => cell.model.sharedModel.getSource().startsWith(prefix))"""

# Run one cell (as Shift+Enter does) and wait for it to finish; JupyterLab's own command.
JS_RUN_CELL = """async (index) => {
    const app = window.jupyterapp, panel = window.__uiPanel;
    panel.content.activeCellIndex = index;
    await app.commands.execute('notebook:run-cell');
    return panel.content.widgets[index].model.executionCount;
}"""

JS_OUTPUT_TEXT = """(index) => {
    const text = (value) => Array.isArray(value) ? value.join('') : (value || '');
    return window.__uiPanel.content.widgets[index].model.outputs.toJSON().map(
        (output) => text(output.data && output.data['text/plain']) + text(output.text) + text(output.evalue)
    ).join('\\n');
}"""


def _type_into_cell(page, index: int, text: str) -> None:  # noqa: ANN001
    """Click into the cell's editor, select everything in it and type ``text`` over it."""
    panel = page.evaluate("() => window.__uiPanel.id")
    page.evaluate("(i) => { window.__uiPanel.content.activeCellIndex = i; }", index)
    editor = page.locator(f"[id='{panel}'] .jp-Cell").nth(index).locator(".cm-content")
    editor.scroll_into_view_if_needed()
    editor.click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(text)
    source = page.evaluate("(i) => window.__uiPanel.content.widgets[i].model.sharedModel.getSource()", index)
    assert source.strip() == text.strip(), f"the editor holds {source!r}"


def _run(page, index: int) -> str:  # noqa: ANN001
    """Run cell ``index`` and return what it shows."""
    page.evaluate(JS_RUN_CELL, index)
    return page.evaluate(JS_OUTPUT_TEXT, index)


def test_a_learner_answers_an_exercise_and_a_question(lab_page, reload_lab, artifacts_dir) -> None:  # noqa: ANN001
    page = lab_page
    try:
        page.evaluate(
            "(path) => { window.jupyterapp.commands.execute('docmanager:open', {path, factory: 'Notebook'}); }",
            NOTEBOOK,
        )
        page.wait_for_function(JS_NOTEBOOK_OPEN, arg=NOTEBOOK, polling=POLL_MS, timeout=OPEN_TIMEOUT_MS)
        page.evaluate(JS_KERNEL_READY)
        page.wait_for_timeout(1500)  # the kernel's info reply lands in the notebook's metadata
        changed = page.evaluate(JS_CHANGED_ON_OPEN)
        assert not changed, f"{NOTEBOOK} opens already modified, before anything is typed: {changed}"
        page.evaluate(JS_START_RUN_ALL)
        page.wait_for_function(
            "() => window.__uiRunAll !== undefined", polling=POLL_MS, timeout=RUN_ALL_TIMEOUT_MS
        )

        stub = page.evaluate(JS_CELL_INDEX, "# Exercise 03.3:")
        check_cell = page.evaluate(JS_CELL_INDEX, 'check("03.3"')
        assert stub >= 0 and check_cell == stub + 1, (stub, check_cell)
        assert "not attempted" in page.evaluate(JS_OUTPUT_TEXT, check_cell)

        _type_into_cell(page, stub, WRONG)
        _run(page, stub)
        shown = _run(page, check_cell)
        zero_weights = get_exercise("03.3").properties[0]
        assert "Exercise 03.3 failed" in shown and zero_weights.name in shown, shown
        assert zero_weights.message in shown, f"the hint is not shown: {shown}"

        _type_into_cell(page, stub, RIGHT)
        _run(page, stub)
        shown = _run(page, check_cell)
        assert "Exercise 03.3 passed" in shown, shown

        question = get_question("03.q2")
        cell = page.evaluate(JS_CELL_INDEX, "# Question 03.q2:")
        assert cell >= 0
        head = f"# Question 03.q2: {question.title}\n"
        _type_into_cell(page, cell, head + 'answer_q2 = "c"\ncheck("03.q2", answer_q2)')
        shown = _run(page, cell)
        assert "Question 03.q2 failed" in shown and dict(question.wrong)["c"] in shown, shown
        assert question.explanation not in shown
        _type_into_cell(page, cell, head + 'answer_q2 = "b"\ncheck("03.q2", answer_q2)')
        shown = _run(page, cell)
        assert "Question 03.q2 passed" in shown and question.explanation in shown, shown
        assert "Your first answer, 'c', is the one graded (not right)" in shown, shown  # the grade keeps "c"
        page.screenshot(path=str(artifacts_dir / "exercise_03.png"))
    except Exception:
        page.screenshot(path=str(artifacts_dir / "exercise_03.failed.png"))
        raise
    finally:
        close_notebook(page, reload_lab)
