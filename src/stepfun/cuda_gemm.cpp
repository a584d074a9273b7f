// CUDA binders of the GEMM stages (FC1 + SwiGLUStep epilogue, FC2).
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

CudaEnqueue bind_cuda_fc1(const Fc1Args&, const GemmDims&) { pending("fc1"); }
CudaEnqueue bind_cuda_fc2(const Fc2Args&, const GemmDims&) { pending("fc2"); }

}  // namespace stepfun
}  // namespace cakemoe
#endif
