// StepFun FC1 / FC2 CUDA kernels at the spec §10.3 geometry (H 4096, I 1536, E 64, K 8), random
// physical operands (finite values), uniform random routing. Prints ms per launch (cudaEvents over
// 10 launches, warm L2) and TFLOP/s of the valid rows. A plain main: without a CUDA device it says
// so and exits 0.
//   bench_stepfun_gemm [FAMILIES|all] [T,T,...] [PATH: default|sm90|simt|sm90-e4m3|sm90-g8]
//   [TILE|default]
// defaults: all families, T 8,64,512,2048, the default plan's units and tile.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench_hash.cuh"
#include "cakemoe/errors.h"
#include "cakemoe/stepfun.h"
#include "core/cuda_check.h"
#include "core/cuda_util.h"
#include "formats/layouts.h"
#include "reference/stepfun/families.h"
#include "reference/stepfun/tables.h"
#include "stepfun/catalog.h"
#include "testbed/gpu/cuda_timing.h"

namespace cakemoe {
namespace stepfun {
namespace {

constexpr int64_t kH = 4096, kI = 1536, kE = 64, kK = 8;
constexpr int kLaunches = 10;

/// Pseudo-random bytes: (hash & and_mask) | or_mask, masks alternating on even / odd bytes.
__global__ void fill_kernel(uint8_t* p, int64_t n, uint32_t seed, uint16_t and_mask,
                            uint16_t or_mask) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const uint32_t h = bench::hash_index(i, seed);
    const int shift = (i & 1) ? 8 : 0;
    p[i] = static_cast<uint8_t>((h & (and_mask >> shift)) | (or_mask >> shift));
  }
}

/// A device tensor of random bytes; masks keep every value finite in its format.
Tensor random_tensor(const std::vector<int64_t>& shape, DType dtype, uint32_t seed) {
  Tensor t = Tensor::empty(shape, dtype, Device::cuda(0));
  uint16_t and_mask = 0xFFFF, or_mask = 0;
  if (dtype == DType::kBF16) and_mask = 0x80FF, or_mask = 0x3C00;   // +-2^-7 .. 2^-6 ranges
  if (dtype == DType::kE4M3) and_mask = 0xB7B7;                     // exponent field <= 6
  if (dtype == DType::kUE8M0) and_mask = 0x0303, or_mask = 0x7C7C;  // 2^-3 .. 2^0
  fill_kernel<<<1024, 256>>>(t.ptr<uint8_t>(), static_cast<int64_t>(t.nbytes()), seed, and_mask,
                             or_mask);
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
  return t;
}

/// Block scales: e4m3 in [2^-1, 2) (nvfp4*) or ue8m0 in [2^-3, 2^0] (mxfp8).
Tensor random_scales(const std::vector<int64_t>& shape, Family f, uint32_t seed) {
  Tensor t =
      Tensor::empty(shape, f == Family::kMXFP8 ? DType::kUE8M0 : DType::kE4M3, Device::cuda(0));
  const int64_t bytes = static_cast<int64_t>(t.nbytes());
  const uint16_t and_mask = f == Family::kMXFP8 ? 0x0303 : 0x0F0F;
  const uint16_t or_mask = f == Family::kMXFP8 ? 0x7C7C : 0x3030;
  fill_kernel<<<1024, 256>>>(t.ptr<uint8_t>(), bytes, seed, and_mask, or_mask);
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
  return t;
}

Tensor device_floats(int64_t n, float value) {
  std::vector<float> v(static_cast<size_t>(n), value);
  return core::copy_to(TensorView(v.data(), DType::kFP32, {n}), Device::cuda(0));
}

Tensor device_ints(const std::vector<int32_t>& v) {
  return core::copy_to(
      TensorView(const_cast<int32_t*>(v.data()), DType::kInt32, {int64_t(v.size())}),
      Device::cuda(0));
}

bool nvfp4(Family f) { return f == Family::kNVFP4 || f == Family::kNVFP4BF16Tok; }

/// Physical weight view [E, rows, K] of a family, with its 128x4 scales when it has them.
void weights(Family f, int64_t rows, int64_t k, uint32_t seed, Tensor* w, Tensor* s) {
  if (f == Family::kBF16) {
    *w = random_tensor({kE, k / 64, rows, 64}, DType::kBF16, seed);
  } else if (nvfp4(f)) {
    *w = random_tensor({kE, rows, k / 2}, DType::kE2M1x2, seed);
    *s = random_scales({kE * formats::sf_size_128x4(rows, k / 16)}, f, seed + 1);
  } else {
    *w = random_tensor({kE, rows, k}, DType::kE4M3, seed);
    if (f == Family::kMXFP8) *s = random_scales({kE * formats::sf_size_128x4(rows, k / 32)}, f, 7);
  }
}

/// Scale bytes of [rows, cols] activation SFs: 2-D when linear (the FC1 input), else flat.
std::vector<int64_t> sf_shape(SfLayout layout, int64_t rows, int64_t cols) {
  if (layout == SfLayout::kLinear) return {rows, cols};
  return {formats::sf_size(layout, rows, cols)};
}

/// Activations [rows, K] in a family's FC-input format (nvfp4_bf16tok FC2: nvfp4).
void activations(Family f, int64_t rows, int64_t k, SfLayout layout, uint32_t seed, Tensor* x,
                 Tensor* s) {
  if (f == Family::kBF16) {
    *x = random_tensor({rows, k}, DType::kBF16, seed);
  } else if (nvfp4(f)) {
    *x = random_tensor({rows, k / 2}, DType::kE2M1x2, seed);
    *s = random_scales(sf_shape(layout, rows, k / 16), f, seed + 1);
  } else {
    *x = random_tensor({rows, k}, DType::kE4M3, seed);
    if (f == Family::kMXFP8) *s = random_scales(sf_shape(layout, rows, k / 32), f, 9);
  }
}

struct Options {
  std::vector<Family> families{std::begin(kAllFamilies), std::end(kAllFamilies)};
  std::vector<int64_t> tokens{8, 64, 512, 2048};
  std::string path = "default";
  int64_t tile = 0;  ///< 0: the plan's
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = s.find(',', start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

/// Whether `p` is on `path`: "default" (any), "sm90" (the main sm90 units), "simt", or
/// "sm90-<variant>" (an sm90 variant unit pair: e4m3, g8, p).
bool on_path(const Plan& p, const std::string& path) {
  if (path == "default") return true;
  const std::string variant = unit_variant(p.fc1_kernel);
  if (path.rfind("sm90-", 0) == 0) return p.path == "sm90" && variant == path.substr(5);
  return p.path == path && variant.empty();
}

/// The plan whose path is `path` ("default": the default plan) at `tile` (0: the plan's own).
Plan pick_plan(const ProblemDesc& problem, const Options& o) {
  if (o.tile != 0 && o.path.rfind("sm90", 0) == 0) {
    // sm90 units by name: also the variants plans_for does not offer yet.
    const std::string variant = o.path == "sm90" ? "" : o.path.substr(5);
    if (const auto plan = sm90_variant_plan(problem, static_cast<int>(o.tile), variant)) {
      return *plan;
    }
  }
  for (const Plan& p : plans_for(problem)) {
    if (on_path(p, o.path) && (o.tile == 0 || p.tile == o.tile)) return p;
  }
  if (o.tile != 0) {
    // Outside the native window: the unit names of the same path at that tile.
    ProblemDesc wide = problem;
    for (int64_t t : {1, 16, 128, 1024, 4096, 16384, 65536}) {
      wide.num_tokens = t;
      for (const Plan& p : plans_for(wide)) {
        if (on_path(p, o.path) && p.tile == o.tile) return p;
      }
    }
  }
  throw Unsupported("path", "no " + o.path + " plan at tile " + std::to_string(o.tile));
}

void bench_family(Family f, const Options& o) {
  Tensor w1, w1s, w2, w2s;
  weights(f, 2 * kI, kH, 11, &w1, &w1s);
  weights(f, kH, kI, 13, &w2, &w2s);
  const bool scalars = nvfp4(f) || f == Family::kFP8;
  const Tensor one = device_floats(kE, 1e-2f), limit = device_floats(kE, 7.0f);
  for (int64_t t : o.tokens) {
    ProblemDesc problem;
    problem.family = f, problem.num_tokens = t, problem.top_k = kK;
    problem.local_num_experts = kE, problem.hidden_size = kH, problem.intermediate_size = kI;
    problem.device = Device::cuda(0);
    const Plan plan = pick_plan(problem, o);
    const int64_t tile = plan.tile;
    const SfLayout layout = tile <= 64 ? SfLayout::kR8C4 : SfLayout::kR128C4;
    std::mt19937 rng(20261004);
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < t; ++i) {
      std::vector<int32_t> all(kE);
      for (int32_t e = 0; e < kE; ++e) all[e] = e;
      std::shuffle(all.begin(), all.end(), rng);
      ids.insert(ids.end(), all.begin(), all.begin() + kK);
    }
    reference::stepfun::RoutingConfig rc;
    rc.num_tokens = t, rc.top_k = kK, rc.num_experts = kE, rc.local_num_experts = kE;
    rc.tile = tile;
    const auto tables = reference::stepfun::build_tables(rc, ids.data());
    const int64_t rows = reference::stepfun::table_sizes(rc).max_padded;
    const Tensor p2t = device_ints(tables.permuted_idx_to_token_idx);
    const Tensor batch = device_ints(tables.cta_idx_xy_to_batch_idx);
    const Tensor mn = device_ints(tables.cta_idx_xy_to_mn_limit);
    const Tensor live = device_ints({tables.num_non_exiting_ctas});
    const Tensor total = device_ints({tables.total_num_padded_tokens});

    Fc1Args a1;
    a1.family = f;
    Tensor x, xs;
    activations(f, t, kH, SfLayout::kLinear, 17, &x, &xs);
    a1.hidden_states = x, a1.hidden_states_scale = xs;
    const Tensor pts = device_floats(rows, 1e-2f);
    if (f == Family::kNVFP4BF16Tok) a1.per_token_scale = pts;
    a1.gemm1_weights = w1, a1.gemm1_weights_scale = w1s;
    if (scalars) a1.output1_scale_scalar = one, a1.output1_scale_gate_scalar = one;
    a1.gemm1_clamp_limit = limit;
    a1.permuted_idx_to_token_idx = p2t, a1.cta_idx_xy_to_batch_idx = batch;
    a1.cta_idx_xy_to_mn_limit = mn, a1.num_non_exiting_ctas = live;
    a1.total_num_padded_tokens = total;
    Tensor y, ys;
    if (f == Family::kNVFP4BF16Tok) {
      y = random_tensor({rows, kI}, DType::kBF16, 19);
    } else {
      activations(f, rows, kI, layout, 19, &y, &ys);
    }
    a1.gemm1_output = y, a1.gemm1_output_scale = ys;
    a1.top_k = kK, a1.tile_tokens_dim = tile;
    a1.kernel = plan.fc1_kernel;

    Fc2Args a2;
    a2.family = f;
    Tensor z, zs;
    if (f == Family::kNVFP4BF16Tok) {
      activations(f, rows, kI, layout, 23, &z, &zs);  // the requant output (nvfp4)
      a2.per_token_scale = pts;
    }
    a2.gemm2_input = f == Family::kNVFP4BF16Tok ? z : y;
    a2.gemm2_input_scale = f == Family::kNVFP4BF16Tok ? zs : ys;
    a2.gemm2_weights = w2, a2.gemm2_weights_scale = w2s;
    if (scalars) a2.output2_scale_scalar = one;
    a2.cta_idx_xy_to_batch_idx = batch, a2.cta_idx_xy_to_mn_limit = mn;
    a2.num_non_exiting_ctas = live;
    const Tensor out = Tensor::empty({rows, kH}, DType::kBF16, Device::cuda(0));
    a2.gemm2_output = out;
    a2.num_tokens = t, a2.top_k = kK, a2.tile_tokens_dim = tile;
    a2.kernel = plan.fc2_kernel;

    const StepFunStageLaunch fc1 = prepare_fc1(a1), fc2 = prepare_fc2(a2);
    const double ms1 = gpu_testbed::time_ms([&] { fc1.launch(nullptr); }, kLaunches);
    const double ms2 = gpu_testbed::time_ms([&] { fc2.launch(nullptr); }, kLaunches);
    const double flop1 = 2.0 * t * kK * 2 * kI * kH, flop2 = 2.0 * t * kK * kH * kI;
    std::printf(
        "%-14s T %5lld tile %3lld %-4s fc1 %9.3f ms %7.2f TFLOP/s  fc2 %9.3f ms %7.2f "
        "TFLOP/s  total %9.3f ms\n",
        family_name(f), static_cast<long long>(t), static_cast<long long>(tile), plan.path.c_str(),
        ms1, flop1 / (ms1 * 1e9), ms2, flop2 / (ms2 * 1e9), ms1 + ms2);
  }
}

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe

int main(int argc, char** argv) {
  using namespace cakemoe::stepfun;
  if (cakemoe::core::cuda_device_count() == 0) {
    std::printf("bench_stepfun_gemm: no CUDA device, nothing measured\n");
    return 0;
  }
  try {
    Options o;
    if (argc > 1 && std::string(argv[1]) != "all") {
      o.families.clear();
      for (const std::string& name : split(argv[1])) o.families.push_back(parse_family(name));
    }
    if (argc > 2) {
      o.tokens.clear();
      for (const std::string& t : split(argv[2])) o.tokens.push_back(std::stoll(t));
    }
    if (argc > 3) o.path = argv[3];
    if (argc > 4 && std::string(argv[4]) != "default") o.tile = std::stoll(argv[4]);
    std::printf("StepFun GEMM stages, H %lld I %lld E %lld K %lld\n", static_cast<long long>(kH),
                static_cast<long long>(kI), static_cast<long long>(kE), static_cast<long long>(kK));
    for (Family f : o.families) bench_family(f, o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_stepfun_gemm: %s\n", e.what());
    return 2;
  }
  return 0;
}
