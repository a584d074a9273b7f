#!/usr/bin/env bash
# One device call (under 10 minutes on the H200): build, the StepFun GPU suite, the decode rows of
# the layer table (T 1 / 8 / 64, every family, both workloads), ncu of the single-launch routing
# kernel (duration; warp stall samples per SASS line at the finest interval), then
# compute-sanitizer runs in parallel (scripts/gpu-sanitize-parallel.sh, one process per tool x
# group in RUNS) inside what is left of the call.
#
#   bench/lab/stepfun_check_and_sanitize.sh OUTDIR
#
# Files in OUTDIR (at most 8): summary.txt, test.log, layer.md, routing_ncu.txt, routing_sass.csv,
# sanitize_summary.txt, sanitize_logs.txt.
set -uo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"
out="${1:-${OUT:-$PWD/stepfun-check-out}}"
mkdir -p "$out"
work="$(mktemp -d)"
build="${CAKEMOE_BUILD_DIR:-$CAKEMOE_ROOT/build-gpu}"
deadline=$((SECONDS + ${CALL_SECS:-570}))
export CAKEMOE_WITH_CUDA=ON
cakemoe_cuda_path
summary="$out/summary.txt"
note() { echo "$*" | tee -a "$summary"; }
: >"$summary"
note "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"

t0=$SECONDS
if cakemoe_configure "$build" all -DCAKEMOE_BUILD_TESTS=ON -DCAKEMOE_BUILD_BENCH=ON \
     -DCAKEMOE_HEADER_CHECK=OFF -DCAKEMOE_BUILD_PYTHON=OFF -DCMAKE_CUDA_FLAGS=-lineinfo \
     >"$work/build.log" 2>&1 &&
   cmake --build "$build" -j "$(nproc)" --target test_gpu bench_stepfun_layer \
     >>"$work/build.log" 2>&1; then
  note "build: ok ($((SECONDS - t0)) s)"
else
  note "build: FAILED"; tail -n 40 "$work/build.log" | tee -a "$summary"; exit 1
fi

t0=$SECONDS
(cd "$build" && timeout 240 ctest -L gpu -R 'Step|step|Sm90' -E python -j 8 --output-on-failure) \
  >"$out/test.log" 2>&1
note "tests: rc $? ($((SECONDS - t0)) s) $(grep -E 'tests passed|tests failed' "$out/test.log")"
grep -E '^\s+[0-9]+ - .*(Failed|Timeout|Exception)' "$out/test.log" | tee -a "$summary"

layer="$build/bench/bench_stepfun_layer"
t0=$SECONDS
timeout 120 "$layer" --tokens=1,8,64 --reps=10 --out="$work" >"$work/layer.log" 2>&1
note "layer: rc $? ($((SECONDS - t0)) s)"
cp "$work/stepfun_layer.md" "$out/layer.md" 2>/dev/null

rargs=(--workload=step35 --family=bf16 --tokens=1 --reps=1)
{
  timeout 60 ncu --clock-control none -k regex:routing_ --launch-count 4 --section SpeedOfLight \
    "$layer" "${rargs[@]}" 2>&1 | grep -E "routing_|Duration|Elapsed"
  timeout 60 ncu --clock-control none -k regex:routing_single_kernel --launch-count 1 \
    --warp-sampling-interval 0 --section WarpStateStats --section SourceCounters \
    --import-source yes -o "$work/routing" "$layer" "${rargs[@]}" >/dev/null 2>&1
  echo "report: rc $?"
} >"$out/routing_ncu.txt" 2>&1
ncu -i "$work/routing.ncu-rep" --page source --csv --print-source sass >"$out/routing_sass.csv" 2>&1
note "routing ncu: rc $?"

# Sanitizers: one process per (tool, group), all at once, each with the time left.
# shellcheck disable=SC2206  # SANITIZE_RUNS: whitespace-separated TOOL:GROUP words
RUNS=(${SANITIZE_RUNS:-memcheck:stepfun-gemm-variants racecheck:stepfun-gemm-variants
      synccheck:stepfun-gemm-variants initcheck:stepfun-gemm-variants memcheck:stepfun-routing
      racecheck:stepfun-routing synccheck:stepfun-matrix initcheck:stepfun-matrix
      racecheck:stepfun-matrix racecheck:stepfun-shapes initcheck:bgmv-grouped
      racecheck:bgmv-kernels racecheck:bgmv-specialized racecheck:bgmv-grouped})
note "sanitizers: ${#RUNS[@]} runs in parallel, budget $((deadline - SECONDS)) s each"
SANITIZE_SECS=$((deadline - SECONDS)) CAKEMOE_BUILD_DIR="$build" \
  bash "$CAKEMOE_ROOT/scripts/gpu-sanitize-parallel.sh" "$out" --no-build "${RUNS[@]}"
grep -E 'T=' "$work/layer.log" | head -n 40
cat "$summary"
