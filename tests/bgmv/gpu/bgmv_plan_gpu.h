// Helpers of the BGMV plan GPU tests: a seeded case uploaded to device 0, GPU and CPU plans of
// the same inputs, host copies of results, comparisons with precise diagnostics, and the spec §8
// replay checks every path shares (changing contents, outer capture).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "bgmv/bgmv_case.h"
#include "cakemoe/bgmv.h"
#include "core/cuda_check.h"
#include "core/cuda_util.h"
#include "formats/codecs.h"
#include "testbed/gpu/gpu_testbed.h"
#include "reference/bgmv/bgmv.h"
#include "testbed/testbed.h"

namespace cakemoe {
namespace bgmv_gpu {

using bgmv::BgmvOptions;
using bgmv::BgmvPlan;
using bgmv_test::Case;
using bgmv_test::CaseSpec;
using bgmv_test::expect_close_to_oracle;
using bgmv_test::PairOrder;
using formats::float_to_bits;

/// A seeded case spec; bgmv_case.h's other fields keep their defaults.
inline CaseSpec gpu_spec(DType dtype, int64_t hidden, int64_t rank, int64_t tokens, int64_t top_k,
                         PairOrder order, int64_t loras, int64_t experts, uint64_t seed) {
  CaseSpec s;
  s.dtype = dtype;
  s.hidden = hidden;
  s.rank = rank;
  s.tokens = tokens;
  s.top_k = top_k;
  s.order = order;
  s.loras = loras;
  s.experts = experts;
  s.seed = seed;
  return s;
}

/// A case's shape, for failure messages.
inline std::string describe(const CaseSpec& s) {
  return "H=" + std::to_string(s.hidden) + " R=" + std::to_string(s.rank) +
         " T=" + std::to_string(s.tokens) + " k=" + std::to_string(s.top_k) +
         " L=" + std::to_string(s.loras) + " E=" + std::to_string(s.experts) + " " +
         dtype_name(s.dtype) + " order=" + std::to_string(static_cast<int>(s.order));
}
inline std::string describe(const Case& c) {
  return describe(c.spec) + " P=" + std::to_string(c.num_pairs());
}

/// The case of `s` with routing edge cases added: token 2 without LoRA, padding pairs (token -1,
/// token T and token -7), and an extra route for token 1 (P != k T: the route-index path).
inline Case case_with_edge_routes(CaseSpec s) {
  s.nan_unused_blocks = false;  // the extra route reads a block no other route reads
  Case c = bgmv_test::make_case(s);
  c.lora_indices[2] = -1;
  c.add_pair(-1, 0, 0.0f);
  c.add_pair(c.spec.tokens, 0, 0.0f);
  c.add_pair(1, 0, 0.25f);
  c.add_pair(-7, 3, 0.5f);
  return c;
}

/// A host case (bgmv_case.h) plus device copies of every operand.
struct GpuCase {
  Case host;
  Tensor x, sorted, experts, loras, weights;
  std::vector<Tensor> a, b;

  explicit GpuCase(const Case& c) : host(c) { upload(); }

  void upload() {
    upload_x();
    sorted = gpu_testbed::to_device(host.sorted_view());
    experts = gpu_testbed::to_device(host.experts_view());
    loras = gpu_testbed::to_device(host.lora_view());
    weights = gpu_testbed::to_device(host.weights_view());
    a.clear();
    b.clear();
    for (const TensorView& v : host.a_views()) a.push_back(gpu_testbed::to_device(v));
    for (const TensorView& v : host.b_views()) b.push_back(gpu_testbed::to_device(v));
  }
  /// Re-uploads x into the same device buffer (plans read current contents, spec §8).
  void upload_x() {
    if (!x.defined()) {
      x = gpu_testbed::to_device(host.x_view());
      return;
    }
    core::copy_tensor(x, host.x_view(), nullptr);
    core::cuda_stream_sync(nullptr);
  }
  /// x *= factor on the host and on the device.
  void scale_x(float factor) {
    for (uint16_t& v : host.x) {
      v = reference::bgmv::narrow(host.spec.dtype,
                                  reference::bgmv::widen(host.spec.dtype, v) * factor);
    }
    upload_x();
  }

