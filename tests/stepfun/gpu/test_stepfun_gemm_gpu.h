// Helpers of the StepFun GEMM-stage GPU tests: device copies of a reference case (spec §10.3 data
// through tests/reference/stepfun_gemm_testing.h), the public per-stage arguments bound to them,
// and element statistics against the CPU reference stage output.
#pragma once

#include <cstdint>
#include <cmath>
#include <string>
#include <vector>

#include "cakemoe/stepfun.h"
#include "testbed/gpu/gpu_testbed.h"
#include "reference/stepfun/stepfun_gemm_testing.h"

namespace cakemoe {
namespace reference {
namespace stepfun {
namespace gpu_gemm {

using testing::Case;

/// A host buffer copied to device 0 as a tensor of `shape` and `dtype`.
inline Tensor upload(const void* host, const std::vector<int64_t>& shape, DType dtype) {
  return gpu_testbed::to_device(TensorView(const_cast<void*>(host), dtype, shape));
}
inline Tensor upload(const Tensor& host) { return gpu_testbed::to_device(host); }
inline Tensor upload_opt(const Tensor& host) { return host.defined() ? upload(host) : Tensor(); }

/// A device tensor whose every byte is 0xFF (NaN for every float format, never written).
inline Tensor poisoned(const std::vector<int64_t>& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, Device::cuda(0));
  core::fill_bytes(t, 0xFF);
  core::cuda_stream_sync(nullptr);
  return t;
}

/// The case's routing tables on the device. Tail entries [num_non_exiting, max_ctas) of the cta
/// tables are replaced by plausible-looking tiles (expert 0, full rows): a kernel that does not
/// exit there writes padded rows, which the poison checks catch.
struct DeviceTables {
  Tensor p2t, batch, limit, num_ctas, total_padded;
};

inline DeviceTables upload_tables(const Case& c) {
  const RoutingTables& t = c.tables;
  std::vector<int32_t> batch = t.cta_idx_xy_to_batch_idx, limit = t.cta_idx_xy_to_mn_limit;
  for (size_t n = static_cast<size_t>(t.num_non_exiting_ctas); n < batch.size(); ++n) {
    batch[n] = 0;
    limit[n] = static_cast<int32_t>((n + 1) * c.dims.tile);
  }
  DeviceTables d;
  d.p2t = upload(t.permuted_idx_to_token_idx.data(),
                 {static_cast<int64_t>(t.permuted_idx_to_token_idx.size())}, DType::kInt32);
  d.batch = upload(batch.data(), {static_cast<int64_t>(batch.size())}, DType::kInt32);
  d.limit = upload(limit.data(), {static_cast<int64_t>(limit.size())}, DType::kInt32);
  d.num_ctas = upload(&t.num_non_exiting_ctas, {1}, DType::kInt32);
  d.total_padded = upload(&t.total_num_padded_tokens, {1}, DType::kInt32);
  return d;
}

/// The case rebuilt for another tile (same data and routing, new tables and SF layout).
inline Case with_tile(const Case& base, int64_t tile) {
  Case c = base;
  c.dims.tile = tile;
  RoutingConfig rc;
  rc.num_tokens = c.dims.tokens;
  rc.top_k = c.dims.top_k;
  rc.num_experts = c.dims.experts;
  rc.local_num_experts = c.dims.experts;
  rc.tile = tile;
  c.tables = build_tables(rc, c.ids.data());
  c.max_padded = table_sizes(rc).max_padded;
  c.layout = tile <= 64 ? SfLayout::kR8C4 : SfLayout::kR128C4;
  return c;
}

/// Element statistics of decoded outputs against the reference.
struct Stats {
  int64_t total = 0, exact = 0, bad = 0;
  double max_abs_error = 0;
  double sq_error = 0, sq_want = 0;  ///< relative Frobenius error, reported
  std::string first_bad;
  void add(double got, double want, double tol, const std::string& where) {
    ++total;
    if (want == want) sq_want += want * want;
    if (got == want || (got != got && want != want)) {
      ++exact;
      return;
    }
    const double err = got - want < 0 ? want - got : got - want;
    if (!(err <= max_abs_error)) max_abs_error = err;
    sq_error += err * err;
    if (!(err <= tol)) {
      if (bad++ == 0) {
        first_bad = where + ": got " + std::to_string(got) + " want " + std::to_string(want) +
                    " tol " + std::to_string(tol);
      }
    }
  }
  double exact_fraction() const { return total ? double(exact) / double(total) : 1.0; }
  double rel_frob() const { return sq_want > 0 ? std::sqrt(sq_error / sq_want) : 0.0; }
  std::string summary() const {
    return std::to_string(total) + " elements, exact " + std::to_string(exact_fraction()) +
           ", beyond tolerance " + std::to_string(bad) + ", max |err| " +
           std::to_string(max_abs_error) + ", rel_frob " + std::to_string(rel_frob()) +
           (bad ? ", first: " + first_bad : std::string());
  }
};

}  // namespace gpu_gemm
}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
