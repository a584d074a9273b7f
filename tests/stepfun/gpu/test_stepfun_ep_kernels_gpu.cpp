// The EP bookkeeping kernels (src/stepfun/ep/ep_kernels.cuh) against their host mirrors
// (dispatch_plan.h), bit for bit, on one GPU with a simulated world of 4 ranks: route, pack (16-,
// 4- and 1-byte rows), mask, id unpacking and the fixed-order combine (vector and scalar paths).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "cakemoe/stepfun_ep.h"
#include "formats/codecs.h"
#include "testbed/gpu/gpu_testbed.h"

#if defined(CAKEMOE_WITH_NCCL)
#include "stepfun/ep/dispatch_plan.h"
#include "stepfun/ep/ep_kernels.h"
#endif

namespace cakemoe {
namespace stepfun {
namespace ep {
namespace {
namespace gt = gpu_testbed;

#if defined(CAKEMOE_WITH_NCCL)

template <typename T>
Tensor device_vector(const std::vector<T>& host, DType dtype) {
  return gt::to_device(
      TensorView(const_cast<T*>(host.data()), dtype, {static_cast<int64_t>(host.size())}));
}

template <typename T>
std::vector<T> host_vector(const Tensor& device) {
  const Tensor host = gt::to_host(device);
  const T* p = host.ptr<T>();
  return std::vector<T>(p, p + host.numel());
}

constexpr int kWorld = 4;
constexpr int64_t kTokens = 37, kTopK = 3, kExperts = 16, kRows = 40;

std::vector<int32_t> test_ids() {
  std::mt19937 rng(5);
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t k = 0; k < kTopK; ++k) ids.push_back(static_cast<int32_t>(rng() % kExperts));
  }
  ids[4] = -1;
  ids[8] = static_cast<int32_t>(kExperts);
  ids[30] = ids[31] = ids[32] = -1;  // token 10 goes nowhere
  return ids;
}

TEST(EpKernels, RouteAndPackMatchTheHostPlan) {
  CAKEMOE_REQUIRE_GPU();
  const ExpertPartition partition = make_partition(kExperts, {0, 3, 9, 10}, {3, 6, 1, 6});
  const std::vector<int32_t> ids = test_ids();
  const DispatchPlan plan = plan_dispatch(partition, ids.data(), kTokens, kTopK, kRows);

  Tensor d_ids = device_vector(ids, DType::kInt32);
  Tensor d_owner = device_vector(partition.owner_table(), DType::kInt32);
  Tensor d_counts = Tensor::empty({kWorld}, DType::kInt32, Device::cuda(0));
  Tensor d_slots = Tensor::empty({kTokens, kWorld}, DType::kInt32, Device::cuda(0));
  Tensor d_rows = Tensor::empty({kWorld, kRows}, DType::kInt32, Device::cuda(0));
  core::fill_bytes(d_rows, 0xFF);
  RouteParams r;
  r.topk_ids = d_ids.ptr<int32_t>();
  r.owner_of_expert = d_owner.ptr<int32_t>();
  r.num_tokens = kTokens;
  r.top_k = kTopK;
  r.num_experts = kExperts;
  r.world_size = kWorld;
  r.rows_per_peer = kRows;
  r.send_counts = d_counts.ptr<int32_t>();
  r.slot_of = d_slots.ptr<int32_t>();
  r.token_of_send_row = d_rows.ptr<int32_t>();
  launch_route(r, nullptr);
  EXPECT_EQ(host_vector<int32_t>(d_counts), plan.send_counts);
  EXPECT_EQ(host_vector<int32_t>(d_slots), plan.slot_of);
  EXPECT_EQ(host_vector<int32_t>(d_rows), plan.token_of_send_row);  // unused rows untouched (-1)

  // Pack three fields whose rows allow 16-, 4- and 1-byte accesses.
  const int64_t row_bytes[3] = {64, 12, 3};
  std::mt19937 rng(9);
  PackParams p;
  std::vector<RowCopy> host_copies;
  std::vector<std::vector<uint8_t>> src(3), expected(3);
  std::vector<Tensor> d_src, d_dst;
  for (int f = 0; f < 3; ++f) {
    src[f].resize(kTokens * row_bytes[f]);
    for (uint8_t& b : src[f]) b = static_cast<uint8_t>(rng());
    expected[f].assign(kWorld * kRows * row_bytes[f], 0xA5);
    host_copies.push_back(RowCopy{src[f].data(), expected[f].data(), row_bytes[f]});
    d_src.push_back(device_vector(src[f], DType::kUInt8));
    d_dst.push_back(device_vector(expected[f], DType::kUInt8));  // same 0xA5 background
    PackField& pf = p.fields[p.num_fields++];
    pf.src = d_src.back().ptr<uint8_t>();
    pf.dst = d_dst.back().ptr<uint8_t>();
    pf.row_bytes = row_bytes[f];
    pf.word_bytes = widest_word(pf.src, pf.dst, pf.row_bytes);
  }
  EXPECT_EQ(p.fields[0].word_bytes, 16);
  EXPECT_EQ(p.fields[1].word_bytes, 4);
  EXPECT_EQ(p.fields[2].word_bytes, 1);
  pack_rows_host(plan, host_copies);
  p.token_of_send_row = r.token_of_send_row;
  p.send_counts = r.send_counts;
  p.regions = kWorld;
  p.rows_per_peer = kRows;
  launch_pack(p, nullptr);
  for (int f = 0; f < 3; ++f) {
    EXPECT_EQ(host_vector<uint8_t>(d_dst[f]), expected[f]) << "field " << f;
  }
}

TEST(EpKernels, MaskAndUnpackMatchTheHostMirrors) {
  CAKEMOE_REQUIRE_GPU();
  std::vector<int32_t> ids(kWorld * kRows * kTopK);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i % 13);
  const std::vector<int32_t> counts = {0, 40, 7, 1};
  Tensor d_ids = device_vector(ids, DType::kInt32);
  Tensor d_counts = device_vector(counts, DType::kInt32);
  MaskParams m;
  m.recv_ids = d_ids.ptr<int32_t>();
  m.recv_counts = d_counts.ptr<int32_t>();
  m.world_size = kWorld;
  m.rows_per_peer = kRows;
  m.top_k = kTopK;
  launch_mask(m, nullptr);
  mask_received_ids_host(ids.data(), counts.data(), kWorld, kRows, kTopK);
  EXPECT_EQ(host_vector<int32_t>(d_ids), ids);

