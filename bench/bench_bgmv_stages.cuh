// bench_bgmv --stages (bench/NOTES.md "BGMV Cake path on the H200", recommendation 0): for a few
// representative rows, the median cold-L2 time of graph replays of the whole plan, the order-remap
// prologue, the shrink alone, the expand alone, and empty graphs (the launch-latency floor), with
// the spec §14 bytes each stage must move. Included by bench_bgmv.cu only.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "bench_bgmv_common.cuh"
#include "bgmv/cake_device.cuh"
#include "bgmv/cake_launch.h"
#include "bgmv/grouped_launch.h"
#include "bgmv/plan_impl.h"
#include "core/kernel_registry.h"

namespace cakemoe {
namespace {

__global__ void null_kernel() {}
// The per-route plans' launch pattern with nothing in it: the first grid triggers its dependent
// at entry, the second is launched as a programmatic dependent and waits.
__global__ void null_trigger_kernel() { bgmv::dev::pdl_trigger(); }
__global__ void null_wait_kernel() { bgmv::dev::pdl_wait(); }

// The handoff of a decode plan with nothing else in it (bench/NOTES.md session 15): producers
// (the shrink: kHandoffProducers CTAs, 12 KB each from HBM) hand 512 bytes each to consumers (the
// expand: kHandoffConsumers CTAs that load 16 KB of their own before the handoff, then read every
// producer's bytes). Two kernels with a PDL edge, or one kernel whose consumers spin on an arrival
// counter the producers release (reset by the last consumer: the next replay starts after this
// grid completed).
constexpr int kHandoffProducers = 32, kHandoffConsumers = 24, kHandoffThreads = 128;
constexpr int kHandoffProducerVectors = 12 * 1024 / 16 / kHandoffThreads;  // uint4 per thread
constexpr int kHandoffConsumerVectors = 16 * 1024 / 16 / kHandoffThreads;

struct HandoffBuffers {
  const uint4* a;      ///< [producers][12 KB]
  const uint4* b;      ///< [consumers][16 KB]
  float* mid;          ///< [producers][128]
  float* out;          ///< [consumers][128]
  unsigned* counters;  ///< {arrivals, departures}, zero between launches
};

/// The sum of this thread's kVectors 16-byte loads src[i * kHandoffThreads + tid] (the loads
/// are what the graphs time; the sum keeps them alive).
template <int kVectors>
__device__ __forceinline__ float handoff_load(const uint4* src) {
  float acc = 0.0f;
#pragma unroll
  for (int i = 0; i < kVectors; ++i) {
    const uint4 v = __ldg(src + i * kHandoffThreads + threadIdx.x);
    acc +=
        __uint_as_float(v.x) + __uint_as_float(v.y) + __uint_as_float(v.z) + __uint_as_float(v.w);
  }
  return acc;
}

__device__ __forceinline__ void handoff_produce(const HandoffBuffers& h, int cta) {
  h.mid[cta * kHandoffThreads + threadIdx.x] =
      handoff_load<kHandoffProducerVectors>(h.a + cta * kHandoffProducerVectors * kHandoffThreads);
}

__device__ __forceinline__ float handoff_preload(const HandoffBuffers& h, int cta) {
  return handoff_load<kHandoffConsumerVectors>(h.b +
                                               cta * kHandoffConsumerVectors * kHandoffThreads);
}

__device__ __forceinline__ void handoff_consume(const HandoffBuffers& h, int cta, float acc) {
#pragma unroll 8
  for (int j = 0; j < kHandoffProducers; ++j)
    acc += __ldcg(h.mid + j * kHandoffThreads + threadIdx.x);
  h.out[cta * kHandoffThreads + threadIdx.x] = acc;
}

__global__ void handoff_producer_kernel(HandoffBuffers h) {
  bgmv::dev::pdl_trigger();
  handoff_produce(h, blockIdx.x);
}
__global__ void handoff_consumer_kernel(HandoffBuffers h) {
  const float acc = handoff_preload(h, blockIdx.x);
  bgmv::dev::pdl_wait();
  handoff_consume(h, blockIdx.x, acc);
}
__global__ void handoff_one_kernel(HandoffBuffers h) {
  if (blockIdx.x < kHandoffProducers) {
    handoff_produce(h, blockIdx.x);
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(h.counters, 1u);
    }
    return;
  }
  const int cta = blockIdx.x - kHandoffProducers;
  const float acc = handoff_preload(h, cta);
  if (threadIdx.x == 0) {
    unsigned seen = 0;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(h.counters) : "memory");
    } while (seen < kHandoffProducers);
  }
  __syncthreads();
  handoff_consume(h, cta, acc);
  if (threadIdx.x == 0 && atomicAdd(h.counters + 1, 1u) == kHandoffConsumers - 1) {
    h.counters[0] = 0;
    h.counters[1] = 0;
  }
}

