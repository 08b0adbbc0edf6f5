"""A static scan for kernels and launchers that only work on the CPU.

A launcher, or any helper that computes on its input's device, breaks on a GPU when it builds a tensor with
``torch.ones(T, S)`` (it lands on the CPU) and combines it with the input; a ``tl.dot`` on float32 tiles without
``input_precision`` runs in TF32 on an A100/H100/L4 and misses a 1e-5 tolerance. Neither shows on a CPU, where
the interpreter runs every kernel in float32 and every tensor is on the CPU. This file reads the code, never
runs it (Python's ``ast``; a notebook's magic lines are read as ``pass``):

- ``tl.dot(`` without ``input_precision=``: in every code cell of ``solutions/*.ipynb`` and
  ``exercises/*.ipynb`` and every Python file of ``attn_edu/kernels`` and ``attn_edu/grading`` (sub-folders too);
- a tensor constructor (``torch.zeros``, ``ones``, ``empty``, ``full``, ``arange``, ``rand*``, ``tensor``,
  ``eye``, ``linspace``...; the ``*_like`` and ``x.new_*`` follow their input) without ``device=``, inside a
  function that receives a tensor, in the code that meets tensors on a GPU: the notebooks of the Triton
  exercises (``check()`` runs those on :func:`~attn_edu.grading.run.kernel_device`), ``attn_edu/kernels``, the
  grading engine (``attn_edu/grading`` outside ``checks/``), and the check modules of the Triton exercises with
  the check modules they import. The other check modules' references, mistakes and case builders only ever see
  the CPU copies of their cases (``check()`` runs a PyTorch exercise on the CPU), so they are not scanned;
- a tensor constructor without ``device=`` at the top level of the Triton exercises' notebooks: their verify
  cells build their inputs on the ``device`` that the setup cell chose once.

A function receives a tensor when a parameter is annotated ``torch.Tensor`` or, unannotated, is used as one
(``x.shape``, ``q.device``, ``q @ k``...); a function defined inside such a function counts too. A constructor
moved at once (``torch.tensor(...).to(x.device)``) is not flagged. The finders are tested on planted snippets.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]

CONSTRUCTORS = frozenset(
    {"zeros", "ones", "empty", "full", "arange", "rand", "randn", "randint", "randperm", "tensor", "eye",
     "linspace", "logspace"}
)  # fmt: skip
# Attributes that only a tensor has among a function's arguments here: reading one marks the argument a tensor.
TENSOR_ATTRIBUTES = frozenset(
    {"shape", "device", "dtype", "stride", "contiguous", "is_contiguous", "numel", "ndim", "mT", "transpose",
     "new_zeros", "new_ones", "new_full", "new_empty", "new_tensor", "masked_fill", "amax", "detach"}
)  # fmt: skip

# (file, function, call as written): constructors that rightly make CPU tensors, each with its reason.
ALLOWED: dict[tuple[str, str, str], str] = {
    ("attn_edu/grading/judge.py", "_difference", "torch.tensor(flat)"): (
        "an index turned into Python ints at once, to read the judged tensors, which run_case has brought "
        "back to the CPU"
    ),
}


class Finding(NamedTuple):
    where: str  # the file, or the notebook and its cell
    line: int
    function: str  # the enclosing function, or "<top level>"
    what: str  # the call, as written

    def __str__(self) -> str:
        return f"{self.where}:{self.line} in {self.function}: {self.what}"


# ---------------------------------------------------------------------------------------------------------
# Finders


def _is_tensor_annotation(node: ast.expr | None) -> bool:
    """``torch.Tensor``, ``Tensor``, and either of them ``| None`` or in ``Optional[...]``."""
    if node is None:
        return False
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _is_tensor_annotation(node.left) or _is_tensor_annotation(node.right)
    if isinstance(node, ast.Subscript) and ast.unparse(node.value) in ("Optional", "typing.Optional"):
        return _is_tensor_annotation(node.slice)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation
        try:
            return _is_tensor_annotation(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return False
    return (isinstance(node, ast.Name) and node.id == "Tensor") or (
        isinstance(node, ast.Attribute) and node.attr == "Tensor"
    )


FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's (or a module's) body, not those of the functions defined inside it."""
    body = scope.body if isinstance(scope.body, list) else [scope.body]
    todo = [node for node in body if not isinstance(node, FUNCTIONS)]
    while todo:
        node = todo.pop()
        yield node
        todo.extend(child for child in ast.iter_child_nodes(node) if not isinstance(child, FUNCTIONS))


