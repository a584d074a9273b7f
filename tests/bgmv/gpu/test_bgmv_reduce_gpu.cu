// dev::warp_reduce_scatter (src/bgmv/cake_device.cuh) against dev::warp_butterfly: every slot's
// sum must carry the bits of lane 0's butterfly of that slot, for every slot count, on inputs
// chosen to expose a changed order (magnitudes 1e-30 .. 1e30, signed zeros, infinities).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "bgmv/cake_device.cuh"
#include "formats/codecs.h"
#include "testbed/gpu/device_buffer.h"
#include "testbed/gpu/gpu_testbed.h"

namespace cakemoe {
namespace {

/// One warp: lane l holds in[l * kSlots + s]; writes each slot's butterfly (every lane) and
/// each lane's reduce-scatter result.
template <int kSlots>
__global__ void reduce_both(const float* in, float* butterfly, float* scattered) {
  const int lane = threadIdx.x;
  float v[kSlots];
#pragma unroll
  for (int s = 0; s < kSlots; ++s) v[s] = in[lane * kSlots + s];
#pragma unroll
  for (int s = 0; s < kSlots; ++s) butterfly[lane * kSlots + s] = bgmv::dev::warp_butterfly(v[s]);
  scattered[lane] = bgmv::dev::warp_reduce_scatter<kSlots>(v);
}

template <int kSlots>
void check_slots(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 30), kind(0, 39);
  std::vector<float> in(32 * kSlots);
  for (float& x : in) {
    const int k = kind(rng);
    if (k == 0) {
      x = 0.0f;
    } else if (k == 1) {
      x = -0.0f;
    } else if (k == 2) {
      x = std::numeric_limits<float>::infinity();
    } else {
      x = unit(rng) * std::pow(10.0f, static_cast<float>(exponent(rng)));
    }
  }
  gpu_testbed::DeviceBuffer<float> d_in(in), d_bf(32 * kSlots), d_rs(32);
  reduce_both<kSlots><<<1, 32>>>(d_in.get(), d_bf.get(), d_rs.get());
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
  const std::vector<float> bf = d_bf.download(), rs = d_rs.download();
  constexpr int kLanesPerSlot = 32 / kSlots;
  for (int lane = 0; lane < 32; ++lane) {
    const int slot = lane / kLanesPerSlot;
    EXPECT_EQ(formats::float_to_bits(rs[lane]),
              formats::float_to_bits(bf[slot]))  // lane 0's butterfly of that slot
        << "kSlots " << kSlots << " lane " << lane << " slot " << slot << ": " << rs[lane] << " vs "
        << bf[slot];
  }
}

TEST(BgmvWarpReduce, ReduceScatterEqualsLaneZeroButterflies) {
  CAKEMOE_REQUIRE_GPU();
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    check_slots<2>(seed);
    check_slots<4>(seed);
    check_slots<8>(seed);
    check_slots<16>(seed);
    check_slots<32>(seed);
  }
}

}  // namespace
}  // namespace cakemoe
