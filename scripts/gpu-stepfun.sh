#!/usr/bin/env bash
# StepFun-focused run on a GPU machine (the sm90 GEMM work): builds only what StepFun needs
# (all kernel units, no header check, no Python module), checks the sm90 units' SASS, runs the
# StepFun GPU tests and benchmarks. Writes a few files to OUTDIR (summary.txt last on stdout).
#
#   scripts/gpu-stepfun.sh OUTDIR
#
# Environment: STEPFUN_TESTS (gtest filter; default the StepFun GPU suite), STEPFUN_TEST_SECS
# (default 300), STEPFUN_BENCH (command line run after the tests, e.g.
# "build-gpu/bench/bench_stepfun_layer --quick"; default none), STEPFUN_BENCH_SECS (default 240),
# CAKEMOE_BUILD_DIR (default build-gpu), CAKEMOE_JOBS (default nproc).
set -uo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

out="${1:-${OUT:-$PWD/gpu-stepfun-out}}"
mkdir -p "$out"
build="${CAKEMOE_BUILD_DIR:-$CAKEMOE_ROOT/build-gpu}"
jobs="${CAKEMOE_JOBS:-$(nproc)}"
tests="${STEPFUN_TESTS:-*Stepfun*:*StepFun*:Sm90*}"
export CAKEMOE_WITH_CUDA=ON
cakemoe_cuda_path
summary="$out/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

note "commit: ${CAKEMOE_COMMIT:-$(git -C "$CAKEMOE_ROOT" rev-parse --short HEAD 2>/dev/null)}"
note "gpu: $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null)"
start=$SECONDS
benches=()  # one target per bench source
for f in "$CAKEMOE_ROOT"/bench/bench_stepfun*.c*; do
  name="${f##*/}"
  [[ -e "$f" ]] && benches+=("${name%%.*}")
done
if cakemoe_build_gpu_units "$build" "$out/build.log" "$jobs" -- test_gpu cakemoe_cli "${benches[@]}"; then
  note "build: ok ($((SECONDS - start)) s)"
else
  note "build: FAILED ($((SECONDS - start)) s)"; tail -n 40 "$out/build.log"; exit 1
fi

# SASS of the sm90 units: tensor-core instructions in the main loop, no local memory.
{
  for o in $(find "$build" -name 'sm90_*.o' | sort); do
    sass=$(cuobjdump -sass "$o" 2>/dev/null)
    printf '%-28s HGMMA %4d  QGMMA %4d  LDL %3d  STL %3d\n' "$(basename "$o" .cu.o)" \
      "$(grep -c HGMMA <<<"$sass")" "$(grep -c QGMMA <<<"$sass")" \
      "$(grep -c 'LDL' <<<"$sass")" "$(grep -c 'STL' <<<"$sass")"
  done
} >"$out/sass.txt"
note "sass: $(wc -l <"$out/sass.txt") sm90 units; lines with LDL/STL: $(awk '$7 > 0 || $9 > 0' "$out/sass.txt" | wc -l)"

start=$SECONDS
timeout "${STEPFUN_TEST_SECS:-300}" stdbuf -oL "$build/tests/test_gpu" --gtest_filter="$tests" \
  >"$out/test.log" 2>&1
rc=$?
note "tests ($tests): rc $rc, $((SECONDS - start)) s, $(grep -c '^\[       OK' "$out/test.log") ok, $(grep -c '^\[  FAILED  \]' "$out/test.log") failed lines"
grep -E '^\[  FAILED  \]' "$out/test.log" | head -n 20 | tee -a "$summary"

if [[ -n "${STEPFUN_BENCH:-}" ]]; then
  start=$SECONDS
  (cd "$CAKEMOE_ROOT" && timeout "${STEPFUN_BENCH_SECS:-240}" bash -c "$STEPFUN_BENCH") \
    >"$out/bench.log" 2>&1
  note "bench: rc $?, $((SECONDS - start)) s"
  tail -n 60 "$out/bench.log"
fi
cat "$out/sass.txt"
echo "---- summary"
cat "$summary"
