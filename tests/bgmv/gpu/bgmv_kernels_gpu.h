// Helpers of the BGMV kernel tests (tests/gpu/test_bgmv_kernels_gpu.cu): device copies of a
// bgmv_case problem, a Cake launch harness over src/bgmv/cake_launch.h, and bitwise comparisons
// that report the first mismatch precisely.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "bgmv/bgmv_case.h"
#include "bgmv/cake_launch.h"
#include "bgmv/plan.h"
#include "core/cuda_check.h"
#include "formats/codecs.h"
#include "testbed/gpu/device_buffer.h"
#include "reference/bgmv/bgmv.h"

namespace cakemoe {
namespace bgmv_gpu_test {

using bgmv::CakeParams;
using bgmv::launch_cake_expand;
using bgmv::launch_cake_shrink;
using bgmv::launch_portable;
using bgmv::PortableParams;
using bgmv::shrink_form_number;
using bgmv::shrink_kind_name;
using bgmv::ShrinkKind;
using formats::float_to_bits;
using gpu_testbed::DeviceBuffer;

/// Bitwise comparison of 16-bit rows [rows][width]; names the first mismatch.
inline ::testing::AssertionResult same_u16(const std::vector<uint16_t>& got,
                                           const std::vector<uint16_t>& want, int64_t width,
                                           DType dtype, const char* what) {
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] != want[i]) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os << what << ": " << bad << " of " << want.size() << " differ; first at row "
     << first / width << " col " << first % width << ": got 0x" << std::hex << got[first]
     << " want 0x" << want[first] << std::dec << " ("
     << reference::bgmv::widen(dtype, got[first]) << " vs "
     << reference::bgmv::widen(dtype, want[first]) << ")";
  return ::testing::AssertionFailure() << os.str();
}

/// Bitwise comparison of FP32 rows [rows][width] stored with `stride`; the columns
/// [width, stride) of `got` must still hold the canary bits.
inline ::testing::AssertionResult same_rows(const std::vector<float>& got,
                                            const std::vector<float>& want, int64_t rows,
                                            int64_t width, int64_t stride, uint32_t canary,
                                            const char* what) {
  int64_t bad = 0, first = -1, canary_bad = 0, first_canary = -1;
  double max_err = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < stride; ++c) {
      const int64_t i = r * stride + c;
      if (c >= width) {
        if (float_to_bits(got[i]) != canary && canary_bad++ == 0) first_canary = i;
        continue;
      }
      if (float_to_bits(got[i]) != float_to_bits(want[i])) {
        if (bad++ == 0) first = i;
        max_err = std::fmax(max_err, std::fabs(double(got[i]) - double(want[i])));
      }
    }
  }
  if (bad == 0 && canary_bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os << what << ": " << bad << " of " << rows * width << " differ (max |err| " << max_err << ")";
  if (first >= 0) {
    os << "; first at row " << first / stride << " col " << first % stride << ": got "
       << got[first] << " (0x" << std::hex << float_to_bits(got[first]) << ") want " << std::dec
       << want[first] << " (0x" << std::hex << float_to_bits(want[first]) << ")" << std::dec;
  }
  if (canary_bad > 0) {
    os << "; " << canary_bad << " canary columns overwritten, first at row "
       << first_canary / stride << " col " << first_canary % stride;
  }
  return ::testing::AssertionFailure() << os.str();
}

/// The ShrinkKind of a spec form number (0, 2-6; shrink_form_number's inverse).
inline ShrinkKind kind_of_form(int form) {
  for (const ShrinkKind kind :
       {ShrinkKind::kRing2Stage, ShrinkKind::kRing3Stage, ShrinkKind::kRegisters,
        ShrinkKind::kRegistersOneTile, ShrinkKind::kRegistersHalfBlock,
        ShrinkKind::kRegistersQuarterBlock}) {
    if (shrink_form_number(kind) == form) return kind;
  }
  return static_cast<ShrinkKind>(-1);
}

/// Launch choices; -1 = what the plan selectors pick on an SM90 device with 132 SMs.
struct LaunchConfig {
  int form = -1;  ///< shrink kind by spec form number (kind_of_form)
  int splits = -1;
  int schedule = -1;
  int pdl = -1;
  bool remap = false;  ///< a random CTA order (spec §6) instead of the identity
  int64_t y_pad = 16;  ///< canary columns right of each y row
};

