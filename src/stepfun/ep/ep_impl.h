// The object behind EpLaunch: the NCCL backend (ep_nccl.cpp) derives from it.
#pragma once

#include "cakemoe/stepfun_ep.h"

namespace cakemoe {
namespace stepfun {
namespace ep {

class EpLaunch::Impl {
 public:
  virtual ~Impl() = default;
  virtual void launch_dispatch(Stream stream) const = 0;
  virtual void launch_layer(Stream stream) const = 0;
  virtual void launch_combine(Stream stream) const = 0;

  TensorView output;           ///< bf16 [T, H]
  TensorView received_counts;  ///< int32 [world]
  EpSizes sizes;
  Plan plan;
};

}  // namespace ep
}  // namespace stepfun
}  // namespace cakemoe
