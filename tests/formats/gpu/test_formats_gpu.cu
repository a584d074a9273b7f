// Device evaluation of src/formats: every codec on all codes and on a large float set, and the
// block quantizers, compared bit for bit with the host; the encoders are also compared with the
// CUDA conversion intrinsics (an independent implementation, hardware cvt where the arch has it).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp4.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/cuda_check.h"
#include "formats/codecs.h"
#include "formats/quantize.h"
#include "testbed/gpu/device_buffer.h"
#include "testbed/gpu/gpu_testbed.h"

namespace cakemoe {
namespace formats {
namespace {

using gpu_testbed::DeviceBuffer;

// ---- Kernels ------------------------------------------------------------------------------------

struct EncodeOut {
  uint16_t bf16, fp16, bf16_cuda, fp16_cuda;
  uint8_t e4m3, e2m1, ue8m0, e4m3_cuda, e2m1_cuda, ue8m0_cuda;
  uint32_t rcp, mul, div;
};

__global__ void encode_kernel(const float* x, const float* y, EncodeOut* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  EncodeOut o;
  o.bf16 = bf16_from_float(v);
  o.fp16 = fp16_from_float(v);
  o.e4m3 = e4m3_from_float(v);
  o.e2m1 = e2m1_from_float(v);
  o.ue8m0 = ue8m0_from_float_round_up(v);
  o.rcp = float_to_bits(rcp_rn(v));
  o.mul = float_to_bits(mul_rn(v, y[i]));
  o.div = float_to_bits(div_rn(v, y[i]));
  o.bf16_cuda = __bfloat16_as_ushort(__float2bfloat16_rn(v));
  o.fp16_cuda = __half_as_ushort(__float2half_rn(v));
  o.e4m3_cuda = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  o.e2m1_cuda = __nv_cvt_float_to_fp4(v, __NV_E2M1, cudaRoundNearest);
  o.ue8m0_cuda = __nv_cvt_float_to_e8m0(v, __NV_SATFINITE, cudaRoundPosInf);
  out[i] = o;
}

__global__ void decode_kernel(uint32_t* bf16, uint32_t* fp16, uint32_t* e4m3, uint32_t* ue8m0,
                              uint32_t* e2m1) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= 65536) return;
  bf16[i] = float_to_bits(bf16_to_float(static_cast<uint16_t>(i)));
  fp16[i] = float_to_bits(fp16_to_float(static_cast<uint16_t>(i)));
  if (i < 256) e4m3[i] = float_to_bits(e4m3_to_float(static_cast<uint8_t>(i)));
  if (i < 256) ue8m0[i] = float_to_bits(ue8m0_to_float(static_cast<uint8_t>(i)));
  if (i < 16) e2m1[i] = float_to_bits(e2m1_to_float(static_cast<uint8_t>(i)));
}

/// One thread per 32-element chunk: two NVFP4 blocks (global and unit rule) and one MXFP8 block.
__global__ void block_kernel(const float* x, const float* enc, int chunks, uint8_t* packed,
                             uint8_t* sf, uint8_t* packed_unit, uint8_t* sf_unit, uint8_t* q8,
                             uint8_t* sf8) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= chunks) return;
  for (int h = 0; h < 2; ++h) {
    const int b = 2 * i + h;
    nvfp4_quantize_block16(x + 16 * b, enc[i], packed + 8 * b, sf + b);
    nvfp4_quantize_block16_unit(x + 16 * b, packed_unit + 8 * b, sf_unit + b);
  }
  mxfp8_quantize_block32(x + 32 * i, q8 + 32 * i, sf8 + i);
}

__global__ void per_token_kernel(const float* x, int rows, int cols, uint8_t* packed, uint8_t* sf,
                                 float* p) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  p[r] = nvfp4_per_token_quantize_row(x + r * cols, cols, 1.f / 2688.f, packed + r * cols / 2,
                                      sf + r * cols / 16);
}

// ---- Inputs -------------------------------------------------------------------------------------

