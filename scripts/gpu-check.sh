#!/usr/bin/env bash
# Full check on the H200 box (no network there; the caller carries third_party/ with the CUTLASS
# headers, and the GoogleTest/Benchmark copies that scripts/setup-deps.sh stages).
#
#   scripts/gpu-check.sh OUTDIR [--sanitize[=FILTER]] [--no-bench] [--no-tests] [--no-run]
#
# Configures with CAKEMOE_KERNELS=all, builds, runs ctest -L cpu and -L gpu (CAKEMOE_GPU_TEST_JOBS
# at a time, default 8), the portable GPU
# tests again from compute_80 PTX (CUDA_FORCE_PTX_JIT=1), `cakemoe run`,
# every bench/bench_* binary, and (with --sanitize) test_gpu under compute-sanitizer memcheck,
# racecheck and synccheck on a reduced filter (default: GPU tests named *Small* or *Tiny*, else
# all). Few files are written to OUTDIR (the device tool returns at most 8):
#   summary.txt  machine, commit and the step table (also printed last on stdout)
#   build.log  test.log  run.log  bench.log  bench.json  sanitize.log
# Every step runs under a timeout taken from one budget (CAKEMOE_GPU_CHECK_BUDGET seconds,
# default 570, inside the device's 10-minute limit), so the summary is always written. A warm
# machine keeps the build folder (CAKEMOE_BUILD_DIR, default build-gpu), so a second call only
# rebuilds what changed. Exit status: 0 when no step failed.
set -uo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

out=""
sanitize=0
sanitize_filter=""
do_bench=1
do_tests=1
do_run=1
# The GPU tests that launch only PTX-carrying units (plus test-side kernels, which carry it too).
ptx_jit_filter='*StepFun*:*Stepfun*:FormatsGpu.*:BgmvKernelsGpu.Portable*:BgmvPlanGpuPortable.*'
ptx_jit_filter+='-*Perf*:*Timed*'
for arg in "$@"; do
  case "$arg" in
    --sanitize) sanitize=1 ;;
    --sanitize=*) sanitize=1; sanitize_filter="${arg#--sanitize=}"; user_sanitize_filter=1 ;;
    --no-bench) do_bench=0 ;;
    --no-tests) do_tests=0 ;;
    --no-run) do_run=0 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    -*) cakemoe_log "unknown argument: $arg"; exit 2 ;;
    *) out="$arg" ;;
  esac
done
out="${out:-${OUT:-$PWD/gpu-check-out}}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
build="${CAKEMOE_BUILD_DIR:-$CAKEMOE_ROOT/build-gpu}"
jobs="${CAKEMOE_JOBS:-$(nproc)}"
budget="${CAKEMOE_GPU_CHECK_BUDGET:-570}"
# GPU tests side by side (their time is mostly the host oracle; tests/CMakeLists.txt runs the
# free-memory checks alone).
gpu_jobs="${CAKEMOE_GPU_TEST_JOBS:-8}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export CAKEMOE_WITH_CUDA=ON
cakemoe_cuda_path

# ---- Step bookkeeping -------------------------------------------------------------------------
step_names=()
step_status=()
step_secs=()
step_detail=()
failed=0

record() {  # record NAME STATUS SECONDS DETAIL
  step_names+=("$1"); step_status+=("$2"); step_secs+=("$3"); step_detail+=("$4")
  [[ "$2" == ok || "$2" == skip ]] || failed=1
}

finish() {  # finish NAME DETAIL: records the step run_step just ran
  local detail="$2"
  [[ "$last_status" == skip ]] && detail="no time left in the ${budget} s budget"
  record "$1" "$last_status" "$last_secs" "$detail"
}

# run_step NAME LOG CAP_SECONDS command...: runs the command under a timeout (the smaller of CAP
# and what is left of the budget), appends its output to LOG, and leaves it in $tmp/last.log.
run_step() {
  local name="$1" log="$2" cap="$3"
  shift 3
  local left=$((budget - SECONDS - 20))
  local limit=$((cap < left ? cap : left))
  last_secs=0
  : >"$tmp/last.log"
  if ((limit <= 0)); then
    last_status=skip
    return 1
  fi
  printf '\n==== %s (limit %d s): %s\n' "$name" "$limit" "$*" >>"$log"
  local t0=$SECONDS rc=0
  if declare -F "$1" >/dev/null; then
    # A function from common.sh: timeout needs a program, so run it in a fresh bash.
    # shellcheck disable=SC2016  # expanded by the inner bash
    set -- bash -c 'source "$0"; "$@"' "$CAKEMOE_ROOT/scripts/common.sh" "$@"
  fi
  timeout --kill-after=10 "$limit" "$@" >"$tmp/last.log" 2>&1 || rc=$?
  cat "$tmp/last.log" >>"$log"
  last_secs=$((SECONDS - t0))
  if ((rc == 124 || rc == 137)); then
    last_status=timeout
  elif ((rc != 0)); then
    last_status=FAIL
  else
    last_status=ok
  fi
  if [[ "$last_status" != ok ]]; then
    printf '\n---- %s: %s (rc %d), last lines of %s:\n' "$name" "$last_status" "$rc" \
      "$(basename "$log")"
    tail -n 25 "$tmp/last.log"
  fi
  [[ "$last_status" == ok ]]
}

