// The CUDA backend of the StepFun stages: each binder validates nothing (the caller did), picks its
// kernel unit from the catalog and returns an enqueue closure that launches on a stream with no
// allocation and no host synchronisation (graph-capturable). Implemented in src/stepfun/cuda_*.cpp;
// builds without CUDA get stubs that throw Unsupported.
#pragma once

#include <cstdint>
#include <functional>

#include "cakemoe/stepfun.h"
#include "stepfun/validate.h"

namespace cakemoe {
namespace stepfun {

using CudaEnqueue = std::function<void(Stream)>;

CudaEnqueue bind_cuda_routing(const RoutingArgs& args, const RoutingDims& dims);
CudaEnqueue bind_cuda_fc1(const Fc1Args& args, const GemmDims& dims);
CudaEnqueue bind_cuda_requant(const RequantArgs& args, int64_t rows);
CudaEnqueue bind_cuda_fc2(const Fc2Args& args, const GemmDims& dims);
CudaEnqueue bind_cuda_finalize(const FinalizeArgs& args, int64_t hidden);

}  // namespace stepfun
}  // namespace cakemoe
