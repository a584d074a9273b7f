// cakemoe public API: typed errors. Every error names the offending argument and the rule it broke.
#pragma once

#include <stdexcept>
#include <string>

namespace cakemoe {

/// Base class of all cakemoe errors. `what()` is "<argument>: <rule>".
class Error : public std::runtime_error {
 public:
  Error(std::string argument, std::string rule);
  const std::string& argument() const { return argument_; }
  const std::string& rule() const { return rule_; }

 private:
  std::string argument_;
  std::string rule_;
};

/// The caller passed something the contract forbids (shape, dtype, range, device, layout).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// The input is valid but this build / device / path does not implement it.
class Unsupported : public Error {
 public:
  using Error::Error;
};

/// A CUDA runtime or driver call failed. `argument()` is the call, `rule()` the CUDA message.
class CudaError : public Error {
 public:
  using Error::Error;
};

}  // namespace cakemoe
