#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, synccheck, initcheck) over the StepFun and BGMV GPU
# suites, split into groups of tests so that each call fits the device's 10-minute limit.
#
#   scripts/gpu-sanitize.sh OUTDIR [--group=NAME[,NAME...]] [--tool=TOOL[,TOOL...]]
#                                  [--filter=GTEST_FILTER] [--no-build] [--list]
#
# --group takes group names (below), a suite (stepfun, bgmv, all) or SUITE-TOOL (e.g.
# stepfun-memcheck: every StepFun group under memcheck); default all. --tool restricts the tools
# (default: the four, or the one a SUITE-TOOL names). --filter runs one custom gtest filter as the
# group "custom". Runs go tool by tool, group by group, each under a timeout taken from one budget
# (CAKEMOE_SANITIZE_BUDGET seconds from the start, build included; default 570), so the summary
# is always written; runs left without time are listed as skipped. --list prints the groups, their
# filters and test counts, and any StepFun / BGMV test that no group covers.
#
# Files in OUTDIR (the device tool returns at most 8):
#   summary.txt   machine, commit and one row per (tool, group): status, tests run / passed /
#                 failed / skipped, the sanitizer's ERROR SUMMARY or RACECHECK SUMMARY, seconds
#   sanitize.log  the output of every run    build.log  configure and build
# Builds (or reuses) test_gpu in CAKEMOE_BUILD_DIR (default build-gpu) with every kernel unit, as
# scripts/gpu-stepfun.sh does. Exit status 0 when every run finished with no failed test and no
# sanitizer error. The GPU tests' hang watchdog is scaled by CAKEMOE_GPU_HANG_SCALE (default 20
# here: sanitized kernels are 10-100x slower).
set -uo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# ---- Groups: gtest filters over test_gpu; together they cover every StepFun and BGMV test ------
declare -A filters=(
  [stepfun-routing]='StepFunRoutingGpu.*'
  [stepfun-requant-finalize]='StepFunRequantGpu.*:StepFunFinalizeGpu.*'
  [stepfun-gemm-fc1]='StepfunGemmGpu.Fc1*'
  [stepfun-gemm-fc2]='StepfunGemmGpu.Fc2*'
  [stepfun-gemm-variants]='StepfunGemmGpu.NonPreferred*'
  [stepfun-layer]='*StepFunStagesSmall.*:StepFunConfigSmall.*:*StepFunGraphSmall*.*'
  [stepfun-concurrency]='*StepFunConcurrency.*:*StepFunGraphInPlace.*'
  [stepfun-shapes]='*StepFun35ShapeE288.*:*StepFunLargeTilesT2048.*'
  [stepfun-matrix]='*StepFunLayerMatrix.*:*StepFun35Layer.*'
  [bgmv-kernels]='BgmvKernelsGpu.*:*BgmvGenericMatrix.*:BgmvWarpReduce.*'
  [bgmv-plan]='BgmvPlanGpu*.*'
  [bgmv-grouped]='BgmvGroupedGpu.*'
  [bgmv-specialized]='BgmvSpecializedGpu.*'
  [bgmv-concurrency]='BgmvConcurrencyGpu.*'
)
stepfun_groups=(stepfun-routing stepfun-requant-finalize stepfun-gemm-fc1 stepfun-gemm-fc2
                stepfun-gemm-variants stepfun-layer stepfun-concurrency stepfun-shapes
                stepfun-matrix)
bgmv_groups=(bgmv-kernels bgmv-plan bgmv-grouped bgmv-specialized bgmv-concurrency)
all_tools=(memcheck racecheck synccheck initcheck)
suite_filter='*StepFun*:*Stepfun*:*Bgmv*'

out=""
group_args=()
tool_args=()
custom_filter=""
do_build=1
list_only=0
for arg in "$@"; do
  case "$arg" in
    --group=*) IFS=, read -r -a more <<<"${arg#--group=}"; group_args+=("${more[@]}") ;;
    --tool=*) IFS=, read -r -a more <<<"${arg#--tool=}"; tool_args+=("${more[@]}") ;;
    --filter=*) custom_filter="${arg#--filter=}" ;;
    --no-build) do_build=0 ;;
    --list) list_only=1 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    -*) cakemoe_log "unknown argument: $arg"; exit 2 ;;
    *) out="$arg" ;;
  esac
done

