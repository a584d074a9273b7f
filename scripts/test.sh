#!/usr/bin/env bash
# The test command: set up dependencies, configure and build everything, run the CPU tests, and
# the GPU tests too when a CUDA device is present. CI runs this (via .ci/run).
#
#   scripts/test.sh [extra ctest arguments...]
#
# Environment: CAKEMOE_BUILD_DIR (default build), CAKEMOE_JOBS (default 2),
# CAKEMOE_WITH_CUDA (default ON when nvcc is found), CAKEMOE_KERNELS (default ci, or all when a
# GPU is present).
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

build="${CAKEMOE_BUILD_DIR:-$CAKEMOE_ROOT/build}"
jobs="${CAKEMOE_JOBS:-2}"
start=$SECONDS

bash "$CAKEMOE_ROOT/scripts/setup-deps.sh"
cakemoe_cuda_path
# NOTE: a GPU runs the GPU tests, which need every unit; CI without one builds the ci set.
kernels="${CAKEMOE_KERNELS:-ci}"
if [[ -z "${CAKEMOE_KERNELS:-}" ]] && cakemoe_has_gpu; then kernels=all; fi
cakemoe_configure "$build" "$kernels"
cakemoe_build "$build" "$jobs"
built=$SECONDS
cakemoe_log "configure + build: $((built - start)) s"

cd "$build"
ctest -L cpu --output-on-failure -j "$jobs" --timeout 900 "$@"
if [[ "$(cakemoe_with_cuda)" == ON ]] && cakemoe_has_gpu; then
  # Side by side: their time is mostly the host oracle; the free-memory check runs alone
  # (RUN_SERIAL, tests/CMakeLists.txt).
  ctest -L gpu --output-on-failure --timeout 900 -j "${CAKEMOE_GPU_TEST_JOBS:-4}" "$@"
else
  cakemoe_log "no CUDA device (or a build without CUDA): GPU tests not run"
fi
cakemoe_log "tests: $((SECONDS - built)) s, total: $((SECONDS - start)) s"
