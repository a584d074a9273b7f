#!/usr/bin/env bash
# Installs what cakemoe needs to build and test. Idempotent: a machine that already has
# everything does no network access at all.
#
#   scripts/setup-deps.sh [--no-apt] [--cutlass | --no-cutlass] [--no-bundle] [--no-python]
#                         [--no-test-deps]
#
# 1. Debian packages (only when run as root with apt-get, and only the missing ones):
#    cmake, ninja-build, g++, libgtest-dev, libgmock-dev, libbenchmark-dev, python3
#    (--no-test-deps: without the GoogleTest and Google Benchmark packages, for a build that
#    leaves tests and benchmarks out, as scripts/run.sh's does).
# 2. CUTLASS/CuTe headers (when the build will use CUDA, or with --cutlass): the include folders
#    of the nvidia-cutlass wheel, unpacked into third_party/cutlass/{include,tools/util/include}.
#    Skipped when present, or when CAKEMOE_CUTLASS_DIR names another copy.
# 3. Offline bundle (local copies only, no network): GoogleTest sources and the Google Benchmark
#    library staged in third_party/, so a machine without these packages and without network
#    (the H200 box) can build the tests and benches when third_party/ is carried there.
# 4. Python packages for the `cakemoe` module and its tests (nanobind, numpy, pytest): when
#    python3 cannot import them, a virtual environment .venv/ (seeing the system's packages) gets
#    them from PyPI, and scripts/common.sh configures with its interpreter. Not fatal: without
#    them the build leaves the Python module out (CAKEMOE_BUILD_PYTHON=AUTO).
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

readonly kCutlassVersion="4.2.0.0"

use_apt=1
want_cutlass=auto
want_bundle=1
want_python=1
want_test_deps=1
for arg in "$@"; do
  case "$arg" in
    --no-apt) use_apt=0 ;;
    --cutlass) want_cutlass=1 ;;
    --no-cutlass) want_cutlass=0 ;;
    --no-bundle) want_bundle=0 ;;
    --no-python) want_python=0 ;;
    --no-test-deps) want_test_deps=0 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) cakemoe_log "unknown argument: $arg"; exit 2 ;;
  esac
done

cakemoe_cuda_path
if [[ "$want_cutlass" == auto ]]; then
  want_cutlass=0
  [[ "$(cakemoe_with_cuda)" == ON ]] && want_cutlass=1
fi

# ---- 1. Debian packages ------------------------------------------------------------------------
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_pkg() {
  have_cmd dpkg-query || return 1
  [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" == *"ok installed"* ]]
}
have_header() { [[ -f "/usr/include/$1" || -f "/usr/local/include/$1" ]]; }

missing=()
have_cmd cmake || missing+=(cmake)
have_cmd ninja || missing+=(ninja-build)
have_cmd g++ || missing+=(g++)
have_cmd python3 || missing+=(python3)
if ((want_test_deps)); then
  have_pkg libgtest-dev || have_header gtest/gtest.h || missing+=(libgtest-dev)
  have_pkg libgmock-dev || have_header gmock/gmock.h || missing+=(libgmock-dev)
  have_pkg libbenchmark-dev || have_header benchmark/benchmark.h || missing+=(libbenchmark-dev)
fi
if ((want_cutlass)) && ! python3 -m pip --version >/dev/null 2>&1; then
  missing+=(python3-pip)
fi

if ((${#missing[@]} > 0)); then
  if ((use_apt)) && [[ "$(id -u)" == 0 ]] && have_cmd apt-get; then
    cakemoe_log "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
  else
    cakemoe_log "missing packages (install them, e.g. as root): ${missing[*]}"
  fi
fi

if have_cmd cmake; then
  cmake_version="$(cmake --version | head -n1 | awk '{print $3}')"
  if [[ "$(printf '%s\n' 3.25 "$cmake_version" | sort -V | head -n1)" != 3.25 ]]; then
    cakemoe_log "cmake $cmake_version is older than 3.25, which CMakeLists.txt needs"
    exit 1
  fi
fi

# ---- 2. CUTLASS/CuTe headers -------------------------------------------------------------------
cutlass_ok() { [[ -f "$1/include/cute/tensor.hpp" && -f "$1/include/cutlass/cutlass.h" ]]; }

install_cutlass() {
  local dest="$1" tmp
  tmp="$(mktemp -d)"
  # shellcheck disable=SC2064  # expand now: tmp is local
  trap "rm -rf '$tmp'" EXIT
  cakemoe_log "downloading nvidia-cutlass==$kCutlassVersion (headers only are kept)"
  python3 -m pip download -q --no-deps --only-binary=:all: --no-cache-dir \
    --disable-pip-version-check -d "$tmp/wheel" "nvidia-cutlass==$kCutlassVersion"
  # NOTE: inside the wheel the headers live under cutlass_library/source/; only the two include
  # folders (CUTLASS + CuTe, and tools/util) and the licence are unpacked.
  python3 - "$tmp"/wheel/nvidia_cutlass-*.whl "$tmp/stage" <<'PY'
import os, sys, zipfile
wheel, stage = sys.argv[1], sys.argv[2]
prefixes = {
    "cutlass_library/source/include/": "include/",
    "cutlass_library/source/tools/util/include/": "tools/util/include/",
}
count = 0
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        name = info.filename
        if name.endswith("/"):
            continue
        target = None
        for src, dst in prefixes.items():
            if name.startswith(src):
                target = dst + name[len(src):]
        if name.endswith(".dist-info/licenses/LICENSE.txt"):
            target = "LICENSE.txt"
        if target is None:
            continue
        path = os.path.join(stage, target)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with z.open(info) as src_file, open(path, "wb") as out:
            out.write(src_file.read())
        count += 1
if count < 100:
    sys.exit(f"unexpected wheel layout: only {count} header files found in {wheel}")
print(f"[cakemoe] unpacked {count} files", file=sys.stderr)
PY
  printf 'nvidia-cutlass %s\n' "$kCutlassVersion" >"$tmp/stage/VERSION"
  mkdir -p "$(dirname "$dest")"
  rm -rf "$dest"
  mv "$tmp/stage" "$dest"
}

if ((want_cutlass)); then
  if [[ -n "${CAKEMOE_CUTLASS_DIR:-}" ]]; then
    if ! cutlass_ok "$CAKEMOE_CUTLASS_DIR"; then
      cakemoe_log "CAKEMOE_CUTLASS_DIR=$CAKEMOE_CUTLASS_DIR holds no include/cute/tensor.hpp"
      exit 1
    fi
    cakemoe_log "CUTLASS from CAKEMOE_CUTLASS_DIR=$CAKEMOE_CUTLASS_DIR"
  else
    dest="$CAKEMOE_ROOT/third_party/cutlass"
    if cutlass_ok "$dest" && grep -qx "nvidia-cutlass $kCutlassVersion" "$dest/VERSION" 2>/dev/null
    then
      cakemoe_log "CUTLASS $kCutlassVersion already in $dest"
    else
      install_cutlass "$dest"
    fi
  fi
fi

# ---- 3. Offline bundle for machines without network (local copies) ----------------------------
stage_googletest() {
  local dest="$CAKEMOE_ROOT/third_party/googletest" src=/usr/src/googletest
  [[ -f "$dest/CMakeLists.txt" || ! -f "$src/CMakeLists.txt" ]] && return 0
  local tmp="$dest.tmp"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  cp -r "$src/CMakeLists.txt" "$src/googletest" "$src/googlemock" "$tmp/"
  # The library needs only CMakeLists, cmake/, include/ and src/.
  rm -rf "$tmp"/googletest/{test,docs,samples} "$tmp"/googlemock/{test,docs}
  mv "$tmp" "$dest"
  cakemoe_log "staged GoogleTest sources in $dest"
}

stage_benchmark() {
  local dest="$CAKEMOE_ROOT/third_party/benchmark" dir lib="" soname
  [[ -f "$dest/include/benchmark/benchmark.h" ]] && return 0
  [[ -f /usr/include/benchmark/benchmark.h ]] || return 0
  for dir in "/usr/lib/$(gcc -print-multiarch 2>/dev/null)" /usr/lib64 /usr/lib /usr/local/lib; do
    if [[ -e "$dir/libbenchmark.so" ]]; then
      lib="$(readlink -f "$dir/libbenchmark.so")"
      break
    fi
  done
  [[ -n "$lib" ]] || return 0
  soname="$(objdump -p "$lib" 2>/dev/null | awk '$1 == "SONAME" {print $2}')"
  soname="${soname:-$(basename "$lib")}"
  mkdir -p "$dest.tmp/include" "$dest.tmp/lib"
  cp -r /usr/include/benchmark "$dest.tmp/include/"
  # NOTE: copied under its SONAME, the name the loader looks for at run time.
  cp "$lib" "$dest.tmp/lib/$soname"
  rm -rf "$dest"
  mv "$dest.tmp" "$dest"
  cakemoe_log "staged Google Benchmark ($soname) in $dest"
}

if ((want_bundle)); then
  stage_googletest
  stage_benchmark
fi
# ---- 4. Python packages for the module and its tests -------------------------------------------
readonly kNanobindVersion="3.1.0"
python_ok() { "$1" -c 'import nanobind, numpy, pytest' >/dev/null 2>&1; }

if ((want_python)) && have_cmd python3 && ! python_ok python3; then
  venv="$CAKEMOE_ROOT/.venv"
  if [[ -x "$venv/bin/python" ]] && python_ok "$venv/bin/python"; then
    cakemoe_log "Python packages already in $venv"
  elif python3 -m venv --system-site-packages "$venv" >/dev/null 2>&1 &&
       "$venv/bin/python" -m pip install -q --disable-pip-version-check \
         "nanobind==$kNanobindVersion" numpy pytest; then
    cakemoe_log "installed nanobind $kNanobindVersion, numpy, pytest into $venv"
  else
    cakemoe_log "could not install nanobind / numpy / pytest: the Python module is left out"
  fi
fi
cakemoe_log "dependencies ready"