# ---- Expand --group / --tool into the runs (tool, group) --------------------------------------
groups=()
suite_tool=""
add_groups() {  # appends each group not listed yet
  local g
  for g in "$@"; do [[ " ${groups[*]} " == *" $g "* ]] || groups+=("$g"); done
}
(( ${#group_args[@]} == 0 )) && [[ -z "$custom_filter" ]] && group_args=(all)
for g in "${group_args[@]}"; do
  case "$g" in
    all) add_groups "${stepfun_groups[@]}" "${bgmv_groups[@]}" ;;
    stepfun) add_groups "${stepfun_groups[@]}" ;;
    bgmv) add_groups "${bgmv_groups[@]}" ;;
    stepfun-memcheck|stepfun-racecheck|stepfun-synccheck|stepfun-initcheck)
      add_groups "${stepfun_groups[@]}"; suite_tool="${g#stepfun-}" ;;
    bgmv-memcheck|bgmv-racecheck|bgmv-synccheck|bgmv-initcheck)
      add_groups "${bgmv_groups[@]}"; suite_tool="${g#bgmv-}" ;;
    *)
      if [[ -z "${filters[$g]+set}" ]]; then
        cakemoe_log "unknown group: $g (groups: ${!filters[*]}; or stepfun, bgmv, all, SUITE-TOOL)"
        exit 2
      fi
      add_groups "$g" ;;
  esac
done
if [[ -n "$custom_filter" ]]; then
  filters[custom]="$custom_filter"
  add_groups custom
fi
tools=()
if (( ${#tool_args[@]} > 0 )); then
  tools=("${tool_args[@]}")
elif [[ -n "$suite_tool" ]]; then
  tools=("$suite_tool")
else
  tools=("${all_tools[@]}")
fi
for t in "${tools[@]}"; do
  [[ " ${all_tools[*]} " == *" $t "* ]] || { cakemoe_log "unknown tool: $t"; exit 2; }
done

out="${out:-${OUT:-$PWD/gpu-sanitize-out}}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
build="${CAKEMOE_BUILD_DIR:-$CAKEMOE_ROOT/build-gpu}"
jobs="${CAKEMOE_JOBS:-$(nproc)}"
budget="${CAKEMOE_SANITIZE_BUDGET:-570}"
export CAKEMOE_GPU_HANG_SCALE="${CAKEMOE_GPU_HANG_SCALE:-20}"
export CAKEMOE_WITH_CUDA=ON
cakemoe_cuda_path
gpu_tests="$build/tests/test_gpu"
summary="$out/summary.txt"
log="$out/sanitize.log"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# ---- Build ------------------------------------------------------------------------------------
build_note="reused (--no-build)"
if ((do_build)); then
  t0=$SECONDS
  build_secs=$((budget > 120 ? budget - 60 : 60))
  if cakemoe_configure "$build" all -DCAKEMOE_BUILD_TESTS=ON >"$out/build.log" 2>&1 &&
     timeout "$build_secs" cmake --build "$build" -j "$jobs" --target test_gpu \
       >>"$out/build.log" 2>&1; then
    build_note="ok ($((SECONDS - t0)) s)"
  else
    # A failed (or timed-out) build leaves no sanitized run: a stale test_gpu would mislead.
    tail -n 30 "$out/build.log"
    echo "build: FAILED or ran out of time ($((SECONDS - t0)) s, see build.log); call again" |
      tee "$summary"
    exit 1
  fi
fi
if [[ ! -x "$gpu_tests" ]]; then
  echo "no $gpu_tests (build: $build_note)" | tee "$summary"
  exit 1
fi

# ---- --list: groups, counts, and the suite tests no group covers ------------------------------
count_tests() { "$gpu_tests" --gtest_list_tests --gtest_filter="$1" 2>/dev/null | grep -c '^  '; }
if ((list_only)); then
  union=""
  for g in "${stepfun_groups[@]}" "${bgmv_groups[@]}"; do
    printf '%-26s %4d tests  %s\n' "$g" "$(count_tests "${filters[$g]}")" "${filters[$g]}"
    union+="${union:+:}${filters[$g]}"
  done
  echo "StepFun / BGMV tests in no group:"
  "$gpu_tests" --gtest_list_tests --gtest_filter="$suite_filter-$union" |
    grep -v -e '^  ' -e '^Running main' |
    sed 's/^/  suite /' || true
  exit 0
fi

# ---- Runs -------------------------------------------------------------------------------------
sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
if [[ ! -x "$sanitizer" ]]; then
  echo "no compute-sanitizer found (PATH, /usr/local/cuda/bin)" | tee "$summary"
  exit 1
fi
help_text="$("$sanitizer" --help 2>&1)"
common_opts=(--error-exitcode 9 --print-limit 30)
# NOTE: API-error reports are off: the hang watchdog polls cudaStreamQuery (cudaErrorNotReady)
# and the capture control test makes forbidden calls on purpose; every CUDA call of the library
# is checked, so a real API error fails its test instead.
[[ "$help_text" == *--report-api-errors* ]] && common_opts+=(--report-api-errors no)
tool_opts() {  # the options of one tool (only those this compute-sanitizer knows)
  case "$1" in
    # NOTE: padding after every allocation catches overruns into a neighbouring allocation.
    memcheck) [[ "$help_text" == *--padding* ]] && echo "--padding 256" ;;
    racecheck) [[ "$help_text" == *--racecheck-report* ]] && echo "--racecheck-report analysis" ;;
    *) ;;
  esac
}

