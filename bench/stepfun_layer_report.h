// Rows of bench_stepfun_layer: the roofline floor of the [stepfun-sm90] targets (the same
// arithmetic as shared/tools/stepfun_floor.py), the printed line, the markdown table and the JSON
// list that stepfun_floor.py --check reads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "cakemoe/stepfun.h"

namespace cakemoe {
namespace stepfun {
namespace layer_bench {

constexpr double kHbmBytesPerS = 4.47e12;  // H200 HBM read ceiling (bench/NOTES.md)
constexpr double kFp8Peak = 1460e12;       // e4m3 wgmma, FLOP/s
constexpr double kBf16Peak = 773e12;       // bf16 wgmma, also the families dequantized to bf16

/// Weight bytes per element: bf16 2, fp8 1, mxfp8 1 + 1/32, nvfp4* 0.5 + 1/16 (block scales).
inline double bytes_per_weight(Family f) {
  switch (f) {
    case Family::kBF16:
      return 2.0;
    case Family::kFP8:
      return 1.0;
    case Family::kMXFP8:
      return 1.0 + 1.0 / 32;
    case Family::kNVFP4:
    case Family::kNVFP4BF16Tok:
      return 0.5 + 1.0 / 16;
  }
  return 0.0;
}

inline double layer_flops(int64_t t, int64_t k, int64_t h, int64_t i) {
  return 6.0 * static_cast<double>(t) * k * h * i;  // FC1 2*(2I)*H + FC2 2*H*I per pair
}

/// floor µs = max(touched experts' weight bytes / HBM, FLOPs / MMA peak).
inline double floor_us(Family f, int64_t t, int64_t k, int64_t h, int64_t i, int64_t experts,
                       int64_t unique_experts) {
  const double ue = static_cast<double>(std::min(experts, unique_experts));
  const double bw_s = ue * 3.0 * h * i * bytes_per_weight(f) / kHbmBytesPerS;
  const double mma_s = layer_flops(t, k, h, i) / (f == Family::kFP8 ? kFp8Peak : kBf16Peak);
  return std::max(bw_s, mma_s) * 1e6;
}

/// One (workload, family, T, path) row. `status` is empty for a measured row, else why not.
struct Row {
  std::string workload, family, path;
  int64_t tokens = 0, unique_experts = 0;
  int tile = 0;
  std::string fc1_kernel, fc2_kernel;
  double us = 0, floor_us = 0, tflops = 0;
  int64_t nonfinite = 0;  // non-finite outputs after the timed replays (0 expected)
  std::string status;
  bool measured() const { return status.empty(); }
};

inline std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

inline void print_row(const Row& r) {
  if (!r.measured()) {
    std::printf("%-7s %-14s T=%6lld %-5s  %s\n", r.workload.c_str(), r.family.c_str(),
                static_cast<long long>(r.tokens), r.path.c_str(), r.status.c_str());
  } else {
    std::printf(
        "%-7s %-14s T=%6lld %-5s tile %3d %10.1f us  experts %3lld  floor %9.1f us  "
        "%5.2f of floor  %7.1f TFLOP/s%s\n",
        r.workload.c_str(), r.family.c_str(), static_cast<long long>(r.tokens), r.path.c_str(),
        r.tile, r.us, static_cast<long long>(r.unique_experts), r.floor_us, r.floor_us / r.us,
        r.tflops, r.nonfinite ? "  NON-FINITE OUTPUT" : "");
  }
  std::fflush(stdout);
}

inline std::string utc_date() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  return buf;
}

/// <dir>/stepfun_layer.md: a header line, then one table row per Row (skipped rows say why).
inline bool write_markdown(const std::string& path, const std::vector<Row>& rows,
                           const std::string& gpu, const std::string& commit,
                           const std::string& command, int reps) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return false;
  std::fprintf(f, "# StepFun layer, routing to finalize\n\n");
  std::fprintf(f,
               "%s, commit %s, %s. `%s`: CUDA graph replay, L2 flushed (256 MiB memset) "
               "before each rep, median of %d reps. Floor = max(touched experts' weight bytes / "
               "4.47 TB/s, 6*T*K*H*I / peak), peak 1460 TFLOP/s for fp8, 773 otherwise.\n\n",
               utc_date().c_str(), commit.c_str(), gpu.c_str(), command.c_str(), reps);
  std::fprintf(f,
               "| workload | family | T | path | tile | µs | experts | floor µs | of floor | "
               "TFLOP/s | FC1 / FC2 unit |\n");
  std::fprintf(f, "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n");
  for (const Row& r : rows) {
    std::fprintf(f, "| %s | %s | %lld | %s | ", r.workload.c_str(), r.family.c_str(),
                 static_cast<long long>(r.tokens), r.path.c_str());
    if (!r.measured()) {
      std::fprintf(f, " |  | %lld | %.1f |  |  | %s |\n", static_cast<long long>(r.unique_experts),
                   r.floor_us, r.status.c_str());
      continue;
    }
    std::fprintf(f, "%d | %.1f | %lld | %.1f | %.2f | %.1f | `%s` / `%s`%s |\n", r.tile, r.us,
                 static_cast<long long>(r.unique_experts), r.floor_us, r.floor_us / r.us, r.tflops,
                 r.fc1_kernel.c_str(), r.fc2_kernel.c_str(),
                 r.nonfinite ? " (non-finite output)" : "");
  }
  std::fclose(f);
  return true;
}

/// <dir>/stepfun_layer.json: a list of the measured rows only (stepfun_floor.py --check reads
/// every row's "us"), keys workload, family, T, us, floor_us, unique_experts, path, tile, tflops.
inline bool write_json(const std::string& path, const std::vector<Row>& rows) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return false;
  std::fprintf(f, "[");
  bool first = true;
  for (const Row& r : rows) {
    if (!r.measured()) continue;
    std::fprintf(f,
                 "%s\n  {\"workload\": \"%s\", \"family\": \"%s\", \"T\": %lld, \"us\": %.3f, "
                 "\"floor_us\": %.3f, \"unique_experts\": %lld, \"path\": \"%s\", \"tile\": %d, "
                 "\"tflops\": %.3f, \"fc1_kernel\": \"%s\", \"fc2_kernel\": \"%s\", "
                 "\"nonfinite\": %lld}",
                 first ? "" : ",", r.workload.c_str(), r.family.c_str(),
                 static_cast<long long>(r.tokens), r.us, r.floor_us,
                 static_cast<long long>(r.unique_experts), r.path.c_str(), r.tile, r.tflops,
                 r.fc1_kernel.c_str(), r.fc2_kernel.c_str(), static_cast<long long>(r.nonfinite));
    first = false;
  }
  std::fprintf(f, "\n]\n");
  std::fclose(f);
  return true;
}

}  // namespace layer_bench
}  // namespace stepfun
}  // namespace cakemoe
