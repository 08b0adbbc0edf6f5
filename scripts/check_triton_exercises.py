"""The Triton exercises' solution kernels (the eight steps of notebook 12's ladder) through check(), compiled where
there is a GPU.

    python scripts/check_triton_exercises.py            (gpu_check.sh runs it; TRITON_INTERPRET=1: the interpreter)
    python scripts/check_triton_exercises.py 12.4 12.11 only those (every kernel is still found in the notebook)

The exercises are every registered exercise of kind "triton", so a new step is covered as soon as it is
registered. The kernels come from solutions/12_flash_attention.ipynb, written to a module file (Triton reads a
kernel's source), and check() launches each with the grader's launcher on the GPU when there is one
(attn_edu/grading/harness.py). Prints one line per exercise and exits 1 unless all pass (or one is missing from
the notebook).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "solutions" / "12_flash_attention.ipynb"


def main(argv: list[str] | None = None) -> int:
    from attn_edu.grading.registry import exercises

    only = set(sys.argv[1:] if argv is None else argv)  # exercise ids to check; none named: all of them

    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    sources = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]

    def place(exercise_id: str) -> int:  # where the notebook asks for it: the ladder's order
        found = [n for n, source in enumerate(sources) if f"# Exercise {exercise_id}:" in source]
        return found[0] if found else len(sources)

    triton = {i: e for i, e in exercises().items() if e.kind == "triton"}
    triton = {i: triton[i] for i in sorted(triton, key=place)}
    sources = [s for s in sources if any(f"# Exercise {e}:" in s for e in triton)]
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

        print(f"device: {kernel_device()}; {len(triton)} Triton exercises: {', '.join(triton)}")
        missing = [i for i, e in triton.items() if not hasattr(module, e.function_name)]
        for exercise_id in missing:
            print(f"missing: {exercise_id} ({triton[exercise_id].function_name} is not in {NOTEBOOK.name})")
        results = {
            i: check(i, getattr(module, e.function_name), timeout=300)
            for i, e in triton.items()
            if i not in missing and (not only or i in only)
        }
    for result in results.values():
        print(repr(result))
    return 0 if not missing and all(r.passed for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
