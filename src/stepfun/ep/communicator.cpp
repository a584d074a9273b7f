// OwnedCommunicator's ownership and create_communicator's device-free argument checks (every
// build; the NCCL calls are in communicator_nccl.cpp, their stand-ins in ep_stub.cpp).
#include "stepfun/ep/communicator.h"

#include <string>
#include <utility>

#include "core/check.h"

namespace cakemoe {
namespace stepfun {
namespace ep {

void check_communicator_args(const std::vector<uint8_t>& unique_id, int rank, int world_size,
                             int device) {
  core::require(unique_id.size() == kUniqueIdBytes, "unique_id",
                "must hold " + std::to_string(kUniqueIdBytes) + " bytes (an ncclUniqueId), got " +
                    std::to_string(unique_id.size()));
  core::require(world_size >= 1, "world_size",
                "must be at least 1, got " + std::to_string(world_size));
  core::require(rank >= 0 && rank < world_size, "rank",
                "must be in [0, world_size = " + std::to_string(world_size) + "), got " +
                    std::to_string(rank));
  core::require(device >= 0, "device",
                "must be a CUDA device index (>= 0), got " + std::to_string(device));
}

OwnedCommunicator::OwnedCommunicator(Communicator comm, int rank, int world_size, int device)
    : comm_(comm), rank_(rank), world_size_(world_size), device_(device) {}

OwnedCommunicator::~OwnedCommunicator() { reset(); }

OwnedCommunicator::OwnedCommunicator(OwnedCommunicator&& other) noexcept
    : comm_(std::exchange(other.comm_, nullptr)),
      rank_(other.rank_),
      world_size_(other.world_size_),
      device_(other.device_) {}

OwnedCommunicator& OwnedCommunicator::operator=(OwnedCommunicator&& other) noexcept {
  if (this != &other) {
    reset();
    comm_ = std::exchange(other.comm_, nullptr);
    rank_ = other.rank_;
    world_size_ = other.world_size_;
    device_ = other.device_;
  }
  return *this;
}

void OwnedCommunicator::reset() noexcept {
  if (comm_ != nullptr) destroy_communicator(std::exchange(comm_, nullptr), device_);
}

}  // namespace ep
}  // namespace stepfun
}  // namespace cakemoe
