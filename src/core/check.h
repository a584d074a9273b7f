// Argument validation helpers. Each throws a typed error naming the argument and the rule.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "cakemoe/errors.h"
#include "cakemoe/tensor.h"

namespace cakemoe {
namespace core {

/// Throws InvalidArgument(arg, rule) unless `condition` holds.
inline void require(bool condition, const std::string& arg, const std::string& rule) {
  if (!condition) throw InvalidArgument(arg, rule);
}

/// Throws Unsupported(arg, rule) unless `condition` holds.
inline void require_supported(bool condition, const std::string& arg, const std::string& rule) {
  if (!condition) throw Unsupported(arg, rule);
}

/// The structure of a view is sound: 0..6 dims, a valid dtype and device, no negative size or
/// stride, numel / byte size / addressed span within int64, and non-null data when it has
/// elements. Every check below that reads a shape runs it first.
void check_view(const TensorView& t, const std::string& arg);
/// `t` must be present (and pass check_view).
void check_defined(const TensorView& t, const std::string& arg);
/// A view and the argument name it is reported under.
struct NamedView {
  const TensorView& view;
  const char* arg;
};
/// Every given (defined) view passes check_view, also one the call's mode ignores (e.g. the
/// routing logits next to precomputed ids): a malformed argument is an error wherever it is.
void check_given(std::initializer_list<NamedView> views);
/// `t` must be absent.
void check_absent(const TensorView& t, const std::string& arg, const std::string& why);
/// dtype must be one of `allowed`.
void check_dtype(const TensorView& t, const std::string& arg, std::initializer_list<DType> allowed);
/// Exact shape; a -1 entry matches any size.
void check_shape(const TensorView& t, const std::string& arg, std::initializer_list<int64_t> shape);
/// ndim must equal `ndim`.
void check_ndim(const TensorView& t, const std::string& arg, int ndim);
/// Row-major contiguous.
void check_contiguous(const TensorView& t, const std::string& arg);
/// On `device`.
void check_device(const TensorView& t, const std::string& arg, Device device);
/// Exactly `size` elements in a single dimension (e.g. the [1] device scalars).
void check_vector(const TensorView& t, const std::string& arg, int64_t size);
/// numel must be at least `min_numel` (workspace-style buffers).
void check_min_numel(const TensorView& t, const std::string& arg, int64_t min_numel);
/// Defined + dtype + contiguous + device in one call (the common case for operands).
void check_operand(const TensorView& t, const std::string& arg,
                   std::initializer_list<DType> allowed, Device device);

/// "[4, 8]" for messages.
std::string shape_string(std::initializer_list<int64_t> shape);
/// "cpu" or "cuda:N" for messages.
std::string device_string(Device device);

}  // namespace core
}  // namespace cakemoe
