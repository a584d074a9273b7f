#!/usr/bin/env bash
# One device call (about 5 minutes on the H200): the persistent "p" units (bf16 / fp8, tiles
# 8..128) against the default units — correctness first (the GPU test of the non-preferred
# sm90 units), then the GEMM stages and the decode layer rows side by side — and compute-sanitizer
# on the GEMM groups (scripts/gpu-sanitize-parallel.sh) in what is left of the call.
#
#   bench/lab/stepfun_persistent_ab.sh OUTDIR
#
# Files in OUTDIR: summary.txt, test.log, ab.txt, sanitize_summary.txt, sanitize_logs.txt.
set -uo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"
out="${1:-${OUT:-$PWD/stepfun-p-out}}"
mkdir -p "$out"
build="${CAKEMOE_BUILD_DIR:-$CAKEMOE_ROOT/build-gpu}"
deadline=$((SECONDS + ${CALL_SECS:-300}))
export CAKEMOE_WITH_CUDA=ON
cakemoe_cuda_path
summary="$out/summary.txt"
note() { echo "$*" | tee -a "$summary"; }
: >"$summary"
note "commit: ${CAKEMOE_COMMIT:-unknown}; gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
t0=$SECONDS
if cakemoe_build_gpu_units "$build" /tmp/p_build.log "$(nproc)" -- \
     test_gpu bench_stepfun_gemm bench_stepfun_layer; then
  note "build: ok ($((SECONDS - t0)) s)"
else
  note "build: FAILED"; tail -n 40 /tmp/p_build.log | tee -a "$summary"; exit 1
fi
t0=$SECONDS
CAKEMOE_GPU_HANG_SCALE=1 timeout 90 "$build/tests/test_gpu" \
  --gtest_filter='StepfunGemmGpu.NonPreferred*' >"$out/test.log" 2>&1
test_rc=$?
note "test: rc $test_rc ($((SECONDS - t0)) s) $(grep -cE '^\[fc[12] (bf16|fp8)' "$out/test.log") bf16/fp8 cases"
grep -E '^\[  FAILED|Failure|HANG' "$out/test.log" | head -n 5 | tee -a "$summary"
# A failed or hung persistent unit would stall every bench below: go to the sanitizers.
((test_rc == 0)) && {
  gemm="$build/bench/bench_stepfun_gemm"
  for path in sm90 sm90-p; do
    for tile in 8 16 32; do timeout 30 "$gemm" bf16,fp8 8,64,512 "$path" "$tile"; done
  done
  # Prefill: the default tile-64 units (g8) against the persistent ones at 64 and 128.
  timeout 60 "$gemm" bf16,fp8 4096,16384 sm90-g8 64
  timeout 60 "$gemm" bf16,fp8 4096,16384 sm90-p 64
  timeout 60 "$gemm" bf16,fp8 4096,16384 sm90-p 128
  for path in sm90-p sm90; do
    timeout 90 "$build/bench/bench_stepfun_layer" --family=bf16,fp8 --path=$path --reps=10
  done
} >"$out/ab.txt" 2>&1
note "ab: rc $?"
runs=(memcheck:stepfun-gemm-fc1 memcheck:stepfun-gemm-fc2 synccheck:stepfun-gemm-fc1
      synccheck:stepfun-gemm-fc2 initcheck:stepfun-gemm-fc1 initcheck:stepfun-gemm-fc2
      racecheck:stepfun-gemm-fc1 racecheck:stepfun-gemm-fc2 memcheck:stepfun-routing)
((test_rc == 0)) && runs+=(memcheck:stepfun-gemm-variants synccheck:stepfun-gemm-variants
                           racecheck:stepfun-gemm-variants)
SANITIZE_SECS=$((deadline - SECONDS)) CAKEMOE_BUILD_DIR="$build" \
  bash "$CAKEMOE_ROOT/scripts/gpu-sanitize-parallel.sh" "$out" --no-build "${runs[@]}"
grep -E 'fc1|T=' "$out/ab.txt" | head -n 60
cat "$summary"
