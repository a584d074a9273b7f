// Builds without NCCL (or without CUDA): the EP layer reports why it is not there.
#if !defined(CAKEMOE_WITH_NCCL)
#include "cakemoe/errors.h"
#include "cakemoe/stepfun_ep.h"

namespace cakemoe {
namespace stepfun {
namespace ep {

EpLaunch prepare(const EpArgs&) {
#if defined(CAKEMOE_WITH_CUDA)
  throw Unsupported("comm",
                    "this build of cakemoe has no NCCL (CAKEMOE_WITH_NCCL=OFF, or AUTO found no "
                    "nccl.h / libnccl; set CAKEMOE_NCCL_DIR): the EP layer is not compiled in");
#else
  throw Unsupported("comm",
                    "this build of cakemoe has no CUDA support (CAKEMOE_WITH_CUDA=OFF): the EP "
                    "layer needs CUDA and NCCL");
#endif
}

}  // namespace ep
}  // namespace stepfun
}  // namespace cakemoe
#endif
