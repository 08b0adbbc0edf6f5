#!/usr/bin/env bash
# GPU check of the Triton FlashAttention kernel (attn_edu/kernels/triton_flash.py), in one go:
#   1. environment: GPU name, torch, CUDA and triton versions
#   2. correctness: outputs and gradients against the reference, float16/bfloat16/float32,
#      causal and not, odd lengths, T != S, grouped heads  (python -m attn_edu.bench flash --check)
#   3. benchmark: forward/backward TFLOP/s against PyTorch's FlashAttention and the naive reference
#
# Usage:   ./gpu_check.sh OUTDIR
# Needs:   python3 with torch (CUDA) and triton already installed; installs nothing.
# Writes:  OUTDIR/{env.txt, check.txt, check.json, bench.txt, bench.json, bench.png}
# Dry run without a GPU: GPU_CHECK_ALLOW_CPU=1 ./gpu_check.sh OUTDIR (Triton's interpreter, tiny sizes).
# Runtime: under 8 minutes (each stage has its own time limit; the benchmark also stops starting
#          new timings after BENCH_BUDGET_S seconds and keeps what it measured).
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

ENV_TIMEOUT_S=60
CHECK_TIMEOUT_S=170
BENCH_TIMEOUT_S=220
BENCH_BUDGET_S=170

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
import sys, torch, triton
print("python", sys.version.split()[0])
print("torch", torch.__version__, "| CUDA", torch.version.cuda)
print("triton", triton.__version__)
assert torch.cuda.is_available(), "no CUDA device visible to torch"
print("gpu", torch.cuda.get_device_name(0), "| capability", torch.cuda.get_device_capability(0))
EOF
'

if [[ ${#failed[@]} -ne 0 && "${GPU_CHECK_ALLOW_CPU:-0}" != "1" ]]; then
    echo "gpu_check: no usable GPU (see $OUT/env.txt); stopping before the kernel stages"
    exit 1
fi

stage "correctness" "$CHECK_TIMEOUT_S" "$OUT/check.txt" \
    python3 -m attn_edu.bench flash --check --json "$OUT/check.json"

stage "benchmark" "$BENCH_TIMEOUT_S" "$OUT/bench.txt" \
    python3 -m attn_edu.bench flash --json "$OUT/bench.json" --plot "$OUT/bench.png" --budget-s "$BENCH_BUDGET_S"

echo
if [[ ${#failed[@]} -eq 0 ]]; then
    echo "gpu_check: all stages passed; results in $OUT"
else
    echo "gpu_check: FAILED stages: ${failed[*]}; logs in $OUT"
    exit 1
fi
