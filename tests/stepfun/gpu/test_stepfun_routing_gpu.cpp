// GPU routing (spec stepfun §2) vs the CPU reference, bit for bit: every output buffer in full
// (including entries past the written ends, which must keep the shared poison), for both T paths,
// bf16/fp32 logits, ties, local ranges, precomputed ids, tiles 8..256, benign and poison tails.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "cakemoe/stepfun.h"
#include "core/cuda_check.h"
#include "formats/codecs.h"
#include "testbed/gpu/gpu_testbed.h"
#include "testbed/testbed.h"

namespace cakemoe {
namespace stepfun {
namespace {

using gpu_testbed::expect_same_bytes;

enum class Input { kBF16Logits, kFP32Logits, kIds };

struct Case {
  int64_t T = 1, K = 1, E = 8, off = 0, E_loc = 8, tile = 8;
  Input input = Input::kBF16Logits;
  bool ids_weights_fp32 = false;
  bool ties = false;         ///< logits from a handful of values: many equal keys
  bool poison = false;
  bool with_ntpe = true;
  bool p2t_plus_one = true;  ///< p2t sized max_padded + 1 (else max_padded)
  double rsf = 1.0;
  uint64_t seed = 1;
};

std::string describe(const Case& c) {
  std::ostringstream s;
  const char* in[] = {"bf16 logits", "fp32 logits", "ids"};
  s << "T=" << c.T << " K=" << c.K << " E=" << c.E << " off=" << c.off << " E_loc=" << c.E_loc
    << " tile=" << c.tile << " " << in[static_cast<int>(c.input)]
    << (c.input == Input::kIds ? (c.ids_weights_fp32 ? " (fp32 w)" : " (bf16 w)") : "")
    << (c.ties ? " ties" : "") << (c.poison ? " poison" : " benign") << " ntpe=" << c.with_ntpe
    << " p2t+1=" << c.p2t_plus_one << " rsf=" << c.rsf << " seed=" << c.seed;
  return s.str();
}

/// Every tensor of one routing call; `input`/`weights` hold the inputs, the rest is poisoned.
struct Buffers {
  Tensor input, weights, packed, hist, total, e2p, p2t, batch, mn, nne, ntpe;
};

Tensor poisoned(const std::vector<int64_t>& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  testbed::poison(t);
  return t;
}

Buffers make_host(const Case& c) {
  testbed::Rng rng(c.seed);
  Buffers b;
  const int64_t n = c.T * c.K;
  if (c.input == Input::kIds) {
    b.input = Tensor::empty({c.T, c.K}, DType::kInt32);
    // K distinct ids per token (spec §2.2; the CPU engine rejects repeats), among them ids
    // outside [off, off + E_loc) and outside [0, E) (all non-local).
    for (int64_t t = 0; t < c.T; ++t) {
      int32_t* row = b.input.ptr<int32_t>() + t * c.K;
      for (int64_t k = 0; k < c.K; ++k) {
        do {
          row[k] = int32_t(rng.integer(-3, c.E + 3));
        } while (std::find(row, row + k, row[k]) != row + k);
      }
    }
    b.weights = Tensor::empty({c.T, c.K}, c.ids_weights_fp32 ? DType::kFP32 : DType::kBF16);
    for (int64_t i = 0; i < n; ++i) {
      const float w = rng.uniform(0.0f, 1.0f);
      if (c.ids_weights_fp32) {
        b.weights.ptr<float>()[i] = w;
      } else {
        b.weights.ptr<uint16_t>()[i] = formats::bf16_from_float(w);
      }
    }
  } else {
    const bool fp32 = c.input == Input::kFP32Logits;
    b.input = Tensor::empty({c.T, c.E}, fp32 ? DType::kFP32 : DType::kBF16);
    for (int64_t i = 0; i < c.T * c.E; ++i) {
      float v = c.ties ? static_cast<float>(rng.integer(-2, 3)) : 3.0f * rng.normal();
      if (c.ties && v == 0.0f && rng.integer(0, 2) == 0) v = -0.0f;  // -0 < +0 in key order
      if (fp32) {
        b.input.ptr<float>()[i] = v;
      } else {
        b.input.ptr<uint16_t>()[i] = formats::bf16_from_float(v);
      }
    }
    b.weights = poisoned({c.T, c.K}, DType::kBF16);
    b.packed = poisoned({c.T, c.K}, DType::kInt32);
  }
  const int64_t max_c = max_ctas(c.T, c.K, c.E, c.tile);
  b.hist = poisoned({std::max<int64_t>(2 * c.E, 512)}, DType::kInt32);
  b.total = poisoned({1}, DType::kInt32);
  b.e2p = poisoned({n}, DType::kInt32);
  b.p2t = poisoned({max_c * c.tile + (c.p2t_plus_one ? 1 : 0)}, DType::kInt32);
  b.batch = poisoned({max_c}, DType::kInt32);
  b.mn = poisoned({max_c}, DType::kInt32);
  b.nne = poisoned({1}, DType::kInt32);
  if (c.with_ntpe) b.ntpe = poisoned({c.E_loc}, DType::kInt32);
  return b;
}

Tensor device_copy(const Tensor& t) { return t.defined() ? gpu_testbed::to_device(t) : Tensor(); }

Buffers to_device(const Buffers& h) {
  Buffers d;
  d.input = device_copy(h.input);
  d.weights = device_copy(h.weights);
  d.packed = device_copy(h.packed);
  d.hist = device_copy(h.hist);
  d.total = device_copy(h.total);
  d.e2p = device_copy(h.e2p);
  d.p2t = device_copy(h.p2t);
  d.batch = device_copy(h.batch);
  d.mn = device_copy(h.mn);
  d.nne = device_copy(h.nne);
  d.ntpe = device_copy(h.ntpe);
  return d;
}

TensorView view(const Tensor& t) { return t.defined() ? t.view() : TensorView(); }

RoutingArgs args_of(const Case& c, const Buffers& b) {
  RoutingArgs a;
  if (c.input == Input::kIds) {
    a.topk_ids = view(b.input);
  } else {
    a.routing_logits = view(b.input);
    a.topk_packed = view(b.packed);
  }
  a.topk_weights = view(b.weights);
  a.expert_count_histogram = view(b.hist);
  a.total_num_padded_tokens = view(b.total);
  a.expanded_idx_to_permuted_idx = view(b.e2p);
  a.permuted_idx_to_token_idx = view(b.p2t);
  a.cta_idx_xy_to_batch_idx = view(b.batch);
  a.cta_idx_xy_to_mn_limit = view(b.mn);
  a.num_non_exiting_ctas = view(b.nne);
  a.num_tokens_per_expert = view(b.ntpe);
  a.num_experts = c.E;
  a.top_k = c.K;
  a.local_expert_offset = c.off;
  a.local_num_experts = c.E_loc;
  a.tile_tokens_dim = c.tile;
  a.routed_scaling_factor = c.rsf;
  a.poison_routing_tail = c.poison;
  return a;
}

/// Compares every output of the device run with the CPU run (the histogram is GPU scratch).
bool same_outputs(const Case& c, const Buffers& h, const Buffers& d) {
  bool ok = true;
  if (c.input != Input::kIds) {
    ok &= expect_same_bytes("topk_packed", h.packed, d.packed);
    ok &= expect_same_bytes("topk_weights", h.weights, d.weights);
  } else {
    ok &= expect_same_bytes("topk_weights (caller input, must be untouched)", h.weights,
                            d.weights);
  }
  ok &= expect_same_bytes("expanded_idx_to_permuted_idx", h.e2p, d.e2p);
  ok &= expect_same_bytes("permuted_idx_to_token_idx", h.p2t, d.p2t);
  ok &= expect_same_bytes("cta_idx_xy_to_batch_idx", h.batch, d.batch);
  ok &= expect_same_bytes("cta_idx_xy_to_mn_limit", h.mn, d.mn);
  ok &= expect_same_bytes("num_non_exiting_ctas", h.nne, d.nne);
  ok &= expect_same_bytes("total_num_padded_tokens", h.total, d.total);
  if (c.with_ntpe) ok &= expect_same_bytes("num_tokens_per_expert", h.ntpe, d.ntpe);
  return ok;
}

void run_case(const Case& c) {
  SCOPED_TRACE(describe(c));
  Buffers host = make_host(c);
  Buffers dev = to_device(host);  // same inputs, same poison
  routing(args_of(c, host));      // CPU reference engine
  routing(args_of(c, dev));
  core::cuda_stream_sync(nullptr);
  ASSERT_TRUE(same_outputs(c, host, dev));
}

/// The spec matrix T x K x E, cycling input dtype, tile, local range, tail and buffer options.
TEST(StepFunRoutingGpu, MatrixMatchesReferenceBitwise) {
  CAKEMOE_REQUIRE_GPU();
  const int64_t tiles[] = {8, 16, 24, 32, 64, 128, 192, 256};
  int index = 0;
  for (int64_t T : {1, 3, 16, 17, 32, 33, 64, 257, 2048, 16384}) {
    for (int64_t E : {8, 64, 288, 512}) {
      for (int64_t K : {1, 2, 8, 32}) {
        if (K > E) continue;
        Case c;
        c.T = T;
        c.K = K;
        c.E = E;
        c.tile = tiles[index % 8];
        c.input = index % 2 == 0 ? Input::kBF16Logits : Input::kFP32Logits;
        switch (index % 3) {
          case 0: c.off = 0; c.E_loc = E; break;
          case 1: c.off = E / 4; c.E_loc = E / 2; break;
          default: c.off = E - 1; c.E_loc = 1; break;
        }
        c.poison = index % 4 == 3;
        c.with_ntpe = index % 5 != 4;
        c.p2t_plus_one = index % 2 == 1;
        c.seed = 1000 + index;
        run_case(c);
        if (HasFatalFailure()) return;
        ++index;
      }
    }
  }
}

TEST(StepFunRoutingGpu, TiesAndSignedZeros) {
  CAKEMOE_REQUIRE_GPU();
  int index = 0;
  for (int64_t T : {3, 64, 2048}) {
    for (int64_t E : {64, 288}) {
      for (int64_t K : {8, 32}) {
        for (Input in : {Input::kBF16Logits, Input::kFP32Logits}) {
          Case c;
          c.T = T, c.K = K, c.E = E, c.E_loc = E / 2, c.off = E / 8;
          c.tile = index % 2 ? 8 : 64;
          c.input = in;
          c.ties = true;
          c.seed = 2000 + index++;
          run_case(c);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(StepFunRoutingGpu, PrecomputedIds) {
  CAKEMOE_REQUIRE_GPU();
  int index = 0;
  for (int64_t T : {1, 16, 17, 257, 2048, 16384}) {
    for (int64_t E : {8, 288, 512}) {
      for (int64_t K : {1, 8}) {
        Case c;
        c.T = T, c.K = K, c.E = E;
        c.input = Input::kIds;
        c.ids_weights_fp32 = index % 2 == 0;
        c.off = index % 3 == 0 ? 0 : E / 3;
        c.E_loc = index % 3 == 0 ? E : E / 2;
        c.tile = index % 2 ? 16 : 128;
        c.poison = index % 3 == 2;
        c.seed = 3000 + index++;
        run_case(c);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(StepFunRoutingGpu, ScaledLargeExpertCountsAndHighIds) {
  CAKEMOE_REQUIRE_GPU();
  const Case cases[] = {
      // routed_scaling_factor != 1 (deviation 4), both paths.
      {16, 8, 64, 0, 64, 8, Input::kFP32Logits, false, false, false, true, true, 2.5, 41},
      {257, 8, 288, 0, 288, 32, Input::kBF16Logits, false, false, false, true, true, 0.7, 42},
      // E beyond 512, K = 32.
      {64, 32, 2048, 0, 2048, 8, Input::kBF16Logits, false, false, false, true, true, 1.0, 43},
      {300, 32, 4096, 1024, 2048, 64, Input::kFP32Logits, false, false, true, true, true, 1.0,
       44},
      // E = 65535: ids >= 32768 make the packed words negative.
      {3, 4, 65535, 0, 65535, 8, Input::kFP32Logits, false, false, false, true, true, 1.0, 45},
      {40, 2, 65535, 30000, 35535, 16, Input::kBF16Logits, false, false, false, true, false,
       1.0, 46},
  };
  for (const Case& c : cases) {
    run_case(c);
    if (HasFatalFailure()) return;
  }
}

/// Capturing the launch fails if it allocates or synchronises (global capture mode); replaying
/// the graph must give the eager bits. Both T paths, both input modes.
TEST(StepFunRoutingGpu, GraphCaptureReplaysEagerBits) {
  CAKEMOE_REQUIRE_GPU();
  for (int64_t T : {16, 2048}) {
    for (Input in : {Input::kBF16Logits, Input::kIds}) {
      Case c;
      c.T = T, c.K = 8, c.E = 288, c.off = 32, c.E_loc = 144, c.tile = 16, c.input = in;
      c.seed = 5000 + T;
      SCOPED_TRACE(describe(c));
      const Buffers host = make_host(c);
      Buffers dev = to_device(host);
      cudaStream_t stream = nullptr;
      CAKEMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      const StepFunStageLaunch launch = prepare_routing(args_of(c, dev));
      launch.launch(stream);
      core::cuda_stream_sync(stream);
      const Buffers eager = [&] {
        Buffers e;
        e.packed = dev.packed.defined() ? gpu_testbed::to_host(dev.packed) : Tensor();
        e.weights = gpu_testbed::to_host(dev.weights);
        e.e2p = gpu_testbed::to_host(dev.e2p);
        e.p2t = gpu_testbed::to_host(dev.p2t);
        e.batch = gpu_testbed::to_host(dev.batch);
        e.mn = gpu_testbed::to_host(dev.mn);
        e.nne = gpu_testbed::to_host(dev.nne);
        e.total = gpu_testbed::to_host(dev.total);
        e.ntpe = gpu_testbed::to_host(dev.ntpe);
        return e;
      }();
      dev = to_device(host);  // re-poison every output
      const StepFunStageLaunch relaunch = prepare_routing(args_of(c, dev));
      gpu_testbed::capture_and_replay(
          stream, [&](cudaStream_t s) { relaunch.launch(s); }, /*replays=*/2);
      EXPECT_TRUE(same_outputs(c, eager, dev));
      CAKEMOE_CUDA_CHECK(cudaStreamDestroy(stream));
    }
  }
}

TEST(StepFunRoutingGpu, KernelUnitsAreRegistered) {
  CAKEMOE_REQUIRE_GPU();
  // A device routing call on a build without the units throws Unsupported; this build has them.
  Case c;
  c.T = 2, c.K = 2, c.E = 8, c.E_loc = 8;
  Buffers dev = to_device(make_host(c));
  EXPECT_NO_THROW(prepare_routing(args_of(c, dev)));
}

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe
