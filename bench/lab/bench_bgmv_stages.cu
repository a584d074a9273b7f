// BGMV stage table (bench/NOTES.md "BGMV Cake path on the H200", recommendation 0), a lab binary
// built on demand (`cmake --build BUILD --target bench_bgmv_stages`): for a few representative
// rows, the median cold-L2 time of graph replays of the whole plan, the order-remap prologue, the
// shrink alone, the expand alone (per-route plans) or of the grouped pipeline cut after each stage
// (grouped plans, from the product's per-stage launchers), and empty graphs (the launch-latency
// floor), with the spec §14 bytes each stage must move.
//
//   bench_bgmv_stages [--reps=N] [--flush=memset|none]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "bench_bgmv_common.cuh"
#include "bgmv/cake_device.cuh"
#include "bgmv/cake_launch.h"
#include "bgmv/cuda_plan_launch.h"
#include "bgmv/grouped_launch.h"
#include "bgmv/grouped_pipeline.cuh"
#include "bgmv/plan_impl.h"
#include "core/kernel_registry.h"
#include "ptx/sync.cuh"

namespace cakemoe {
namespace {

__global__ void null_kernel() {}
// The per-route plans' launch pattern with nothing in it: the first grid triggers its dependent
// at entry, the second is launched as a programmatic dependent and waits.
__global__ void null_trigger_kernel() { ptx::griddep_launch_dependents(); }
__global__ void null_wait_kernel() { ptx::griddep_wait(); }

/// An instantiated graph, destroyed with its owner.
class GraphExec {
 public:
  /// Captures what `enqueue(stream)` launches on `stream` (which must be idle).
  template <typename F>
  GraphExec(cudaStream_t stream, F&& enqueue) {
    CAKEMOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      enqueue(stream);
    } catch (...) {  // leave the stream usable: end the broken capture before rethrowing
      cudaStreamEndCapture(stream, &graph_);
      release();
      throw;
    }
    CAKEMOE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph_));
    const cudaError_t status = cudaGraphInstantiate(&exec_, graph_, 0);
    if (status != cudaSuccess) release();
    CAKEMOE_CUDA_CHECK(status);
  }
  ~GraphExec() { release(); }
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  cudaGraphExec_t get() const { return exec_; }

 private:
  void release() noexcept {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) cudaGraphDestroy(graph_);
    exec_ = nullptr;
    graph_ = nullptr;
  }

  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

struct StageRow {
  std::string name;
  double us = 0;
  double bytes_min = 0;    ///< spec §14, each touched bin's weights once
  double bytes_route = 0;  ///< spec §14 per-route: every route reads its own weight rows
};

/// The Cake launch operands of a per-route plan, as prepare builds them
/// (bgmv::detail::cake_params), plus the order-remap permutation when the plan uses it.
/// NOTE: pdl_mode is 0 here: a stage graph holds one kernel, so there is no producer to overlap
/// with (spec §4.4); the PDL gain shows only in the whole-plan row.
bgmv::CakeParams cake_params(const bgmv::BgmvPlan::Impl& impl) {
  bgmv::CakeParams cp = bgmv::detail::cake_params(impl);
  cp.pdl_mode = 0;
  if (impl.choice.order_remap) cp.order = impl.order_workspace.ptr<int32_t>();
  return cp;
}

bgmv::OrderBuildParams order_params(const bgmv::CakeParams& cp) {
  bgmv::OrderBuildParams o;
  o.sorted_token_ids = cp.sorted_token_ids;
  o.expert_ids = cp.expert_ids;
  o.lora_indices = cp.lora_indices;
  o.order = const_cast<int32_t*>(cp.order);
  o.num_tokens = static_cast<int>(cp.T);
  o.num_pairs = static_cast<int>(cp.P);
  o.num_loras = static_cast<int>(cp.L);
  o.num_experts = static_cast<int>(cp.E);
  return o;
}

/// spec §14 terms split by stage: the shrink reads x, A, the routing and writes shrink_out; the
/// expand reads shrink_out, B, experts and weights and writes y; the order build reads the routing
/// and writes order[P].
double shrink_bytes(const Shape& s, int64_t bins) {
  const double b = 2, p = double(s.tokens * s.top_k);
  return b * s.hidden * (s.tokens + double(bins) * s.rank) + p * (8 + 8) + s.tokens * 8.0 +
         p * s.rank * b;
}
double expand_bytes(const Shape& s, int64_t bins) {
  const double b = 2, p = double(s.tokens * s.top_k);
  return b * s.hidden * double(bins) * s.rank + 4.0 * s.tokens * s.hidden + p * (8 + 4) +
         p * s.rank * b;
}
double order_bytes(const Shape& s) {
  const double p = double(s.tokens * s.top_k);
  return p * (8 + 8 + 4) + s.tokens * 8.0;
}

void print_stage(const StageRow& r) {
  const auto gbs = [&](double bytes) { return r.us > 0 ? bytes / (r.us * 1e3) : 0.0; };
  std::printf("  %-20s %9.2f | %9.2f %8.1f %5.1f%% | %9.2f %8.1f\n", r.name.c_str(), r.us,
              r.bytes_min / 1e6, gbs(r.bytes_min), 100.0 * gbs(r.bytes_min) / (kHbmTbPerS * 1e3),
              r.bytes_route / 1e6, gbs(r.bytes_route));
}

/// Stage times of one shape. Order of the measurements matters for the route index (spec §3.3):
/// the whole plan first (its last replay leaves a consistent index), then the expand alone (it
/// only rewrites the other parity's bases and the launch counter, so every replay finds the same
/// published routes), then the order build and the shrink alone (each replay publishes again;
/// slots past 16 are dropped, so the work per replay stays the same). The plan is dropped after.
void run_stages(Bench& bench, const Shape& s, void* a_buf, void* b_buf, void* x_buf, bool sm90) {
  const Inputs in(s, a_buf, b_buf, x_buf);
  const int64_t u = in.routing.bins_touched, p = s.tokens * s.top_k;
  // NOTE: the generic variant: the stages below are the generic kernels, driven with the plan's
  // launch operands (the specialized variant has its own kernels; bench_bgmv --specialized
  // times it).
  bgmv::PlanOverrides generic;
  generic.variant = bgmv::Variant::kGeneric;
  std::shared_ptr<bgmv::BgmvPlan::Impl> impl = bgmv::detail::prepare_impl(
      in.x, {in.a}, {in.b}, in.sorted, in.experts, in.loras, in.weights, s.experts, {}, generic);
  bgmv::BgmvPlan plan(impl);
  std::printf("H %lld R %lld T %lld k %lld L %lld E %lld (U %lld, P %lld): %s\n",
              (long long)s.hidden, (long long)s.rank, (long long)s.tokens, (long long)s.top_k,
              (long long)s.loras, (long long)s.experts, (long long)u, (long long)p,
              plan_label(plan).c_str());
  std::vector<StageRow> rows;
  rows.push_back({"whole plan", bench.time_plan(plan), bytes_min(s, u), bytes_min(s, p)});
  {
    // bench/NOTES.md recommendation 6: the whole plan under the other flush too, so the dirty-line
    // write-back of the memset flush shows as the difference of these two rows.
    const FlushMode own = bench.flush_mode;
    bench.flush_mode = own == FlushMode::kRead ? FlushMode::kMemset : FlushMode::kRead;
    rows.push_back(
        {std::string("whole, ") + (own == FlushMode::kRead ? "memset" : "read") + " flush",
         bench.time_plan(plan), bytes_min(s, u), bytes_min(s, p)});
    bench.flush_mode = own;
  }
  if (plan.backend_used() == "cake" && plan.grouped()) {
    // The grouped pipeline cut after each stage (the product's stage launchers, PDL as in the
    // whole plan); a stage's row is the difference of its prefix and the one before, i.e. what it
    // adds to the pipelined plan.
    const bgmv::GroupedParams& g = impl->cuda->launch()->grouped;
    const char* names[] = {"index (prefix)", "+ shrink", "+ expand"};
    double before = 0;
    for (int last = 0; last < 3; ++last) {
      const GraphExec prefix(bench.stream, [&](cudaStream_t st) {
        bgmv::grouped::launch_grouped_index(g, st);
        if (last >= 1) bgmv::grouped::launch_grouped_shrink<true>(g, st);
        if (last >= 2) bgmv::grouped::launch_grouped_expand<true>(g, st);
      });
      const double us = bench.time_graph(prefix.get());
      rows.push_back({names[last], us - before});
      before = us;
    }
    rows.push_back({"+ combine", rows.front().us - before});
  }
  if (plan.backend_used() != "cake" || plan.grouped()) {
    for (const StageRow& r : rows) print_stage(r);
    if (!plan.grouped()) std::printf("  (stages not separable from the bench for this path)\n");
    return;
  }
  const bgmv::CakeParams cp = cake_params(*impl);
  {
    const GraphExec g(bench.stream, [&](cudaStream_t st) { bgmv::launch_cake_expand(cp, st); });
    rows.push_back({"expand", bench.time_graph(g.get()), expand_bytes(s, u), expand_bytes(s, p)});
  }
  double sum = rows.back().us;
  if (cp.order != nullptr) {
    const core::KernelUnit* unit = core::find_kernel_unit("bgmv", "order_build", "", 0, sm90);
    if (unit != nullptr) {
      const auto build = reinterpret_cast<bgmv::OrderBuildLauncher>(unit->launch);
      const bgmv::OrderBuildParams o = order_params(cp);
      const GraphExec g(bench.stream, [&](cudaStream_t st) { build(o, st); });
      rows.push_back({"order build", bench.time_graph(g.get()), order_bytes(s), order_bytes(s)});
      sum += rows.back().us;
    }
  }
  {
    const GraphExec g(bench.stream, [&](cudaStream_t st) { bgmv::launch_cake_shrink(cp, st); });
    rows.push_back({"shrink", bench.time_graph(g.get()), shrink_bytes(s, u), shrink_bytes(s, p)});
    sum += rows.back().us;
  }
  rows.push_back({"sum of stages", sum, bytes_min(s, u), bytes_min(s, p)});
  for (const StageRow& r : rows) print_stage(r);
}

