#!/usr/bin/env bash
# A/B of the BGMV benchmark on the H200 box in one device call: builds bench_bgmv from this tree
# and from an older tree (e.g. `git archive <sha> | tar -x -C ab_old`; an untracked folder travels
# with the working tree only if git does not ignore it, else name it in the device call's carry
# list), then runs both tables back to back, the new one also under each override set in
# $AB_OVERRIDES, and ncu of the grouped kernels at $AB_NCU_SHAPES.
#
#   scripts/gpu-bgmv-ab.sh OLD_TREE OUTDIR
#
# OLD_TREE "-": no old tree (only the new bench and its overrides).
# Both tables run with --digest: when the old tree's bench has it too (any tree with the commit
# that added it), summary.txt counts the rows whose y and shrink rows are bitwise equal.
# AB_TESTS=<gtest filter> also builds and runs the new tree's test_gpu (after the benches).
# AB_OVERRIDES="KEY=VALUE[,KEY=VALUE] ..." runs the new bench once more per override set
# (`bench_bgmv --override=SET`, src/bgmv/overrides.h; bench_override<i>.log), e.g.
# AB_OVERRIDES="grouped_stage=1 grouped_stage=2";
# AB_BENCH_ARGS (e.g. --quick) goes to every bench run. AB_NCU_SECTIONS (default "SpeedOfLight
# Occupancy") names ncu's sections. AB_NCU_CACHE=none: ncu keeps the caches
# between kernels (what one stage leaves in L2 for the next; default: flushed before each).
# summary.txt also compares the tables by plan kind (scripts/bgmv_table_compare.py): new / old, and
# each AB_OVERRIDES table / new. Files in OUTDIR: summary.txt, bench_old.log, bench_new.log,
# bench_override<i>.log, ncu_<i>.txt, tests.log (at most 8 come back: keep AB_OVERRIDES and
# AB_NCU_SHAPES short). Build logs stay in build-ab-{new,old}.log (their
# tails go to summary.txt on failure).
set -uo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
old="$1"
[[ "$old" == "-" ]] || old="$(cd "$old" && pwd)"  # build_bench runs from the repo root
out="$2"
mkdir -p "$out"
export CAKEMOE_WITH_CUDA=ON
cakemoe_cuda_path
export CAKEMOE_CUTLASS_DIR="${CAKEMOE_CUTLASS_DIR:-$CAKEMOE_ROOT/third_party/cutlass}"
summary="$out/summary.txt"
echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')  new: ${CAKEMOE_COMMIT:-?}  old: $old" >"$summary"
build_bench() {  # TREE BUILD_DIR LOG
  (cd "$1" && source scripts/common.sh && cakemoe_configure "$2" all -DCAKEMOE_BUILD_BENCH=ON &&
     cmake --build "$2" -j 8 --target bench_bgmv) >"$3" 2>&1
}
build_bench "$CAKEMOE_ROOT" "$CAKEMOE_ROOT/build-ab-new" "$CAKEMOE_ROOT/build-ab-new.log" &
sides="new"
if [[ "$old" != "-" ]]; then
  sides="new old"
  build_bench "$old" "$CAKEMOE_ROOT/build-ab-old" "$CAKEMOE_ROOT/build-ab-old.log" &
fi
wait
for side in $sides; do
  if [[ ! -x "$CAKEMOE_ROOT/build-ab-$side/bench/bench_bgmv" ]]; then
    echo "build $side failed" >>"$summary"
    tail -n 20 "$CAKEMOE_ROOT/build-ab-$side.log" >>"$summary"
  fi
done
echo "builds: $SECONDS s" >>"$summary"
new_bench="$CAKEMOE_ROOT/build-ab-new/bench/bench_bgmv"
old_bench="$CAKEMOE_ROOT/build-ab-old/bench/bench_bgmv"
# shellcheck disable=SC2086  # AB_BENCH_ARGS is a list of arguments
[[ "$old" == "-" ]] ||
  timeout 90 "$old_bench" --reps=30 --digest ${AB_BENCH_ARGS:-} >"$out/bench_old.log" 2>&1
# shellcheck disable=SC2086
timeout 90 "$new_bench" --reps=30 --digest ${AB_BENCH_ARGS:-} >"$out/bench_new.log" 2>&1
compare="$CAKEMOE_ROOT/scripts/bgmv_table_compare.py"
if [[ "$old" != "-" ]]; then
  { echo "new / old by plan kind (rows that moved > 4 % listed):"
    python3 "$compare" "$out/bench_old.log" "$out/bench_new.log" --rows=4; } >>"$summary"
fi
e=0
for assignment in ${AB_OVERRIDES:-}; do  # KEY=VALUE[,...]: the new bench again with that override
  e=$((e + 1))
  echo "$assignment" >"$out/bench_override$e.log"
  # shellcheck disable=SC2086
  timeout 90 "$new_bench" --reps=30 --override="$assignment" ${AB_BENCH_ARGS:-} \
    >>"$out/bench_override$e.log" 2>&1
  { echo "$assignment / new:"
    python3 "$compare" "$out/bench_new.log" "$out/bench_override$e.log"; } >>"$summary"
done
i=0
ncu_sections=""
for section in ${AB_NCU_SECTIONS:-SpeedOfLight Occupancy}; do
  ncu_sections+=" --section $section"
done
for shape in ${AB_NCU_SHAPES:-}; do
  i=$((i + 1))
  for side in $sides; do
    bench="$CAKEMOE_ROOT/build-ab-$side/bench/bench_bgmv"
    echo "== $side $shape" >>"$out/ncu_$i.txt"
    # shellcheck disable=SC2086  # ncu_sections is a list of arguments
    timeout 90 ncu --clock-control none --cache-control "${AB_NCU_CACHE:-all}" \
      --graph-profiling node --kernel-name regex:'group' --launch-count 4 $ncu_sections \
      --metrics dram__bytes_read.sum,dram__bytes_write.sum \
      "$bench" --variants --shape="$shape" --reps=1 >>"$out/ncu_$i.txt" 2>&1
  done
done
if [[ -n "${AB_TESTS:-}" ]]; then  # the new tree's GPU tests matching $AB_TESTS (a gtest filter)
  cmake --build "$CAKEMOE_ROOT/build-ab-new" -j "$(nproc)" --target test_gpu >>"$CAKEMOE_ROOT/build-ab-new.log" 2>&1 ||
    tail -n 20 "$CAKEMOE_ROOT/build-ab-new.log" >>"$summary"
  timeout 240 "$CAKEMOE_ROOT/build-ab-new/tests/test_gpu" --gtest_filter="$AB_TESTS" \
    --gtest_brief=1 >"$out/tests.log" 2>&1
  echo "tests ($AB_TESTS): rc $?, $(grep -E 'PASSED|FAILED' "$out/tests.log" | tr '\n' ' ')" >>"$summary"
fi
echo "total: $SECONDS s" >>"$summary"
cat "$summary"
