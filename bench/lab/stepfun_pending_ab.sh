#!/usr/bin/env bash
# One device call (about 8 minutes on the H200) that settles the StepFun changes compiled but not
# yet run (docs/performance/stepfun.md, "Prepared"): the GPU suite with the variant units, the A/B
# of each variant against its main unit in the same run, and the profile of the single-launch
# routing kernel (11 us at T 1, cause unknown).
#
#   bench/lab/stepfun_pending_ab.sh OUTDIR        (OUTDIR: $OUT on the device machine)
#
# Writes to OUTDIR (at most 8 files): summary.txt, test.log, ab.txt, routing_ncu.txt, layer.md,
# layer.json. Builds every kernel unit in build-gpu (CAKEMOE_BUILD_DIR) with line info.
set -uo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"
out="${1:-${OUT:-$PWD/stepfun-ab-out}}"
mkdir -p "$out"
build="${CAKEMOE_BUILD_DIR:-$CAKEMOE_ROOT/build-gpu}"
export CAKEMOE_WITH_CUDA=ON
cakemoe_cuda_path
summary="$out/summary.txt"
note() { echo "$*" | tee -a "$summary"; }
: >"$summary"
note "commit: ${CAKEMOE_COMMIT:-$(git -C "$CAKEMOE_ROOT" rev-parse --short HEAD 2>/dev/null)}"
note "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"

start=$SECONDS
if cakemoe_configure "$build" all -DCAKEMOE_BUILD_TESTS=ON -DCAKEMOE_BUILD_BENCH=ON \
     -DCAKEMOE_HEADER_CHECK=OFF -DCAKEMOE_BUILD_PYTHON=OFF -DCMAKE_CUDA_FLAGS=-lineinfo \
     >/tmp/stepfun_ab_build.log 2>&1 &&
   cmake --build "$build" -j "$(nproc)" --target test_gpu bench_stepfun_layer bench_stepfun_gemm \
     >>/tmp/stepfun_ab_build.log 2>&1; then
  note "build: ok ($((SECONDS - start)) s)"
else
  note "build: FAILED"; tail -n 40 /tmp/stepfun_ab_build.log | tee -a "$summary"; exit 1
fi

# 1. Correctness first: the StepFun GPU suite, variant units included (VariantUnitsMatchReference).
start=$SECONDS
(cd "$build" && timeout 240 ctest -L gpu -R 'Step|step|Sm90' -E python -j 8 --output-on-failure) \
  >"$out/test.log" 2>&1
note "tests: rc $? ($((SECONDS - start)) s) $(grep -E 'tests passed|tests failed' "$out/test.log")"
grep -E '^\s+[0-9]+ - .*(Failed|Timeout|Exception)' "$out/test.log" | tee -a "$summary"

# 2. A/B in one run: each variant against its main unit, same shapes, same process.
gemm="$build/bench/bench_stepfun_gemm"
{
  "$gemm" mxfp8 8,64,512 sm90 8
  "$gemm" mxfp8 8,64,512 sm90-e4m3 8
  "$gemm" mxfp8 512,2048 sm90 32
  "$gemm" bf16,fp8 4096,16384 sm90 64
  "$gemm" bf16,fp8 4096,16384 sm90-g8 64
  "$gemm" bf16,fp8 4096,16384 sm90-mc2 64
} >"$out/ab.txt" 2>&1
note "gemm A/B: rc $?"
timeout 120 "$build/bench/bench_stepfun_layer" --family=mxfp8 --tokens=1,8,64 --path=sm90-e4m3 \
  --reps=10 --out="$out" >>"$out/ab.txt" 2>&1
timeout 120 "$build/bench/bench_stepfun_layer" --family=mxfp8 --tokens=1,8,64 --path=sm90 \
  --reps=10 >>"$out/ab.txt" 2>&1
[[ -f "$out/stepfun_layer.md" ]] && mv "$out/stepfun_layer.md" "$out/layer.md"
[[ -f "$out/stepfun_layer.json" ]] && mv "$out/stepfun_layer.json" "$out/layer.json"

# 3. Where the 11 us of the single-launch routing go: stall reasons by source line.
timeout 90 ncu --clock-control none -k regex:routing_single_kernel --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SourceCounters \
  "$build/bench/bench_stepfun_layer" --workload=step35 --family=bf16 --tokens=1 --reps=1 \
  >"$out/routing_ncu.txt" 2>&1
note "routing ncu: rc $?"
grep -E 'T=|us ' "$out/ab.txt" | tail -n 40
cat "$summary"
