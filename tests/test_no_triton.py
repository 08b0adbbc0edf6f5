"""The learner without Triton (macOS, Windows, or a plain ``pip install attn-edu``).

Triton is installed on this machine, so the tests hide it: in a child process, the path-based
finder on ``sys.meta_path`` is replaced by one that cannot see ``triton``. Then, exactly as on a
machine without the package, ``importlib.util.find_spec("triton")`` returns ``None`` and
``import triton`` raises ``ModuleNotFoundError``. (The kernel tests in ``test_triton_flash.py`` hide
it differently, with ``sys.modules["triton"] = None``, which only the ``sys.modules`` branch of
``triton_available`` sees; this covers the ``find_spec`` branch and the code that uses it.)
The finder lives in a ``sitecustomize.py`` put first on ``PYTHONPATH``, so it is active before any
other import, in the child and in any Jupyter kernel the child starts.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
COURSE = REPO / "course"

HIDE_TRITON = '''
import sys
from importlib.machinery import PathFinder


class _PathFinderWithoutTriton(PathFinder):
    """Python's own path finder, blind to triton: find_spec says None and `import triton` fails."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name == "triton" or name.startswith("triton."):
            return None
        return super().find_spec(name, path, target)


sys.meta_path[:] = [_PathFinderWithoutTriton if f is PathFinder else f for f in sys.meta_path]
'''


@pytest.fixture(scope="module")
def no_triton_env(tmp_path_factory) -> dict[str, str]:
    """Environment for a child process (and its Jupyter kernels) in which Triton cannot be imported."""
    folder = tmp_path_factory.mktemp("no_triton")
    (folder / "sitecustomize.py").write_text(HIDE_TRITON)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), str(REPO)])}
    env.pop("TRITON_INTERPRET", None)
    return env


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


def test_everything_without_triton_says_what_to_install(no_triton_env):
    code = """
import json, torch
result = {}
try:
    import triton
    result["import triton"] = "imported"
except ModuleNotFoundError as err:
    result["import triton"] = type(err).__name__

import attn_edu, attn_edu.kernels as kernels
result["available"] = kernels.triton_available()
try:
    import attn_edu.kernels.triton_flash
    result["kernel import"] = "imported"
except ImportError as err:
    result["kernel import"] = type(err).__name__
    result["message"] = str(err)
try:
    import attn_edu.kernels.triton_flash_fast
    result["fast kernel import"] = "imported"
except ImportError as err:
    result["fast kernel import"] = type(err).__name__

# The PyTorch twin of the kernel, which the notebooks fall back on, still works.
from attn_edu.flash import tiled_attention
from attn_edu.attention import scaled_dot_product_attention
q, k, v = (torch.randn(1, 2, 40, 8, generator=torch.Generator().manual_seed(i)) for i in range(3))
torch.testing.assert_close(tiled_attention(q, k, v, is_causal=True, block_q=16, block_k=16),
                           scaled_dot_product_attention(q, k, v, is_causal=True))

from attn_edu import env
result["env"] = {c.name: c.status for c in env.check_environment()}["triton"]

from attn_edu.bench import report
result["report"] = report._guarded("interpreter", report.interpreter_time)["status"]
print(json.dumps(result))
"""
    result = _python(code, no_triton_env)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["import triton"] == "ModuleNotFoundError"
    assert found["available"] is False
    assert found["kernel import"] == "TritonNotInstalledError"
    assert found["fast kernel import"] == "TritonNotInstalledError"
    assert 'pip install "attn-edu[triton]"' in found["message"]
    assert "attn_edu.flash.tiled_attention" in found["message"]
    assert found["env"] != "OK"
    assert found["report"] == "not available"


def test_the_flash_benchmark_explains_instead_of_crashing_obscurely(no_triton_env):
    result = subprocess.run(
        [sys.executable, "-m", "attn_edu.bench", "flash", "--quick"],
        cwd=REPO,
        env=no_triton_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    assert "TritonNotInstalledError" in result.stderr and "pip install" in result.stderr


def _notebooks_that_use_triton() -> list[Path]:
    """Course notebooks whose code (not the Colab install line) mentions Triton or the kernels."""
    found = []
    for path in sorted(COURSE.glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        code = "\n".join(line for line in code.splitlines() if "%pip" not in line)
        if re.search(r"triton|attn_edu\.kernels", code, re.IGNORECASE):
            found.append(path)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("notebook", _notebooks_that_use_triton(), ids=lambda p: p.stem)
def test_notebook_runs_without_triton(notebook, no_triton_env, tmp_path):
    """Executes the notebook in a kernel that cannot import Triton (the CI's no-Triton job runs them all)."""
    code = f"""
import nbformat
from nbclient import NotebookClient
notebook = nbformat.read({str(notebook)!r}, as_version=4)
# A last cell proves the kernel really ran without Triton.
notebook.cells.append(nbformat.v4.new_code_cell(
    "import importlib.util\\nassert importlib.util.find_spec('triton') is None, 'triton is visible'"))
NotebookClient(notebook, timeout=300, kernel_name="python3",
               resources={{"metadata": {{"path": {str(tmp_path)!r}}}}}).execute()
print("ran", len(notebook.cells), "cells")
"""
    result = _python(code, {**no_triton_env, "OMP_NUM_THREADS": "2"})
    assert result.returncode == 0, result.stderr[-3000:]