def tensor_parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """The parameters of ``fn`` that are tensors: annotated so, or used as one in its own body."""
    args = fn.args
    params = [*args.posonlyargs, *args.args, *args.kwonlyargs, *filter(None, (args.vararg, args.kwarg))]
    tensors = {p.arg for p in params if _is_tensor_annotation(p.annotation)}
    names = {p.arg for p in params if p.annotation is None}
    for node in _own_nodes(fn):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in TENSOR_ATTRIBUTES
            and isinstance(node.value, ast.Name)
            and node.value.id in names
        ):
            tensors.add(node.value.id)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            sides = (node.left, node.right)
            tensors.update(side.id for side in sides if isinstance(side, ast.Name) and side.id in names)
    return tensors


def _torch_constructor(call: ast.Call) -> str | None:
    """``"zeros"`` for ``torch.zeros(...)``, else ``None``."""
    func = call.func
    if (
        isinstance(func, ast.Attribute)
        and func.attr in CONSTRUCTORS
        and isinstance(func.value, ast.Name)
        and func.value.id == "torch"
    ):
        return func.attr
    return None


def _sets(call: ast.Call, keyword: str) -> bool:
    """The call passes ``keyword=`` (or ``**kwargs``, which may hold it)."""
    return any(kw.arg in (keyword, None) for kw in call.keywords)


def _moved(call: ast.Call, parents: dict[ast.AST, ast.AST]) -> bool:
    """``torch.X(...).to(device)`` / ``.to(device=...)``: built, then moved at once."""
    attribute = parents.get(call)
    outer = parents.get(attribute) if isinstance(attribute, ast.Attribute) else None
    if not (isinstance(outer, ast.Call) and outer.func is attribute and attribute.attr == "to"):
        return False
    target = outer.args[0] if outer.args else None
    return _sets(outer, "device") or (
        target is not None and not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                                    and target.value.id == "torch")  # .to(torch.float64) moves nothing
    )  # fmt: skip


def _name(fn: ast.AST) -> str:
    return getattr(fn, "name", "<lambda>")


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _bare_constructors(scope: ast.AST, parents: dict[ast.AST, ast.AST]) -> list[ast.Call]:
    """The tensor constructors in ``scope``'s own body without ``device=``, in the order they are written."""
    calls = [
        node
        for node in _own_nodes(scope)
        if isinstance(node, ast.Call)
        and _torch_constructor(node)
        and not _sets(node, "device")
        and not _moved(node, parents)
    ]
    return sorted(calls, key=lambda node: (node.lineno, node.col_offset))


def constructors_without_device(tree: ast.AST, where: str) -> list[Finding]:
    """Tensor constructors without ``device=`` in the functions of ``tree`` that receive a tensor, or that are
    defined inside one."""
    parents = _parents(tree)
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, FUNCTIONS):
            continue
        outer: ast.AST | None = fn
        while outer is not None and not (isinstance(outer, FUNCTIONS) and tensor_parameters(outer)):
            outer = parents.get(outer)
        if outer is not None:
            found += [
                Finding(where, node.lineno, _name(fn), ast.unparse(node))
                for node in _bare_constructors(fn, parents)
            ]
    return found


def top_level_constructors_without_device(tree: ast.Module, where: str) -> list[Finding]:
    """Tensor constructors without ``device=`` outside any function (a notebook's verify code)."""
    parents = _parents(tree)
    return [
        Finding(where, node.lineno, "<top level>", ast.unparse(node))
        for node in _bare_constructors(tree, parents)
    ]


