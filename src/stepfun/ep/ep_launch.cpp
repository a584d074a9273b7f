// EpLaunch: the public handle over EpLaunch::Impl, and the scheme names.
#include <string>

#include "cakemoe/errors.h"
#include "core/check.h"
#include "stepfun/ep/ep_impl.h"

namespace cakemoe {
namespace stepfun {
namespace ep {

const char* scheme_name(Scheme scheme) {
  return scheme == Scheme::kAllGather ? "all_gather" : "all_to_all";
}

Scheme parse_scheme(const std::string& name) {
  if (name == "all_to_all") return Scheme::kAllToAll;
  if (name == "all_gather") return Scheme::kAllGather;
  throw InvalidArgument("scheme", "must be all_to_all or all_gather, got '" + name + "'");
}

bool available() {
#if defined(CAKEMOE_WITH_NCCL)
  return true;
#else
  return false;
#endif
}

EpLaunch::EpLaunch() = default;
EpLaunch::EpLaunch(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

namespace {
const EpLaunch::Impl& checked(const std::shared_ptr<EpLaunch::Impl>& impl, const char* what) {
  core::require(impl != nullptr, what, "this EpLaunch was default-constructed");
  return *impl;
}
}  // namespace

void EpLaunch::launch(Stream stream) const {
  const Impl& impl = checked(impl_, "launch");
  impl.launch_dispatch(stream);
  impl.launch_layer(stream);
  impl.launch_combine(stream);
}

void EpLaunch::launch_dispatch(Stream stream) const {
  checked(impl_, "launch_dispatch").launch_dispatch(stream);
}
void EpLaunch::launch_layer(Stream stream) const {
  checked(impl_, "launch_layer").launch_layer(stream);
}
void EpLaunch::launch_combine(Stream stream) const {
  checked(impl_, "launch_combine").launch_combine(stream);
}
TensorView EpLaunch::output() const { return checked(impl_, "output").output; }
TensorView EpLaunch::received_counts() const {
  return checked(impl_, "received_counts").received_counts;
}
const EpSizes& EpLaunch::sizes() const { return checked(impl_, "sizes").sizes; }
const Plan& EpLaunch::plan() const { return checked(impl_, "plan").plan; }

}  // namespace ep
}  // namespace stepfun
}  // namespace cakemoe
