// The fuzzed entries of the public C++ API. The first input byte picks one (fuzz_one.cpp); each
// reads its problem dims, scalars and per-tensor flag bytes from the rest. Entry ids are part of
// the corpus format: add new entries at the end.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "cakemoe/tensor.h"
#include "fuzz_arena.h"
#include "fuzz_input.h"

namespace cakemoe {
namespace fuzz {

using EntryFn = void (*)(FuzzInput& in, Arena& arena);

struct Entry {
  const char* name;
  EntryFn run;
};

/// All entries, in id order.
const Entry* entries();
int num_entries();

void fuzz_tensor_view(FuzzInput& in, Arena& arena);          // 0
void fuzz_tensor_empty(FuzzInput& in, Arena& arena);         // 1
void fuzz_bounds(FuzzInput& in, Arena& arena);               // 2
void fuzz_plans(FuzzInput& in, Arena& arena);                // 3
void fuzz_routing(FuzzInput& in, Arena& arena);              // 4
void fuzz_fc1(FuzzInput& in, Arena& arena);                  // 5
void fuzz_requant(FuzzInput& in, Arena& arena);              // 6
void fuzz_fc2(FuzzInput& in, Arena& arena);                  // 7
void fuzz_finalize(FuzzInput& in, Arena& arena);             // 8
void fuzz_moe(FuzzInput& in, Arena& arena);                  // 9
void fuzz_prepare_weights(FuzzInput& in, Arena& arena);      // 10
void fuzz_prepare_activations(FuzzInput& in, Arena& arena);  // 11
void fuzz_bgmv(FuzzInput& in, Arena& arena);                 // 12
void fuzz_config(FuzzInput& in, Arena& arena);               // 13
void fuzz_config_layer(FuzzInput& in, Arena& arena);         // 14
void fuzz_handles(FuzzInput& in, Arena& arena);              // 15

/// Launches (the compute of the CPU engine) run only when this many multiply-adds or fewer are
/// claimed: larger valid problems are prepared (validated) but not computed, so a fuzz run
/// spends its time on validation instead of honest GEMMs.
constexpr int64_t kWorkBudget = int64_t{1} << 22;
inline bool affordable(std::initializer_list<int64_t> factors) {
  int64_t work = 1;
  for (int64_t f : factors) work = saturating_mul(work, f < 1 ? 1 : f);
  return work <= kWorkBudget;
}
/// Saturating numel of a view's claimed shape (INT64_MAX for negative dims / bad ndim).
inline int64_t claimed_numel(const TensorView& v) {
  if (v.ndim < 0 || v.ndim > TensorView::kMaxDims) return INT64_MAX;
  int64_t n = 1;
  for (int d = 0; d < v.ndim; ++d) n = saturating_mul(n, v.shape[d]);
  return n;
}
/// shape[0] of a view (0 when it has none).
inline int64_t claimed_rows(const TensorView& v) {
  return v.ndim >= 1 && v.ndim <= TensorView::kMaxDims ? v.shape[0] : 0;
}
/// A stream handle: null or junk (the CPU engine must ignore it).
inline Stream any_stream(FuzzInput& in) {
  return in.flag() ? reinterpret_cast<Stream>(uintptr_t{0xDEAD0}) : nullptr;
}

/// How a prepared stage is exercised: prepare only, prepare + launch, the one-shot, prepare +
/// two launches. Unaffordable problems are only prepared.
template <typename Prepare, typename OneShot>
void exercise(int how, bool can_compute, Stream stream, Prepare prepare, OneShot one_shot) {
  if (!can_compute || how % 4 == 0) {
    prepare();
    return;
  }
  if (how % 4 == 2) {
    one_shot(stream);
    return;
  }
  const auto launch = prepare();
  launch.launch(stream);
  if (how % 4 == 3) launch.launch(stream);
}

}  // namespace fuzz
}  // namespace cakemoe
