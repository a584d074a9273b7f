// create_communicator's argument checks (every build, before any device or NCCL call), the
// builds without NCCL, and OwnedCommunicator's empty and moved-from states.
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "cakemoe/stepfun_ep.h"
#include "testbed/expect_error.h"

namespace cakemoe {
namespace stepfun {
namespace ep {
namespace {

using testbed::expect_error;

const std::vector<uint8_t> kId(kUniqueIdBytes, 7);

TEST(EpCommunicator, RejectsAUniqueIdOfTheWrongLength) {
  for (size_t bytes : {size_t{0}, size_t{1}, kUniqueIdBytes - 1, kUniqueIdBytes + 1}) {
    const std::vector<uint8_t> id(bytes, 7);
    expect_error([&] { create_communicator(id, 0, 1, 0); }, "unique_id");
  }
}

TEST(EpCommunicator, RejectsABadWorldSize) {
  expect_error([] { create_communicator(kId, 0, 0, 0); }, "world_size");
  expect_error([] { create_communicator(kId, 0, -2, 0); }, "world_size");
}

TEST(EpCommunicator, RejectsARankOutsideTheWorld) {
  expect_error([] { create_communicator(kId, -1, 2, 0); }, "rank");
  expect_error([] { create_communicator(kId, 2, 2, 0); }, "rank");
  expect_error([] { create_communicator(kId, 1, 1, 0); }, "rank");
}

TEST(EpCommunicator, RejectsANegativeDevice) {
  expect_error([] { create_communicator(kId, 0, 1, -1); }, "device");
}

TEST(EpCommunicator, ChecksTheIdBeforeTheRank) {
  // The first rule broken is the one reported: the id length, then world size, rank, device.
  expect_error([] { create_communicator({1, 2, 3}, 5, 0, -1); }, "unique_id");
  expect_error([] { create_communicator(kId, 5, 0, -1); }, "world_size");
  expect_error([] { create_communicator(kId, 5, 2, -1); }, "rank");
}

TEST(EpCommunicator, BuildsWithoutNcclSayWhy) {
  if (available()) GTEST_SKIP() << "this build has NCCL (the GPU tests make communicators)";
  expect_error([] { new_unique_id(); }, "unique_id", /*unsupported=*/true);
  expect_error([] { create_communicator(kId, 0, 1, 0); }, "unique_id", /*unsupported=*/true);
}

TEST(EpCommunicator, EmptyAndMovedFromHoldNothing) {
  OwnedCommunicator empty;
  EXPECT_EQ(empty.get(), nullptr);
  EXPECT_EQ(empty.device(), -1);
  empty.reset();  // nothing to destroy
  OwnedCommunicator moved(std::move(empty));
  EXPECT_EQ(moved.get(), nullptr);
  OwnedCommunicator assigned;
  assigned = std::move(moved);
  EXPECT_EQ(assigned.get(), nullptr);
}

}  // namespace
}  // namespace ep
}  // namespace stepfun
}  // namespace cakemoe
