"""The Triton exercises' solution kernels (12.4, 12.5, 12.7, 12.8) through check(), compiled where there is a GPU.

    python scripts/check_triton_exercises.py            (gpu_check.sh runs it; TRITON_INTERPRET=1: the interpreter)

The kernels come from solutions/12_flash_attention.ipynb, written to a module file (Triton reads a kernel's
source), and check() launches each with the grader's launcher on the GPU when there is one
(attn_edu/grading/harness.py). Prints one line per exercise and exits 1 unless all four pass.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "solutions" / "12_flash_attention.ipynb"
EXERCISES = ("12.4", "12.5", "12.7", "12.8")
LAUNCHERS = {"12.4": "softmax_rows", "12.5": "row_logsumexp", "12.7": "flash_forward", "12.8": "flash_dq"}


def main() -> int:
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    sources = [
        "".join(c["source"])
        for c in cells
        if c["cell_type"] == "code" and any(f"# Exercise {e}:" in "".join(c["source"]) for e in EXERCISES)
    ]
    code = "import math\n\nimport torch\nimport triton\nimport triton.language as tl\n\n\n" + "\n\n\n".join(
        sources
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "triton_exercises.py"
        path.write_text(code, encoding="utf-8")
        spec = importlib.util.spec_from_file_location("triton_exercises", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        from attn_edu.grading import check
        from attn_edu.grading.run import kernel_device

        print(f"device: {kernel_device()}")
        results = {e: check(e, getattr(module, LAUNCHERS[e]), timeout=300) for e in EXERCISES}
    for result in results.values():
        print(repr(result))
    return 0 if all(r.passed for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
