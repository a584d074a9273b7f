// Builds the tensor arguments of one fuzzed call. Each view starts from the shape the entry
// expects ("natural") and the input's flag byte for it may drop it, add it, null its data,
// rewrite its ndim, a dim, a stride, its dtype or device, or how its buffer is filled.
//
// Data pointers are honest: a view gets a real buffer exactly as large as its shape and strides
// claim, so any access past it is the library's fault. Claims the fuzzer cannot back (over the
// real-memory cap) get a null pointer; claims no buffer can back (negative dims or strides,
// overflowing extents, ndim outside [0, 6]) keep the natural buffer, which the library must not
// touch because it has to reject the view first.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cakemoe/tensor.h"
#include "fuzz_input.h"

namespace cakemoe {
namespace fuzz {

enum class Fill : uint8_t {
  kZero,
  kIndex,  ///< integers uniform in [lo, hi) (written as floats for float dtypes)
  kFloat,  ///< normal-ish floats times `scale` (random bytes for 8-bit dtypes)
  kBytes,  ///< random bytes
  kConst,  ///< every element `lo`
  kStep,   ///< element i = min((i + 1) * lo, hi) (e.g. the CTA row limits of routing)
};

struct FillSpec {
  Fill kind = Fill::kBytes;
  int64_t lo = 0;
  int64_t hi = 1;
  float scale = 1.0f;
};
inline FillSpec index_fill(int64_t lo, int64_t hi) { return {Fill::kIndex, lo, hi, 1.0f}; }
inline FillSpec float_fill(float scale = 1.0f) { return {Fill::kFloat, 0, 1, scale}; }
inline FillSpec byte_fill() { return {Fill::kBytes, 0, 1, 1.0f}; }
inline FillSpec const_fill(int64_t value) { return {Fill::kConst, value, value, 1.0f}; }
inline FillSpec step_fill(int64_t step, int64_t cap) { return {Fill::kStep, step, cap, 1.0f}; }

/// Element extent in bytes a view claims (1 + sum (shape - 1) * stride, times the element size),
/// or -1 when no buffer can back it. A zero dim claims 0 bytes.
int64_t claimed_bytes(const TensorView& v);

class Arena {
 public:
  /// Real buffers of one call together stay under this (the fuzzer tests validation, not the
  /// allocator).
  static constexpr int64_t kRealBytesCap = int64_t{64} << 20;

  Arena(FuzzInput& in, uint64_t seed) : in_(in), rng_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  /// The next argument: natural `dtype` / `shape` / `fill`, absent instead when !present; then
  /// the input's flag byte for it applies (see the header comment).
  TensorView view(DType dtype, const std::vector<int64_t>& shape, FillSpec fill,
                  bool present = true);
  /// A list of `count` views of one natural shape, each with its own flag byte.
  std::vector<TensorView> views(int count, DType dtype, const std::vector<int64_t>& shape,
                                FillSpec fill);

  int64_t real_bytes() const { return used_; }
  uint64_t next_random();

  /// The first view handed out that no call may accept (ndim outside [0, 6], a negative dim, an
  /// out-of-range dtype or device type, or null data under a non-empty shape), as "argument #n
  /// (why)" counting views in creation order; empty when all were valid.
  const std::string& first_invalid_view() const { return invalid_; }
  /// Entries call this when some of their views do not reach the library (then accepting the
  /// call says nothing about them).
  void mark_views_unused() { views_unused_ = true; }
  bool views_unused() const { return views_unused_; }

 private:
  void* allocate(int64_t bytes);
  void back_with_buffer(TensorView& v, const TensorView& natural, const FillSpec& fill);
  void note_if_invalid(const TensorView& v);
  void fill_buffer(void* data, int64_t bytes, DType dtype, const FillSpec& fill);

  struct FreeDeleter {
    void operator()(void* p) const;
  };
  FuzzInput& in_;
  uint64_t rng_;
  int64_t used_ = 0;
  int view_count_ = 0;
  std::string invalid_;
  bool views_unused_ = false;
  std::vector<std::unique_ptr<void, FreeDeleter>> buffers_;
};

}  // namespace fuzz
}  // namespace cakemoe
