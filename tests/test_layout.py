"""The package's layout keeps its promises: floors only use the floors below, no private name crosses a
module border, no library module grows past 600 lines (a check module past 800), and importing the grader or a
model pulls in nothing it
must not (DESIGN.md, "Layers")."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "attn_edu"
MAX_LINES = 600
# A check module (attn_edu/grading/checks/) holds one notebook's exercises: its length is content (cases, the
# named mistakes and their hints, a property per exercise), not logic, and it grows with the notebook. It is cut
# by notebook, not by size; the cap only catches a module that has become two notebooks' worth.
MAX_CHECK_LINES = 800
CHECKS = PACKAGE / "grading" / "checks"
# Files allowed to be longer, each with the reason its docstring gives.
LONG_FILES = {"attn_edu/kernels/triton_flash.py": "reads best whole", "attn_edu/flash.py": "reads best whole"}

# The floors of DESIGN.md, lowest first. A module may import its own floor and the floors below it.
FLOORS = {
    "support": ["_validate", "source", "env", "report", "hardware", "links", "__init__"],
    "core": ["attention", "masks"],
    "blocks": [
        "retrieval",
        "multihead",
        "qk_norm",
        "positional",
        "rope",
        "rope_scaling",
        "sparse",
        "selection",
        "efficient",
        "delta_rule",
        "moe",
        "flash",
        "distributed",
        "gating",
        "differential",
        "kv_cache",
        "kv_quant",
        "paged_kv",
        "kv_sharing",
    ],
    "architectures": [
        "blocks",
        "models",
        "objectives",
        "generation",
        "data",
        "train",
        "interp",
        "explanation",
        "params",
        "pretrained",
        "mla",
        "circuits",
        "sinks",
        "corpus",
        "probes",
    ],
    "interop": ["interop", "model_cards"],
    "kernels": ["kernels"],
    "views": ["viz", "widgets"],
    "grading": ["grading", "grade", "exercises"],
    # The models trained here: nothing below uses them; the benchmarks may.
    "experiments": ["experiments"],
    "bench": ["bench"],
}
LEVEL = {top: i for i, tops in enumerate(FLOORS.values()) for top in tops}
# The names of the floors in the README's table "Where things live", which a maintainer reads.
README_FLOORS = {"blocks": "building blocks"}  # the others are called the same there


def test_the_readmes_table_of_floors_is_floors():
    """The README's table lists the floors of FLOORS in order, and in each row every module of that floor."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("### Where things live") :]
    section = section[: section.index("\n### ", 1)]
    rows = dict(re.findall(r"^\| ([a-z ]+) \| (.+) \|$", section, flags=re.M))
    rows.pop("floor", None)  # the header
    assert list(rows) == [README_FLOORS.get(floor, floor) for floor in FLOORS]
    for floor, tops in FLOORS.items():
        named = set(re.findall(r"`([a-z_]+)(?:\.py|/)?`", rows[README_FLOORS.get(floor, floor)]))
        missing = [top for top in tops if top != "__init__" and top not in named]
        assert not missing, f"the README's {floor!r} row does not name {missing}"


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top(module: str) -> str:
    """``attn_edu.models.gpt`` -> ``models``; ``attn_edu`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path) -> list[tuple[str, list[str], ast.AST, list[ast.AST]]]:
    """Every ``attn_edu`` import in a file: (module, names, node, enclosing function defs)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _name(path) if path.name == "__init__.py" else _name(path).rsplit(".", 1)[0]
    found = []

    def visit(node: ast.AST, scopes: list[ast.AST]) -> None:
        for child in ast.iter_child_nodes(node):
            inner = scopes + [child] if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else scopes
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.startswith("attn_edu"):
                        found.append((alias.name, [], child, scopes))
            elif isinstance(child, ast.ImportFrom):
                module = child.module or ""
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    module = ".".join(base + ([module] if module else []))
                if module.startswith("attn_edu"):
                    names = [a.name for a in child.names]
                    found.append((module, names, child, scopes))
            visit(child, inner)

    visit(tree, [])
    return found


def _type_checking_only(path: Path, node: ast.AST) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for block in ast.walk(tree):
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test):
            if any(child is node or ast.dump(child) == ast.dump(node) for child in ast.walk(block)):
                return True
    return False


def test_every_module_has_a_floor() -> None:
    tops = {_top(_name(p)) for p in _modules()}
    assert tops <= set(LEVEL), (
        f"modules without a floor in this test and DESIGN.md: {sorted(tops - set(LEVEL))}"
    )


def test_floors_only_use_the_floors_below() -> None:
    broken = []
    for path in _modules():
        here = _name(path)
        for module, _, node, scopes in _imports(path):
            target = module if module != "attn_edu" else "attn_edu.__init__"
            if LEVEL[_top(target)] <= LEVEL[_top(here)] or _type_checking_only(path, node):
                continue
            # The one allowed upward arrow: a model's from_hf classmethod delegates to interop, lazily.
            lazy_from_hf = _top(here) == "models" and _top(target) == "interop" and scopes
            if lazy_from_hf and all(getattr(s, "name", "") == "from_hf" for s in scopes):
                continue
            broken.append(f"{here} imports {module} (line {node.lineno})")
    assert not broken, "imports that reach up a floor:\n" + "\n".join(broken)


