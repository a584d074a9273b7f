// new_unique_id / create_communicator over NCCL: the bootstrap callers without their own ncclComm_t
// (the Python package, launchers) use. The caller's environment holds the NCCL switches.
#if defined(CAKEMOE_WITH_NCCL)
#include <cstring>
#include <string>
#include <vector>

#include "cakemoe/errors.h"
#include "core/check.h"
#include "core/cuda_check.h"
#include "stepfun/ep/communicator.h"
#include "stepfun/ep/ep_nccl_host.h"

namespace cakemoe {
namespace stepfun {
namespace ep {

static_assert(sizeof(ncclUniqueId) == kUniqueIdBytes, "kUniqueIdBytes must match ncclUniqueId");

std::vector<uint8_t> new_unique_id() {
  ncclUniqueId id;
  CAKEMOE_NCCL_CHECK(ncclGetUniqueId(&id));
  std::vector<uint8_t> bytes(kUniqueIdBytes);
  std::memcpy(bytes.data(), &id, kUniqueIdBytes);
  return bytes;
}

OwnedCommunicator create_communicator(const std::vector<uint8_t>& unique_id, int rank,
                                      int world_size, int device) {
  check_communicator_args(unique_id, rank, world_size, device);
  int devices = 0;
  CAKEMOE_CUDA_CHECK(cudaGetDeviceCount(&devices));
  core::require(device < devices, "device",
                "must be a CUDA device of this process (0.." + std::to_string(devices - 1) +
                    "), got " + std::to_string(device));
  ncclUniqueId id;
  std::memcpy(&id, unique_id.data(), kUniqueIdBytes);
  int previous = 0;
  CAKEMOE_CUDA_CHECK(cudaGetDevice(&previous));
  CAKEMOE_CUDA_CHECK(cudaSetDevice(device));
  ncclComm_t comm = nullptr;
  const ncclResult_t status = ncclCommInitRank(&comm, world_size, id, rank);
  cudaSetDevice(previous);
  nccl_check(status, "ncclCommInitRank", __FILE__, __LINE__);
  return OwnedCommunicator(comm, rank, world_size, device);
}

void destroy_communicator(Communicator comm, int device) noexcept {
  int previous = 0;
  const bool switched =
      cudaGetDevice(&previous) == cudaSuccess && cudaSetDevice(device) == cudaSuccess;
  ncclCommDestroy(static_cast<ncclComm_t>(comm));
  if (switched) cudaSetDevice(previous);
}

}  // namespace ep
}  // namespace stepfun
}  // namespace cakemoe
#endif