std::vector<float> float_set(uint64_t seed) {
  std::vector<float> out;
  auto from_bits = [](uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  };
  for (uint64_t b = 0; b < (1ull << 32); b += 2053)
    out.push_back(from_bits(static_cast<uint32_t>(b)));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (int i = 0; i < 500000; ++i) out.push_back(from_bits(rng()));
  std::normal_distribution<float> normal;
  for (int i = 0; i < 500000; ++i) out.push_back(normal(rng) * std::ldexp(1.f, i % 40 - 20));
  // Every e4m3 / e2m1 grid point, the midpoints and their float neighbours.
  for (int c = 0; c < 127; ++c) {
    const float a = e4m3_to_float(static_cast<uint8_t>(c));
    const float b = e4m3_to_float(static_cast<uint8_t>(c + 1 == 127 ? 126 : c + 1));
    for (float v : {a, 0.5f * (a + b), 0.5f * (a + b) + 0.5f * (a + b) * 1e-7f}) {
      out.insert(out.end(), {v, -v, std::nextafter(v, 0.f), std::nextafter(v, 1e30f)});
    }
  }
  for (float v : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.f, 6.f, 7.f, 464.f, 65520.f}) {
    out.insert(out.end(), {v, -v, std::nextafter(v, 0.f), std::nextafter(v, 1e30f)});
  }
  const float inf = std::numeric_limits<float>::infinity();
  out.insert(out.end(), {inf, -inf, std::numeric_limits<float>::quiet_NaN(), -0.f, 0.f});
  return out;
}

// ---- Tests --------------------------------------------------------------------------------------

TEST(FormatsGpu, DecodersMatchHostOnAllCodes) {
  CAKEMOE_REQUIRE_GPU();
  DeviceBuffer<uint32_t> bf16(65536), fp16(65536), e4m3(256), ue8m0(256), e2m1(16);
  decode_kernel<<<256, 256>>>(bf16.get(), fp16.get(), e4m3.get(), ue8m0.get(), e2m1.get());
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
  const auto d_bf16 = bf16.download(), d_fp16 = fp16.download();
  const auto d_e4m3 = e4m3.download(), d_ue8m0 = ue8m0.download(), d_e2m1 = e2m1.download();
  for (uint32_t c = 0; c < 65536; ++c) {
    ASSERT_EQ(d_bf16[c], float_to_bits(bf16_to_float(static_cast<uint16_t>(c)))) << c;
    ASSERT_EQ(d_fp16[c], float_to_bits(fp16_to_float(static_cast<uint16_t>(c)))) << c;
  }
  for (uint32_t c = 0; c < 256; ++c) {
    ASSERT_EQ(d_e4m3[c], float_to_bits(e4m3_to_float(static_cast<uint8_t>(c)))) << c;
    ASSERT_EQ(d_ue8m0[c], float_to_bits(ue8m0_to_float(static_cast<uint8_t>(c)))) << c;
  }
  for (uint32_t c = 0; c < 16; ++c) {
    ASSERT_EQ(d_e2m1[c], float_to_bits(e2m1_to_float(static_cast<uint8_t>(c)))) << c;
  }
}

TEST(FormatsGpu, EncodersMatchHostAndCudaIntrinsics) {
  CAKEMOE_REQUIRE_GPU();
  const std::vector<float> xs = float_set(5);
  std::vector<float> ys(xs.size());
  std::mt19937 rng(6);
  for (float& y : ys) {
    const uint32_t b = rng();
    std::memcpy(&y, &b, 4);
  }
  const int n = static_cast<int>(xs.size());
  DeviceBuffer<float> dx(xs), dy(ys);
  DeviceBuffer<EncodeOut> dout(xs.size());
  encode_kernel<<<(n + 255) / 256, 256>>>(dx.get(), dy.get(), dout.get(), n);
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
  const std::vector<EncodeOut> out = dout.download();
  for (int i = 0; i < n; ++i) {
    const float v = xs[i];
    const EncodeOut& o = out[i];
    // Our functions: device bits == host bits, NaN included.
    ASSERT_EQ(o.bf16, bf16_from_float(v)) << "bf16 x=" << v;
    ASSERT_EQ(o.fp16, fp16_from_float(v)) << "fp16 x=" << v;
    ASSERT_EQ(o.e4m3, e4m3_from_float(v)) << "e4m3 x=" << v;
    ASSERT_EQ(o.e2m1, e2m1_from_float(v)) << "e2m1 x=" << v;
    ASSERT_EQ(o.ue8m0, ue8m0_from_float_round_up(v)) << "ue8m0 x=" << v;
    // NOTE: NaN payloads of arithmetic differ (device: canonical 0x7FFFFFFF, host: propagated);
    // only the NaN-ness is part of the contract there.
    if (std::isnan(v)) {
      ASSERT_TRUE(std::isnan(bits_to_float(o.rcp))) << "rcp x=" << v;
    } else {
      ASSERT_EQ(o.rcp, float_to_bits(rcp_rn(v))) << "rcp x=" << v;
    }
    if (!std::isnan(mul_rn(v, ys[i]))) ASSERT_EQ(o.mul, float_to_bits(mul_rn(v, ys[i])));
    if (!std::isnan(div_rn(v, ys[i]))) ASSERT_EQ(o.div, float_to_bits(div_rn(v, ys[i])));
    // CUDA intrinsics: same values (NaN payloads are implementation-defined, skipped).
    ASSERT_EQ(o.e2m1_cuda, e2m1_from_float(v)) << "cvt e2m1 x=" << v;  // NaN -> +6 as well
    if (std::isnan(v)) continue;
    ASSERT_EQ(o.bf16_cuda, o.bf16) << "cvt bf16 x=" << v;
    ASSERT_EQ(o.fp16_cuda, o.fp16) << "cvt fp16 x=" << v;
    ASSERT_EQ(o.e4m3_cuda, o.e4m3) << "cvt e4m3 x=" << v;
    if (v > 0 && std::isfinite(v)) ASSERT_EQ(o.ue8m0_cuda, o.ue8m0) << "cvt ue8m0 x=" << v;
  }
}