/// Empty graphs under the same flush / event protocol: 0, 1 and 2 null-kernel nodes, and 2 with
/// the programmatic (PDL) edge the per-route plans use (the floor a one-kernel decode competes
/// with).
void run_empty_graphs(Bench& bench) {
  for (int kernels = 0; kernels <= 2; ++kernels) {
    const std::string name = "empty graph, " + std::to_string(kernels) + "k";
    try {
      const GraphExec g(bench.stream, [&](cudaStream_t st) {
        for (int i = 0; i < kernels; ++i) null_kernel<<<1, 32, 0, st>>>();
        CAKEMOE_CUDA_CHECK(cudaGetLastError());
      });
      print_stage({name, bench.time_graph(g.get())});
    } catch (const std::exception& e) {  // NOTE: some runtimes refuse a graph with no node
      std::printf("  %-20s not measured: %s\n", name.c_str(), e.what());
    }
  }
  const GraphExec g(bench.stream, [&](cudaStream_t st) {
    null_trigger_kernel<<<1, 32, 0, st>>>();
    CAKEMOE_CUDA_CHECK(cudaGetLastError());
    bgmv::dev::launch_pdl(null_wait_kernel, dim3(1), dim3(32), 0, st, true);
  });
  print_stage({"empty graph, 2k PDL", bench.time_graph(g.get())});
}

/// The representative rows of bench/NOTES.md (L 8, E 128) and the 4-LoRA vLLM rows at T 1024 /
/// 2048 (H 3072) and T 1024 (H 2688).
int run_stage_mode(Bench& bench) {
  const std::vector<Shape> shapes = {{3072, 32, 1, 2, 8, 128},    {3072, 32, 8, 2, 8, 128},
                                     {3072, 32, 256, 2, 8, 128},  {3072, 32, 1024, 2, 8, 128},
                                     {3072, 32, 2048, 2, 8, 128}, {3072, 64, 8, 8, 8, 128},
                                     {2688, 32, 512, 6, 8, 128},  {3072, 32, 1024, 2, 4, 128},
                                     {3072, 32, 2048, 2, 4, 128}, {2688, 32, 1024, 2, 4, 128}};
  std::printf(
      "BGMV stage bench: graph replay of each stage alone (per-route plans; stage graphs "
      "without PDL) or of the plan cut after each stage (grouped plans: what each stage "
      "adds, PDL kept), L2 flush (%s) per rep, median of %d reps, bf16; roofline %.2f "
      "TB/s\n",
      bench.flush_name(), bench.reps, kHbmTbPerS);
  std::printf("  %-20s %9s | %9s %8s %6s | %9s %8s\n", "stage", "us", "min MB", "GB/s", "%roof",
              "route MB", "GB/s");
  run_empty_graphs(bench);
  const TableBuffers buf(8 * 128 * 64 * 3072, 2048 * 3072);
  const bool sm90 = core::cuda_capability(0) == 90;
  for (const Shape& s : shapes) run_stages(bench, s, buf.a, buf.b, buf.x, sm90);
  return 0;
}

}  // namespace
}  // namespace cakemoe

int main(int argc, char** argv) {
  try {
    cakemoe::Bench bench;
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg.rfind("--reps=", 0) == 0) bench.reps = std::max(1, std::stoi(arg.substr(7)));
      if (arg == "--flush=memset") bench.flush_mode = cakemoe::FlushMode::kMemset;
      if (arg == "--flush=none") bench.flush_mode = cakemoe::FlushMode::kNone;
    }
    return cakemoe::run_stage_mode(bench);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_bgmv_stages: %s\n", e.what());
    return 1;
  }
}
