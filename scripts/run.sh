#!/usr/bin/env bash
# The main job: set up dependencies, configure and build the CLI, then run `cakemoe run`, which
# uses the GPU when one is present and the CPU reference engine otherwise.
#
#   scripts/run.sh [arguments for `cakemoe run`...]
#
# Environment: CAKEMOE_BUILD_DIR (default build), CAKEMOE_JOBS (default 2),
# CAKEMOE_WITH_CUDA (default ON when nvcc is found), CAKEMOE_KERNELS (default ci).
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

build="${CAKEMOE_BUILD_DIR:-$CAKEMOE_ROOT/build}"
jobs="${CAKEMOE_JOBS:-2}"

bash "$CAKEMOE_ROOT/scripts/setup-deps.sh"
cakemoe_cuda_path
cakemoe_configure "$build" "${CAKEMOE_KERNELS:-ci}"
cakemoe_build "$build" "$jobs" cakemoe_cli
exec "$build/tools/cakemoe" run "$@"
