# shellcheck shell=bash
# Helpers shared by the scripts in this folder; source it, do not run it.
# Knobs (environment): CAKEMOE_BUILD_DIR, CAKEMOE_JOBS, CAKEMOE_WITH_CUDA (ON/OFF, default: ON
# when nvcc is found), CAKEMOE_KERNELS (ci/all), CAKEMOE_BUILD_TYPE, CAKEMOE_CUTLASS_DIR.

CAKEMOE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

cakemoe_log() { printf '[cakemoe] %s\n' "$*" >&2; }

# Put CUDA's bin folder on PATH when nvcc is not already there (CUDA 13 lives in /usr/local/cuda).
cakemoe_cuda_path() {
  if ! command -v nvcc >/dev/null 2>&1; then
    local dir
    for dir in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda /usr/local/cuda-13.0; do
      if [[ -n "$dir" && -x "$dir/bin/nvcc" ]]; then
        export PATH="$dir/bin:$PATH"
        break
      fi
    done
  fi
}

# Prints ON when the build should compile the CUDA kernels, OFF otherwise.
cakemoe_with_cuda() {
  case "${CAKEMOE_WITH_CUDA:-auto}" in
    ON|on|1|TRUE|true|YES|yes) echo ON ;;
    OFF|off|0|FALSE|false|NO|no) echo OFF ;;
    *) if command -v nvcc >/dev/null 2>&1; then echo ON; else echo OFF; fi ;;
  esac
}

# True when a CUDA device is visible (nvidia-smi lists at least one GPU).
cakemoe_has_gpu() {
  command -v nvidia-smi >/dev/null 2>&1 || return 1
  [[ "$(nvidia-smi -L 2>/dev/null)" == *"GPU "* ]]
}

# cakemoe_configure BUILD_DIR KERNELS [extra cmake arguments...]
cakemoe_configure() {
  local build="$1" kernels="$2"
  shift 2
  local args=(-S "$CAKEMOE_ROOT" -B "$build"
              -DCMAKE_BUILD_TYPE="${CAKEMOE_BUILD_TYPE:-Release}"
              -DCAKEMOE_WITH_CUDA="$(cakemoe_with_cuda)"
              -DCAKEMOE_KERNELS="$kernels")
  # A build folder keeps the generator it was made with; pick one only for a new folder.
  if [[ ! -f "$build/CMakeCache.txt" ]]; then
    if command -v ninja >/dev/null 2>&1; then
      args+=(-G Ninja)
    else
      args+=(-G "Unix Makefiles")
    fi
  fi
  if [[ -n "${CAKEMOE_CUTLASS_DIR:-}" ]]; then
    args+=(-DCAKEMOE_CUTLASS_DIR="$CAKEMOE_CUTLASS_DIR")
  fi
  # The interpreter of the Python module: setup-deps.sh's .venv when it made one.
  if [[ -x "$CAKEMOE_ROOT/.venv/bin/python" ]]; then
    args+=(-DPython_EXECUTABLE="$CAKEMOE_ROOT/.venv/bin/python")
  fi
  cakemoe_log "cmake ${args[*]} $*"
  cmake "${args[@]}" "$@"
}

# cakemoe_build_gpu_units BUILD_DIR LOG JOBS [cmake arguments...] -- TARGETS...
# The GPU scripts' build: every kernel unit, tests and benches, no header check and no Python
# module; configures BUILD_DIR and builds TARGETS, all output to LOG.
cakemoe_build_gpu_units() {
  local build="$1" log="$2" jobs="$3"
  shift 3
  local cmake_args=()
  while (($# > 0)) && [[ "$1" != -- ]]; do
    cmake_args+=("$1")
    shift
  done
  (($# > 0)) && shift  # --
  { cakemoe_configure "$build" all -DCAKEMOE_BUILD_TESTS=ON -DCAKEMOE_BUILD_BENCH=ON \
      -DCAKEMOE_HEADER_CHECK=OFF -DCAKEMOE_BUILD_PYTHON=OFF "${cmake_args[@]}" &&
    cakemoe_build "$build" "$jobs" "$@"; } >"$log" 2>&1
}

# cakemoe_build BUILD_DIR JOBS [targets...]
cakemoe_build() {
  local build="$1" jobs="$2"
  shift 2
  if (($# > 0)); then
    cmake --build "$build" -j "$jobs" --target "$@"
  else
    cmake --build "$build" -j "$jobs"
  fi
}