def _enclosing(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> str:
    while node in parents:
        node = parents[node]
        if isinstance(node, FUNCTIONS):
            return _name(node)
    return "<top level>"


def dots_without_precision(tree: ast.AST, where: str) -> list[Finding]:
    """``tl.dot(...)`` calls that leave ``input_precision`` to Triton's default (TF32 on float32 tiles)."""
    parents = _parents(tree)
    return [
        Finding(where, node.lineno, _enclosing(node, parents), ast.unparse(node))
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "dot"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "tl"
        and not _sets(node, "input_precision")
    ]


# ---------------------------------------------------------------------------------------------------------
# What is scanned

MAGIC = re.compile(r"^(\s*)[%!]")  # an IPython line magic or shell escape: not Python


def _cell_tree(source: str) -> ast.Module:
    """A code cell's syntax tree, its magic lines read as ``pass`` and the lines a magic continues onto (after a
    trailing backslash, as IPython joins them) as blank lines (line numbers kept)."""
    lines, continued = [], False
    for line in source.split("\n"):
        if continued:
            lines.append("")
        else:
            lines.append(MAGIC.sub(r"\1pass  # ", line))
            continued = MAGIC.match(line) is not None
        continued = continued and line.rstrip().endswith("\\")
    return ast.parse("\n".join(lines))


def _notebook_trees(paths: list[Path]) -> list[tuple[str, ast.Module]]:
    trees = []
    for path in paths:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        for index, cell in enumerate(cells):
            if cell["cell_type"] == "code":
                where = f"{path.relative_to(ROOT)} cell {index}"
                trees.append((where, _cell_tree("".join(cell["source"]))))
    return trees


def _file_trees(paths: list[Path]) -> list[tuple[str, ast.Module]]:
    return [(str(p.relative_to(ROOT)), ast.parse(p.read_text(encoding="utf-8"))) for p in paths]


NOTEBOOKS = sorted([*(ROOT / "solutions").glob("*.ipynb"), *(ROOT / "exercises").glob("*.ipynb")])
PACKAGE_FILES = sorted(
    [*(ROOT / "attn_edu" / "kernels").glob("*.py"), *(ROOT / "attn_edu" / "grading").rglob("*.py")]
)


def _triton_check_modules() -> list[Path]:
    """The check modules of the Triton exercises, and the check modules they import from."""
    from attn_edu.grading.registry import CHECK_MODULES

    names = [m.__name__ for m in CHECK_MODULES if any(e.kind == "triton" for e in m.EXERCISES)]
    paths = [ROOT / (name.replace(".", "/") + ".py") for name in names]
    for path in list(paths):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "attn_edu.grading.checks."
            ):
                paths.append(ROOT / (node.module.replace(".", "/") + ".py"))
    return sorted(set(paths))


def device_facing_notebooks() -> list[Path]:
    """The solution and exercise notebooks of the Triton exercises (``"12.7"`` -> ``12_*.ipynb``)."""
    from attn_edu.grading.registry import exercises

    numbers = {e.exercise_id.split(".")[0] for e in exercises().values() if e.kind == "triton"}
    return [p for p in NOTEBOOKS if p.name.split("_")[0] in numbers]


def device_facing_files() -> list[Path]:
    """The kernels, the grading engine (outside ``checks/``), and the Triton exercises' check modules."""
    checks = ROOT / "attn_edu" / "grading" / "checks"
    engine = [p for p in PACKAGE_FILES if checks not in p.parents]
    return sorted([*engine, *_triton_check_modules()])


# ---------------------------------------------------------------------------------------------------------
# The finders on planted snippets: each mistake is caught, its right form is not

LAUNCHER_WITH_CPU_MASK = """
def flash_dq(kernel, q, k, v, out, grad_out, is_causal=False):
    N, T, D = q.shape
    S = k.shape[1]
    scores = q @ k.transpose(-2, -1)
    if is_causal:
        scores = scores.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(S - T), float("-inf"))
    return scores
"""


def test_a_launcher_with_a_cpu_mask_is_found() -> None:
    found = constructors_without_device(ast.parse(LAUNCHER_WITH_CPU_MASK), "planted.py")
    assert [(f.line, f.function, f.what) for f in found] == [
        (7, "flash_dq", "torch.ones(T, S, dtype=torch.bool)")
    ], found
    fixed = LAUNCHER_WITH_CPU_MASK.replace("dtype=torch.bool)", "dtype=torch.bool, device=q.device)")
    assert constructors_without_device(ast.parse(fixed), "planted.py") == []


@pytest.mark.parametrize(
    "helper",
    [
        "def lse(x: torch.Tensor, block: int):\n    m = torch.full((x.size(0),), -1.0)\n",  # annotated
        "def lse(x: 'torch.Tensor | None', block):\n    m = torch.full((3,), -1.0)\n",  # a string annotation
        "def lse(x, block):\n    n = x.shape[0]\n    m = torch.full((n,), -1.0)\n",  # used as a tensor
        "def lse(q, k):\n    s = q @ k\n    return s + torch.zeros(3)\n",  # an operand of @
        "def lse(x):\n    R = x.shape[0]\n    def inner(n):\n        return torch.arange(n)\n",  # inside one
        "fn = lambda x: x.shape[0] + torch.ones(2)\n",  # a lambda
        "def lse(x, block):\n    n = x.shape[0]\n    m = torch.full((n,), -1.0).to(torch.float64)\n",
    ],
)
def test_a_helper_that_receives_a_tensor_is_scanned(helper: str) -> None:
    found = constructors_without_device(ast.parse(helper), "planted.py")
    assert len(found) == 1, (helper, found)


