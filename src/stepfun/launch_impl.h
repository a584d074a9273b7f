// Internal launch objects behind StepFunStageLaunch / StepFunMoeLaunch.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "cakemoe/stepfun.h"

namespace cakemoe {
namespace stepfun {

/// One bound stage. `launch` must not allocate and must not synchronise the host.
class StepFunStageLaunch::Impl {
 public:
  virtual ~Impl() = default;
  virtual void launch(Stream stream) const = 0;
};

/// A stage served by the CPU reference engine: runs synchronously on the calling thread.
class HostStageLaunch final : public StepFunStageLaunch::Impl {
 public:
  explicit HostStageLaunch(std::function<void()> body) : body_(std::move(body)) {}
  void launch(Stream) const override { body_(); }

 private:
  std::function<void()> body_;
};

}  // namespace stepfun
}  // namespace cakemoe
