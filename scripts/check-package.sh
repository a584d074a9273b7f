#!/usr/bin/env bash
# Checks the installed C++ package: installs the build to a temporary prefix, then configures,
# builds and runs examples/cpp (find_package(cakemoe CONFIG) -> cakemoe::cakemoe) against that
# prefix alone, with no CUDA compiler on PATH. CI runs it after scripts/test.sh (via .ci/run),
# reusing that build; on its own it configures and builds the library and the CLI first.
#
#   scripts/check-package.sh
#
# Environment: CAKEMOE_BUILD_DIR (default build), CAKEMOE_JOBS (default 2), CAKEMOE_WITH_CUDA,
# CAKEMOE_KERNELS (default ci): as for scripts/test.sh.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

build="${CAKEMOE_BUILD_DIR:-$CAKEMOE_ROOT/build}"
jobs="${CAKEMOE_JOBS:-2}"
start=$SECONDS
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if [[ ! -f "$build/CMakeCache.txt" ]]; then
  bash "$CAKEMOE_ROOT/scripts/setup-deps.sh"
  cakemoe_cuda_path
  cakemoe_configure "$build" "${CAKEMOE_KERNELS:-ci}"
fi
cakemoe_build "$build" "$jobs" cakemoe cakemoe_cli
cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"
for f in include/cakemoe/stepfun.h include/cakemoe/bgmv.h lib/cmake/cakemoe/cakemoeConfig.cmake \
         bin/cakemoe; do
  [[ -e "$work/prefix/$f" ]] || { cakemoe_log "install is missing $f"; exit 1; }
done
cakemoe_log "installed to a temporary prefix: $(find "$work/prefix" -type f | wc -l) files"

# The consumer sees the install prefix only, and no nvcc: its PATH drops every CUDA bin folder.
consumer_path="$(tr ':' '\n' <<<"$PATH" | grep -v -i cuda | paste -sd: -)"
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
env PATH="$consumer_path" cmake -S "$CAKEMOE_ROOT/examples/cpp" -B "$work/example" \
  "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$work/prefix"
env PATH="$consumer_path" cmake --build "$work/example" -j "$jobs"
"$work/example/cakemoe_example"
cakemoe_log "package check: $((SECONDS - start)) s"
