// Internals of OwnedCommunicator / create_communicator (include/cakemoe/stepfun_ep.h): the
// argument checks every build runs, and the destroy call the NCCL backend (or the stub) defines.
#pragma once

#include <cstdint>
#include <vector>

#include "cakemoe/stepfun_ep.h"

namespace cakemoe {
namespace stepfun {
namespace ep {

/// The checks of create_communicator that need no device: id length, world size, rank, and a
/// non-negative device (whether it exists is checked where CUDA is).
void check_communicator_args(const std::vector<uint8_t>& unique_id, int rank, int world_size,
                             int device);

/// ncclCommDestroy with `device` current; errors are dropped (it runs in destructors).
void destroy_communicator(Communicator comm, int device) noexcept;

}  // namespace ep
}  // namespace stepfun
}  // namespace cakemoe
