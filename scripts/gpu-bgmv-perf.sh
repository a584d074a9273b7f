#!/usr/bin/env bash
# BGMV performance session on the H200 box in one device call (bench/NOTES.md, "next, ranked"):
# build, the BGMV GPU tests, the issue table, the stage table, the variant table (optional) and an
# ncu per-kernel view of two reference shapes. At most 8 files land in OUTDIR (the device tool's
# limit): summary.txt build.log tests.log bench.log stages.log variants.log ncu_1.txt ncu_2.txt,
# sanitize.log with --sanitize and ncu_source_<i>.txt with --ncu-source (then pass --no-bench or
# --no-ncu to stay within 8).
#
#   scripts/gpu-bgmv-perf.sh OUTDIR [--variants] [--no-ncu] [--no-bench] [--sanitize=FILTER]
#                            [--ncu-shapes="H,R,T,k,L H,R,T,k,L"]
#                            [--ncu-source="KERNEL_REGEX@H,R,T,k,L[,E] ..."]
#                            [--sweep="KEY=VALUE[,KEY=VALUE] ..."] [--no-tests]
#
# The stage table (stages.log) is the lab binary bench/lab/bench_bgmv_stages.cu, built here too.
#
# --sweep: the table again under each override set (`bench_bgmv --override=SET`, PlanOverrides'
# text form: src/bgmv/overrides.h, docs/decisions/bgmv-overrides.md), all into sweep.log ("====
# SET" before each), each compared with the default table by plan kind in summary.txt
# (scripts/bgmv_table_compare.py; rows that moved > 4 % listed). --sweep=defaults: every override
# one way (re-measures the plan's defaults, e.g. after a kernel change: a stale default shows as an
# override that wins a plan kind).
# --ncu-source: per entry, the first launch matching KERNEL_REGEX in that table row (bench_bgmv
# --rows: the row's Cake plan, then its portable plan, e.g. 'portable_expand@3072,16,1,8,8')
# under ncu's full set with source counters, the details page and the per-instruction SASS view
# with CUDA lines (builds with -lineinfo, which changes no code) into ncu_source_<i>.txt. The
# warp sampler runs at its finest interval (2^5 cycles): at the default a 10 µs kernel on one SM
# gets too few samples to name a line.
#
# --sanitize=FILTER: test_gpu under compute-sanitizer memcheck, racecheck and synccheck on FILTER.
#
# Every step has its own timeout inside one budget (CAKEMOE_GPU_CHECK_BUDGET, default 540 s).
# ncu runs with --clock-control none (H200.md) and its default cache flush before each kernel.
set -uo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

out=""
variants=0
ncu_on=1
bench_on=1
sanitize_filter=""
ncu_shapes="3072,32,1024,2,8 3072,32,1024,2,4"
ncu_source=""
sweep=""
tests_on=1
for arg in "$@"; do
  case "$arg" in
    --variants) variants=1 ;;
    --no-ncu) ncu_on=0 ;;
    --no-bench) bench_on=0 ;;
    --sanitize=*) sanitize_filter="${arg#--sanitize=}" ;;
    --ncu-shapes=*) ncu_shapes="${arg#--ncu-shapes=}" ;;
    --ncu-source=*) ncu_source="${arg#--ncu-source=}" ;;
    --sweep=*) sweep="${arg#--sweep=}" ;;
    --no-tests) tests_on=0 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    -*) cakemoe_log "unknown argument: $arg"; exit 2 ;;
    *) out="$arg" ;;
  esac
done
out="${out:-${OUT:-$PWD/gpu-bgmv-perf-out}}"
mkdir -p "$out"
build="${CAKEMOE_BUILD_DIR:-$CAKEMOE_ROOT/build-gpu}"
budget="${CAKEMOE_GPU_CHECK_BUDGET:-540}"
export CAKEMOE_WITH_CUDA=ON
cakemoe_cuda_path
summary="$out/summary.txt"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
{
  echo "date:   $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "commit: ${CAKEMOE_COMMIT:-unknown (set CAKEMOE_COMMIT)}"
  echo "gpu:    $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
} >"$summary"

# step NAME LOG CAP command...: runs under min(CAP, what is left of the budget), logs rc and time.
step() {
  local name="$1" log="$2" cap="$3"
  shift 3
  local left=$((budget - SECONDS - 10))
  local limit=$((cap < left ? cap : left))
  if ((limit <= 0)); then
    echo "$name: skipped (budget spent)" >>"$summary"
    return 1
  fi
  local t0=$SECONDS rc=0
  timeout --kill-after=5 "$limit" "$@" >>"$log" 2>&1 || rc=$?
  echo "$name: rc $rc, $((SECONDS - t0)) s" >>"$summary"
  return "$rc"
}