@pytest.mark.parametrize(
    "code",
    [
        "def cases(g: torch.Generator, n: int):\n    return torch.randn(n, generator=g)\n",  # no tensor in
        "def count(seq_q, seq_k):\n    return torch.tensor(seq_q * seq_k)\n",  # numbers in
        "def f(x):\n    n = x.shape[0]\n    return torch.zeros(n, device=x.device)\n",
        "def f(x):\n    n = x.shape[0]\n    return torch.arange(n).to(x.device)\n",  # moved at once
        "def f(x, **kw):\n    n = x.shape[0]\n    return torch.zeros(n, **kw)\n",  # may hold device=
        "def f(x):\n    n = x.shape[0]\n    return torch.zeros_like(x) + x.new_ones(n)\n",
        "def f(x: torch.Tensor):\n    return torch.softmax(x, dim=-1)\n",  # not a constructor
    ],
)
def test_a_right_or_unrelated_function_is_not_flagged(code: str) -> None:
    assert constructors_without_device(ast.parse(code), "planted.py") == []


KERNEL_WITH_TF32_DOT = """
@triton.jit
def kernel(q_ptr, k_ptr, out_ptr, BLOCK: tl.constexpr):
    q = tl.load(q_ptr + tl.arange(0, BLOCK)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :])
    k = tl.load(k_ptr + tl.arange(0, BLOCK)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :])
    scores = tl.dot(q, tl.trans(k))
    acc = tl.dot(scores, k, input_precision=DOT_PRECISION)
"""


def test_a_dot_without_its_precision_is_found() -> None:
    found = dots_without_precision(ast.parse(KERNEL_WITH_TF32_DOT), "planted.py")
    assert [(f.line, f.function, f.what) for f in found] == [(6, "kernel", "tl.dot(q, tl.trans(k))")], found
    fixed = KERNEL_WITH_TF32_DOT.replace("tl.trans(k))", 'tl.trans(k), input_precision="ieee")')
    assert dots_without_precision(ast.parse(fixed), "planted.py") == []


def test_a_verify_cell_on_the_cpu_is_found() -> None:
    cell = _cell_tree(
        "%matplotlib inline\n"
        "q = torch.randn(2, 21, 16, device=device)\n"
        "seen = torch.ones(21, 38, dtype=torch.bool).tril(17)\n"
        "def helper(n):\n    return torch.arange(n)\n"  # a function's body is not the cell's top level
    )
    found = top_level_constructors_without_device(cell, "planted.ipynb cell 0")
    assert [(f.line, f.what) for f in found] == [(3, "torch.ones(21, 38, dtype=torch.bool)")], found


# ---------------------------------------------------------------------------------------------------------
# The scan


def _report(found: list[Finding], what: str) -> str:
    return f"{len(found)} {what}:\n" + "\n".join(f"  {f}" for f in found)


def test_every_dot_sets_its_precision() -> None:
    trees = _notebook_trees(NOTEBOOKS) + _file_trees(PACKAGE_FILES)
    found = [f for where, tree in trees for f in dots_without_precision(tree, where)]
    assert found == [], _report(found, "tl.dot calls leave input_precision to Triton (TF32 on float32 tiles)")
    dots = sum("tl.dot(" in ast.unparse(tree) for _, tree in trees)
    assert dots >= 4, "the scan should see the kernels' tl.dot calls (solutions/12, attn_edu/kernels)"


def test_launchers_and_helpers_build_their_tensors_on_the_inputs_device() -> None:
    trees = _notebook_trees(device_facing_notebooks()) + _file_trees(device_facing_files())
    found = [f for where, tree in trees for f in constructors_without_device(tree, where)]
    unexplained = [f for f in found if (f.where, f.function, f.what) not in ALLOWED]
    assert unexplained == [], _report(
        unexplained, "tensor constructors without device= in a function that receives a tensor"
    )
    stale = set(ALLOWED) - {(f.where, f.function, f.what) for f in found}
    assert not stale, f"allowed but no longer found (remove them): {sorted(stale)}"
    names = {where for where, _ in trees}
    assert any(w.startswith("solutions/12_") for w in names) and any(
        w.startswith("exercises/12_") for w in names
    )
    assert {"attn_edu/grading/harness.py", "attn_edu/grading/checks/triton_kernels.py"} <= names, names


def test_the_triton_notebooks_verify_on_one_chosen_device() -> None:
    trees = _notebook_trees(device_facing_notebooks())
    found = [f for where, tree in trees for f in top_level_constructors_without_device(tree, where)]
    assert found == [], _report(found, "tensor constructors without device= in a verify cell")
    for path in device_facing_notebooks():  # its setup cell chooses the device, once
        notebook = f"{path.relative_to(ROOT)} cell "
        chosen = [
            w
            for w, tree in trees
            if w.startswith(notebook) and "device = kernel_device()" in ast.unparse(tree)
        ]
        assert len(chosen) == 1, f"{path.name}: the device is chosen in {chosen}, not once in the setup cell"
