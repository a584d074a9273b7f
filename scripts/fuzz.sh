#!/usr/bin/env bash
# Fuzzes the public C++ API on CPU tensors (tests/fuzz) for a fixed time, under ASan + UBSan.
# With clang it runs libFuzzer (coverage-guided); without, the plain driver (random mutations of
# the corpus). Any crash, sanitizer report, hang or escaped non-cakemoe exception fails the run
# and leaves the input in <build>/fuzz/crashes/.
#
#   scripts/fuzz.sh [--seconds N] [--seed N] [--driver auto|libfuzzer|plain] [--build DIR]
#                   [--no-build] [-- extra driver arguments...]
#
# --seconds N   fuzzing time after the corpus replay (default 60; e.g. 3600 for a long run)
# --seed N      the mutation seed (N >= 1; default: a new one each run); a seeded run tries the
#               same inputs each time, up to where its time runs out (CI uses one)
# --driver      auto (default): libFuzzer when the build has it (clang), else the plain driver
# --build DIR   build folder (default $CAKEMOE_FUZZ_BUILD_DIR or build-fuzz); configured CPU-only
#               with CAKEMOE_SANITIZE=address,undefined and CAKEMOE_BUILD_FUZZ=ON, compiler $CXX
#               or clang++ when found, else the default one
# --no-build    use the build folder as it is (scripts/sanitize.sh built it)
# The work corpus (inputs libFuzzer found interesting) stays in <build>/fuzz/corpus between runs.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

seconds=60
seed=0
driver=auto
build="${CAKEMOE_FUZZ_BUILD_DIR:-$CAKEMOE_ROOT/build-fuzz}"
do_build=1
extra=()
while (($# > 0)); do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --driver) driver="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) cakemoe_log "unknown argument: $1"; exit 2 ;;
  esac
done
if ! [[ "$seconds" =~ ^[0-9]+$ ]]; then
  cakemoe_log "--seconds needs a whole number, not '$seconds'"
  exit 2
fi
if ! [[ "$seed" =~ ^[0-9]+$ ]]; then
  cakemoe_log "--seed needs a whole number, not '$seed'"
  exit 2
fi

if ((do_build)); then
  cxx="${CXX:-}"
  if [[ -z "$cxx" ]] && command -v clang++ >/dev/null 2>&1; then cxx=clang++; fi
  args=(-DCAKEMOE_SANITIZE=address,undefined -DCAKEMOE_BUILD_FUZZ=ON -DCAKEMOE_BUILD_TESTS=OFF
        -DCAKEMOE_BUILD_BENCH=OFF -DCAKEMOE_BUILD_PYTHON=OFF)
  [[ -n "$cxx" ]] && args+=(-DCMAKE_CXX_COMPILER="$cxx")
  command -v ccache >/dev/null 2>&1 && args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  CAKEMOE_WITH_CUDA=OFF cakemoe_configure "$build" ci "${args[@]}"
  targets=(cakemoe_fuzz_replay)
  # The libFuzzer binary exists in clang builds only (Ninja lists "name: phony", Make "... name").
  if cmake --build "$build" --target help 2>/dev/null |
    grep -Eq '(^|\.\.\. )cakemoe_fuzz(:|$)'; then
    targets+=(cakemoe_fuzz)
  fi
  cakemoe_build "$build" "${CAKEMOE_JOBS:-2}" "${targets[@]}"
fi

replay="$build/tests/fuzz/cakemoe_fuzz_replay"
libfuzzer="$build/tests/fuzz/cakemoe_fuzz"
if [[ ! -x "$replay" ]]; then
  cakemoe_log "no fuzz driver in $build (configure with -DCAKEMOE_BUILD_FUZZ=ON)"
  exit 2
fi
case "$driver" in
  auto) [[ -x "$libfuzzer" ]] && driver=libfuzzer || driver=plain ;;
  libfuzzer)
    [[ -x "$libfuzzer" ]] || { cakemoe_log "no libFuzzer binary (needs clang)"; exit 2; } ;;
  plain) ;;
  *) cakemoe_log "--driver must be auto, libfuzzer or plain"; exit 2 ;;
esac

work="$build/fuzz"
mkdir -p "$work/corpus" "$work/crashes"
# NOTE: the drivers default ASan to detect_leaks=1:max_allocation_size_mb=2048 (fuzz_one.cpp).
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
seeds="$CAKEMOE_ROOT/tests/fuzz/corpus"

# On a failure, print the saved inputs (small) so a CI log alone is enough to reproduce them:
# write the bytes back with `xxd -r -p` and replay the file with either driver.
report_failure() {
  local f
  for f in "$work"/crashes/*; do
    [[ -f "$f" && "$f" -nt "$stamp" ]] || continue
    cakemoe_log "failing input $(basename "$f") (hex):"
    od -An -tx1 -v "$f" | tr -d ' \n' | fold -w 100 >&2
    echo >&2
  done
  exit 1
}
stamp="$work/.started"
touch "$stamp"
cakemoe_log "replaying the seed corpus ($seeds)"
"$replay" --crash-dir "$work/crashes" "$seeds" || report_failure
((seconds > 0)) || exit 0
start=$SECONDS
cakemoe_log "fuzzing for $seconds s with the $driver driver"
if [[ "$driver" == libfuzzer ]]; then
  ((seed > 0)) && extra=(-seed="$seed" "${extra[@]}")
  "$libfuzzer" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=3072 -malloc_limit_mb=2048 \
    -max_len=512 -print_final_stats=1 -artifact_prefix="$work/crashes/" \
    "${extra[@]}" "$work/corpus" "$seeds" || report_failure
else
  ((seed > 0)) && extra=(--seed "$seed" "${extra[@]}")
  "$replay" --seconds "$seconds" --timeout 20 --crash-dir "$work/crashes" "${extra[@]}" \
    "$seeds" "$work/corpus" || report_failure
fi
cakemoe_log "fuzzing: no failure in $((SECONDS - start)) s"
