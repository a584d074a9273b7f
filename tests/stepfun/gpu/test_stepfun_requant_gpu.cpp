// GPU per-token NVFP4 requant (spec stepfun §6) vs the CPU reference, bit for bit: packed codes,
// SF bytes (linear, r8c4, r128c4, padding included) and per-token scales, with zero rows, -1
// entries, rows never reached (must keep the poison), a duplicate entry and unaligned inputs.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "cakemoe/stepfun.h"
#include "core/cuda_check.h"
#include "formats/codecs.h"
#include "formats/layouts.h"
#include "testbed/gpu/gpu_testbed.h"
#include "testbed/testbed.h"

namespace cakemoe {
namespace stepfun {
namespace {

using gpu_testbed::expect_same_bytes;

struct Case {
  int64_t rows = 128, cols = 64, num_expanded = 64;
  SfLayout layout = SfLayout::kR8C4;
  double global_scale_inv = 1.0 / 2688.0;
  bool unaligned = false;  ///< input view one element past a 16-byte boundary (scalar path)
  uint64_t seed = 1;
};

std::string describe(const Case& c) {
  std::ostringstream s;
  s << "rows=" << c.rows << " I=" << c.cols << " expanded=" << c.num_expanded << " layout="
    << sf_layout_name(c.layout) << " gsi=" << c.global_scale_inv
    << (c.unaligned ? " unaligned" : "") << " seed=" << c.seed;
  return s.str();
}

struct Buffers {
  Tensor storage;  ///< holds `input` (one spare element for the unaligned view)
  TensorView input;
  Tensor e2p, output, scale, per_token;
};

Buffers make_host(const Case& c) {
  testbed::Rng rng(c.seed);
  Buffers b;
  const int64_t n = c.rows * c.cols;
  b.storage = Tensor::empty({n + 8}, DType::kBF16);
  uint16_t* x = b.storage.ptr<uint16_t>() + (c.unaligned ? 1 : 0);
  for (int64_t r = 0; r < c.rows; ++r) {
    const int kind = static_cast<int>(r % 7);
    const float magnitude = std::ldexp(1.0f, static_cast<int>(rng.integer(-12, 8)));
    for (int64_t j = 0; j < c.cols; ++j) {
      float v = magnitude * rng.normal();
      if (kind == 0) v = 0.0f;                                   // zero row (p == 0 guard)
      if (kind == 1 && j % 16 != 3) v = 0.0f;                    // mostly zero blocks
      if (kind == 2 && j == c.cols / 2) v = std::nanf("");       // NaN ignored by rowAmax
      if (kind == 3 && j % 5 == 0) v = -0.0f;
      x[r * c.cols + j] = formats::bf16_from_float(v);
    }
  }
  b.input = TensorView(x, DType::kBF16, {c.rows, c.cols});
  // e2p: a random subset of rows in random order, -1 entries, one duplicated row.
  std::vector<int32_t> rows(static_cast<size_t>(c.rows));
  std::iota(rows.begin(), rows.end(), 0);
  std::shuffle(rows.begin(), rows.end(), rng.engine());
  b.e2p = Tensor::empty({c.num_expanded}, DType::kInt32);
  int32_t* e2p = b.e2p.ptr<int32_t>();
  for (int64_t i = 0; i < c.num_expanded; ++i) {
    e2p[i] = i % 4 == 1 ? -1 : rows[static_cast<size_t>(i % c.rows)];
  }
  if (c.num_expanded > 3) e2p[c.num_expanded - 1] = e2p[0];  // the same row reached twice
  b.output = Tensor::empty({c.rows, c.cols / 2}, DType::kE2M1x2);
  b.scale = Tensor::empty({formats::sf_size(c.layout, c.rows, c.cols / 16)}, DType::kE4M3);
  b.per_token = Tensor::empty({c.rows}, DType::kFP32);
  testbed::poison(b.output);
  testbed::poison(b.scale);
  testbed::poison(b.per_token);
  return b;
}

Buffers to_device(const Buffers& h, const Case& c) {
  Buffers d;
  d.storage = gpu_testbed::to_device(h.storage);
  d.input = TensorView(d.storage.ptr<uint16_t>() + (c.unaligned ? 1 : 0), DType::kBF16,
                       {c.rows, c.cols}, Device::cuda(0));
  d.e2p = gpu_testbed::to_device(h.e2p);
  d.output = gpu_testbed::to_device(h.output);
  d.scale = gpu_testbed::to_device(h.scale);
  d.per_token = gpu_testbed::to_device(h.per_token);
  return d;
}

RequantArgs args_of(const Case& c, const Buffers& b) {
  RequantArgs a;
  a.gemm1_output = b.input;
  a.expanded_idx_to_permuted_idx = b.e2p;
  a.output = b.output;
  a.output_scale = b.scale;
  a.per_token_scale = b.per_token;
  a.sf_layout = c.layout;
  a.global_scale_inv = c.global_scale_inv;
  return a;
}

bool same_outputs(const Buffers& h, const Buffers& d) {
  bool ok = expect_same_bytes("output (packed e2m1)", h.output, d.output);
  ok &= expect_same_bytes("output_scale (e4m3 SF bytes)", h.scale, d.scale);
  ok &= expect_same_bytes("per_token_scale", h.per_token, d.per_token);
  return ok;
}

void run_case(const Case& c) {
  SCOPED_TRACE(describe(c));
  Buffers host = make_host(c);
  Buffers dev = to_device(host, c);
  requant(args_of(c, host));
  requant(args_of(c, dev));
  core::cuda_stream_sync(nullptr);
  ASSERT_TRUE(same_outputs(host, dev));
}

TEST(StepFunRequantGpu, MatchesReferenceBitwise) {
  CAKEMOE_REQUIRE_GPU();
  uint64_t seed = 100;
  for (SfLayout layout : {SfLayout::kLinear, SfLayout::kR8C4, SfLayout::kR128C4}) {
    for (int64_t cols : {16, 48, 64, 1536, 1280}) {
      for (int64_t rows : {128, 512}) {
        Case c;
        c.rows = rows;
        c.cols = cols;
        c.num_expanded = rows * 3 / 4;  // some rows never reached
        c.layout = layout;
        c.seed = seed++;
        run_case(c);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(StepFunRequantGpu, ScalesUnalignedAndEdgeCases) {
  CAKEMOE_REQUIRE_GPU();
  const Case cases[] = {
      {256, 1536, 1000, SfLayout::kR128C4, 1.0 / 2688.0, true, 7},  // scalar path
      {64, 320, 17, SfLayout::kR8C4, 1.0 / 2688.0, true, 8},
      {128, 640, 96, SfLayout::kLinear, 1e-3, false, 9},
      {128, 64, 128, SfLayout::kR8C4, 1e-44, false, 10},  // p underflows or is subnormal
      {8, 16, 1, SfLayout::kR8C4, 1.0 / 2688.0, false, 11},
  };
  for (const Case& c : cases) {
    run_case(c);
    if (HasFatalFailure()) return;
  }
}

TEST(StepFunRequantGpu, GraphCaptureReplaysEagerBits) {
  CAKEMOE_REQUIRE_GPU();
  Case c;
  c.rows = 256, c.cols = 1536, c.num_expanded = 200, c.layout = SfLayout::kR128C4, c.seed = 12;
  SCOPED_TRACE(describe(c));
  const Buffers host = make_host(c);
  Buffers dev = to_device(host, c);
  cudaStream_t stream = nullptr;
  CAKEMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  prepare_requant(args_of(c, dev)).launch(stream);
  core::cuda_stream_sync(stream);
  Buffers eager;
  eager.output = gpu_testbed::to_host(dev.output);
  eager.scale = gpu_testbed::to_host(dev.scale);
  eager.per_token = gpu_testbed::to_host(dev.per_token);
  dev = to_device(host, c);  // poisoned again
  const StepFunStageLaunch launch = prepare_requant(args_of(c, dev));
  gpu_testbed::capture_and_replay(stream, [&](cudaStream_t s) { launch.launch(s); });
  EXPECT_TRUE(same_outputs(eager, dev));
  CAKEMOE_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe
