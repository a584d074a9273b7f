// Overflow-checked size arithmetic and the structural checks of a public TensorView (issue 25:
// views with negative sizes, overflowing shapes or null data used to pass validation).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "cakemoe/errors.h"
#include "cakemoe/tensor.h"
#include "core/check.h"
#include "core/checked.h"
#include "testbed/expect_error.h"

namespace cakemoe {
namespace {

using testbed::expect_error;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

TEST(CheckedArithmetic, ExactWhenInRange) {
  EXPECT_EQ(core::checked_mul(int64_t{1} << 31, int64_t{1} << 31, "a"), int64_t{1} << 62);
  EXPECT_EQ(core::checked_mul(-3, 7, "a"), -21);
  EXPECT_EQ(core::checked_add(kInt64Max - 1, 1, "a"), kInt64Max);
  EXPECT_EQ(core::checked_product({2, 3, 4, 5}, "a"), 120);
  EXPECT_EQ(core::checked_product({}, "a"), 1);
}

TEST(CheckedArithmetic, OverflowNamesTheArgument) {
  expect_error([] { core::checked_mul(int64_t{1} << 32, int64_t{1} << 31, "tile_tokens_dim"); },
               "tile_tokens_dim");
  expect_error([] { core::checked_mul(kInt64Max, -2, "x"); }, "x");
  expect_error([] { core::checked_add(kInt64Max, 1, "num_experts"); }, "num_experts");
  expect_error([] { core::checked_add(-kInt64Max, -2, "y"); }, "y");
  expect_error(
      [] {
        core::checked_product({1 << 20, 1 << 20, 1 << 20, 1 << 4}, "shape");
      },
      "shape");
  expect_error([] { core::require_in_range(5, 0, 4, "top_k", "top_k"); }, "top_k");
  EXPECT_NO_THROW(core::require_in_range(4, 0, 4, "top_k", "top_k"));
}

TEST(CheckView, AcceptsOrdinaryViews) {
  float buf[24];
  EXPECT_NO_THROW(core::check_view(TensorView(buf, DType::kFP32, {2, 3, 4}), "t"));
  EXPECT_NO_THROW(core::check_view(TensorView(), "t"));                               // absent
  EXPECT_NO_THROW(core::check_view(TensorView(nullptr, DType::kFP32, {0, 8}), "t"));  // no data
  EXPECT_NO_THROW(core::check_view(TensorView(buf, DType::kFP32, {4, 3}, {0, 1}), "t"));
}

TEST(CheckView, RejectsNegativeSizesAndStrides) {
  float buf[24];
  TensorView v(buf, DType::kFP32, {2, 3, 4});
  TensorView negative_dim = v;
  negative_dim.shape[1] = -3;
  expect_error([&] { core::check_view(negative_dim, "hidden_states"); }, "hidden_states");
  TensorView negative_stride = v;
  negative_stride.strides[0] = -12;
  expect_error([&] { core::check_view(negative_stride, "y_accum"); }, "y_accum");
  // A negative size used to act as a wildcard of check_shape: -1 == "any" on the rule side only.
  TensorView wildcard(buf, DType::kFP32, {6, 4});
  wildcard.shape[0] = -1;
  expect_error([&] { core::check_shape(wildcard, "topk_weights", {6, 4}); }, "topk_weights");
  expect_error([&] { core::check_shape(wildcard, "topk_weights", {-1, 4}); }, "topk_weights");
  expect_error([&] { core::check_min_numel(wildcard, "topk_weights", 1); }, "topk_weights");
}

TEST(CheckView, RejectsOverflowingShapes) {
  float buf[4];
  TensorView huge(buf, DType::kFP32, {4});
  huge.ndim = 3;
  huge.shape[0] = huge.shape[1] = huge.shape[2] = int64_t{1} << 22;  // 2^66 elements
  huge.strides[2] = 1;
  expect_error([&] { core::check_view(huge, "x"); }, "x");
  // numel fits but the bytes do not: 2^62 int64 elements.
  TensorView wide(buf, DType::kInt64, {4});
  wide.shape[0] = int64_t{1} << 62;
  expect_error([&] { core::check_view(wide, "sorted_token_ids"); }, "sorted_token_ids");
  // A row stride that addresses past int64.
  TensorView strided(buf, DType::kFP32, {4, 1});
  strided.strides[0] = kInt64Max / 2;
  expect_error([&] { core::check_view(strided, "y_accum"); }, "y_accum");
  // The backstops of the view itself throw instead of wrapping.
  expect_error([&] { huge.numel(); }, "shape");
  expect_error([&] { wide.nbytes(); }, "shape");
  EXPECT_FALSE(huge.is_contiguous());
  expect_error([] { Tensor::empty({int64_t{1} << 40, int64_t{1} << 40}, DType::kFP32); }, "shape");
}

TEST(CheckView, RejectsNullDataWithElements) {
  TensorView v(nullptr, DType::kInt64, {8});
  expect_error([&] { core::check_view(v, "expert_ids"); }, "expert_ids");
  expect_error([&] { core::check_defined(v, "expert_ids"); }, "expert_ids");
  expect_error([&] { core::check_operand(v, "expert_ids", {DType::kInt64}, Device::cpu()); },
               "expert_ids");
}

TEST(CheckView, RejectsValuesOutsideTheEnums) {
  float buf[8];
  TensorView bad_dtype(buf, DType::kFP32, {8});
  bad_dtype.dtype = static_cast<DType>(200);
  expect_error([&] { core::check_view(bad_dtype, "x"); }, "x");
  TensorView bad_device(buf, DType::kFP32, {8});
  bad_device.device.type = static_cast<DeviceType>(7);
  expect_error([&] { core::check_view(bad_device, "x"); }, "x");
  TensorView bad_index(buf, DType::kFP32, {8});
  bad_index.device = Device::cuda(-1);
  expect_error([&] { core::check_view(bad_index, "x"); }, "x");
  TensorView bad_ndim(buf, DType::kFP32, {8});
  bad_ndim.ndim = TensorView::kMaxDims + 1;
  expect_error([&] { core::check_view(bad_ndim, "x"); }, "x");
  bad_ndim.ndim = -1;
  expect_error([&] { core::check_view(bad_ndim, "x"); }, "x");
}

TEST(CheckView, ScalarsAreExactlyShapeOne) {
  int32_t buf[4] = {};
  EXPECT_NO_THROW(
      core::check_vector(TensorView(buf, DType::kInt32, {1}), "num_non_exiting_ctas", 1));
  expect_error(
      [&] { core::check_vector(TensorView(buf, DType::kInt32, {4}), "num_non_exiting_ctas", 1); },
      "num_non_exiting_ctas");
  expect_error(
      [&] {
        core::check_vector(TensorView(buf, DType::kInt32, {1, 1}), "total_num_padded_tokens", 1);
      },
      "total_num_padded_tokens");
}

}  // namespace
}  // namespace cakemoe
