// CudaPlan::Launch: the operands of each launch sequence (internal to prepare / cuda_plan.cpp).
#pragma once

#include "bgmv/cake_launch.h"
#include "bgmv/cuda_plan.h"
#include "bgmv/grouped_launch.h"

namespace cakemoe {
namespace bgmv {

struct CudaPlan::Launch {
  CudaPath path = CudaPath::kCakePerRoute;
  CakeParams cake;           ///< per-route Cake shrink + expand
  bool order_remap = false;  ///< run the order-build prologue first
  OrderBuildParams order;
  GroupedParams grouped;    ///< grouped pipeline
  PortableParams portable;  ///< portable fallback
  CakeUnitLaunch specialized_launcher = nullptr;  ///< shrink + expand of the specialized unit
  OrderBuildLauncher order_launcher = nullptr;
  GroupedLauncher grouped_launcher = nullptr;
};

}  // namespace bgmv
}  // namespace cakemoe