/// A problem on the device with its Cake params (route index zeroed once, never reset).
class CakeRun {
 public:
  CakeRun(const bgmv_test::Case& c, const LaunchConfig& cfg)
      : x_(c.x),
        a_(c.lora_a[0]),
        b_(c.lora_b[0]),
        tokens_(c.sorted_token_ids),
        experts_(c.expert_ids),
        loras_(c.lora_indices),
        weights_(c.topk_weights),
        shrink_(static_cast<size_t>(c.num_pairs() * c.spec.rank)),
        y_(static_cast<size_t>(c.spec.tokens * (c.spec.hidden + cfg.y_pad))),
        route_(static_cast<size_t>(bgmv::route_index_layout(c.spec.tokens).total_words)),
        order_(static_cast<size_t>(c.num_pairs())) {
    route_.fill(0);
    const int64_t p_n = c.num_pairs(), h = c.spec.hidden, r = c.spec.rank, t_n = c.spec.tokens;
    const bgmv::ShrinkLaunch pick = bgmv::plan_generic_shrink(p_n, r, h, bgmv::Arch::kSm90a);
    p_.dtype = c.spec.dtype == DType::kFP16 ? 1 : 0;
    p_.x = x_.get();
    p_.lora_a = a_.get();
    p_.lora_b = b_.get();
    p_.sorted_token_ids = tokens_.get();
    p_.expert_ids = experts_.get();
    p_.lora_indices = loras_.get();
    p_.topk_weights = weights_.get();
    p_.shrink_out = shrink_.get();
    p_.y = y_.get();
    p_.y_row_stride = h + cfg.y_pad;
    p_.route_index = route_.get();
    p_.T = t_n;
    p_.H = h;
    p_.R = r;
    p_.P = p_n;
    p_.L = c.spec.loras;
    p_.E = c.spec.experts;
    p_.shrink = cfg.form >= 0 ? kind_of_form(cfg.form) : pick.kind;
    p_.splits = cfg.splits >= 0 ? cfg.splits : pick.splits;
    p_.schedule_id = cfg.schedule >= 0 ? cfg.schedule : bgmv::select_generic_schedule(t_n);
    p_.pdl_mode = cfg.pdl >= 0 ? cfg.pdl
                               : bgmv::select_pdl_mode(bgmv::Variant::kGeneric, t_n, h,
                                                       bgmv::Arch::kSm90a, 132);
    if (cfg.remap) {
      std::vector<int32_t> perm(p_n);
      for (int64_t i = 0; i < p_n; ++i) perm[i] = static_cast<int32_t>(i);
      testbed::Rng rng(c.spec.seed + 99);
      std::shuffle(perm.begin(), perm.end(), rng.engine());
      order_.upload(perm);
      p_.order = order_.get();
    }
    CAKEMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~CakeRun() { cudaStreamDestroy(stream_); }

  const CakeParams& params() const { return p_; }
  /// One run: shrink then expand on the run's own (non-default) stream.
  void launch() {
    launch_cake_shrink(p_, stream_);
    launch_cake_expand(p_, stream_);
  }
  cudaStream_t stream() const { return stream_; }
  void sync() { CAKEMOE_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  void upload_x(const std::vector<uint16_t>& x) { x_.upload(x); }
  std::vector<uint16_t> shrink_out() const { return shrink_.download(); }
  std::vector<float> y() const { return y_.download(); }
  std::vector<uint32_t> route_words() const { return route_.download(); }
  void poison_outputs() {
    shrink_.fill(0xFF);
    y_.fill(0xFF);
  }
  int64_t stride() const { return p_.y_row_stride; }

 private:
  DeviceBuffer<uint16_t> x_, a_, b_;
  DeviceBuffer<int64_t> tokens_, experts_, loras_;
  DeviceBuffer<float> weights_;
  DeviceBuffer<uint16_t> shrink_;
  DeviceBuffer<float> y_;
  DeviceBuffer<uint32_t> route_;
  DeviceBuffer<int32_t> order_;
  CakeParams p_;
  cudaStream_t stream_ = nullptr;
};

/// The canonical reference of a case (same splits): shrink rows [P, R] and y [T, H] with the
/// given stride (columns past H hold the canary).
struct Expected {
  std::vector<uint16_t> shrink;
  std::vector<float> y;
};

inline Expected expected(const bgmv_test::Case& c, int splits, int64_t stride, uint32_t canary) {
  Expected e;
  const reference::bgmv::Problem p = c.problem();
  e.shrink.assign(static_cast<size_t>(c.num_pairs() * c.spec.rank), 0);
  float canary_value;
  std::memcpy(&canary_value, &canary, 4);
  e.y.assign(static_cast<size_t>(c.spec.tokens * stride), canary_value);
  reference::bgmv::CanonicalParams params;
  params.shrink_splits = splits;
  reference::bgmv::run(p, params, e.shrink.data(), e.y.data(), stride);
  return e;
}

}  // namespace bgmv_gpu_test
}  // namespace cakemoe