rows=()
failed=0
: >"$log"
for tool in "${tools[@]}"; do
  for g in "${groups[@]}"; do
    filter="${filters[$g]}"
    left=$((budget - SECONDS - 15))
    if ((left < 30)); then
      rows+=("$(printf '%-10s %-25s %-8s %5s %6s %6s %7s %7s  %s' "$tool" "$g" skip - - - - 0 \
               "no time left in the ${budget} s budget")")
      failed=1
      continue
    fi
    # shellcheck disable=SC2207  # options are single words
    opts=($(tool_opts "$tool"))
    printf '\n==== %s %s (limit %d s): --gtest_filter=%s\n' "$tool" "$g" "$left" "$filter" >>"$log"
    t0=$SECONDS
    rc=0
    timeout --kill-after=10 "$left" "$sanitizer" --tool "$tool" "${common_opts[@]}" "${opts[@]}" \
      "$gpu_tests" --gtest_filter="$filter" >"$tmp/run.log" 2>&1 || rc=$?
    secs=$((SECONDS - t0))
    cat "$tmp/run.log" >>"$log"
    run=$(grep -c '^\[ RUN      \]' "$tmp/run.log")
    passed=$(grep -c '^\[       OK \]' "$tmp/run.log")
    nfail=$(grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$tmp/run.log")
    skipped=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$tmp/run.log")
    verdict="$(grep -oE '(ERROR|RACECHECK) SUMMARY: .*' "$tmp/run.log" | paste -sd ';' -)"
    if ((rc == 124 || rc == 137)); then
      status=timeout
      # Killed before its summary: count the report headers printed so far instead.
      reports=$(grep -E '^========= [^ ]' "$tmp/run.log" | grep -vc 'COMPUTE-SANITIZER')
      verdict="no summary (killed); ${reports} '=========' report lines so far"
    elif grep -q '^HANG: ' "$tmp/run.log"; then
      status=hang
      verdict="$(grep -m1 '^HANG: ' "$tmp/run.log") ${verdict}"
    elif ((rc == 9)); then
      status=errors
    elif ((rc != 0 || nfail > 0)); then
      status=FAIL
    elif ((run == 0)); then
      status=empty
      verdict="no test matched the filter ${verdict}"
    elif ((skipped == run)); then
      status=allskip  # e.g. no device visible: nothing was checked
    else
      status=ok
    fi
    [[ "$status" == ok ]] || failed=1
    rows+=("$(printf '%-10s %-25s %-8s %5d %6d %6d %7d %7d  %s' "$tool" "$g" "$status" "$run" \
             "$passed" "$nfail" "$skipped" "$secs" "${verdict:-no summary line}")")
    printf '%s %s: %s, %d run, %d passed, %d failed, %s (%d s)\n' "$tool" "$g" "$status" "$run" \
      "$passed" "$nfail" "${verdict:-no summary line}" "$secs"
  done
done

# The device tool returns files up to 16 MiB: keep the head and the tail of a larger log.
if (($(stat -c %s "$log") > 15 * 1024 * 1024)); then
  { head -c $((6 * 1024 * 1024)) "$log"; printf '\n\n[... cut ...]\n\n'
    tail -c $((6 * 1024 * 1024)) "$log"; } >"$tmp/cut.log" && mv "$tmp/cut.log" "$log"
fi

# ---- Summary ----------------------------------------------------------------------------------
{
  echo "date:      $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  commit="$(git -C "$CAKEMOE_ROOT" rev-parse --short=12 HEAD 2>/dev/null || true)"
  commit="${CAKEMOE_COMMIT:-$commit}"
  echo "commit:    ${commit:-unknown (no .git; set CAKEMOE_COMMIT)}"
  echo "gpu:       $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null \
                     | head -n1 || echo none)"
  echo "sanitizer: $("$sanitizer" --version 2>/dev/null | grep -oE 'Version [^ ]+' | head -n1)"
  echo "options:   ${common_opts[*]}; memcheck $(tool_opts memcheck);" \
       "racecheck $(tool_opts racecheck)"
  echo "build:     $build_note"
  echo "total:     $SECONDS s (budget $budget s), CAKEMOE_GPU_HANG_SCALE=$CAKEMOE_GPU_HANG_SCALE"
  echo
  printf '%-10s %-25s %-8s %5s %6s %6s %7s %7s  %s\n' tool group status tests passed failed \
    skipped seconds "sanitizer summary"
  printf '%s\n' "${rows[@]}"
  echo
  for g in "${groups[@]}"; do printf 'filter %-25s %s\n' "$g" "${filters[$g]}"; done
} >"$summary"
echo
cat "$summary"
exit "$failed"