  std::vector<int32_t> packed = {static_cast<int32_t>(0x011F3F80u),
                                 static_cast<int32_t>(0xFFFF0000u),
                                 static_cast<int32_t>(0x80003C00u), 0x00003C00};
  Tensor d_packed = device_vector(packed, DType::kInt32);
  Tensor d_unpacked = Tensor::empty({4}, DType::kInt32, Device::cuda(0));
  UnpackIdsParams u;
  u.topk_packed = d_packed.ptr<int32_t>();
  u.topk_ids = d_unpacked.ptr<int32_t>();
  u.count = 4;
  launch_unpack_ids(u, nullptr);
  EXPECT_EQ(host_vector<int32_t>(d_unpacked), (std::vector<int32_t>{0x011F, 0xFFFF, 0x8000, 0}));
}

TEST(EpKernels, CombineMatchesTheHostOrderOnBothPaths) {
  CAKEMOE_REQUIRE_GPU();
  const ExpertPartition partition = even_partition(kExperts, kWorld);
  const std::vector<int32_t> ids = test_ids();
  const DispatchPlan plan = plan_dispatch(partition, ids.data(), kTokens, kTopK, kRows);
  Tensor d_slots = device_vector(plan.slot_of, DType::kInt32);
  for (const int64_t hidden : {64, 60}) {  // 16-byte vectors, then the scalar path
    std::mt19937 rng(static_cast<uint32_t>(hidden));
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<uint16_t> partials(kWorld * kRows * hidden);
    for (uint16_t& v : partials) v = formats::bf16_from_float(normal(rng) * 100.f);
    // Order-sensitive values on token 0 (see EpCombine in tests/stepfun/test_ep_plan.cpp).
    const float big[kWorld] = {1073741824.f, -1073741824.f, 1.f, 3.f};
    for (const CombineTerm& c : combine_order(plan, 0)) {
      partials[(c.peer * kRows + c.row) * hidden] = formats::bf16_from_float(big[c.peer]);
    }
    std::vector<uint16_t> expected(kTokens * hidden);
    combine_host(plan, partials.data(), hidden, expected.data());
    Tensor d_partials = device_vector(partials, DType::kBF16);
    Tensor d_out = Tensor::empty({kTokens, hidden}, DType::kBF16, Device::cuda(0));
    core::fill_bytes(d_out, 0xFF);
    CombineParams c;
    c.partials = d_partials.ptr<uint16_t>();
    c.slot_of = d_slots.ptr<int32_t>();
    c.output = d_out.ptr<uint16_t>();
    c.num_tokens = kTokens;
    c.world_size = kWorld;
    c.rows_per_peer = kRows;
    c.hidden = hidden;
    c.vector_access = hidden % 8 == 0;
    launch_combine(c, nullptr);
    EXPECT_EQ(host_vector<uint16_t>(d_out), expected) << "hidden " << hidden;
  }
}

#else

TEST(EpKernels, BuiltWithoutNccl) {
  GTEST_SKIP() << "this build has no NCCL: the EP kernels are not compiled (CAKEMOE_WITH_NCCL)";
}

#endif

}  // namespace
}  // namespace ep
}  // namespace stepfun
}  // namespace cakemoe
