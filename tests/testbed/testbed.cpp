#include "testbed/testbed.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "formats/codecs.h"

namespace cakemoe {
namespace testbed {

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  if (const char* old = std::getenv(name)) {
    saved_ = old;
    had_ = true;
  }
  if (value != nullptr) {
    setenv(name, value, 1);
  } else {
    unsetenv(name);
  }
}

ScopedEnv::~ScopedEnv() {
  if (had_) {
    setenv(name_.c_str(), saved_.c_str(), 1);
  } else {
    unsetenv(name_.c_str());
  }
}

std::vector<float> Rng::normal_vector(size_t n, float scale) {
  std::vector<float> v(n);
  for (auto& x : v) x = normal() * scale;
  return v;
}

Tensor random_bf16(const std::vector<int64_t>& shape, Rng& rng, float scale) {
  Tensor t = Tensor::empty(shape, DType::kBF16);
  uint16_t* p = t.ptr<uint16_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = formats::bf16_from_float(scale * rng.normal());
  return t;
}

void poison(const TensorView& t) {
  const bool integer = t.dtype == DType::kInt32 || t.dtype == DType::kInt64;
  std::memset(t.data, integer ? 0x5A : 0xFF, t.nbytes());
}

double fraction_within(const std::vector<double>& actual, const std::vector<double>& reference,
                       double atol, double rtol) {
  if (actual.size() != reference.size() || actual.empty()) return 0.0;
  size_t ok = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i], b = reference[i];
    if (std::isfinite(a) && std::isfinite(b) && std::fabs(a - b) <= atol + rtol * std::fabs(b))
      ++ok;
  }
  return static_cast<double>(ok) / static_cast<double>(actual.size());
}

double relative_frobenius(const std::vector<double>& actual, const std::vector<double>& reference) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < actual.size() && i < reference.size(); ++i) {
    if (std::isnan(actual[i])) return NAN;
    num += (actual[i] - reference[i]) * (actual[i] - reference[i]);
    den += reference[i] * reference[i];
  }
  return den == 0.0 ? std::sqrt(num) : std::sqrt(num / den);
}

int64_t first_mismatch(const std::vector<double>& actual, const std::vector<double>& reference,
                       double atol, double rtol) {
  for (size_t i = 0; i < actual.size() && i < reference.size(); ++i) {
    const double a = actual[i], b = reference[i];
    if (!(std::fabs(a - b) <= atol + rtol * std::fabs(b))) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace testbed
}  // namespace cakemoe
