#!/usr/bin/env bash
# The full spec §10.3 StepFun matrix on the H200 (CAKEMOE_GPU_MATRIX=full), one process per family
# in parallel (the host-side oracle dominates), then the rest of the GPU suite serially.
#   scripts/gpu-matrix.sh OUTDIR [BUILD_DIR]   (after scripts/gpu-check.sh built BUILD_DIR)
set -uo pipefail
out="$1"
build="${2:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build-gpu}"
exe="$build/tests/test_gpu"
mkdir -p "$out"
start=$SECONDS
pids=()
for f in bf16 fp8 mxfp8 nvfp4 nvfp4_bf16tok; do
  CAKEMOE_GPU_MATRIX=full timeout 480 "$exe" \
    --gtest_filter="Spec103/*/${f}_*:Step35/*/${f}" >"$out/matrix_${f}.log" 2>&1 &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
echo "matrix: $((SECONDS - start)) s, rc=$rc"
cat "$out"/matrix_*.log >"$out/matrix.log" && rm -f "$out"/matrix_*.log
grep -E "^\[  (PASSED|FAILED) |^\[==========\]|tests? ran" "$out/matrix.log" | sort | uniq -c
exit $rc
