#!/usr/bin/env bash
# The sanitizer part of CI (run after scripts/test.sh): a CPU-only build with ASan + UBSan
# (CAKEMOE_SANITIZE=address,undefined, every report fatal), then
#   1. the CPU tests under it (ctest -L cpu),
#   2. the fuzz regression inputs (ctest -L fuzz: one reproducer per known finding),
#   3. a fixed-time fuzz run of the public API (scripts/fuzz.sh: libFuzzer with clang, else the
#      plain driver), seeded (CAKEMOE_FUZZ_SEED, default 1: a gate that tries the same inputs
#      on every run).
# Steps 2 and 3 run in strict mode (CAKEMOE_FUZZ_STRICT, default 1 here): a call that returns
# normally although one of its views was malformed fails too.
# Every step runs; the script fails when any of them does.
#
#   scripts/sanitize.sh [--fuzz-seconds N]     (default 90)
#
# Environment: CAKEMOE_SANITIZE_BUILD_DIR (default build-sanitize), CAKEMOE_JOBS (default 2),
# CXX (default clang++ when found: one tree then serves the tests and libFuzzer; else g++).
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

fuzz_seconds=90
while (($# > 0)); do
  case "$1" in
    --fuzz-seconds) fuzz_seconds="$2"; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) cakemoe_log "unknown argument: $1"; exit 2 ;;
  esac
done

build="${CAKEMOE_SANITIZE_BUILD_DIR:-$CAKEMOE_ROOT/build-sanitize}"
jobs="${CAKEMOE_JOBS:-2}"
start=$SECONDS

cxx="${CXX:-}"
if [[ -z "$cxx" ]] && command -v clang++ >/dev/null 2>&1; then cxx=clang++; fi
args=(-DCAKEMOE_SANITIZE=address,undefined -DCAKEMOE_BUILD_FUZZ=ON -DCAKEMOE_BUILD_BENCH=OFF
      -DCAKEMOE_BUILD_PYTHON=OFF)
[[ -n "$cxx" ]] && args+=(-DCMAKE_CXX_COMPILER="$cxx")
command -v ccache >/dev/null 2>&1 && args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
CAKEMOE_WITH_CUDA=OFF cakemoe_configure "$build" ci "${args[@]}"
cakemoe_build "$build" "$jobs"
built=$SECONDS
cakemoe_log "sanitizer build: $((built - start)) s"

# NOTE: leaks fail too; the fuzz drivers also report allocations over 2 GiB (fuzz_one.cpp).
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export CAKEMOE_FUZZ_STRICT="${CAKEMOE_FUZZ_STRICT:-1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
failed=()
step() {
  local name="$1" t0=$SECONDS
  shift
  cakemoe_log "---- $name"
  if "$@"; then
    cakemoe_log "$name: passed ($((SECONDS - t0)) s)"
  else
    cakemoe_log "$name: FAILED ($((SECONDS - t0)) s)"
    failed+=("$name")
  fi
}
step "cpu tests (asan+ubsan)" ctest --test-dir "$build" -L cpu --output-on-failure -j "$jobs" \
  --timeout 1200
step "fuzz regressions" ctest --test-dir "$build" -L fuzz --output-on-failure --timeout 600
step "fuzz ${fuzz_seconds} s" bash "$CAKEMOE_ROOT/scripts/fuzz.sh" --build "$build" --no-build \
  --seconds "$fuzz_seconds" --seed "${CAKEMOE_FUZZ_SEED:-1}"

cakemoe_log "sanitizers: $((SECONDS - built)) s after the build, total $((SECONDS - start)) s"
if ((${#failed[@]} > 0)); then
  cakemoe_log "failed: ${failed[*]}"
  exit 1
fi
