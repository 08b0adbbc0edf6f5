"""No course notebook shows an exercise's answer before it sends the learner to the exercise.

An exercise's *answers* are the body of its solution (``solutions/NN_*.ipynb``, between the solution markers)
and the library functions that its reference calls, with their private helpers (the function the exercise asks
for, as ``attn_edu`` writes it). What a course notebook *shows* before the exercises are linked (the first cell
that links ``../exercises/NN_*.ipynb``, in the summary) is the source of each code cell, the text of its stored
outputs (``show_source`` prints library code there) and the code blocks of its markdown cells.

Both sides are cut into normalised lines: logical lines (a statement spread over several lines is one), comments
and docstrings dropped, strings spelt one way, every name that is neither called, nor an attribute, nor a
keyword argument, nor a module such as ``torch`` replaced by ``_`` (renaming ``scores`` to ``s`` hides nothing),
and ``return x`` read as ``_ = x``. A line is *trivial* when it has fewer than two tokens besides ``_``, brackets, commas, dots, ``=``
and keywords (``return out``, ``B, T, C = x.shape``, ``if mask is None:``), or is an import, ``def``, ``class``,
decorator or ``pass``; trivial lines are left out of both sides.

A leak: the non-trivial lines of one answer and of one shown block (one cell's source, one output, one markdown
code block) have at least :data:`AT_LEAST` lines in common, in the same order, or all of the answer's lines when
it has fewer.
"""

from __future__ import annotations

import ast
import inspect
import io
import json
import keyword
import re
import textwrap
import tokenize
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from attn_edu.grading.registry import exercises

REPO = Path(__file__).resolve().parents[1]
COURSE = REPO / "course"
SOLUTIONS = REPO / "solutions"

AT_LEAST = 3  # lines in common, in order, that make a leak (or the whole answer when it is shorter)
KEPT_NAMES = {"torch", "math", "F", "nn", "np", "tl", "triton"}  # modules: what they provide is content
STRUCTURE = {"(", ")", "[", "]", "{", "}", ",", ":", ".", "=", "_"}
TRIVIAL_STARTS = ("import", "from", "def", "class", "@", "pass", "global", "nonlocal")
EXERCISE_LINE = re.compile(r"#\s*Exercise\s+(\d\d\.\d+)\s*:")
FENCE = re.compile(r"```[a-z]*\n(.*?)```", re.S)


def _text(value: str | list[str]) -> str:
    return "".join(value) if isinstance(value, list) else value


