#!/usr/bin/env bash
# One device call (about 3 minutes on the H200): the StepFun GPU suite, the Step-3.5 / FlashInfer
# layer table on the default sm90 plans (mxfp8 tile 8 on the e4m3 units, bf16 / fp8 tile 64 on
# the g8 units) with the torch _grouped_mm anchor on the same routing, the same rows on the main
# units at the same tiles for the A/B, and the single-launch routing kernel's duration (ncu with
# cache control).
#
#   bench/lab/stepfun_default_plan_run.sh OUTDIR        (OUTDIR: $OUT on the device machine)
#
# Files in OUTDIR (at most 8): summary.txt, test.log, layer.md, layer.json, anchor.txt, ab.txt,
# routing_ncu.txt.
set -uo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"
out="${1:-${OUT:-$PWD/stepfun-default-out}}"
mkdir -p "$out"
work="$(mktemp -d)"
build="${CAKEMOE_BUILD_DIR:-$CAKEMOE_ROOT/build-gpu}"
export CAKEMOE_WITH_CUDA=ON
cakemoe_cuda_path
summary="$out/summary.txt"
note() { echo "$*" | tee -a "$summary"; }
: >"$summary"
note "commit: ${CAKEMOE_COMMIT:-$(git -C "$CAKEMOE_ROOT" rev-parse --short HEAD 2>/dev/null)}"
note "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"

start=$SECONDS
if cakemoe_build_gpu_units "$build" "$work/build.log" "$(nproc)" -DCMAKE_CUDA_FLAGS=-lineinfo -- \
     test_gpu bench_stepfun_layer bench_stepfun_gemm; then
  note "build: ok ($((SECONDS - start)) s)"
else
  note "build: FAILED"; tail -n 40 "$work/build.log" | tee -a "$summary"; exit 1
fi

# 1. Correctness first: the StepFun GPU suite, variant units included.
start=$SECONDS
(cd "$build" && timeout 240 ctest -L gpu -R 'Step|step|Sm90' -E python -j 8 --output-on-failure) \
  >"$out/test.log" 2>&1
note "tests: rc $? ($((SECONDS - start)) s) $(grep -E 'tests passed|tests failed' "$out/test.log")"
grep -E '^\s+[0-9]+ - .*(Failed|Timeout|Exception)' "$out/test.log" | tee -a "$summary"

# 2. The layer table on the default plans, and the anchor on the same routing.
layer="$build/bench/bench_stepfun_layer"
tokens=1,8,64,512,4096,16384
start=$SECONDS
timeout 260 "$layer" --tokens=$tokens --reps=10 --write-routing --out="$work" --budget=230 \
  >"$work/layer.log" 2>&1
note "layer: rc $? ($((SECONDS - start)) s)"
cp "$work/stepfun_layer.md" "$out/layer.md" 2>/dev/null
cp "$work/stepfun_layer.json" "$out/layer.json" 2>/dev/null
start=$SECONDS
timeout 120 python3 "$CAKEMOE_ROOT/bench/anchor_grouped_mm.py" --tokens=$tokens --reps=10 \
  --routing-dir="$work" --budget=100 >"$out/anchor.txt" 2>&1
note "anchor: rc $? ($((SECONDS - start)) s)"

# 3. A/B: the same rows on the main units (the default plan's rows are in layer.md).
{
  cat "$work/layer.log"
  echo "---- main units"
  timeout 90 "$layer" --family=bf16,fp8 --tokens=512,4096,16384 --path=sm90-main --reps=10
  timeout 60 "$layer" --family=mxfp8 --tokens=1,8,64 --path=sm90-main --reps=10
} >"$out/ab.txt" 2>&1
note "ab: rc $?"

# 4. The routing kernel's duration at T 1 (ncu; the per-SASS stall samples of an earlier call are
# in docs/performance/stepfun.md).
timeout 60 ncu --clock-control none -k regex:routing_ --launch-count 4 --section SpeedOfLight \
  "$layer" --workload=step35 --family=bf16 --tokens=1 --reps=1 2>&1 |
  grep -E "routing_|Duration|Elapsed" >"$out/routing_ncu.txt"
note "routing ncu: rc $?"
grep -E 'T=' "$out/ab.txt" | tail -n 40
cat "$summary"