TEST(FormatsGpu, BlockQuantizersMatchHost) {
  CAKEMOE_REQUIRE_GPU();
  const int chunks = 4096, rows = 64, cols = chunks * 32 / rows;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> x(chunks * 32), enc(chunks);
  for (int i = 0; i < chunks * 32; ++i) {
    x[i] = (i / 32) % 17 == 0 ? 0.f : normal(rng) * std::ldexp(1.f, (i / 32) % 30 - 15);
  }
  for (int i = 0; i < chunks; ++i) enc[i] = i % 17 == 0 ? INFINITY : 2688.f / (1.f + i % 97);
  DeviceBuffer<float> dx(x), denc(enc);
  DeviceBuffer<uint8_t> packed(chunks * 16), sf(chunks * 2), packed_u(chunks * 16),
      sf_u(chunks * 2), q8(chunks * 32), sf8(chunks), tok_packed(chunks * 16), tok_sf(chunks * 2);
  DeviceBuffer<float> p(rows);
  block_kernel<<<(chunks + 127) / 128, 128>>>(dx.get(), denc.get(), chunks, packed.get(), sf.get(),
                                              packed_u.get(), sf_u.get(), q8.get(), sf8.get());
  per_token_kernel<<<1, rows>>>(dx.get(), rows, cols, tok_packed.get(), tok_sf.get(), p.get());
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
  const auto d_packed = packed.download(), d_sf = sf.download();
  const auto d_packed_u = packed_u.download(), d_sf_u = sf_u.download();
  const auto d_q8 = q8.download(), d_sf8 = sf8.download();
  for (int i = 0; i < chunks; ++i) {
    uint8_t hp[16], hs[2], hpu[16], hsu[2], hq[32], hs8;
    for (int h = 0; h < 2; ++h) {
      nvfp4_quantize_block16(&x[32 * i + 16 * h], enc[i], hp + 8 * h, hs + h);
      nvfp4_quantize_block16_unit(&x[32 * i + 16 * h], hpu + 8 * h, hsu + h);
    }
    mxfp8_quantize_block32(&x[32 * i], hq, &hs8);
    for (int j = 0; j < 16; ++j) ASSERT_EQ(d_packed[16 * i + j], hp[j]) << "nvfp4 chunk " << i;
    for (int j = 0; j < 16; ++j) ASSERT_EQ(d_packed_u[16 * i + j], hpu[j]) << "unit chunk " << i;
    for (int j = 0; j < 32; ++j) ASSERT_EQ(d_q8[32 * i + j], hq[j]) << "mxfp8 chunk " << i;
    for (int h = 0; h < 2; ++h) ASSERT_EQ(d_sf[2 * i + h], hs[h]) << "nvfp4 sf chunk " << i;
    for (int h = 0; h < 2; ++h) ASSERT_EQ(d_sf_u[2 * i + h], hsu[h]) << "unit sf chunk " << i;
    ASSERT_EQ(d_sf8[i], hs8) << "mxfp8 sf chunk " << i;
  }
  std::vector<float> host_p;
  const Nvfp4Matrix tok =
      nvfp4_per_token_quantize_matrix(x.data(), rows, cols, 1.f / 2688.f, &host_p);
  EXPECT_EQ(tok_packed.download(), tok.packed);
  EXPECT_EQ(tok_sf.download(), tok.sf);
  const std::vector<float> d_p = p.download();
  for (int r = 0; r < rows; ++r) EXPECT_EQ(float_to_bits(d_p[r]), float_to_bits(host_p[r])) << r;
}

}  // namespace
}  // namespace formats
}  // namespace cakemoe
