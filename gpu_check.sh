#!/usr/bin/env bash
# GPU check of the Triton FlashAttention kernels (attn_edu/kernels/triton_flash.py) and of notebook 12's
# Triton exercises, in one go:
#   1. environment: GPU name, torch, CUDA and triton versions
#   2. correctness: the kernel tests, compiled for the GPU (pytest tests/test_triton_flash.py -m triton):
#      outputs and gradients against float64 references, float16/bfloat16/float32, causal and not,
#      odd lengths, T != S, grouped heads, one-token decoding, the teaching kernels and the fast path
#   3. exercises: the eight Triton exercises' solution kernels (12.11, 12.4, 12.12, 12.5, 12.13, 12.14, 12.7, 12.8) through check(), compiled
#      for the GPU and launched by the grader's launchers (scripts/check_triton_exercises.py)
#   4. notebook: solutions/12_flash_attention.ipynb run top to bottom as a learner runs it (jupyter nbconvert
#      --execute, into OUTDIR) with ATTN_EDU_STRICT=1, so every check() in it must pass; its launchers and
#      verify cells put their tensors on the GPU (the device its setup cell chooses once), and each verify
#      cell must print what the stored notebook printed (those cells catch their own errors, for a learner)
#   5. benchmark: forward/backward TFLOP/s against PyTorch's FlashAttention and the naive reference
#
# Usage:   ./gpu_check.sh OUTDIR
# Needs:   python3 with torch (CUDA), triton, pytest, nbconvert and ipykernel already installed; installs
#          nothing.
# Writes:  OUTDIR/{env.txt, check.txt, check.xml, exercises.txt, notebook.txt, 12_flash_attention.ipynb,
#          notebook_answers.json, bench.txt, bench.json, bench.png}
#          (check.xml: the tests' JUnit XML summary, one <testcase> per test; 12_flash_attention.ipynb: the
#          executed notebook; notebook_answers.json: the first answers its questions kept)
# Dry run without a GPU: GPU_CHECK_ALLOW_CPU=1 ./gpu_check.sh OUTDIR (Triton's interpreter, tiny sizes; the
#          notebook's setup cell turns the interpreter on and chooses the CPU by itself).
# Runtime: at most 10 minutes (each stage has its own time limit, together 600 s; the benchmark also stops
#          starting new timings after BENCH_BUDGET_S seconds and keeps what it measured). On a GPU with
#          pytest-xdist installed the kernel tests run in 4 processes.
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi
OUT="$1"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$REPO"

export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export MPLBACKEND=Agg
export PYTHONUNBUFFERED=1
unset TRITON_INTERPRET  # compile for the GPU, never the CPU interpreter

ENV_TIMEOUT_S=30
CHECK_TIMEOUT_S=240  # compiling every tested kernel variant takes most of it
EXERCISES_TIMEOUT_S=90
NOTEBOOK_TIMEOUT_S=120
NOTEBOOK_CELL_TIMEOUT_S=90  # one cell; a check() compiles the variants of its kernel
BENCH_TIMEOUT_S=120
BENCH_BUDGET_S=80

failed=()

stage() {  # stage NAME TIMEOUT_S LOGFILE COMMAND...: run with a time limit, log, remember failures
    local name="$1" limit="$2" log="$3"
    shift 3
    echo
    echo "=== ${name} (limit ${limit}s) ==="
    local start=$SECONDS rc=0
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$log" || rc=$?
    if [[ $rc -eq 124 || $rc -eq 137 ]]; then
        echo "!!! ${name}: timed out after ${limit}s" | tee -a "$log"
    elif [[ $rc -ne 0 ]]; then
        echo "!!! ${name}: exit status ${rc}" | tee -a "$log"
    fi
    echo "--- ${name}: $((SECONDS - start))s"
    [[ $rc -eq 0 ]] || failed+=("$name")
}

stage "environment" "$ENV_TIMEOUT_S" "$OUT/env.txt" bash -c '
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "nvidia-smi unavailable"
    python3 - <<EOF
import os, sys, torch, triton
print("python", sys.version.split()[0])
print("torch", torch.__version__, "| CUDA", torch.version.cuda)
print("triton", triton.__version__)
if torch.cuda.is_available():
    print("gpu", torch.cuda.get_device_name(0), "| capability", torch.cuda.get_device_capability(0))
