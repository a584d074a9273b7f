// Builds without CUDA: every CUDA binder reports that the backend is not compiled in.
#if !defined(CAKEMOE_WITH_CUDA)
#include "cakemoe/errors.h"
#include "stepfun/cuda_stages.h"

namespace cakemoe {
namespace stepfun {
namespace {
[[noreturn]] void no_cuda() {
  throw Unsupported("device", "this build of cakemoe has no CUDA support (CAKEMOE_WITH_CUDA=OFF); "
                              "pass CPU tensors to use the reference engine");
}
}  // namespace

CudaEnqueue bind_cuda_routing(const RoutingArgs&, const RoutingDims&) { no_cuda(); }
CudaEnqueue bind_cuda_fc1(const Fc1Args&, const GemmDims&) { no_cuda(); }
CudaEnqueue bind_cuda_requant(const RequantArgs&, int64_t) { no_cuda(); }
CudaEnqueue bind_cuda_fc2(const Fc2Args&, const GemmDims&) { no_cuda(); }
CudaEnqueue bind_cuda_finalize(const FinalizeArgs&, int64_t) { no_cuda(); }

}  // namespace stepfun
}  // namespace cakemoe
#endif