// The same bytes handed off inside thread-block clusters (the skeleton of the cluster decode,
// bench/NOTES.md session 15: 4.70 µs, while the real one lost 1.27-1.56x): 56 CTAs in clusters of
// 8, each reads 6 KB from HBM into a partial and loads 8 KB of its own, then a cluster barrier,
// then it reads its 7 peers' partials through distributed shared memory.
constexpr int kHandoffClusterCtas = 56, kHandoffCluster = 8;
__global__ void __cluster_dims__(kHandoffCluster, 1, 1) handoff_cluster_kernel(HandoffBuffers h) {
  namespace cg = cooperative_groups;
  __shared__ float partial[kHandoffThreads];
  const cg::cluster_group cluster = cg::this_cluster();
  const int cta = blockIdx.x;
  constexpr int kA = kHandoffProducerVectors / 2, kB = kHandoffConsumerVectors / 2;
  const float acc = handoff_load<kA>(h.a + cta * kA * kHandoffThreads);
  float pre = handoff_load<kB>(h.b + cta * kB * kHandoffThreads);
  partial[threadIdx.x] = acc;
  cluster.sync();
#pragma unroll
  for (unsigned r = 0; r < kHandoffCluster; ++r)
    pre += *cluster.map_shared_rank(&partial[threadIdx.x], r);
  cluster.sync();  // no CTA leaves while a peer may still read its shared memory
  h.out[cta * kHandoffThreads + threadIdx.x] = pre;
}

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
  // launch operands (the specialized variant has its own kernels; --specialized times it).
  bgmv::detail::PrepareInternals generic;
  generic.variant_override = 0;
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
    // The grouped pipeline's launches sit behind one launcher: time plans cut after each stage
    // (PrepareInternals::grouped_last_stage, PDL as in the whole plan); a stage's row is the
    // difference of its prefix and the one before, i.e. what it adds to the pipelined plan.
    const char* names[] = {"index (prefix)", "+ shrink", "+ expand"};
    double before = 0;
    for (int last = 0; last < 3; ++last) {
      bgmv::detail::PrepareInternals cut = generic;
      cut.grouped_last_stage = last;
      bgmv::BgmvPlan prefix(bgmv::detail::prepare_impl(in.x, {in.a}, {in.b}, in.sorted, in.experts,
                                                       in.loras, in.weights, s.experts, {}, cut));
      const double us = bench.time_plan(prefix);
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

void run_redundant_cluster_graphs(Bench& bench);  // bench_bgmv_decode_skeleton.cuh

/// The decode handoff in two kernels with a PDL edge against one kernel with a spin (plain and
/// with the cooperative launch attribute, which guarantees the co-residency the spin needs).
void run_handoff_graphs(Bench& bench) {
  const size_t a_bytes = size_t{kHandoffProducers} * 12 * 1024;
  // NOTE: the cluster form reads 8 KB of b and writes 512 B of out per CTA, for 56 CTAs.
  const size_t b_bytes = size_t{kHandoffClusterCtas} * 8 * 1024;
  const size_t mid_bytes = size_t{kHandoffProducers} * kHandoffThreads * sizeof(float);
  const size_t out_bytes = size_t{kHandoffClusterCtas} * kHandoffThreads * sizeof(float);
  char* base = nullptr;
  const size_t total = a_bytes + b_bytes + mid_bytes + out_bytes + 256;
  CAKEMOE_CUDA_CHECK(cudaMalloc(&base, total));
  CAKEMOE_CUDA_CHECK(cudaMemset(base, 0x3c, total - 256));
  CAKEMOE_CUDA_CHECK(cudaMemset(base + total - 256, 0, 256));
  HandoffBuffers h{};
  h.a = reinterpret_cast<const uint4*>(base);
  h.b = reinterpret_cast<const uint4*>(base + a_bytes);
  h.mid = reinterpret_cast<float*>(base + a_bytes + b_bytes);
  h.out = reinterpret_cast<float*>(base + a_bytes + b_bytes + mid_bytes);
  h.counters = reinterpret_cast<unsigned*>(base + total - 256);
  try {
    const GraphExec two(bench.stream, [&](cudaStream_t st) {
      handoff_producer_kernel<<<kHandoffProducers, kHandoffThreads, 0, st>>>(h);
      CAKEMOE_CUDA_CHECK(cudaGetLastError());
      bgmv::dev::launch_pdl(handoff_consumer_kernel, dim3(kHandoffConsumers), dim3(kHandoffThreads),
                            0, st, true, h);
    });
    print_stage({"handoff, 2k PDL", bench.time_graph(two.get())});
    const GraphExec one(bench.stream, [&](cudaStream_t st) {
      handoff_one_kernel<<<kHandoffProducers + kHandoffConsumers, kHandoffThreads, 0, st>>>(h);
      CAKEMOE_CUDA_CHECK(cudaGetLastError());
    });
    print_stage({"handoff, 1k spin", bench.time_graph(one.get())});
    const GraphExec coop(bench.stream, [&](cudaStream_t st) {
      cudaLaunchConfig_t config = {};
      config.gridDim = dim3(kHandoffProducers + kHandoffConsumers);
      config.blockDim = dim3(kHandoffThreads);
      config.stream = st;
      cudaLaunchAttribute attribute[1] = {};
      attribute[0].id = cudaLaunchAttributeCooperative;
      attribute[0].val.cooperative = 1;
      config.attrs = attribute;
      config.numAttrs = 1;
      CAKEMOE_CUDA_CHECK(cudaLaunchKernelEx(&config, handoff_one_kernel, h));
    });
    print_stage({"handoff, 1k spin coop", bench.time_graph(coop.get())});
    const GraphExec clusters(bench.stream, [&](cudaStream_t st) {
      handoff_cluster_kernel<<<kHandoffClusterCtas, kHandoffThreads, 0, st>>>(h);
      CAKEMOE_CUDA_CHECK(cudaGetLastError());
    });
    print_stage({"handoff, 1k clusters of 8", bench.time_graph(clusters.get())});
    unsigned counters[2] = {1, 1};
    CAKEMOE_CUDA_CHECK(cudaMemcpy(counters, h.counters, sizeof(counters), cudaMemcpyDeviceToHost));
    std::printf("  handoff counters after the replays: %u %u (0 0 expected)\n", counters[0],
                counters[1]);
  } catch (const std::exception& e) {
    std::printf("  handoff graphs not measured: %s\n", e.what());
  }
  CAKEMOE_CUDA_CHECK(cudaFree(base));
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
  run_handoff_graphs(bench);
  run_redundant_cluster_graphs(bench);
}

/// --stages: the representative rows of bench/NOTES.md (L 8, E 128) and the 4-LoRA vLLM rows
/// at T 1024 / 2048 (H 3072) and T 1024 (H 2688).
int run_stage_mode(Bench& bench) {
  const std::vector<Shape> shapes = {
      {3072, 32, 1, 2, 8, 128},    {3072, 32, 8, 2, 8, 128},    {3072, 32, 256, 2, 8, 128},
      {3072, 32, 1024, 2, 8, 128}, {3072, 32, 2048, 2, 8, 128}, {3072, 64, 8, 8, 8, 128},
      {2688, 32, 512, 6, 8, 128},  {3072, 32, 1024, 2, 4, 128}, {3072, 32, 2048, 2, 4, 128},
      {2688, 32, 1024, 2, 4, 128}};
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

#include "bench_bgmv_decode_skeleton.cuh"  // NOTE: last: it uses GraphExec and print_stage
