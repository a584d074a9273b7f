#!/usr/bin/env bash
# The main job: set up what the build needs, configure and build the CLI, then run `cakemoe run`
# (both pipelines through the public API, each checked against the fp64 oracle).
#
#   scripts/run.sh [--gpu | --cpu] [arguments for `cakemoe run`...]
#
# The CUDA kernels are built only when a GPU is visible (`nvidia-smi -L` lists one); otherwise
# the build leaves CUDA out (CAKEMOE_WITH_CUDA=OFF, no CUTLASS download) and `cakemoe run` uses
# the CPU reference engine: a few minutes to build, about a minute to run. --gpu / --cpu (or
# CAKEMOE_WITH_CUDA=ON / OFF) force either; a flag wins over the variable. No tests, benchmarks
# or Python module are built, so their dependencies are not fetched either.
#
# Environment: CAKEMOE_BUILD_DIR (default build-run-gpu / build-run-cpu: not scripts/test.sh's
# folder, whose options differ), CAKEMOE_JOBS (default 2), CAKEMOE_WITH_CUDA (ON / OFF; default:
# ON when a GPU is visible), CAKEMOE_KERNELS (default ci), CAKEMOE_CUTLASS_DIR.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

mode=""
run_args=()
for arg in "$@"; do
  case "$arg" in
    --gpu) mode=ON ;;
    --cpu) mode=OFF ;;
    -h|--help)
      awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"
      exit 0 ;;
    *) run_args+=("$arg") ;;
  esac
done

cakemoe_cuda_path
if [[ -z "$mode" ]]; then
  case "${CAKEMOE_WITH_CUDA:-auto}" in
    ON|on|1|TRUE|true|YES|yes) mode=ON ;;
    OFF|off|0|FALSE|false|NO|no) mode=OFF ;;
    auto|"")
      mode=OFF
      if cakemoe_has_gpu; then
        if command -v nvcc >/dev/null 2>&1; then
          mode=ON
        else
          cakemoe_log "a GPU is visible but nvcc is not: building the CPU engine only (install" \
                      "the CUDA toolkit, or pass --gpu to insist)"
        fi
      fi ;;
    *) cakemoe_log "CAKEMOE_WITH_CUDA must be ON or OFF, not '$CAKEMOE_WITH_CUDA'"; exit 2 ;;
  esac
fi
if [[ "$mode" == ON ]] && ! command -v nvcc >/dev/null 2>&1; then
  cakemoe_log "a CUDA build needs nvcc, which is not on PATH nor in /usr/local/cuda/bin"
  exit 1
fi
export CAKEMOE_WITH_CUDA="$mode"  # read by setup-deps.sh (CUTLASS) and cakemoe_configure
if [[ "$mode" == ON ]]; then
  cakemoe_log "CUDA build (a GPU is visible, or --gpu / CAKEMOE_WITH_CUDA=ON)"
  default_build="$CAKEMOE_ROOT/build-run-gpu"
else
  cakemoe_log "CPU build: the CUDA units are left out (no GPU visible, or --cpu /" \
              "CAKEMOE_WITH_CUDA=OFF)"
  default_build="$CAKEMOE_ROOT/build-run-cpu"
fi
build="${CAKEMOE_BUILD_DIR:-$default_build}"
jobs="${CAKEMOE_JOBS:-2}"

bash "$CAKEMOE_ROOT/scripts/setup-deps.sh" --no-test-deps --no-bundle --no-python
cakemoe_configure "$build" "${CAKEMOE_KERNELS:-ci}" -DCAKEMOE_BUILD_TESTS=OFF \
  -DCAKEMOE_BUILD_BENCH=OFF -DCAKEMOE_BUILD_PYTHON=OFF
cakemoe_build "$build" "$jobs" cakemoe_cli
exec "$build/tools/cakemoe" run "${run_args[@]}"