ctest_detail() {  # the "N% tests passed, F tests failed out of T" line, shortened
  local line
  line="$(grep -E 'tests passed|No tests were found' "$tmp/last.log" | tail -n1)"
  echo "${line:-no ctest summary line}"
}

# ---- Machine facts ----------------------------------------------------------------------------
{
  echo "date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  # NOTE: CAKEMOE_COMMIT first: the device tool's copy carries the working tree beside a .git
  # whose HEAD can lag it (session 19: HEAD 95aaa65 under the tree of 29add04).
  commit="${CAKEMOE_COMMIT:-$(git -C "$CAKEMOE_ROOT" rev-parse --short=12 HEAD 2>/dev/null || true)}"
  echo "commit:  ${commit:-unknown (no .git; set CAKEMOE_COMMIT)}"
  echo "gpu:     $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm \
                   --format=csv,noheader 2>/dev/null | head -n1 || echo none)"
  echo "nvcc:    $(nvcc --version 2>/dev/null | grep -o 'release [^,]*, V[0-9.]*' || echo none)"
  echo "cmake:   $(cmake --version 2>/dev/null | head -n1)"
  echo "cpus:    $(nproc), build jobs: $jobs"
  cutlass_dir="${CAKEMOE_CUTLASS_DIR:-$CAKEMOE_ROOT/third_party/cutlass}"
  echo "cutlass: $(cat "$cutlass_dir/VERSION" 2>/dev/null || echo "MISSING at $cutlass_dir")"
} >"$tmp/machine.txt"
cat "$tmp/machine.txt"
: >"$out/build.log"

# ---- Configure and build ----------------------------------------------------------------------
if run_step configure "$out/build.log" 300 \
     cakemoe_configure "$build" all -DCAKEMOE_BUILD_TESTS=ON -DCAKEMOE_BUILD_BENCH=ON; then
  finish configure "$(grep -o '[0-9]* CUDA kernel units.*' "$tmp/last.log")"
  if run_step build "$out/build.log" 480 cakemoe_build "$build" "$jobs"; then
    finish build "$(grep -ci 'warning' "$tmp/last.log") warning lines"
  else
    finish build "see build.log"
  fi
else
  finish configure "see build.log"
  record build skip 0 "configure failed"
fi
built=0
if [[ "${step_status[-1]}" == ok ]]; then
  built=1
else
  record "tests, run, benches" skip 0 "no build"
fi

# ---- Tests ------------------------------------------------------------------------------------
if ((do_tests && built)); then
  : >"$out/test.log"
  run_step "ctest cpu" "$out/test.log" 300 \
    ctest --test-dir "$build" -L cpu --output-on-failure -j "$jobs" --timeout 240
  finish "ctest cpu" "$(ctest_detail)"
  run_step "ctest gpu" "$out/test.log" 300 \
    ctest --test-dir "$build" -L gpu --output-on-failure --timeout 240 -j "$gpu_jobs"
  if grep -q 'No tests were found' "$tmp/last.log"; then
    last_status=skip
    record "ctest gpu" skip "$last_secs" "no tests labelled gpu were built"
  else
    finish "ctest gpu" "$(ctest_detail)"
  fi
fi

# ---- Portable units from their compute_80 PTX (CAKEMOE_PORTABLE_PTX) ----------------------------
# CUDA_FORCE_PTX_JIT=1 makes the driver ignore SASS and JIT every kernel from its PTX, so on the
# H200 the StepFun units and the BGMV portable pair run as other devices of compute capability
# >= 8.0 would (__CUDA_ARCH__ 800: no griddepcontrol); a kernel without PTX would fail to load.
if ((do_tests && built)) && [[ ! -x "$build/tests/test_gpu" ]]; then
  record "ptx jit" skip 0 "no test_gpu"
elif ((do_tests && built)); then
  run_step "ptx jit" "$out/test.log" 240 env CUDA_FORCE_PTX_JIT=1 "$build/tests/test_gpu" \
    --gtest_filter="$ptx_jit_filter" --gtest_brief=1
  finish "ptx jit" "$(grep -E 'PASSED|FAILED' "$tmp/last.log" | tr '\n' ' ')filter=$ptx_jit_filter"