if ((tests_on || bench_on || variants || ncu_on)) || [[ -n "$sanitize_filter$sweep$ncu_source" ]]; then
  if ! step configure "$out/build.log" 120 \
         bash -c "source '$CAKEMOE_ROOT/scripts/common.sh'; cakemoe_configure '$build' all \
                  -DCAKEMOE_BUILD_TESTS=ON -DCAKEMOE_BUILD_BENCH=ON \
                  ${ncu_source:+-DCMAKE_CUDA_FLAGS=-lineinfo}" ||
     ! step build "$out/build.log" 300 cmake --build "$build" -j "$(nproc)" ||
     ! step "build stages" "$out/build.log" 120 cmake --build "$build" -j "$(nproc)" \
         --target bench_bgmv_stages; then
    tail -n 30 "$out/build.log"
    cat "$summary"
    exit 1
  fi
fi
bench="$build/bench/bench_bgmv"
if ((tests_on)); then
  step tests "$out/tests.log" 200 "$build/tests/test_gpu" --gtest_filter='Bgmv*' --gtest_brief=1
  grep -E "PASSED|FAILED" "$out/tests.log" | tail -n 5 >>"$summary"
fi
if [[ -n "$sanitize_filter" ]]; then
  sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  for tool in memcheck racecheck synccheck; do
    echo "==== $tool --gtest_filter=$sanitize_filter" >>"$out/sanitize.log"
    step "sanitize $tool" "$out/sanitize.log" 200 "$sanitizer" --tool "$tool" --error-exitcode 1 \
      "$build/tests/test_gpu" --gtest_filter="$sanitize_filter" --gtest_brief=1
    grep -oE 'ERROR SUMMARY: [0-9]+ error[s]?|RACECHECK SUMMARY: .*' "$out/sanitize.log" |
      tail -n 1 >>"$summary"
  done
fi
if ((bench_on)); then
  step bench "$out/bench.log" 90 "$bench" --reps=30
  step stages "$out/stages.log" 60 "$build/bench/bench_bgmv_stages" --reps=30
fi
if [[ "$sweep" == defaults ]]; then  # every override, one way each
  sweep="grouped_stage=0 grouped_stage=1 grouped_stage=2 fused_index=0 packed_routes=0
    launch_pdl_mode=0 launch_pdl_mode=1 launch_pdl_mode=2 generic_schedule=0 generic_schedule=1
    generic_schedule=2 variant=generic variant=specialized"
fi
for assignment in $sweep; do  # KEY=VALUE[,KEY=VALUE]: the table under that override set
  : >"$tmp/sweep_table.log"
  step "sweep $assignment" "$tmp/sweep_table.log" 60 "$bench" --reps=30 --override="$assignment"
  { echo "==== $assignment"; cat "$tmp/sweep_table.log"; } >>"$out/sweep.log"
  if [[ -f "$out/bench.log" ]]; then  # this set's table against the default one, by plan kind
    { echo "sweep $assignment / default:"
      python3 "$CAKEMOE_ROOT/scripts/bgmv_table_compare.py" "$out/bench.log" \
        "$tmp/sweep_table.log" --rows=4; } >>"$summary"
  fi
done
if ((variants)); then
  step variants "$out/variants.log" 200 "$bench" --variants --reps=30 --budget=170
fi
if ((ncu_on)) && command -v ncu >/dev/null 2>&1; then
  i=0
  for shape in $ncu_shapes; do
    i=$((i + 1))
    echo "shape $shape (default plan first, then the forced pipelines of --variants)" \
      >"$out/ncu_$i.txt"
    step "ncu $shape" "$out/ncu_$i.txt" 90 ncu --clock-control none --graph-profiling node \
      --kernel-name regex:'group|cake' --launch-count 6 --section SpeedOfLight \
      --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
      --section WarpStateStats --metrics dram__bytes_read.sum,dram__bytes_write.sum \
      "$bench" --variants --shape="$shape" --reps=1
  done
fi
if [[ -n "$ncu_source" ]] && command -v ncu >/dev/null 2>&1; then
  i=0
  for entry in $ncu_source; do  # REGEX@H,R,T,k,L[,E] entries, one file each
    i=$((i + 1))
    regex="${entry%@*}" shape="${entry#*@}"
    log="$out/ncu_source_$i.txt"
    # NOTE: --rows runs only that table row (its Cake plan, then the portable one), so the first
    # launch matching REGEX is that row's; bench's --shape applies to --variants only.
    echo "kernels $regex, row $shape: details page (full set)" >"$log"
    step "ncu source $entry" "$log" 90 ncu --clock-control none --graph-profiling node \
      --kernel-name regex:"$regex" --launch-count 1 --set full --import-source yes --warp-sampling-interval 0 \
      "$bench" --rows="$shape" --reps=1
    echo "==== per-instruction source view (sass, cuda)" >>"$log"
    step "ncu source page" "$log" 90 ncu --clock-control none --graph-profiling node \
      --kernel-name regex:"$regex" --launch-count 1 --set full --import-source yes --warp-sampling-interval 0 \
      --page source --print-source cuda,sass --csv "$bench" --rows="$shape" --reps=1
  done
fi
echo "total:  $SECONDS s (budget $budget s)" >>"$summary"
cat "$summary"
