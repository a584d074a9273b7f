// `cakemoe bench`: the StepFun layer and BGMV plan tables with the fraction of the roofline
// reached (GPU), or CPU reference engine timings (no roofline) without a GPU.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cakemoe/tensor.h"

namespace cakemoe {
namespace tools {

/// Largest --tokens entry of `cakemoe bench` (the issue 27 tables stop at 16384).
constexpr int64_t kMaxBenchTokens = 65536;

/// Roofline ceilings of the H200 (bench/NOTES.md): HBM read bandwidth for the StepFun floor, the
/// measured HBM copy ceiling for the BGMV floor, dense MMA peaks (bf16 wgmma, which the
/// dequantized families run; e4m3 for fp8).
constexpr double kStepFunHbmBytesPerS = 4.47e12;
constexpr double kBgmvHbmBytesPerS = 4.26e12;
constexpr double kBf16PeakFlopsPerS = 773e12;
constexpr double kE4m3PeakFlopsPerS = 1460e12;

struct BenchOptions {
  std::string pipeline = "all";  ///< all | stepfun | bgmv
  std::string family = "all";    ///< a StepFun family or all
  std::string workload = "all";  ///< all | step35 | fi (StepFun geometries)
  std::vector<int64_t> tokens;   ///< empty: the defaults of the engine and pipeline
  int64_t reps = 0;              ///< 0: 20 on the GPU, 3 on the CPU
  std::string json_path;         ///< also write the rows here when set
  bool gpu = false;              ///< CUDA device 0 (else the CPU reference engine)
};

/// One table row; the JSON row of the bench/results format (issue 27).
struct BenchRow {
  std::string workload;         ///< step35 | fi | a BGMV shape name
  std::string family;           ///< StepFun family, or "bgmv"
  int64_t tokens = 0;           ///< T
  double us = 0;                ///< median time per forward
  double floor_us = -1;         ///< roofline floor; < 0 where none (CPU engine)
  int64_t unique_experts = -1;  ///< experts (StepFun) or (LoRA, expert) bins (BGMV) touched
  std::string path;             ///< sm90 | simt | cake | portable | cpu_reference
};

/// Runs the tables the options select, prints them and writes the JSON; false on a failure.
bool run_bench(const BenchOptions& options);
std::vector<BenchRow> bench_stepfun(const BenchOptions& options, int reps);
std::vector<BenchRow> bench_bgmv(const BenchOptions& options, int reps);

/// Median microseconds of `reps` calls of `launch(stream)`. CPU: host clock around each call.
/// GPU: with `capture`, the calls are replays of one CUDA graph of launch(); else launch() runs
/// directly (it replays its own graph); before each rep a memset of twice the L2 size evicts the
/// operands (it leaves dirty lines, so small rows read a little pessimistic); cudaEvent timing.
double median_us(const std::function<void(Stream)>& launch, int reps, bool gpu, bool capture);

/// The rows as a JSON list (floor_us / unique_experts are null where < 0).
std::string rows_json(const std::vector<BenchRow>& rows);
/// "  0.87" (floor / time), or "     -" without a floor.
std::string fraction_text(const BenchRow& row);

}  // namespace tools
}  // namespace cakemoe
