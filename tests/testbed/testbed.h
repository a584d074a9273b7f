// Shared test helpers: seeded random inputs, poisoned outputs, accuracy metrics.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cakemoe/tensor.h"

namespace cakemoe {
namespace testbed {

/// Sets (or, for nullptr, clears) an environment variable for one scope; the previous value, or
/// its absence, comes back however the scope ends.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, saved_;
  bool had_ = false;
};

/// Seeded generator; the same seed gives the same stream on every machine.
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  float normal() { return normal_(engine_); }
  float uniform(float lo = 0.f, float hi = 1.f) {
    return lo + (hi - lo) * static_cast<float>((engine_() >> 11) * 0x1.0p-53);
  }
  int64_t integer(int64_t lo, int64_t hi_exclusive) {
    return lo + static_cast<int64_t>(engine_() % static_cast<uint64_t>(hi_exclusive - lo));
  }
  std::mt19937_64& engine() { return engine_; }
  std::vector<float> normal_vector(size_t n, float scale = 1.f);

 private:
  std::mt19937_64 engine_;
  std::normal_distribution<float> normal_{0.f, 1.f};
};

/// Host bf16 tensor of scale * randn, drawn element by element in memory order.
Tensor random_bf16(const std::vector<int64_t>& shape, Rng& rng, float scale);

/// Fills a tensor with a value that no correct kernel writes: NaN bytes (0xFF) for floating types,
/// 0x5A5A5A5A for integer tables (so -1 and small ids are detectable as "written").
void poison(const TensorView& t);

/// FlashInfer's check_accuracy: fraction of elements with |a-b| <= atol + rtol*|b| (b = reference).
/// NaN in either never passes.
double fraction_within(const std::vector<double>& actual, const std::vector<double>& reference,
                       double atol, double rtol);
/// ||a - b||_F / ||b||_F (NaN if any element of a is NaN).
double relative_frobenius(const std::vector<double>& actual, const std::vector<double>& reference);
/// First index where the two differ beyond atol + rtol*|b|, or -1; for failure messages.
int64_t first_mismatch(const std::vector<double>& actual, const std::vector<double>& reference,
                       double atol, double rtol);

}  // namespace testbed
}  // namespace cakemoe
