// EP argument validation on the CPU (device views whose data is never read or allocated), the
// rules across ranks, and the build without NCCL.
#include <gtest/gtest.h>

#include <vector>

#include "cakemoe/stepfun_ep.h"
#include "stepfun/ep/ep_validate.h"
#include "testbed/expect_error.h"

namespace cakemoe {
namespace stepfun {
namespace ep {
namespace {

constexpr int64_t kT = 6, kH = 256, kI = 128, kE = 8, kK = 2;

// NOTE: validation rejects null data, so the views point at a dummy byte it never dereferences.
TensorView meta(DType dtype, std::vector<int64_t> shape, int device = 0) {
  static unsigned char never_read = 0;
  return TensorView(&never_read, dtype, shape, Device::cuda(device));
}

/// Valid nvfp4 arguments of one rank owning experts [2, 6) with precomputed routing.
EpArgs valid_args() {
  EpArgs a;
  static int fake_comm = 0;
  a.comm = &fake_comm;
  MoeArgs& m = a.layer;
  m.family = Family::kNVFP4;
  m.hidden_states = meta(DType::kE2M1x2, {kT, kH / 2});
  m.hidden_states_scale = meta(DType::kE4M3, {kT, kH / 16});
  m.gemm1_weights = meta(DType::kE2M1x2, {4, 2 * kI, kH / 2});
  m.topk_ids = meta(DType::kInt32, {kT, kK});
  m.topk_weights = meta(DType::kFP32, {kT, kK});
  m.num_experts = kE;
  m.top_k = kK;
  m.local_expert_offset = 2;
  m.local_num_experts = 4;
  return a;
}

TEST(EpValidate, DescribesAValidRank) {
  const RankInfo info = validate_rank(valid_args(), 0);
  EXPECT_EQ(info.num_tokens, kT);
  EXPECT_EQ(info.hidden, kH);
  EXPECT_EQ(info.fields.row_bytes[kHidden], kH / 2);
  EXPECT_EQ(info.fields.row_bytes[kHiddenScale], kH / 16);
  EXPECT_EQ(info.fields.row_bytes[kPerTokenScale], 0);
  EXPECT_EQ(info.fields.row_bytes[kTopkIds], 4 * kK);
  EXPECT_EQ(info.fields.row_bytes[kTopkWeights], 4 * kK);
  const RankInfo back = RankInfo::from_words(info.to_words().data());
  EXPECT_EQ(back.to_words(), info.to_words());

  EpArgs logits = valid_args();
  logits.layer.topk_ids = TensorView();
  logits.layer.topk_weights = TensorView();
  logits.layer.routing_logits = meta(DType::kBF16, {kT, kE});
  const RankInfo routed = validate_rank(logits, 0);
  EXPECT_EQ(routed.weights_dtype, static_cast<int64_t>(DType::kBF16));
  EXPECT_EQ(routed.fields.row_bytes[kTopkWeights], 2 * kK);
}

TEST(EpValidate, RejectsBadArgumentsNamingThem) {
  using testbed::expect_error;
  auto with = [](auto edit) {
    EpArgs a = valid_args();
    edit(a);
    return a;
  };
  expect_error([&] { validate_rank(with([](EpArgs& a) { a.comm = nullptr; }), 0); }, "comm");
  expect_error([&] { validate_rank(with([](EpArgs& a) { a.layer.do_finalize = false; }), 0); },
               "do_finalize");
  expect_error([&] { validate_rank(valid_args(), 1); }, "hidden_states");  // another device
  expect_error(
      [&] {
        validate_rank(with([](EpArgs& a) { a.layer.topk_ids.data = nullptr; }), 0);
      },
      "topk_ids");
  expect_error(
      [&] {
        validate_rank(with([](EpArgs& a) {
                        a.layer.hidden_states_scale = meta(DType::kE4M3, {3, 16});
                      }),
                      0);
      },
      "hidden_states_scale");
  expect_error(
      [&] {
        validate_rank(with([](EpArgs& a) { a.layer.topk_ids = meta(DType::kInt32, {kT, 3}); }), 0);
      },
      "topk_ids");
  expect_error(
      [&] {
        validate_rank(with([](EpArgs& a) {
                        a.layer.topk_weights = meta(DType::kFP16, {kT, kK});
                      }),
                      0);
      },
      "topk_weights");
  expect_error(
      [&] {
        validate_rank(with([](EpArgs& a) {
                        a.layer.routing_logits = meta(DType::kBF16, {kT, kE});
                      }),
                      0);
      },
      "routing_logits");
  expect_error([&] { validate_rank(with([](EpArgs& a) { a.layer.local_num_experts = 7; }), 0); },
               "local_num_experts");
  expect_error([&] { validate_rank(with([](EpArgs& a) { a.layer.top_k = 9; }), 0); }, "top_k");
  expect_error(
      [&] {
        validate_rank(with([](EpArgs& a) { a.layer.output = meta(DType::kBF16, {kT, 128}); }), 0);
      },
      "output");
  expect_error(
      [&] {
        validate_rank(with([](EpArgs& a) {
                        a.layer.gemm1_weights = meta(DType::kE2M1x2, {4, kH});
                      }),
                      0);
      },
      "gemm1_weights");
  expect_error(
      [&] {
        validate_rank(
            with([](EpArgs& a) { a.layer.per_token_scale = meta(DType::kFP32, {kT - 1}); }), 0);
      },
      "per_token_scale");
  expect_error(
      [&] {
        validate_rank(with([](EpArgs& a) {
                        a.layer.per_token_scale = meta(DType::kFP32, {kT, 1});
                      }),
                      0);
      },
      "per_token_scale");
}

TEST(EpValidate, RanksMustAgree) {
  using testbed::expect_error;
  const RankInfo r0 = [] {
    EpArgs a = valid_args();
    a.layer.local_expert_offset = 0;
    a.layer.local_num_experts = 2;
    return validate_rank(a, 0);
  }();
  RankInfo r1 = validate_rank(valid_args(), 0);  // [2, 6)
  RankInfo r2 = r1;
  r2.expert_offset = 6;
  r2.num_local_experts = 2;
  r2.num_tokens = 1;  // T may differ
  check_agreement({r0, r1, r2});

  auto broken = [&](auto edit, const char* argument) {
    RankInfo bad = r2;
    edit(bad);
    expect_error([&] { check_agreement({r0, r1, bad}); }, argument);
  };
  broken([](RankInfo& r) { r.family = static_cast<int64_t>(Family::kBF16); }, "family");
  broken([](RankInfo& r) { r.scheme = static_cast<int64_t>(Scheme::kAllGather); }, "scheme");
  broken([](RankInfo& r) { r.top_k = 3; }, "top_k");
  broken([](RankInfo& r) { r.num_experts = 9; }, "num_experts");
  broken([](RankInfo& r) { r.hidden = 512; }, "gemm1_weights");
  broken([](RankInfo& r) { r.weights_dtype = static_cast<int64_t>(DType::kBF16); }, "topk_weights");
  broken([](RankInfo& r) { r.fields.row_bytes[kHiddenScale] = 0; }, "hidden_states_scale");
  broken([](RankInfo& r) { r.expert_offset = 5; }, "local_expert_offset");
  broken([](RankInfo& r) { r.num_local_experts = 1; }, "local_num_experts");
}

TEST(EpSchemes, NamesRoundTrip) {
  EXPECT_EQ(parse_scheme(scheme_name(Scheme::kAllToAll)), Scheme::kAllToAll);
  EXPECT_EQ(parse_scheme(scheme_name(Scheme::kAllGather)), Scheme::kAllGather);
  testbed::expect_error([] { parse_scheme("ring"); }, "scheme");
  testbed::expect_error([] { EpLaunch().launch(); }, "launch");
}

TEST(EpBuild, WithoutNcclPrepareIsUnsupported) {
  if (available()) GTEST_SKIP() << "this build has the EP layer (its GPU tests cover prepare)";
  testbed::expect_error([] { prepare(valid_args()); }, "comm", /*unsupported=*/true);
}

}  // namespace
}  // namespace ep
}  // namespace stepfun
}  // namespace cakemoe
