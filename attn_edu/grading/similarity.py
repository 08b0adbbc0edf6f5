"""Flags for the instructor: a learner's function whose normalised source equals the solution's or the library's.

A copy is not failed: the grade stands on what the function computes. It is flagged in the report
("identical to the solution notebook's", "identical to attn_edu.masks.causal_mask"), for a person to look at.
Normalised means: parsed, its docstring, comments, type annotations and formatting dropped, and its
arguments and local variables renamed in order of appearance, so that renaming ``scores`` to ``s`` or
reflowing the lines does not hide a copy. The grader reads the submitted notebook's cells itself; nothing here
runs the learner's code.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import json
import textwrap
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parent.parent
SOLUTIONS = (
    PACKAGE.parent / "solutions"
)  # in a checkout; an installed package has none, and no flag comes of it
# The library modules whose function of an exercise's name is its twin.
CONCEPT_MODULES = (
    "retrieval", "attention", "masks", "multihead", "positional", "rope", "objectives", "params", "kv_cache",
    "generation", "sparse", "efficient", "moe", "flash", "interp", "blocks",
)  # fmt: skip


class _Renamed(ast.NodeTransformer):
    """Arguments and assigned names become ``v0, v1, ...`` in order of appearance; annotations go."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def _name(self, name: str) -> str:
        return self.names.setdefault(name, f"v{len(self.names)}")

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.arg, node.annotation = self._name(node.arg), None
        return node

    def visit_Name(self, node: ast.Name) -> ast.Name:
        if isinstance(node.ctx, ast.Store) or node.id in self.names:
            node.id = self._name(node.id)
        return node


def normalised(function: ast.FunctionDef) -> str:
    """The function's body and arguments as a canonical string (see the module's docstring)."""
    node = ast.parse(ast.unparse(function)).body[0]  # a copy
    assert isinstance(node, ast.FunctionDef)
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]  # the docstring
    node.body, node.name, node.returns, node.decorator_list = body or [ast.Pass()], "f", None, []
    return ast.dump(_Renamed().visit(node), annotate_fields=False)


def defined_in(cells: list[str], name: str) -> ast.FunctionDef | None:
    """The last ``def name(...)`` at the top level of the notebook's code cells (cells that are not plain
    Python, with magics say, are skipped)."""
    found = None
    for source in cells:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                found = node
    return found


@functools.cache
def _solution_cells(number: str) -> tuple[str, ...]:
    paths = sorted(SOLUTIONS.glob(f"{number}_*.ipynb"))
    if not paths:
        return ()
    cells = json.loads(paths[0].read_text(encoding="utf-8"))["cells"]
    return tuple("".join(c["source"]) for c in cells if c["cell_type"] == "code")


@functools.cache
def _references(exercise_id: str, name: str) -> tuple[tuple[str, str], ...]:
    """``(what, normalised source)`` of the solution notebook's function and the library's function of the
    same name."""
    found = []
    solution = defined_in(list(_solution_cells(exercise_id.split(".")[0])), name)
    if solution is not None:
        found.append(("the solution notebook's", normalised(solution)))
    for module_name in CONCEPT_MODULES:
        module = importlib.import_module(f"attn_edu.{module_name}")
        twin = getattr(module, name, None)
        if inspect.isfunction(twin) and twin.__module__ == module.__name__:
            tree = ast.parse(textwrap.dedent(inspect.getsource(twin))).body[0]
            if isinstance(tree, ast.FunctionDef):
                found.append((f"{module.__name__}.{name}", normalised(tree)))
    return tuple(found)


def copy_flag(cells: list[str], exercise_id: str, function_name: str) -> str | None:
    """``"identical to ..."`` when the notebook's function of this exercise has the normalised source of the
    solution's or the library's, else ``None``."""
    mine = defined_in(cells, function_name)
    if mine is None:
        return None
    own = normalised(mine)
    for what, source in _references(exercise_id, function_name):
        if source == own:
            return f"identical to {what} (normalised source)"
    return None


def flags(cells: list[list[Any]], exercises: list[Any]) -> dict[str, str]:
    """Each exercise's copy flag, for the report (``cells``: ``[number, source]`` as the grader read them)."""
    sources = [source for _, source in cells]
    found = {e.exercise_id: copy_flag(sources, e.exercise_id, e.function_name) for e in exercises}
    return {k: v for k, v in found.items() if v}