def _tokens(text: str) -> list[tokenize.TokenInfo]:
    """Python tokens of ``text``; text that is not Python as a whole (an excerpt that stops inside a block,
    prose) is tokenised line by line, and lines that are not Python give none."""
    try:
        return list(tokenize.generate_tokens(io.StringIO(textwrap.dedent(text) + "\n").readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        found: list[tokenize.TokenInfo] = []
        for line in text.splitlines():
            try:
                found += tokenize.generate_tokens(io.StringIO(line.strip() + "\n").readline)
            except (tokenize.TokenError, IndentationError, SyntaxError):
                continue
        return found


def normalised_lines(text: str) -> list[str]:
    """The logical lines of ``text`` with comments and docstrings dropped and local names replaced by ``_``
    (see the module's docstring); every line, trivial ones included."""
    tokens = [t for t in _tokens(text) if t.type not in (tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)]
    lines: list[str] = []
    current: list[str] = []
    kinds: list[int] = []  # the token types of the current line
    depth = 0
    for index, token in enumerate(tokens):
        if token.type in (tokenize.NEWLINE, tokenize.ENDMARKER) or (token.type == tokenize.NL and depth == 0):
            if current and kinds != [tokenize.STRING]:  # a string alone on its line is a docstring
                lines.append(" ".join(current))
            current, kinds, depth = [], [], 0
            continue
        if token.type in (tokenize.NL, tokenize.ENCODING):
            continue
        word = token.string
        if token.type == tokenize.OP:
            depth += word in "([{"
            depth -= word in ")]}" and depth > 0
        if token.type == tokenize.NAME and not keyword.iskeyword(word) and word not in KEPT_NAMES:
            after = tokens[index + 1].string if index + 1 < len(tokens) else ""
            attribute = bool(current) and current[-1] == "."
            keyword_argument = after == "=" and depth > 0
            if not (attribute or keyword_argument or after == "("):
                word = "_"
        if token.type == tokenize.STRING:
            try:  # one spelling per string: 'a' and "a" are the same
                word = repr(ast.literal_eval(word))
            except (ValueError, SyntaxError):  # an f-string: as written
                pass
        current.append(word)
        kinds.append(token.type)
    return [f"_ = {line[len('return ') :]}" if line.startswith("return ") else line for line in lines]


def trivial(line: str) -> bool:
    """True for a line that says nothing on its own: fewer than two content tokens, or an import, a ``def``,
    a ``class``, a decorator, ``pass``."""
    words = line.split()
    if not words or words[0] in TRIVIAL_STARTS:
        return True
    content = [w for w in words if w not in STRUCTURE and not keyword.iskeyword(w)]
    return len(content) < 2


def content_lines(text: str) -> list[str]:
    """The non-trivial normalised lines of ``text``."""
    return [line for line in normalised_lines(text) if not trivial(line)]


def common_lines(answer: list[str], shown: list[str]) -> list[str]:
    """The longest run of lines of ``answer`` that ``shown`` holds in the same order (gaps allowed)."""
    table = [[0] * (len(shown) + 1) for _ in range(len(answer) + 1)]
    for i, a in enumerate(answer):
        for j, s in enumerate(shown):
            table[i + 1][j + 1] = table[i][j] + 1 if a == s else max(table[i][j + 1], table[i + 1][j])
    found, i, j = [], len(answer), len(shown)
    while i and j:
        if answer[i - 1] == shown[j - 1]:
            found.append(answer[i - 1])
            i, j = i - 1, j - 1
        elif table[i - 1][j] >= table[i][j - 1]:
            i -= 1
        else:
            j -= 1
    return found[::-1]


def leaked(answer: list[str], shown: list[str], at_least: int = AT_LEAST) -> list[str]:
    """The answer's lines that ``shown`` gives away, or ``[]``: at least ``at_least`` of them in order, or all
    of them when the answer has fewer (both lists already normalised and non-trivial)."""
    if not answer:
        return []
    common = common_lines(answer, shown)
    return common if len(common) >= min(at_least, len(answer)) else []


# -- the answers ------------------------------------------------------------------------------------------


def solution_bodies(path: Path) -> dict[str, str]:
    """Exercise id -> the code between the solution markers of its cell, in one solution notebook."""
    bodies = {}
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        source = _text(cell["source"])
        found = EXERCISE_LINE.search(source)
        if cell["cell_type"] != "code" or not found or "### BEGIN SOLUTION" not in source:
            continue
        inside, body = False, []
        for line in source.splitlines():
            if line.strip() in ("### BEGIN SOLUTION", "### END SOLUTION"):
                inside = line.strip() == "### BEGIN SOLUTION"
            elif inside:
                body.append(line)
        bodies[found.group(1)] = "\n".join(body)
    return bodies


def _names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _names(constant)
    return names


def _library(obj: object) -> bool:
    module = getattr(obj, "__module__", None) or ""
    return module.startswith("attn_edu") and not module.startswith(("attn_edu.grading", "attn_edu._validate"))


def library_functions(fn: Callable[..., object], *, depth: int = 0, found: dict | None = None) -> dict:
    """``qualified name -> function`` for the ``attn_edu`` functions (and methods) that ``fn`` names, and,
    below them, the private helpers (``_name``) that those name in turn."""
    found = {} if found is None else found
    if not isinstance(fn, types.FunctionType):
        return found
    names = _names(fn.__code__)
    candidates = []
    for name in names:
        obj = fn.__globals__.get(name)
        if isinstance(obj, types.ModuleType) and obj.__name__.startswith("attn_edu"):
            candidates += [getattr(obj, other) for other in names if hasattr(obj, other)]
        elif obj is not None:
            candidates.append(obj)
    for obj in list(candidates):
        if inspect.isclass(obj) and _library(obj):
            candidates += [
                obj.__dict__[other] for other in names if inspect.isfunction(obj.__dict__.get(other))
            ]
    for obj in candidates:
        if not inspect.isfunction(obj) or not _library(obj) or (depth and not obj.__name__.startswith("_")):
            continue
        key = f"{obj.__module__}.{obj.__qualname__}"
        if key not in found:
            found[key] = obj
            if depth < 3:
                library_functions(obj, depth=depth + 1, found=found)
    return found


def answers(exercise_id: str, body: str) -> list[tuple[str, list[str]]]:
    """``(what, non-trivial normalised lines)`` of each answer of one exercise."""
    found = [("the solution notebook's body", content_lines(body))]
    for name, function in library_functions(exercises()[exercise_id].reference).items():
        source = textwrap.dedent(inspect.getsource(function))
        node = ast.parse(source).body[0]
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)), name
        first_body_line = node.body[0].lineno
        found.append((name, content_lines("\n".join(source.splitlines()[first_body_line - 1 :]))))
    return found


# -- what a course notebook shows ------------------------------------------------------------------------


def shown_blocks(cells: list[dict], number: str) -> Iterator[tuple[int, str, str]]:
    """``(cell index, what, text)`` of every block a learner reads before the cell that links the exercises
    of notebook ``number``: code sources, stored text outputs, markdown code blocks."""
    for index, cell in enumerate(cells):
        source = _text(cell["source"])
        if f"../exercises/{number}_" in source:
            return
        if cell["cell_type"] == "markdown":
            for block in FENCE.findall(source):
                yield index, "a code block", block
            continue
        if cell["cell_type"] != "code":
            continue
        code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
        yield index, "its source", code
        for output in cell.get("outputs", []):
            text = output.get("text") or output.get("data", {}).get("text/plain")
            if text:
                yield index, "its output", _text(text)