  /// New contents through the same device buffers for replay `step` (spec §8: plans read current
  /// contents): token ids rotated (a token may get 0..P routes; odd steps add -1 padding), one
  /// LoRA index toggled, x rescaled.
  void change_contents(int step) {
    const int64_t tokens = host.spec.tokens;
    for (int64_t p = 0; p < host.num_pairs(); ++p) {
      host.sorted_token_ids[p] = (p * (step + 1) + step) % (tokens + 1) - (step % 2);
    }
    host.lora_indices[step % tokens] = step % 3 == 0 ? -1 : step % 2;
    core::copy_tensor(sorted, host.sorted_view(), nullptr);
    core::copy_tensor(loras, host.lora_view(), nullptr);
    core::cuda_stream_sync(nullptr);
    scale_x(step % 2 == 0 ? 0.5f : 2.0f);
  }

  std::vector<TensorView> views(const std::vector<Tensor>& ts) const {
    std::vector<TensorView> v;
    for (const Tensor& t : ts) v.push_back(t.view());
    return v;
  }
  BgmvPlan prepare_gpu(const BgmvOptions& options = BgmvOptions()) const {
    return bgmv::prepare_bgmv_moe(x, views(a), views(b), sorted, experts, loras, weights,
                                  host.spec.experts, options);
  }
  /// The CPU reference backend on the same inputs: same selectors (sm90a, 132 SMs), so the same
  /// canonical order parameters (splits, grouped).
  BgmvPlan prepare_cpu(const BgmvOptions& gpu_options = BgmvOptions()) {
    BgmvOptions o;
    o.grouped = gpu_options.grouped;
    o.order_remap = gpu_options.order_remap;
    o.fallback = gpu_options.fallback;
    return bgmv::prepare_bgmv_moe(host.x_view(), host.a_views(), host.b_views(), host.sorted_view(),
                                  host.experts_view(), host.lora_view(), host.weights_view(),
                                  host.spec.experts, o);
  }
};

/// y_accum as a column slice: a [T, H] view at column 32 of a NaN-filled [T, H + 64] device
/// buffer, and the check that nothing outside the view was written.
struct CanaryY {
  static constexpr int64_t kLeft = 32, kExtra = 64;
  int64_t tokens, hidden, wide;
  Tensor buffer;
  CanaryY(int64_t t, int64_t h)
      : tokens(t),
        hidden(h),
        wide(h + kExtra),
        buffer(Tensor::empty({t, h + kExtra}, DType::kFP32, Device::cuda(0))) {
    core::fill_bytes(buffer, 0xFF, nullptr);  // NaN everywhere
  }
  TensorView view() const {
    return TensorView(static_cast<float*>(buffer.data()) + kLeft, DType::kFP32, {tokens, hidden},
                      {wide, 1}, Device::cuda(0));
  }
  ::testing::AssertionResult canaries_intact() const {
    core::cuda_stream_sync(nullptr);
    const Tensor host = gpu_testbed::to_host(buffer);
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t c = 0; c < wide; ++c) {
        if (c >= kLeft && c < kLeft + hidden) continue;
        if (!std::isnan(host.ptr<float>()[t * wide + c])) {
          return ::testing::AssertionFailure() << "canary overwritten at row " << t << " col " << c;
        }
      }
    }
    return ::testing::AssertionSuccess();
  }
};

/// Poisons y_accum and shrink_out (NaN bytes) on `stream`, then runs the plan there.
inline void poison_and_run(BgmvPlan& plan, Stream stream) {
  core::fill_bytes(plan.y_accum(), 0xFF, stream);
  core::fill_bytes(plan.shrink_out(), 0xFF, stream);
  plan.run(stream);
}