fi

# ---- The main job -----------------------------------------------------------------------------
if ((do_run && built)); then
  : >"$out/run.log"
  run_step "cakemoe run" "$out/run.log" 180 "$build/tools/cakemoe" run
  finish "cakemoe run" "$(tail -n1 "$tmp/last.log" | cut -c1-60)"
fi

# ---- Benchmarks -------------------------------------------------------------------------------
if ((do_bench && built)); then
  : >"$out/bench.log"
  mkdir -p "$tmp/json"
  for exe in "$build"/bench/bench_*; do
    [[ -f "$exe" && -x "$exe" ]] || continue
    name="$(basename "$exe")"
    run_step "$name" "$out/bench.log" 180 "$exe" \
      --benchmark_out="$tmp/json/$name.json" --benchmark_out_format=json
    finish "$name" "$(grep -cE '^[A-Za-z_].*[0-9] (ns|us|ms|s) ' "$tmp/last.log") results"
  done
  if compgen -G "$tmp/json/*.json" >/dev/null; then
    # One file for all benches: {binary name: Google Benchmark JSON}.
    python3 - "$tmp/json" "$out/bench.json" <<'PY'
import json, os, sys
src, dst = sys.argv[1], sys.argv[2]
merged = {}
for name in sorted(os.listdir(src)):
    try:
        with open(os.path.join(src, name)) as f:
            merged[name[:-len(".json")]] = json.load(f)
    except (OSError, ValueError) as e:
        merged[name[:-len(".json")]] = {"error": str(e)}
with open(dst, "w") as f:
    json.dump(merged, f, indent=1)
PY
  else
    record benches skip 0 "no bench binaries built"
  fi
fi

# ---- compute-sanitizer ------------------------------------------------------------------------
if ((sanitize && built)); then
  : >"$out/sanitize.log"
  gpu_tests="$build/tests/test_gpu"
  sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  if [[ ! -x "$gpu_tests" || ! -x "$sanitizer" ]]; then
    record sanitize skip 0 "no test_gpu or no compute-sanitizer"
  else
    if [[ -z "$sanitize_filter" ]]; then
      # NOTE: *Control* tests make forbidden CUDA calls on purpose (cudaMalloc / sync inside a
      # capture) and memcheck reports those API errors: they are left out of the sanitizer set.
      sanitize_filter='*Small*:*small*:*Tiny*:*tiny*-*Control*'
      if ! "$gpu_tests" --gtest_list_tests --gtest_filter="$sanitize_filter" | grep -q '^  '; then
        sanitize_filter='*'
      fi
    fi
    # NOTE: racecheck is ~10x slower than memcheck: on the H200 the whole Small set ran past
    # 240 s, so by default it checks one test per kernel family (every StepFun stage of every
    # family; the BGMV Cake variants, padding/no-LoRA and column-slice layouts), ~90 s.
    race_filter="$sanitize_filter"
    if [[ -z "${user_sanitize_filter:-}" ]]; then
      race_filter='AllFamilies/StepFunStagesSmall.*:BgmvPlanGpu.SmallReplaysPerVariant'
      race_filter+=':BgmvPlanGpuRouting.SmallPaddingExtraRouteAndNoLora:BgmvPlanGpuLayout.*'
    fi
    for tool in memcheck racecheck synccheck; do
      filter="$sanitize_filter"
      [[ "$tool" == racecheck ]] && filter="$race_filter"
      run_step "sanitize $tool" "$out/sanitize.log" 240 "$sanitizer" --tool "$tool" \
        --error-exitcode 1 "$gpu_tests" --gtest_filter="$filter" --gtest_brief=1
      finish "sanitize $tool" \
        "$(grep -oE 'ERROR SUMMARY: [0-9]+ error[s]?|RACECHECK SUMMARY: .*' "$tmp/last.log" \
           | tail -n1) filter=$filter"
    done
  fi
fi

# ---- Summary ----------------------------------------------------------------------------------
{
  cat "$tmp/machine.txt"
  echo "total:   $SECONDS s (budget $budget s)"
  echo
  printf '%-22s %-8s %6s  %s\n' step status seconds detail
  printf '%-22s %-8s %6s  %s\n' ---- ------ ------- ------
  for i in "${!step_names[@]}"; do
    printf '%-22s %-8s %6s  %s\n' "${step_names[$i]}" "${step_status[$i]}" "${step_secs[$i]}" \
      "${step_detail[$i]}"
  done
} >"$out/summary.txt"
echo
cat "$out/summary.txt"
exit "$failed"