def leaks(
    cells: list[dict], number: str, exercise_answers: dict[str, list[tuple[str, list[str]]]]
) -> list[str]:
    """One message per (exercise, answer, cell) that leaks, for a notebook's cells."""
    blocks = [(index, what, content_lines(text)) for index, what, text in shown_blocks(cells, number)]
    messages = []
    for exercise_id, answer_list in exercise_answers.items():
        for name, answer in answer_list:
            for index, what, shown in blocks:
                common = leaked(answer, shown)
                if common:
                    lines = "\n    ".join(common)
                    messages.append(
                        f"exercise {exercise_id}: cell {index} ({what}) shows {len(common)} of the "
                        f"{len(answer)} lines of {name} before the exercises are linked:\n    {lines}"
                    )
    return messages


def _notebooks() -> list[tuple[str, Path, Path]]:
    found = []
    for solution in sorted(SOLUTIONS.glob("*.ipynb")):
        course = sorted(COURSE.glob(f"{solution.name[:2]}_*.ipynb"))
        if course:
            found.append((solution.name[:2], course[0], solution))
    return found


@pytest.mark.parametrize("number, course, solution", _notebooks(), ids=[n for n, _, _ in _notebooks()])
def test_no_course_notebook_shows_an_answer_before_its_exercises(number, course, solution):
    cells = json.loads(course.read_text(encoding="utf-8"))["cells"]
    assert any(f"../exercises/{number}_" in _text(c["source"]) for c in cells), (
        f"{course.name}: no cell links ../exercises/{number}_*.ipynb, so nothing says where the exercises begin"
    )
    bodies = solution_bodies(solution)
    assert bodies, f"{solution.name}: no exercise cell with solution markers"
    found = leaks(cells, number, {eid: answers(eid, body) for eid, body in bodies.items()})
    assert not found, f"{course.name}:\n" + "\n".join(found)


# -- the matcher on planted snippets ---------------------------------------------------------------------

PLANTED_ANSWER = '''
    """Weights over the keys."""
    scores = q @ k.transpose(-2, -1) * scale  # (..., T, S)
    scores = scores.masked_fill(~mask, float("-inf"))  # hidden keys
    weights = torch.softmax(scores, dim=-1)  # (..., T, S)
    return torch.where(mask.any(dim=-1, keepdim=True), weights, 0.0)
'''


def test_a_renamed_copy_without_comments_is_a_leak():
    shown = """
s = query @ key.transpose(-2, -1) * scale  # a comment
s = s.masked_fill(~allowed, float('-inf'))  # quoted the other way
print(s.shape)
w = torch.softmax(s, dim=-1)
"""
    common = leaked(content_lines(PLANTED_ANSWER), content_lines(shown))
    assert len(common) == 3, common


def test_two_lines_of_a_long_answer_are_not_a_leak():
    shown = "scores = q @ k.transpose(-2, -1) * scale\nweights = torch.softmax(scores, dim=-1)\n"
    assert leaked(content_lines(PLANTED_ANSWER), content_lines(shown)) == []


def test_trivial_lines_never_count():
    answer = "import torch\nB, T, C = x.shape\nif mask is None:\n    pass\nreturn out\nout = f(x, y)\n"
    assert content_lines(answer) == []
    assert leaked(content_lines(answer), content_lines(answer)) == []


def test_a_one_line_answer_leaks_when_shown_whole():
    answer = content_lines("    return torch.cat([cache, new], dim=2)  # (B, H, S + T, D)")
    assert leaked(answer, content_lines("k_all = torch.cat([k_old, k_new], dim=2)")) == answer
    assert leaked(answer, content_lines("k_all = torch.cat([k_old, k_new], dim=1)")) == []


def test_a_planted_cell_before_the_link_fails_and_one_after_it_does_not():
    answer = {"99.1": [("the solution notebook's body", content_lines(PLANTED_ANSWER))]}
    planted = {"cell_type": "code", "source": PLANTED_ANSWER.replace("return", "weights ="), "outputs": []}
    link = {"cell_type": "markdown", "source": "## Summary\n[exercises](../exercises/99_x.ipynb)"}
    prose = {"cell_type": "markdown", "source": "Some prose."}
    before = leaks([prose, planted, link], "99", answer)
    assert len(before) == 1 and "exercise 99.1: cell 1 (its source)" in before[0], before
    assert leaks([prose, link, planted], "99", answer) == []


def test_stored_output_of_show_source_counts():
    answer = {"99.1": [("attn_edu.x._weights", content_lines(PLANTED_ANSWER))]}
    shown = {
        "cell_type": "code",
        "source": 'show_source(_weights, start="scores =")',
        "outputs": [{"output_type": "execute_result", "data": {"text/plain": PLANTED_ANSWER}}],
    }
    link = {"cell_type": "markdown", "source": "[exercises](../exercises/99_x.ipynb)"}
    found = leaks([shown, link], "99", answer)
    assert len(found) == 1 and "cell 0 (its output)" in found[0], found
