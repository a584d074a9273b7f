#!/usr/bin/env bash
# compute-sanitizer runs side by side: one scripts/gpu-sanitize.sh process per TOOL:GROUP, all at
# once on the one GPU (each racecheck run is bound by host-side analysis, so they overlap well),
# each with the same budget. Builds test_gpu first unless --no-build.
#
#   scripts/gpu-sanitize-parallel.sh OUTDIR [--no-build] TOOL:GROUP [TOOL:GROUP ...]
#
# Environment: SANITIZE_SECS (budget of each run, default 400), CAKEMOE_BUILD_DIR (build-gpu).
# Files in OUTDIR: sanitize_summary.txt (each run's rows and the first run's header) and
# sanitize_logs.txt (the report lines of each run).
set -uo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
out="$1"; shift
mkdir -p "$out"
work="$(mktemp -d)"
build="${CAKEMOE_BUILD_DIR:-$CAKEMOE_ROOT/build-gpu}"
if [[ "${1:-}" == --no-build ]]; then
  shift
else
  export CAKEMOE_WITH_CUDA=ON
  cakemoe_cuda_path
  if ! cakemoe_build_gpu_units "$build" "$work/build.log" "$(nproc)" -- test_gpu; then
    echo "build: FAILED"; tail -n 30 "$work/build.log"; exit 1
  fi
fi
export CAKEMOE_GPU_HANG_SCALE="${CAKEMOE_GPU_HANG_SCALE:-20}"
for r in "$@"; do
  CAKEMOE_SANITIZE_BUDGET="${SANITIZE_SECS:-400}" CAKEMOE_BUILD_DIR="$build" \
    bash "$CAKEMOE_ROOT/scripts/gpu-sanitize.sh" "$work/${r/:/-}" --no-build --group="${r#*:}" \
    --tool="${r%%:*}" >"$work/${r/:/-}.out" 2>&1 &
done
wait
{
  for r in "$@"; do
    echo "==== $r"
    grep -E '^(memcheck|racecheck|synccheck|initcheck) ' "$work/${r/:/-}/summary.txt" 2>/dev/null ||
      tail -n 5 "$work/${r/:/-}.out"
  done
  head -n 8 "$work/${1/:/-}/summary.txt" 2>/dev/null
} >"$out/sanitize_summary.txt"
for r in "$@"; do
  echo "==== $r"
  grep -hE '^========= |HANG|FAILED|SUMMARY' "$work/${r/:/-}"/*.log 2>/dev/null | head -n 40
done >"$out/sanitize_logs.txt"
cat "$out/sanitize_summary.txt"
