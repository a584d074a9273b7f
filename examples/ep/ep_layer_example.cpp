// One rank of the StepFun EP layer, one process per GPU (see run_ep_example.sh, or torchrun):
//   RANK, WORLD_SIZE, LOCAL_RANK from the environment (torchrun's names);
//   rank 0 writes the NCCL unique id to --id-file, the others wait for it; ncclCommInitRank.
// Every rank builds the same random layer (bf16 weights from a fixed seed, prepared for its own
// expert range), routes its own tokens from logits, runs the EP layer (eager and from a CUDA
// graph) and checks its output against the plain single-GPU layer with every expert on the same
// tokens. Exit status 0 when every check passed. Only public headers of cakemoe are used.
#include <cakemoe/errors.h>
#include <cakemoe/stepfun.h>
#include <cakemoe/stepfun_ep.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using cakemoe::Device;
using cakemoe::DType;
using cakemoe::Tensor;
using cakemoe::TensorView;
namespace stepfun = cakemoe::stepfun;
namespace ep = cakemoe::stepfun::ep;

namespace {

#define CHECK_CUDA(call)                                                          \
  do {                                                                            \
    const cudaError_t s_ = (call);                                                \
    if (s_ != cudaSuccess)                                                        \
      throw std::runtime_error(#call ": " + std::string(cudaGetErrorString(s_))); \
  } while (0)
#define CHECK_NCCL(call)                                                          \
  do {                                                                            \
    const ncclResult_t s_ = (call);                                               \
    if (s_ != ncclSuccess)                                                        \
      throw std::runtime_error(#call ": " + std::string(ncclGetErrorString(s_))); \
  } while (0)

struct Options {
  std::string id_file;
  std::string family = "nvfp4";
  std::string scheme = "all_to_all";
  int64_t tokens = 64, experts = 32, hidden = 1024, inter = 512, top_k = 4;
};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : fallback;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--id-file")
      o.id_file = value;
    else if (flag == "--family")
      o.family = value;
    else if (flag == "--scheme")
      o.scheme = value;
    else if (flag == "--tokens")
      o.tokens = std::stoll(value);
    else if (flag == "--experts")
      o.experts = std::stoll(value);
    else if (flag == "--hidden")
      o.hidden = std::stoll(value);
    else if (flag == "--inter")
      o.inter = std::stoll(value);
    else if (flag == "--top-k")
      o.top_k = std::stoll(value);
    else
      throw std::runtime_error("unknown flag " + flag);
  }
  if (o.id_file.empty()) throw std::runtime_error("--id-file is required (a path all ranks see)");
  return o;
}

/// Rank 0 publishes the id (written aside, then renamed: readers never see half a file).
ncclUniqueId bootstrap_id(int rank, const std::string& path) {
  ncclUniqueId id;
  if (rank == 0) {
    CHECK_NCCL(ncclGetUniqueId(&id));
    const std::string tmp = path + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(id.internal, sizeof(id.internal));
    if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("rename " + tmp);
    return id;
  }
  for (int waited_ms = 0; waited_ms < 120000; waited_ms += 50) {
    std::ifstream in(path, std::ios::binary);
    if (in.read(id.internal, sizeof(id.internal))) return id;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw std::runtime_error("no NCCL id in " + path + " after 120 s");
}

uint16_t to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
float from_bf16(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// `n` values uniform in [-scale, scale) from `seed` (the same on every rank).
std::vector<uint16_t> random_bf16(size_t n, uint64_t seed, float scale) {
  std::vector<uint16_t> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (uint16_t& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = to_bf16(scale * (static_cast<float>(s >> 40) / 8388608.f - 1.f));
  }
  return v;
}

Tensor on_device(const std::vector<uint16_t>& host, DType dtype, std::vector<int64_t> shape,
                 int device) {
  Tensor t = Tensor::empty(shape, dtype, Device::cuda(device));
  CHECK_CUDA(cudaMemcpy(t.data(), host.data(), t.nbytes(), cudaMemcpyHostToDevice));
  return t;
}

void set_weights(stepfun::MoeArgs* a, const stepfun::StepFunWeights& w) {
  a->gemm1_weights = w.gemm1_weights;
  a->gemm1_weights_scale = w.gemm1_weights_scale;
  a->gemm2_weights = w.gemm2_weights;
  a->gemm2_weights_scale = w.gemm2_weights_scale;
  a->output1_scale_scalar = w.output1_scale_scalar;
  a->output1_scale_gate_scalar = w.output1_scale_gate_scalar;
  a->output2_scale_scalar = w.output2_scale_scalar;
  a->gemm1_clamp_limit = w.gemm1_clamp_limit;
}

std::vector<uint16_t> to_host(const TensorView& t) {
  std::vector<uint16_t> v(t.numel());
  CHECK_CUDA(cudaMemcpy(v.data(), t.data, t.nbytes(), cudaMemcpyDeviceToHost));
  return v;
}

int run(int argc, char** argv) {
  const Options o = parse(argc, argv);
  setenv("NCCL_NVLS_ENABLE", "0", 1);  // NVLink multicast stays off on the shared machines
  const int rank = env_int("RANK", 0), world = env_int("WORLD_SIZE", 1);
  const int device = env_int("LOCAL_RANK", rank);
  CHECK_CUDA(cudaSetDevice(device));
  const stepfun::Family family = stepfun::parse_family(o.family);
  const ncclUniqueId id = bootstrap_id(rank, o.id_file);
  ncclComm_t comm = nullptr;
  CHECK_NCCL(ncclCommInitRank(&comm, world, id, rank));

  // The same layer everywhere; this rank prepares its expert range [off, off + n).
  const int64_t e = o.experts, h = o.hidden, inter = o.inter, k = o.top_k, t = o.tokens;
  const int64_t per = e / world, off = rank * per, n = rank == world - 1 ? e - off : per;
  const Tensor w1 =
      on_device(random_bf16(e * 2 * inter * h, 1, 0.05f), DType::kBF16, {e, 2 * inter, h}, device);
  const Tensor w2 =
      on_device(random_bf16(e * h * inter, 2, 0.05f), DType::kBF16, {e, h, inter}, device);
  const double a_gs = family == stepfun::Family::kNVFP4 ? 2688.0 / 4.0
                      : family == stepfun::Family::kFP8 ? 448.0 / 4.0
                                                        : 0.0;
  stepfun::WeightPrepOptions options;
  options.family = family;
  options.hidden_states_scale_global = a_gs;
  const stepfun::StepFunWeights all = stepfun::prepare_weights(w1, w2, options);
  options.local_expert_offset = off;
  options.local_num_experts = n;
  const stepfun::StepFunWeights mine = stepfun::prepare_weights(w1, w2, options);

  // This rank's tokens (a different seed per rank) and their logits.
  const Tensor hidden =
      on_device(random_bf16(t * h, 100 + rank, 4.f), DType::kBF16, {t, h}, device);
  const stepfun::StepFunActivations act = stepfun::prepare_activations(family, hidden, a_gs);
  const Tensor logits =
      on_device(random_bf16(t * e, 200 + rank, 3.f), DType::kBF16, {t, e}, device);

  stepfun::MoeArgs layer;
  layer.family = family;
  layer.hidden_states = act.hidden_states;
  layer.hidden_states_scale = act.hidden_states_scale;
  layer.per_token_scale = act.per_token_scale;
  layer.routing_logits = logits;
  layer.num_experts = e;
  layer.top_k = k;
  ep::EpArgs args;
  args.comm = comm;
  args.scheme = ep::parse_scheme(o.scheme);
  args.layer = layer;
  set_weights(&args.layer, mine);
  args.layer.local_expert_offset = off;
  args.layer.local_num_experts = n;
  const ep::EpLaunch launch = ep::prepare(args);

  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  launch.launch(stream);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  const std::vector<uint16_t> eager = to_host(launch.output());

  // The same launch from a CUDA graph, timed.
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  launch.launch(stream);
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  CHECK_CUDA(cudaEventRecord(start, stream));
  const int replays = 20;
  for (int i = 0; i < replays; ++i) CHECK_CUDA(cudaGraphLaunch(exec, stream));
  CHECK_CUDA(cudaEventRecord(stop, stream));
  CHECK_CUDA(cudaEventSynchronize(stop));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  const std::vector<uint16_t> replayed = to_host(launch.output());

  // The plain layer with every expert, on the same tokens.
  stepfun::MoeArgs plain = layer;
  set_weights(&plain, all);
  plain.local_num_experts = e;
  const std::vector<Tensor> reference = stepfun::stepfun_moe(plain, stream);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  const std::vector<uint16_t> expected = to_host(reference[0]);
  double err = 0, norm = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double d = from_bf16(eager[i]) - from_bf16(expected[i]);
    err += d * d;
    norm += double(from_bf16(expected[i])) * from_bf16(expected[i]);
  }
  const double rel = std::sqrt(err / (norm > 0 ? norm : 1));
  const bool stable = std::memcmp(eager.data(), replayed.data(), eager.size() * 2) == 0;
  const bool pass = rel <= 1e-2 && stable && std::isfinite(rel);
  const ep::EpSizes& s = launch.sizes();
  std::printf(
      "rank %d/%d (GPU %d) %s %s: T=%lld experts [%lld, %lld) | %.1f us per launch "
      "(graph) | wire %.2f MB | rel. error vs the single-GPU layer %.2e | replay %s | "
      "%s\n",
      rank, world, device, o.family.c_str(), o.scheme.c_str(), static_cast<long long>(t),
      static_cast<long long>(off), static_cast<long long>(off + n), 1e3 * ms / replays,
      (s.dispatch_wire_bytes + s.combine_wire_bytes) / 1e6, rel,
      stable ? "bitwise stable" : "DIFFERS", pass ? "PASS" : "FAIL");
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphDestroy(graph));
  CHECK_CUDA(cudaStreamDestroy(stream));
  ncclCommDestroy(comm);
  return pass ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ep_layer_example (rank %s): %s\n",
                 std::getenv("RANK") ? std::getenv("RANK") : "0", e.what());
    return 2;
  }
}