else:
    assert os.environ.get("GPU_CHECK_ALLOW_CPU") == "1", "no CUDA device visible to torch"
    print("gpu none: a dry run on the CPU (GPU_CHECK_ALLOW_CPU=1), kernels in the interpreter, no GPU figures")
EOF
'

check_cmd=(python3 -m pytest -q -rs tests/test_triton_flash.py -m triton --junitxml "$OUT/check.xml")
if [[ ${#failed[@]} -ne 0 ]]; then
    echo "gpu_check: no usable GPU (see $OUT/env.txt); stopping before the kernel stages"
    exit 1
elif python3 -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then
    # With pytest-xdist, 4 processes compile the tested kernel variants side by side.
    if python3 -c "import xdist" 2>/dev/null; then
        check_cmd+=(-n 4)
    fi
else
    # Dry run (GPU_CHECK_ALLOW_CPU=1, checked above): no GPU to compile for, so the kernel tests run in
    # Triton's interpreter (else they would skip).
    check_cmd=(env TRITON_INTERPRET=1 "${check_cmd[@]}")
fi

stage "correctness" "$CHECK_TIMEOUT_S" "$OUT/check.txt" "${check_cmd[@]}"

exercises_cmd=(python3 scripts/check_triton_exercises.py)
if ! python3 -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then
    exercises_cmd=(env TRITON_INTERPRET=1 "${exercises_cmd[@]}")  # the dry run
fi
stage "exercises" "$EXERCISES_TIMEOUT_S" "$OUT/exercises.txt" "${exercises_cmd[@]}"

# Notebook 12 as a learner runs it: its kernel starts in solutions/ and finds attn_edu on PYTHONPATH.
notebook_stage() {  # notebook_stage OUTDIR CELL_TIMEOUT_S
    python3 -c "from attn_edu.grading.run import kernel_device as d; print('checks and verify cells on', d())"
    rm -f "$1/12_flash_attention.ipynb"  # a copy from an earlier run must not stand in for this one
    ATTN_EDU_STRICT=1 ATTN_EDU_ANSWERS="$1/notebook_answers.json" \
        MPLBACKEND=module://matplotlib_inline.backend_inline \
        python3 -m jupyter nbconvert --to notebook --execute --ExecutePreprocessor.timeout="$2" \
        --output-dir "$1" --output 12_flash_attention.ipynb solutions/12_flash_attention.ipynb || return 1
    python3 - "$1/12_flash_attention.ipynb" solutions/12_flash_attention.ipynb <<'EOF'
import json, sys

ran, stored = (json.load(open(path, encoding="utf-8"))["cells"] for path in sys.argv[1:3])


def printed(cell):
    return "".join("".join(out["text"]) for out in cell.get("outputs", []) if out.get("name") == "stdout")


verify = [(r, s) for r, s in zip(ran, stored) if "".join(r["source"]).startswith("# Verify")]
wrong = [(r, s) for r, s in verify if printed(r) != printed(s)]
for r, s in wrong:
    print(f"{''.join(r['source']).splitlines()[0]}\n  printed:  {printed(r)!r}\n  expected: {printed(s)!r}")
assert verify, "no verify cell in the notebook"
print(f"{len(verify) - len(wrong)} of {len(verify)} verify cells printed what the stored notebook printed")
sys.exit(1 if wrong else 0)
EOF
}
export -f notebook_stage
stage "notebook" "$NOTEBOOK_TIMEOUT_S" "$OUT/notebook.txt" \
    bash -c 'notebook_stage "$@"' notebook_stage "$OUT" "$NOTEBOOK_CELL_TIMEOUT_S"

stage "benchmark" "$BENCH_TIMEOUT_S" "$OUT/bench.txt" \
    python3 -m attn_edu.bench flash --json "$OUT/bench.json" --plot "$OUT/bench.png" --budget-s "$BENCH_BUDGET_S"

echo
if [[ ${#failed[@]} -eq 0 ]]; then
    echo "gpu_check: all stages passed; results in $OUT"
else
    echo "gpu_check: FAILED stages: ${failed[*]}; logs in $OUT"
    exit 1
fi
