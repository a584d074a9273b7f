// The StepFun EP layer's table (issue 29): the Step-3.5 layer (E 288, I 1280, H 4096, K 8) at EP
// 2 / 4 / 8 (as many GPUs as are visible), T per rank in {8, 64, 512, 4096}, bf16 and nvfp4, both
// schemes. Per row: per-stage µs (dispatch, layer, combine; the slowest rank's mean over the
// timed launches), bytes on the wire per rank, an NCCL all-to-all of the same bytes measured in
// the same run (its µs and GB/s), and the efficiency against the single-GPU layer on all W·T
// tokens: (single-GPU µs / W) / (EP layer-stage µs) and the same over the whole EP launch.
//
// One process, one thread per GPU (rank r on device r, ncclCommInitAll); NCCL_NVLS_ENABLE=0 is
// set before NCCL starts. Weights are random valid codes of the family (bench_stepfun_layer's),
// sliced per rank from one copy on GPU 0; routing from the seeded fp32 logits. With fewer than 2
// GPUs it says so and measures only the single-rank layer (EP 1: the layer's overhead).
// A plain main: --help lists the flags.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cakemoe/stepfun_ep.h"
#include "core/cuda_check.h"
#include "core/cuda_util.h"
#include "stepfun_layer_inputs.cuh"

#if defined(CAKEMOE_WITH_NCCL)
#include <nccl.h>

#include <condition_variable>
#include <mutex>
#include <thread>
#endif

