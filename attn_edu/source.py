"""Show the library's source inside a notebook, so a derivation can be read beside the reference.

Two ways in. :func:`show_source` takes a Python object (``show_source(causal_mask)``), or the dotted name of
a top-level definition (``show_source("attn_edu.kernels.triton_flash._flash_forward_kernel")``), which is read
from the module's file as text and never imported: a Triton kernel can be read on a machine without Triton.
The helpers below it cut a definition into pieces (:func:`excerpt`), find what it calls (:func:`calls`), read
a file's integer constants (:func:`module_constants`) and run a plain-Python function of a file that cannot be
imported here (:func:`load_function`).

A *file* argument is a path, or the dotted name of a module (``"attn_edu.kernels.triton_flash"``), found
without running it.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import textwrap
from pathlib import Path
from typing import Any

SourceFile = Path | str  # a path, or the dotted name of a module


def module_file(file: SourceFile) -> Path:
    """The path of ``file``: itself if a path, else the file of the module with that dotted name.

    The module is located, not run (its parent packages are imported, as Python needs them to find it).

    Example:
        >>> module_file("attn_edu.masks").name
        'masks.py'
    """
    if isinstance(file, Path):
        return file
    spec = importlib.util.find_spec(file)
    if spec is None or spec.origin is None:
        raise ValueError(f"file: expected a path or the dotted name of a module, got {file!r}")
    return Path(spec.origin)


@functools.cache  # one parse per version of a file's text
def definitions(text: str) -> dict[str, tuple[int, int]]:
    """First and last line (from 1) of each top-level definition in a Python file's text, decorators included.

    Functions and classes by their names; any other name by the top-level statement that first assigns it
    (perhaps inside an ``if``).

    Example:
        >>> definitions("import os\\n\\n@decorate\\ndef f():\\n    return 1\\n\\nX = 2\\n")
        {'f': (3, 5), 'X': (7, 7)}
    """
    spans: dict[str, tuple[int, int]] = {}
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            spans.setdefault(node.name, (first, node.end_lineno or node.lineno))
        else:
            for inner in ast.walk(node):
                if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Store):
                    spans.setdefault(inner.id, (node.lineno, node.end_lineno or node.lineno))
    return spans


def _lines(file: SourceFile) -> list[str]:
    return module_file(file).read_text(encoding="utf-8").splitlines()


def definition_span(name: str, *, file: SourceFile) -> tuple[int, int]:
    """First and last line (from 1) of the top-level definition ``name`` in ``file``."""
    path = module_file(file)
    spans = definitions(path.read_text(encoding="utf-8"))
    if name not in spans:
        raise ValueError(f"name: {path.name} has no top-level definition of {name!r}")
    return spans[name]


def definition_source(name: str, *, file: SourceFile) -> str:
    """The source of the top-level definition ``name`` of ``file``, read as text (nothing is imported).

    Example:
        >>> definition_source("causal_mask", file="attn_edu.masks").startswith("def causal_mask(")
        True
    """
    first, last = definition_span(name, file=file)
    return "\n".join(_lines(file)[first - 1 : last])


def find_line(name: str, marker: str, *, file: SourceFile, after: int = 0) -> int:
    """Index (from 0) of the first line of definition ``name`` that contains ``marker``, from line ``after`` on.

    Raises ``ValueError`` if there is none: a notebook that cuts code by its text stops when the text is gone.
    """
    first, last = definition_span(name, file=file)
    lines = _lines(file)
    for index in range(max(first - 1, after), last):
        if marker in lines[index]:
            return index
    raise ValueError(f"marker: no line with {marker!r} in {name} ({module_file(file).name})")


def excerpt(name: str, *markers: str, file: SourceFile) -> str:
    """Lines of definition ``name``, from the line containing ``markers[0]`` to the one containing the last.

    Each marker is searched for from the line of the one before; one marker gives that line alone. The excerpt
    is dedented and starts with a comment saying where it comes from.

    Example:
        >>> print(excerpt("causal_mask", "S = T if S is None", file="attn_edu.masks"))
        # masks.py, causal_mask, line ...
        S = T if S is None else check_positive_int("S", S)
    """
    if not markers:
        raise ValueError("markers: expected at least one piece of a line's text")
    at = [find_line(name, markers[0], file=file)]
    for marker in markers[1:]:
        at.append(find_line(name, marker, file=file, after=at[-1]))
    lines = _lines(file)[at[0] : at[-1] + 1]
    where = f"line {at[0] + 1}" if len(lines) == 1 else f"lines {at[0] + 1}-{at[-1] + 1}"
    return f"# {module_file(file).name}, {name}, {where}\n" + textwrap.dedent("\n".join(lines))


def calls(name: str, *, file: SourceFile) -> list[str]:
    """The functions that definition ``name`` calls, as written (``tl.dot``), in the order of its syntax tree.

    Example:
        >>> "torch.ones" in calls("causal_mask", file="attn_edu.masks")
        True
    """
    tree = ast.parse(definition_source(name, file=file))
    return [ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)]


def module_constants(file: SourceFile) -> dict[str, int]:
    """The top-level integer constants of ``file`` (``BLOCK_M = 64`` ...), read from its text."""
    found = {}
    for node in ast.parse(module_file(file).read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            if type(node.value.value) is int:
                found.update({ast.unparse(target): node.value.value for target in node.targets})
    return found


def load_function(name: str, *, file: SourceFile, **names: Any) -> Any:
    """A plain-Python function of ``file`` that cannot be imported here (its module needs Triton, say).

    Runs the function's source alone, with ``torch``, the file's integer constants and ``names`` as its
    globals, and returns it. Only for short functions whose globals are these.

    Example:
        >>> load_function("_key_stop", file="attn_edu.flash")(q_end=4, T=8, S=8, is_causal=True)
        4
    """
    import torch

    namespace: dict[str, Any] = {"torch": torch, **module_constants(file), **names}
    exec(definition_source(name, file=file), namespace)
    return namespace[name]


def _definition_of(dotted: str) -> tuple[str, str]:
    """Split ``"package.module.name"`` into the module and the definition, locating modules without running them."""
    parts = dotted.split(".")
    for end in range(1, len(parts)):
        module = ".".join(parts[:end])
        spec = importlib.util.find_spec(module)
        if spec is None:
            break
        if spec.submodule_search_locations is None:  # a module, not a package: the rest is a definition
            return module, ".".join(parts[end:])
    raise ValueError(f"obj: expected 'module.definition', got {dotted!r}")


def source_text(obj: Any) -> str:
    """The source code of a function, class or module, or of the top-level definition a dotted name names.

    Example:
        >>> from attn_edu.masks import causal_mask
        >>> source_text(causal_mask).splitlines()[0]
        'def causal_mask(T: int, S: int | None = None, *, device: torch.device | str | None = None) -> torch.Tensor:'
        >>> source_text("attn_edu.masks.causal_mask") == source_text(causal_mask).rstrip("\\n")
        True
    """
    if isinstance(obj, str):
        module, name = _definition_of(obj)
        return definition_source(name, file=module)
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError) as err:
        raise ValueError(
            f"obj: expected a function, class or module defined in Python source, got {obj!r}"
        ) from err


def show_code(*pieces: str) -> Any:
    """Pieces of Python source (excerpts, whole definitions), one after another, highlighted in Jupyter.

    Returns an IPython ``Markdown`` object holding one fenced code block when IPython is available (stored in
    a notebook as a few bytes of text), else the joined text.
    """
    text = "\n\n".join(pieces)
    try:
        from IPython.display import Markdown
    except ImportError:  # plain Python: just the text
        return text
    return Markdown(f"```python\n{text}\n```")


def lines_between(text: str, start: str, stop: str | None = None) -> str:
    """The lines of ``text`` from the first containing ``start`` to the next containing ``stop``, dedented.

    Without ``stop``, the ``start`` line alone. Raises ``ValueError`` when a marker is not found.

    Example:
        >>> print(lines_between("def f(x):\\n    y = x + 1\\n    z = y * 2\\n", "y =", "z ="))
        y = x + 1
        z = y * 2
    """
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if start in line), None)
    if first is None:
        raise ValueError(f"start: no line contains {start!r}")
    last = first
    if stop is not None:
        last = next((i for i in range(first, len(lines)) if stop in lines[i]), None)
        if last is None:
            raise ValueError(f"stop: no line from {start!r} on contains {stop!r}")
    return textwrap.dedent("\n".join(lines[first : last + 1]))


def show_source(obj: Any, *, start: str | None = None, stop: str | None = None) -> Any:
    """Display ``obj``'s source with syntax highlighting in Jupyter (plain text elsewhere).

    ``obj`` is a function, class or module, or the dotted name of a top-level definition
    (``"attn_edu.kernels.triton_flash._flash_forward_kernel"``), read from its file without importing it.
    With ``start`` (and ``stop``), only the lines from the one containing ``start`` to the one containing
    ``stop`` (:func:`lines_between`): the few lines that matter of a long function.
    Returns an IPython ``Code`` object when IPython is available, else the source string.
    """
    text = source_text(obj)
    if start is not None:
        text = lines_between(text, start, stop)
    elif stop is not None:
        raise ValueError("stop: give start too")
    try:
        from IPython.display import Code
    except ImportError:  # plain Python: just the text
        return text
    return Code(text, language="python")
