// CUDA binders of the bitwise stages (routing, requant, finalize).
#if defined(CAKEMOE_WITH_CUDA)
#include "cakemoe/errors.h"
#include "stepfun/cuda_stages.h"

namespace cakemoe {
namespace stepfun {
namespace {
[[noreturn]] void pending(const char* stage) {
  throw Unsupported("device", std::string("the CUDA StepFun ") + stage +
                                  " kernel is not built yet (issue #3)");
}
}  // namespace

CudaEnqueue bind_cuda_routing(const RoutingArgs&, const RoutingDims&) { pending("routing"); }
CudaEnqueue bind_cuda_requant(const RequantArgs&, int64_t) { pending("requant"); }
CudaEnqueue bind_cuda_finalize(const FinalizeArgs&, int64_t) { pending("finalize"); }

}  // namespace stepfun
}  // namespace cakemoe
#endif