namespace cakemoe {
namespace stepfun {
namespace {

struct Options {
  std::vector<Family> families = {Family::kBF16, Family::kNVFP4};
  std::vector<int> worlds = {2, 4, 8};
  std::vector<int64_t> tokens = {8, 64, 512, 4096};
  std::vector<ep::Scheme> schemes = {ep::Scheme::kAllToAll, ep::Scheme::kAllGather};
  int warmup = 5;
  int iters = 20;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

void usage() {
  std::printf(
      "bench_stepfun_ep [--families bf16,nvfp4] [--ep 2,4,8] [--tokens 8,64,512,4096]\n"
      "                 [--schemes all_to_all,all_gather] [--warmup 5] [--iters 20]\n"
      "Step-3.5 layer under expert parallelism over NCCL; one thread per visible GPU.\n");
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw InvalidArgument(flag, "needs a value");
    const std::string value = argv[++i];
    if (flag == "--families") {
      o.families.clear();
      for (const std::string& v : split(value)) o.families.push_back(parse_family(v));
    } else if (flag == "--ep") {
      o.worlds.clear();
      for (const std::string& v : split(value)) o.worlds.push_back(std::stoi(v));
    } else if (flag == "--tokens") {
      o.tokens.clear();
      for (const std::string& v : split(value)) o.tokens.push_back(std::stoll(v));
    } else if (flag == "--schemes") {
      o.schemes.clear();
      for (const std::string& v : split(value)) o.schemes.push_back(ep::parse_scheme(v));
    } else if (flag == "--warmup") {
      o.warmup = std::stoi(value);
    } else if (flag == "--iters") {
      o.iters = std::stoi(value);
    } else {
      throw InvalidArgument(flag, "unknown flag (see --help)");
    }
  }
  return o;
}

#if defined(CAKEMOE_WITH_NCCL)

constexpr layer_bench::Workload kStep35 = layer_bench::kWorkloads[0];

/// A reusable barrier for the rank threads (C++17 has no std::barrier).
class Barrier {
 public:
  explicit Barrier(int count) : count_(count) {}
  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    const int generation = generation_;
    if (++waiting_ == count_) {
      waiting_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation != generation_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int count_, waiting_ = 0, generation_ = 0;
};

/// Mean µs of `iters` runs of `body(stream)` between two events (after `warmup` runs).
template <typename Body>
double time_us(cudaStream_t stream, int warmup, int iters, const Body& body) {
  for (int i = 0; i < warmup; ++i) body(stream);
  cudaEvent_t start, stop;
  CAKEMOE_CUDA_CHECK(cudaEventCreate(&start));
  CAKEMOE_CUDA_CHECK(cudaEventCreate(&stop));
  CAKEMOE_CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < iters; ++i) body(stream);
  CAKEMOE_CUDA_CHECK(cudaEventRecord(stop, stream));
  CAKEMOE_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0.f;
  CAKEMOE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  CAKEMOE_CUDA_CHECK(cudaEventDestroy(start));
  CAKEMOE_CUDA_CHECK(cudaEventDestroy(stop));
  return 1e3 * ms / iters;
}

/// The whole layer's arguments for the first `tokens` rows on GPU 0 (all experts).
MoeArgs full_args(Family f, const StepFunWeights& v, const StepFunActivations& act,
                  const Tensor& logits) {
  MoeArgs a;
  a.family = f;
  a.hidden_states = act.hidden_states;
  a.hidden_states_scale = act.hidden_states_scale;
  a.per_token_scale = act.per_token_scale;
  a.gemm1_weights = v.gemm1_weights;
  a.gemm1_weights_scale = v.gemm1_weights_scale;
  a.gemm2_weights = v.gemm2_weights;
  a.gemm2_weights_scale = v.gemm2_weights_scale;
  a.output1_scale_scalar = v.output1_scale_scalar;
  a.output1_scale_gate_scalar = v.output1_scale_gate_scalar;
  a.output2_scale_scalar = v.output2_scale_scalar;
  a.gemm1_clamp_limit = v.gemm1_clamp_limit;
  a.routing_logits = logits;
  a.num_experts = kStep35.experts;
  a.top_k = kStep35.top_k;
  a.local_num_experts = kStep35.experts;
  return a;
}

/// Rows [start, start + n) of a contiguous tensor (dim 0) copied to cuda:`device`.
TensorView slice_to(const TensorView& t, int64_t start, int64_t n, int device,
                    std::vector<Tensor>* pool) {
  if (!t.defined()) return TensorView();
  TensorView v = t;
  v.data = static_cast<uint8_t*>(t.data) + start * static_cast<int64_t>(t.nbytes() / t.shape[0]);
  v.shape[0] = n;
  pool->push_back(core::copy_to(v, Device::cuda(device)));
  return pool->back();
}

struct RankTimes {
  double dispatch = 0, layer = 0, combine = 0, total = 0, a2a_dispatch = 0, a2a_combine = 0;
  ep::EpSizes sizes;
  std::string error;
};

/// NCCL all-to-all (grouped send/recv, every peer) of `bytes` per peer.
void nccl_all_to_all(ncclComm_t comm, int world, const uint8_t* send, uint8_t* recv, size_t bytes,
                     cudaStream_t stream) {
  ncclGroupStart();
  for (int p = 0; p < world; ++p) {
    ncclSend(send + p * bytes, bytes, ncclUint8, p, comm, stream);
    ncclRecv(recv + p * bytes, bytes, ncclUint8, p, comm, stream);
  }
  ncclGroupEnd();
}

/// Mean µs of every stage on every rank (slowest rank reported) for one scheme.
RankTimes run_rank(const Options& o, ep::Scheme scheme, int r, int world, int64_t tokens,
                   const MoeArgs& full, ncclComm_t comm, Barrier* barrier) {
  RankTimes t;
  CAKEMOE_CUDA_CHECK(cudaSetDevice(r));
  std::vector<Tensor> pool;
  ep::EpArgs a;
  a.comm = comm;
  a.scheme = scheme;
  a.layer = full;
  MoeArgs& m = a.layer;
  for (TensorView* v :
       {&m.hidden_states, &m.hidden_states_scale, &m.per_token_scale, &m.routing_logits}) {
    *v = slice_to(*v, r * tokens, tokens, r, &pool);
  }
  const int64_t per_rank = kStep35.experts / world, off = r * per_rank;
  for (TensorView* w :
       {&m.gemm1_weights, &m.gemm1_weights_scale, &m.gemm2_weights, &m.gemm2_weights_scale,
        &m.output1_scale_scalar, &m.output1_scale_gate_scalar, &m.output2_scale_scalar,
        &m.gemm1_clamp_limit}) {
    *w = slice_to(*w, off, per_rank, r, &pool);
  }
  m.local_expert_offset = off;
  m.local_num_experts = per_rank;
  const ep::EpLaunch launch = ep::prepare(a);
  t.sizes = launch.sizes();
  cudaStream_t stream = nullptr;
  CAKEMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const auto timed = [&](auto body) {
    barrier->wait();  // ranks start each measurement together
    return time_us(stream, o.warmup, o.iters, body);
  };
  t.total = timed([&](cudaStream_t s) { launch.launch(s); });
  t.dispatch = timed([&](cudaStream_t s) { launch.launch_dispatch(s); });
  t.layer = timed([&](cudaStream_t s) { launch.launch_layer(s); });
  t.combine = timed([&](cudaStream_t s) { launch.launch_combine(s); });

  // NCCL all-to-all of the same bytes per peer, the same buffers sizes as the layer's.
  const size_t dispatch_bytes = t.sizes.rows_per_peer * t.sizes.dispatch_row_bytes;
  const size_t combine_bytes = t.sizes.rows_per_peer * t.sizes.combine_row_bytes;
  const size_t most = std::max(dispatch_bytes, combine_bytes) * world;
  Tensor send = Tensor::empty({static_cast<int64_t>(most)}, DType::kUInt8, Device::cuda(r));
  Tensor recv = Tensor::empty({static_cast<int64_t>(most)}, DType::kUInt8, Device::cuda(r));
  for (const bool dispatch : {true, false}) {
    const size_t bytes = dispatch ? dispatch_bytes : combine_bytes;
    const double us = timed([&](cudaStream_t s) {
      nccl_all_to_all(comm, world, send.ptr<uint8_t>(), recv.ptr<uint8_t>(), bytes, s);
    });
    (dispatch ? t.a2a_dispatch : t.a2a_combine) = us;
  }
  CAKEMOE_CUDA_CHECK(cudaStreamDestroy(stream));
  return t;
}

void print_header() {
  std::printf(
      "| family | EP | T/rank | scheme | dispatch µs | layer µs | combine µs | EP total µs | "
      "wire MB/rank | NCCL a2a µs (disp / comb) | a2a GB/s | EP wire GB/s | 1-GPU µs | "
      "eff layer | eff total |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
}

/// One row per scheme: EP `world` at `tokens` per rank against `single_us` (1 GPU, W*T tokens).
void run_point(const Options& o, Family f, int world, int64_t tokens, const MoeArgs& full,
               double single_us, const std::vector<ncclComm_t>& comms) {
  for (const ep::Scheme scheme : o.schemes) {
    std::vector<RankTimes> times(world);
    Barrier barrier(world);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        try {
          times[r] = run_rank(o, scheme, r, world, tokens, full, comms[r], &barrier);
        } catch (const std::exception& e) {
          times[r].error = e.what();
        }
      });
    }
    for (std::thread& th : threads) th.join();
    RankTimes worst;
    for (const RankTimes& t : times) {
      if (!t.error.empty()) {
        std::printf("| %s | %d | %lld | %s | failed: %s |\n", family_name(f), world,
                    static_cast<long long>(tokens), ep::scheme_name(scheme), t.error.c_str());
        return;
      }
      worst.dispatch = std::max(worst.dispatch, t.dispatch);
      worst.layer = std::max(worst.layer, t.layer);
      worst.combine = std::max(worst.combine, t.combine);
      worst.total = std::max(worst.total, t.total);
      worst.a2a_dispatch = std::max(worst.a2a_dispatch, t.a2a_dispatch);
      worst.a2a_combine = std::max(worst.a2a_combine, t.a2a_combine);
    }
    const ep::EpSizes& s = times[0].sizes;
    const double wire = static_cast<double>(s.dispatch_wire_bytes + s.combine_wire_bytes);
    const double a2a_us = worst.a2a_dispatch + worst.a2a_combine;
    const double ideal = single_us / world;
    std::printf(
        "| %s | %d | %lld | %s | %.1f | %.1f | %.1f | %.1f | %.2f | %.1f / %.1f | %.1f | "
        "%.1f | %.1f | %.0f %% | %.0f %% |\n",
        family_name(f), world, static_cast<long long>(tokens), ep::scheme_name(scheme),
        worst.dispatch, worst.layer, worst.combine, worst.total, wire / 1e6, worst.a2a_dispatch,
        worst.a2a_combine, a2a_us > 0 ? wire / a2a_us / 1e3 : 0.0,
        wire / (worst.dispatch + worst.combine) / 1e3, single_us, 100.0 * ideal / worst.layer,
        100.0 * ideal / worst.total);
    std::fflush(stdout);
  }
}

/// The single-GPU layer on `tokens` rows of `full` (GPU 0): mean µs of a launch.
double single_gpu_us(const Options& o, const MoeArgs& full, int64_t tokens) {
  CAKEMOE_CUDA_CHECK(cudaSetDevice(0));
  MoeArgs a = full;
  for (TensorView* v :
       {&a.hidden_states, &a.hidden_states_scale, &a.per_token_scale, &a.routing_logits}) {
    if (v->defined()) v->shape[0] = tokens;  // the first rows of GPU 0's copy
  }
  const StepFunMoeLaunch launch = prepare_stepfun_moe(a);
  return time_us(nullptr, o.warmup, o.iters, [&](cudaStream_t s) { launch.launch(s); });
}

int run(const Options& o) {
  setenv("NCCL_NVLS_ENABLE", "0", 1);  // NVLink multicast stays off on the shared machines
  const int gpus = core::cuda_device_count();
  std::vector<int> worlds;
  for (int w : o.worlds) {
    if (w >= 2 && w <= gpus && kStep35.experts % w == 0) worlds.push_back(w);
  }
  if (gpus < 2) {
    std::printf(
        "NOTE: %d GPU(s) visible: fewer than 2, so no EP row (EP >= 2) can be measured. "
        "%s\n",
        gpus,
        gpus == 1 ? "Measuring EP 1 (one rank: the layer's overhead)." : "Nothing to measure.");
    if (gpus == 0) return 0;
    worlds = {1};
  } else if (worlds.size() < o.worlds.size()) {
    std::printf("NOTE: %d GPUs visible: EP sizes above that (or not dividing 288) are skipped.\n",
                gpus);
  }
  const int most = *std::max_element(worlds.begin(), worlds.end());
  const int64_t rows = most * *std::max_element(o.tokens.begin(), o.tokens.end());
  std::vector<ncclComm_t> comms_by_world[9];
  print_header();
  for (const Family f : o.families) {
    CAKEMOE_CUDA_CHECK(cudaSetDevice(0));
    const StepFunWeights weights = layer_bench::random_weights(kStep35, f);
    const StepFunActivations act = layer_bench::device_activations(kStep35, f, rows);
    const layer_bench::Routing routing = layer_bench::make_routing(kStep35, rows);
    const Tensor logits = core::copy_to(TensorView(const_cast<float*>(routing.logits.data()),
                                                   DType::kFP32, {rows, kStep35.experts}),
                                        Device::cuda(0));
    const MoeArgs full = full_args(f, weights, act, logits);
    for (const int world : worlds) {
      std::vector<ncclComm_t>& comms = comms_by_world[world];
      if (comms.empty()) {
        comms.resize(world);
        std::vector<int> devices(world);
        for (int i = 0; i < world; ++i) devices[i] = i;
        if (ncclCommInitAll(comms.data(), world, devices.data()) != ncclSuccess) {
          std::printf("ncclCommInitAll(%d) failed\n", world);
          return 1;
        }
      }
      for (const int64_t tokens : o.tokens) {
        const double single = single_gpu_us(o, full, world * tokens);
        run_point(o, f, world, tokens, full, single, comms);
      }
    }
  }
  for (std::vector<ncclComm_t>& comms : comms_by_world) {
    for (ncclComm_t c : comms) ncclCommDestroy(c);
  }
  return 0;
}

#else

int run(const Options&) {
  std::printf("bench_stepfun_ep: this build has no NCCL (CAKEMOE_WITH_NCCL): nothing to measure\n");
  return 0;
}

#endif

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      cakemoe::stepfun::usage();
      return 0;
    }
  }
  try {
    return cakemoe::stepfun::run(cakemoe::stepfun::parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_stepfun_ep: %s\n", e.what());
    return 2;
  }
}