/// Dense host copy of a [T, W] fp32 view (device or host, any row stride).
inline std::vector<float> fetch_y(const TensorView& y) {
  std::vector<float> out(static_cast<size_t>(y.shape[0] * y.shape[1]));
  if (y.device.type == DeviceType::kCPU) {
    for (int64_t t = 0; t < y.shape[0]; ++t) {
      std::memcpy(out.data() + t * y.shape[1], y.ptr<float>() + t * y.strides[0],
                  y.shape[1] * sizeof(float));
    }
    return out;
  }
  core::cuda_stream_sync(nullptr);
  const int64_t span = (y.shape[0] - 1) * y.strides[0] + y.shape[1];
  const TensorView flat(y.data, DType::kFP32, {span}, y.device);
  const Tensor host = gpu_testbed::to_host(flat);
  for (int64_t t = 0; t < y.shape[0]; ++t) {
    std::memcpy(out.data() + t * y.shape[1], host.ptr<float>() + t * y.strides[0],
                y.shape[1] * sizeof(float));
  }
  return out;
}

/// Host copy of a contiguous 16-bit workspace (shrink_out).
inline std::vector<uint16_t> fetch_u16(const TensorView& t) {
  if (t.device.type == DeviceType::kCPU) {
    return std::vector<uint16_t>(t.ptr<uint16_t>(), t.ptr<uint16_t>() + t.numel());
  }
  core::cuda_stream_sync(nullptr);
  const Tensor host = gpu_testbed::to_host(t);
  return std::vector<uint16_t>(host.ptr<uint16_t>(), host.ptr<uint16_t>() + host.numel());
}

/// Bitwise equality with the first mismatch, the mismatch count and the max abs difference.
inline ::testing::AssertionResult bitwise_equal(const std::vector<float>& got,
                                                const std::vector<float>& want, int64_t width) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size differs";
  int64_t first = -1, count = 0;
  double max_diff = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (float_to_bits(got[i]) == float_to_bits(want[i])) continue;
    if (first < 0) first = static_cast<int64_t>(i);
    ++count;
    max_diff = std::fmax(max_diff, std::fabs(double(got[i]) - double(want[i])));
  }
  if (count == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os << count << " of " << got.size() << " fp32 elements differ; first at row " << first / width
     << " col " << first % width << ": got " << got[first] << " (0x" << std::hex
     << float_to_bits(got[first]) << ") want " << std::dec << want[first] << " (0x" << std::hex
     << float_to_bits(want[first]) << std::dec << "); max |diff| " << max_diff;
  return ::testing::AssertionFailure() << os.str();
}

inline ::testing::AssertionResult bitwise_equal(const std::vector<uint16_t>& got,
                                                const std::vector<uint16_t>& want, int64_t width) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size differs";
  int64_t first = -1, count = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (first < 0) first = static_cast<int64_t>(i);
    ++count;
  }
  if (count == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os << count << " of " << got.size() << " 16-bit elements differ; first at row " << first / width
     << " col " << first % width << ": got 0x" << std::hex << got[first] << " want 0x"
     << want[first];
  return ::testing::AssertionFailure() << os.str();
}

/// max |got - want| <= tol * max |want| (a tolerance on the scale of the output, as for fp32
/// sums whose order differs: cancellation leaves elements far below their terms).
inline ::testing::AssertionResult close_on_scale(const std::vector<float>& got,
                                                 const std::vector<float>& want, double tol,
                                                 int64_t width) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size differs";
  double scale = 0.0;
  for (const float w : want) scale = std::fmax(scale, std::fabs(double(w)));
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(double(got[i]) - double(want[i]));
    if (d <= tol * scale) continue;  // NOTE: also false for NaN
    return ::testing::AssertionFailure()
           << "row " << i / width << " col " << i % width << ": got " << got[i] << " want "
           << want[i] << ", |diff| " << d << " > " << tol << " x max |y| " << scale;
  }
  return ::testing::AssertionSuccess();
}

