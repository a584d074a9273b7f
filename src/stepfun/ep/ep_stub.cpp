// Builds without NCCL (or without CUDA): the EP layer reports why it is not there.
#if !defined(CAKEMOE_WITH_NCCL)
#include <string>
#include <vector>

#include "cakemoe/errors.h"
#include "cakemoe/stepfun_ep.h"
#include "stepfun/ep/communicator.h"

namespace cakemoe {
namespace stepfun {
namespace ep {
namespace {

std::string why_missing() {
#if defined(CAKEMOE_WITH_CUDA)
  return "this build of cakemoe has no NCCL (CAKEMOE_WITH_NCCL=OFF, or AUTO found no nccl.h / "
         "libnccl; set CAKEMOE_NCCL_DIR): the EP layer is not compiled in";
#else
  return "this build of cakemoe has no CUDA support (CAKEMOE_WITH_CUDA=OFF): the EP layer needs "
         "CUDA and NCCL";
#endif
}

}  // namespace

EpLaunch prepare(const EpArgs&) { throw Unsupported("comm", why_missing()); }

std::vector<uint8_t> new_unique_id() { throw Unsupported("unique_id", why_missing()); }

OwnedCommunicator create_communicator(const std::vector<uint8_t>& unique_id, int rank,
                                      int world_size, int device) {
  check_communicator_args(unique_id, rank, world_size, device);
  throw Unsupported("unique_id", why_missing());
}

// NOTE: nothing can hold a communicator here (create_communicator always throws).
void destroy_communicator(Communicator, int) noexcept {}

}  // namespace ep
}  // namespace stepfun
}  // namespace cakemoe
#endif
