#include "tools/cli_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "cakemoe/errors.h"

#if defined(CAKEMOE_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "core/cuda_check.h"
#endif

namespace cakemoe {
namespace tools {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double cpu_median_us(const std::function<void(Stream)>& launch, int reps) {
  launch(nullptr);  // warm-up: first touch of the buffers
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    launch(nullptr);
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(us);
}

#if defined(CAKEMOE_WITH_CUDA)
double gpu_median_us(const std::function<void(Stream)>& launch, int reps, bool capture) {
  int device = 0, l2_bytes = 0;
  CAKEMOE_CUDA_CHECK(cudaGetDevice(&device));
  CAKEMOE_CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
  const size_t flush_bytes = 2 * static_cast<size_t>(std::max(l2_bytes, 1 << 20));
  void* flush = nullptr;
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  std::vector<double> us;
  try {
    CAKEMOE_CUDA_CHECK(cudaMalloc(&flush, flush_bytes));
    CAKEMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CAKEMOE_CUDA_CHECK(cudaEventCreate(&start));
    CAKEMOE_CUDA_CHECK(cudaEventCreate(&stop));
    launch(stream);  // eager warm-up (module loading) before any capture
    CAKEMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (capture) {
      CAKEMOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
      launch(stream);
      CAKEMOE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
      CAKEMOE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    }
    auto one = [&] {
      if (capture) {
        CAKEMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
      } else {
        launch(stream);
      }
    };
    for (int i = 0; i < 3; ++i) one();
    for (int r = 0; r < reps; ++r) {
      CAKEMOE_CUDA_CHECK(cudaMemsetAsync(flush, r & 0xff, flush_bytes, stream));
      CAKEMOE_CUDA_CHECK(cudaEventRecord(start, stream));
      one();
      CAKEMOE_CUDA_CHECK(cudaEventRecord(stop, stream));
      CAKEMOE_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      CAKEMOE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      us.push_back(1e3 * ms);
    }
  } catch (...) {
    if (stream != nullptr) cudaStreamSynchronize(stream);
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaStreamDestroy(stream);
    cudaFree(flush);
    throw;
  }
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  cudaFree(flush);
  return median(us);
}
#endif

void print_json_number(std::string& out, double value, const char* format) {
  char text[48];
  std::snprintf(text, sizeof(text), format, value);
  out += text;
}

}  // namespace

double median_us(const std::function<void(Stream)>& launch, int reps, bool gpu, bool capture) {
  if (!gpu) return cpu_median_us(launch, reps);
#if defined(CAKEMOE_WITH_CUDA)
  return gpu_median_us(launch, reps, capture);
#else
  (void)capture;
  throw Unsupported("gpu", "this build has no CUDA (CAKEMOE_WITH_CUDA=OFF)");
#endif
}

std::string rows_json(const std::vector<BenchRow>& rows) {
  std::string out = "[\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const BenchRow& r = rows[i];
    out += "  {\"workload\": \"" + r.workload + "\", \"family\": \"" + r.family +
           "\", \"T\": " + std::to_string(r.tokens) + ", \"us\": ";
    print_json_number(out, r.us, "%.3f");
    out += ", \"floor_us\": ";
    if (r.floor_us < 0) {
      out += "null";
    } else {
      print_json_number(out, r.floor_us, "%.3f");
    }
    out += ", \"unique_experts\": ";
    out += r.unique_experts < 0 ? "null" : std::to_string(r.unique_experts);
    out += ", \"path\": \"" + r.path + "\"}";
    out += i + 1 < rows.size() ? ",\n" : "\n";
  }
  return out + "]\n";
}

std::string fraction_text(const BenchRow& row) {
  char text[16];
  if (row.floor_us < 0 || row.us <= 0) return "     -";
  std::snprintf(text, sizeof(text), "%6.2f", row.floor_us / row.us);
  return text;
}

bool run_bench(const BenchOptions& options) {
  const int reps = static_cast<int>(options.reps > 0 ? options.reps : options.gpu ? 20 : 3);
  if (!options.gpu) {
    std::printf(
        "cakemoe bench: CPU reference engine (no CUDA device, or --cpu). These are timings of the\n"
        "spec-as-code engine at small sizes, not performance targets: the GPU tables (fraction of\n"
        "the roofline) need a CUDA device.\n");
    if (options.workload != "all") {
      std::printf("(--workload selects a GPU geometry; the CPU engine runs cpu_small)\n");
    }
  }
  std::ofstream json;
  if (!options.json_path.empty()) {  // opened first: a bad path fails before the long part
    json.open(options.json_path);
    if (!json) {
      std::fprintf(stderr, "cakemoe bench: --json: cannot write %s\n", options.json_path.c_str());
      return false;
    }
  }
  std::vector<BenchRow> rows;
  if (options.pipeline == "all" || options.pipeline == "stepfun") {
    const std::vector<BenchRow> part = bench_stepfun(options, reps);
    rows.insert(rows.end(), part.begin(), part.end());
  }
  if (options.pipeline == "all" || options.pipeline == "bgmv") {
    const std::vector<BenchRow> part = bench_bgmv(options, reps);
    rows.insert(rows.end(), part.begin(), part.end());
  }
  if (json.is_open()) {
    json << rows_json(rows);
    json.close();
    if (!json) {
      std::fprintf(stderr, "cakemoe bench: --json: writing %s failed\n", options.json_path.c_str());
      return false;
    }
    std::printf("\nwrote %zu rows to %s\n", rows.size(), options.json_path.c_str());
  }
  return true;
}

}  // namespace tools
}  // namespace cakemoe
