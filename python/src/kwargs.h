// Keyword arguments from Python into the C++ argument structs: every value is checked for its
// Python type here (no silent coercion: "4", 4.9 or True are not integers), tensors go through
// DLPack, and keys that no field reads are rejected. Errors name the argument.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cakemoe/errors.h"
#include "cakemoe/stepfun.h"
#include "cakemoe/tensor.h"

namespace cakemoe {
namespace python {

/// The argument has the wrong Python type: cakemoe.ArgumentTypeError (an InvalidArgument and a
/// TypeError) in Python.
class ArgumentTypeError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

/// How a stage uses a tensor: outputs must be writable (read-only numpy arrays are refused).
enum class Access : uint8_t { kRead, kWrite };

/// Reads a dict of keyword arguments; `finish()` rejects the keys nothing read.
class Kwargs {
 public:
  Kwargs(nanobind::dict kwargs, std::string call);

  /// Present and not None.
  bool has(const std::string& name) const;
  /// An absent or None tensor is an undefined view; anything that is not an array is a type
  /// error naming `name`.
  TensorView tensor(const std::string& name, Access access = Access::kRead);
  /// A list or tuple of tensors (entries named "name[i]").
  std::vector<TensorView> tensor_list(const std::string& name);
  int64_t integer(const std::string& name, std::optional<int64_t> fallback);
  std::optional<bool> optional_flag(const std::string& name);
  double real(const std::string& name, double fallback);
  std::optional<double> optional_real(const std::string& name);
  bool flag(const std::string& name, bool fallback);
  std::string text(const std::string& name, const std::string& fallback);
  /// A float or a sequence of floats (one value becomes a list of one).
  std::vector<float> reals(const std::string& name);
  stepfun::Family family(const std::string& name);
  std::optional<stepfun::Plan> plan(const std::string& name);
  /// The raw object (None when absent), for the caller's own conversion.
  nanobind::handle object(const std::string& name);
  /// Throws ArgumentTypeError for the first key no accessor read.
  void finish() const;

 private:
  nanobind::handle lookup(const std::string& name);
  [[noreturn]] void type_error(const std::string& name, const std::string& expected,
                               nanobind::handle got) const;

  nanobind::dict kwargs_;
  std::string call_;
  std::set<std::string> read_;
};

/// "int", "list", "str", ... for messages.
std::string python_type_name(nanobind::handle object);

}  // namespace python
}  // namespace cakemoe