/// A GPU plan's y against the CPU engine's: bit for bit, except where the GPU plan's grouped
/// expand runs on tensor cores (BgmvPlan::grouped_mma): within 1e-5 of the largest |y| there
/// (spec §3.2 holds the grouped pipeline to 1e-5 of the per-route path).
inline ::testing::AssertionResult matches_cpu(const BgmvPlan& gpu, const std::vector<float>& got,
                                              const std::vector<float>& want, int64_t width) {
  if (!gpu.grouped_mma()) return bitwise_equal(got, want, width);
  return close_on_scale(got, want, 1e-5, width);
}

/// allclose with atol = rtol = `tol`: |got - want| <= tol + tol * |want| everywhere (FlashInfer's
/// grouped-vs-per-route check, spec bgmv §3.2). NOTE: a pure relative bound cannot hold for
/// outputs that cancel to ~1e-3 of their terms: the two pipelines apply the routing weight
/// before and after the lane butterfly respectively (seen on the H200: 2e-5 relative there).
inline ::testing::AssertionResult allclose(const std::vector<float>& got,
                                           const std::vector<float>& want, double tol,
                                           int64_t width) {
  for (size_t i = 0; i < got.size(); ++i) {
    const double w = want[i], g = got[i];
    if (std::fabs(g - w) <= tol + tol * std::fabs(w)) continue;
    return ::testing::AssertionFailure()
           << "first element beyond atol = rtol = " << tol << " at row " << i / width << " col "
           << i % width << ": got " << g << " want " << w;
  }
  return ::testing::AssertionSuccess();
}

/// spec §8, replays read current contents: `steps` times, new contents go into `g`'s buffers
/// (GpuCase::change_contents) and `gpu` must give the CPU plan's y and shrink rows bit for bit.
inline void expect_follows_changing_contents(GpuCase& g, BgmvPlan& gpu, BgmvPlan& cpu, int steps) {
  for (int step = 0; step < steps; ++step) {
    g.change_contents(step);
    poison_and_run(gpu, nullptr);
    cpu.run(nullptr);
    ASSERT_TRUE(matches_cpu(gpu, fetch_y(gpu.y_accum()), fetch_y(cpu.y_accum()), g.host.spec.hidden))
        << "step " << step;
    ASSERT_TRUE(
        bitwise_equal(fetch_u16(gpu.shrink_out()), fetch_u16(cpu.shrink_out()), g.host.spec.rank))
        << "step " << step;
  }
}

/// spec §8 outer capture: after an eager first run on a fresh stream, `gpu.run` inside the
/// caller's capture enqueues its kernels into the caller's graph, whose `replays` replays give the
/// CPU plan's y bit for bit; the plan's own graph still replays on its owner stream afterwards.
inline void expect_outer_capture_replays(GpuCase& g, BgmvPlan& gpu, int replays) {
  cudaStream_t s = nullptr;
  CAKEMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  BgmvPlan cpu = g.prepare_cpu();
  cpu.run(nullptr);
  const std::vector<float> want = fetch_y(cpu.y_accum());
  gpu.run(s);  // eager first run before any outer capture (spec §8 practical rule)
  CAKEMOE_CUDA_CHECK(cudaStreamSynchronize(s));
  cudaGraph_t graph = nullptr;
  CAKEMOE_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  gpu.run(s);  // enqueued into the caller's graph
  CAKEMOE_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec = nullptr;
  CAKEMOE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < replays; ++i) {
    core::fill_bytes(gpu.y_accum(), 0xFF, s);
    CAKEMOE_CUDA_CHECK(cudaGraphLaunch(exec, s));
    CAKEMOE_CUDA_CHECK(cudaStreamSynchronize(s));
    EXPECT_TRUE(matches_cpu(gpu, fetch_y(gpu.y_accum()), want, g.host.spec.hidden))
        << "outer graph replay " << i;
  }
  gpu.run(s);  // the plan's own graph still replays on its owner stream
  CAKEMOE_CUDA_CHECK(cudaStreamSynchronize(s));
  EXPECT_TRUE(matches_cpu(gpu, fetch_y(gpu.y_accum()), want, g.host.spec.hidden));
  gpu.close();
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

}  // namespace bgmv_gpu
}  // namespace cakemoe