def test_no_private_name_crosses_a_module_border() -> None:
    crossing = []
    for path in _modules():
        for module, names, node, _ in _imports(path):
            for name in names:
                if name.startswith("_") and not name.startswith("__"):
                    crossing.append(f"{_name(path)}: from {module} import {name} (line {node.lineno})")
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
        imported = {
            a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name)
                and node.value.id in imported
                and node.value.id not in ("self", "cls", "torch", "nn", "F")
            ):
                crossing.append(f"{_name(path)}: {node.value.id}.{node.attr} (line {node.lineno})")
    assert not crossing, "private names used outside their module:\n" + "\n".join(crossing)


def test_no_module_is_over_600_lines_without_a_reason() -> None:
    long = {}
    for path in _modules():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        rel = str(path.relative_to(ROOT))
        if lines > (MAX_CHECK_LINES if path.parent == CHECKS else MAX_LINES):
            long[rel] = lines
    assert set(long) <= set(LONG_FILES), (
        f"over {MAX_LINES} lines ({MAX_CHECK_LINES} for a check module): {long}"
    )
    for rel, reason in LONG_FILES.items():
        docstring = ast.get_docstring(ast.parse((ROOT / rel).read_text(encoding="utf-8"))) or ""
        assert reason in docstring, f"{rel}: its docstring should say why it is long ({reason!r})"


# Each import statement below runs in a fresh interpreter, as a learner's kernel would: one process imports torch
# (the shared, slow part: no attn_edu module) and forks a child per statement, which reports the modules it then
# holds. Forked children start from that one import instead of five (about 10 s of CPU saved per run).
FRESH_IMPORTS = r"""
import json, os, sys
import torch  # noqa: F401

statements = json.loads(sys.argv[1])
found = {}
for statement in statements:
    read, write = os.pipe()
    if os.fork() == 0:  # the child: run the statement, report what it loaded, leave without cleaning up
        os.close(read)
        exec(statement, {})
        report = {"attn_edu": sorted(m for m in sys.modules if m.startswith("attn_edu")), "triton": "triton" in sys.modules}
        os.write(write, json.dumps(report).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        found[statement] = json.loads(pipe.read() or "null")
    os.wait()
print(json.dumps(found))
"""
GRADING = "import attn_edu.grading, attn_edu.grading.registry"
STATEMENTS = (
    "import attn_edu.grading",
    "import attn_edu.models",
    "import attn_edu.attention, attn_edu.masks",
    "import attn_edu.widgets",
    GRADING,
)


@pytest.fixture(scope="module")
def fresh_imports() -> dict[str, dict]:
    """What each of STATEMENTS imports, each in an interpreter of its own."""
    import json

    out = subprocess.run(
        [sys.executable, "-c", FRESH_IMPORTS, json.dumps(STATEMENTS)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert all(found[s] for s in STATEMENTS), found  # every child reported
    return found


@pytest.mark.parametrize(
    ("statement", "forbidden"),
    [
        (
            "import attn_edu.grading",
            (
                "attn_edu.widgets",
                "attn_edu.viz",
                "attn_edu.kernels",
                "attn_edu.bench",
                "attn_edu.experiments",
            ),
        ),
        (
            "import attn_edu.models",
            (
                "attn_edu.interop",
                "attn_edu.grading",
                "attn_edu.widgets",
                "attn_edu.viz",
                "attn_edu.experiments",
            ),
        ),
        (
            "import attn_edu.attention, attn_edu.masks",
            ("attn_edu.multihead", "attn_edu.models", "attn_edu.viz"),
        ),
        (
            "import attn_edu.widgets",
            ("attn_edu.grading", "attn_edu.kernels", "attn_edu.interop", "attn_edu.experiments"),
        ),
    ],
)
def test_importing_a_floor_loads_nothing_above_it(
    fresh_imports: dict[str, dict], statement: str, forbidden: tuple[str, ...]
) -> None:
    loaded = fresh_imports[statement]["attn_edu"]
    assert loaded, statement
    wrong = sorted(m for m in loaded if m.startswith(forbidden))
    assert not wrong, f"`{statement}` also imports {wrong}"


def test_checkpoint_names_live_in_interop_only() -> None:
    # Hugging Face's parameter and config names; the models say embed_dim, num_layers, q_proj, ...
    names = ("c_attn", "c_fc", "wte", "wpe", "ln_f", "n_layer", "n_embd", "num_hidden_layers")
    found = []
    for path in _modules():
        if _top(_name(path)) in (*FLOORS["interop"], "grading") or path.parent.name == "bench":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            for name in names:
                if f'"{name}' in code or f"'{name}" in code or f".{name}" in code:
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "checkpoint names outside interop.py and model_cards.py:\n" + "\n".join(found)


def test_importing_the_grading_package_leaves_triton_unimported(fresh_imports: dict[str, dict]) -> None:
    # Triton reads TRITON_INTERPRET once, when first imported: the exercise notebooks and the grader's worker
    # set it after importing attn_edu.grading, so nothing there may import triton (torch.utils.flop_counter
    # does, through torch._inductor: import it inside the function that counts).
    assert fresh_imports[GRADING]["triton"] is False, "importing attn_edu.grading imports triton"
