// Canonical FP32 order of spec bgmv §3.2, emulated exactly on the CPU.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cakemoe/errors.h"
#include "core/parallel.h"
#include "formats/codecs.h"
#include "reference/bgmv/bgmv.h"

namespace cakemoe {
namespace reference {
namespace bgmv {
namespace {

constexpr int64_t kShrinkTile = 1024;  // K elements per tile: 128 threads x 8
constexpr int kThreads = 128;
constexpr int kPerThread = 8;
constexpr int kWarpSize = 32;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int64_t kGroupRanks = 8;  // rank entries per expand lane

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <DType D>
inline float widen_t(uint16_t bits) {
  return D == DType::kBF16 ? formats::bf16_to_float(bits) : formats::fp16_to_float(bits);
}

// Lays a K row out as [tile][element e][thread j] (zero padded) so that the 128 per-thread
// chains become contiguous vectors over j.
// NOTE: the GPU masks the K tail; padding with zeros instead is bit-identical because
// fma(0, 0, acc) == acc for acc != 0 and every zero sign is erased by the final 0.0f + sum.
template <DType D>
void to_thread_major(const uint16_t* src, int64_t hidden, float* dst) {
  const int64_t tiles = ceil_div(hidden, kShrinkTile);
  std::fill(dst, dst + tiles * kShrinkTile, 0.0f);
  for (int64_t k = 0; k < hidden; ++k) {
    const int64_t in_tile = k % kShrinkTile;
    const int64_t slot = k - in_tile + (in_tile % kPerThread) * kThreads + in_tile / kPerThread;
    dst[slot] = widen_t<D>(src[k]);
  }
}

void to_thread_major_f32(const float* src, int64_t hidden, float* dst) {
  const int64_t tiles = ceil_div(hidden, kShrinkTile);
  std::fill(dst, dst + tiles * kShrinkTile, 0.0f);
  for (int64_t k = 0; k < hidden; ++k) {
    const int64_t in_tile = k % kShrinkTile;
    dst[k - in_tile + (in_tile % kPerThread) * kThreads + in_tile / kPerThread] = src[k];
  }
}

// 4 warps: XOR butterfly each, then warp sums in warp order starting from 0.0f.
float block_reduce(const float* acc) {
  float sum = 0.0f;
  float lanes[kWarpSize];
  for (int w = 0; w < kWarps; ++w) {
    std::copy(acc + w * kWarpSize, acc + (w + 1) * kWarpSize, lanes);
    sum = sum + butterfly_sum(lanes, kWarpSize);
  }
  return sum;
}

// Per-thread fma chains over tiles [t0, t1), then the block reduction.
float split_partial(const float* xt, const float* at, int64_t t0, int64_t t1) {
  float acc[kThreads] = {};
  for (int64_t tile = t0; tile < t1; ++tile) {
    for (int e = 0; e < kPerThread; ++e) {
      const float* xv = xt + tile * kShrinkTile + e * kThreads;
      const float* av = at + tile * kShrinkTile + e * kThreads;
      for (int j = 0; j < kThreads; ++j) acc[j] = std::fma(xv[j], av[j], acc[j]);
    }
  }
  return block_reduce(acc);
}

float shrink_thread_major(const float* xt, const float* at, int64_t tiles, int splits) {
  const int64_t tiles_per_split = ceil_div(tiles, splits);
  float total = 0.0f;
  for (int z = 0; z < splits; ++z) {
    const int64_t t0 = std::min<int64_t>(z * tiles_per_split, tiles);
    const int64_t t1 = std::min<int64_t>((z + 1) * tiles_per_split, tiles);
    total = total + split_partial(xt, at, t0, t1);
  }
  return total;
}

bool pair_active(const Problem& p, int64_t pair, int64_t* token, int64_t* lora) {
  const int64_t t = p.sorted_token_ids[pair];
  if (t < 0 || t >= p.num_tokens) return false;
  const int64_t l = p.lora_indices[t];
  if (l < 0) return false;
  *token = t;
  *lora = l;
  return true;
}

template <DType D>
void shrink_t(const Problem& p, int splits, uint16_t* out) {
  const int64_t tiles = ceil_div(p.hidden, kShrinkTile);
  const int64_t slices = p.num_slices();
  core::parallel_for(slices * p.num_pairs, [&](int64_t index) {
    const int64_t s = index / p.num_pairs;
    const int64_t pair = index % p.num_pairs;
    uint16_t* row = out + index * p.rank;
    int64_t t = 0, l = 0;
    if (!pair_active(p, pair, &t, &l)) {
      std::fill(row, row + p.rank, uint16_t{0});
      return;
    }
    thread_local std::vector<float> xt, at;
    xt.resize(tiles * kShrinkTile);
    at.resize(tiles * kShrinkTile);
    to_thread_major<D>(p.x + t * p.hidden, p.hidden, xt.data());
    const int64_t e = p.expert_ids[pair];
    const uint16_t* a = p.lora_a[s] + (l * p.num_experts + e) * p.rank * p.hidden;
    for (int64_t r = 0; r < p.rank; ++r) {
      to_thread_major<D>(a + r * p.hidden, p.hidden, at.data());
      row[r] = narrow(D, shrink_thread_major(xt.data(), at.data(), tiles, splits));
    }
  });
}

// Column-vectorized XOR butterfly: lanes [n][F] -> out [F] (lane 0).
void butterfly_columns(std::vector<float>& lanes, std::vector<float>& scratch, int n, int64_t f,
                       float* out) {
  for (int off = n / 2; off >= 1; off /= 2) {
    for (int i = 0; i < n; ++i) {
      const float* a = lanes.data() + i * f;
      const float* b = lanes.data() + (i ^ off) * f;
      float* d = scratch.data() + i * f;
      for (int64_t c = 0; c < f; ++c) d[c] = a[c] + b[c];
    }
    lanes.swap(scratch);
  }
  std::copy(lanes.data(), lanes.data() + f, out);
}

int next_pow2(int64_t n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

// One (token, slice) row of the expand.
template <DType D>
void expand_row(const Problem& p, const CanonicalParams& params, const uint16_t* shrink_out,
                const int64_t* route_begin, const int64_t* route_end, int64_t l, int64_t s,
                float* y) {
  const int64_t f = p.feat_out, r_total = p.rank;
  const int64_t groups = expand_groups(r_total);
  const int lanes_n = next_pow2(groups);
  thread_local std::vector<float> bt, part, lanes, scratch, srow, combined;
  bt.resize(r_total * f);
  part.resize(f);
  lanes.assign(lanes_n * f, 0.0f);  // lanes beyond `groups` stay +0
  scratch.resize(lanes_n * f);
  srow.resize(r_total);
  combined.assign(f, 0.0f);
  for (const int64_t* it = route_begin; it != route_end; ++it) {
    const int64_t pair = *it;
    const float w = p.topk_weights[pair];
    const uint16_t* sh = shrink_out + (s * p.num_pairs + pair) * r_total;
    for (int64_t r = 0; r < r_total; ++r) srow[r] = widen_t<D>(sh[r]);
    // B[l, e] is [F][R]; transpose to [R][F] so each rank entry is a column vector.
    const uint16_t* b = p.lora_b[s] + (l * p.num_experts + p.expert_ids[pair]) * f * r_total;
    for (int64_t c = 0; c < f; ++c) {
      for (int64_t r = 0; r < r_total; ++r) bt[r * f + c] = widen_t<D>(b[c * r_total + r]);
    }
    if (params.grouped) std::fill(lanes.begin(), lanes.end(), 0.0f);
    for (int64_t g = 0; g < groups; ++g) {
      std::fill(part.begin(), part.end(), 0.0f);
      for (int64_t r = g * kGroupRanks; r < std::min(r_total, (g + 1) * kGroupRanks); ++r) {
        const float sr = srow[r];
        const float* bc = bt.data() + r * f;
        for (int64_t c = 0; c < f; ++c) part[c] = std::fma(sr, bc[c], part[c]);
      }
      float* acc = lanes.data() + g * f;
      if (params.grouped) {
        std::copy(part.begin(), part.end(), acc);  // unweighted per-route partial
      } else {
        for (int64_t c = 0; c < f; ++c) acc[c] = std::fma(part[c], w, acc[c]);
      }
    }
    if (params.grouped) {
      // spec §5 combine (OPEN-1 decided): weight applied once per route partial, in pair order.
      butterfly_columns(lanes, scratch, lanes_n, f, part.data());
      for (int64_t c = 0; c < f; ++c) combined[c] = std::fma(part[c], w, combined[c]);
    }
  }
  if (params.grouped) {
    std::copy(combined.begin(), combined.end(), y);
  } else {
    butterfly_columns(lanes, scratch, lanes_n, f, y);
  }
}

template <DType D>
void expand_t(const Problem& p, const CanonicalParams& params, const uint16_t* shrink_out,
              float* y, int64_t y_row_stride) {
  const TokenRoutes routes = token_routes(p);
  core::parallel_for(p.num_tokens, [&](int64_t t) {
    float* row = y + t * y_row_stride;
    const int64_t l = p.lora_indices[t];
    const int64_t* begin = routes.pairs.data() + routes.offsets[t];
    const int64_t* end = routes.pairs.data() + routes.offsets[t + 1];
    for (int64_t s = 0; s < p.num_slices(); ++s) {
      float* out = row + s * p.feat_out;
      if (l < 0 || begin == end) {
        std::fill(out, out + p.feat_out, 0.0f);
        continue;
      }
      expand_row<D>(p, params, shrink_out, begin, end, l, s, out);
    }
  });
}

void check_params(const Problem& p, const CanonicalParams& params) {
  if (params.shrink_splits < 1) throw InvalidArgument("shrink_splits", "must be at least 1");
  if (p.dtype != DType::kBF16 && p.dtype != DType::kFP16) {
    throw InvalidArgument("dtype", "the BGMV reference takes bf16 or fp16 operands");
  }
}

}  // namespace

float widen(DType dtype, uint16_t bits) {
  return dtype == DType::kBF16 ? widen_t<DType::kBF16>(bits) : widen_t<DType::kFP16>(bits);
}

uint16_t narrow(DType dtype, float value) {
  return dtype == DType::kBF16 ? formats::bf16_from_float(value) : formats::fp16_from_float(value);
}

float butterfly_sum(float* lanes, int n) {
  constexpr int kMaxLanes = 64;
  if (n < 1 || n > kMaxLanes || (n & (n - 1)) != 0) {
    throw InvalidArgument("n", "butterfly lanes must be a power of two in [1, 64]");
  }
  float next[kMaxLanes];
  for (int off = n / 2; off >= 1; off /= 2) {
    for (int i = 0; i < n; ++i) next[i] = lanes[i] + lanes[i ^ off];
    std::copy(next, next + n, lanes);
  }
  return lanes[0];
}

int64_t expand_groups(int64_t rank) { return ceil_div(rank, kGroupRanks); }

float shrink_dot(const float* x, const float* a, int64_t hidden, int splits) {
  if (splits < 1) throw InvalidArgument("splits", "must be at least 1");
  const int64_t tiles = ceil_div(hidden, kShrinkTile);
  std::vector<float> xt(tiles * kShrinkTile), at(tiles * kShrinkTile);
  to_thread_major_f32(x, hidden, xt.data());
  to_thread_major_f32(a, hidden, at.data());
  return shrink_thread_major(xt.data(), at.data(), tiles, splits);
}

TokenRoutes token_routes(const Problem& p) {
  TokenRoutes routes;
  routes.offsets.assign(p.num_tokens + 1, 0);
  for (int64_t pair = 0; pair < p.num_pairs; ++pair) {
    const int64_t t = p.sorted_token_ids[pair];
    if (t >= 0 && t < p.num_tokens) ++routes.offsets[t + 1];
  }
  for (int64_t t = 0; t < p.num_tokens; ++t) routes.offsets[t + 1] += routes.offsets[t];
  routes.pairs.resize(routes.offsets[p.num_tokens]);
  std::vector<int64_t> fill(routes.offsets.begin(), routes.offsets.end() - 1);
  for (int64_t pair = 0; pair < p.num_pairs; ++pair) {  // ascending: each list stays sorted
    const int64_t t = p.sorted_token_ids[pair];
    if (t >= 0 && t < p.num_tokens) routes.pairs[fill[t]++] = pair;
  }
  return routes;
}

void shrink(const Problem& p, const CanonicalParams& params, uint16_t* shrink_out) {
  check_params(p, params);
  if (p.dtype == DType::kBF16) {
    shrink_t<DType::kBF16>(p, params.shrink_splits, shrink_out);
  } else {
    shrink_t<DType::kFP16>(p, params.shrink_splits, shrink_out);
  }
}

void expand(const Problem& p, const CanonicalParams& params, const uint16_t* shrink_out, float* y,
            int64_t y_row_stride) {
  check_params(p, params);
  if (p.dtype == DType::kBF16) {
    expand_t<DType::kBF16>(p, params, shrink_out, y, y_row_stride);
  } else {
    expand_t<DType::kFP16>(p, params, shrink_out, y, y_row_stride);
  }
}

void run(const Problem& p, const CanonicalParams& params, uint16_t* shrink_out, float* y,
         int64_t y_row_stride) {
  shrink(p, params, shrink_out);
  expand(p, params, shrink_out, y, y_row_stride);
}

}  // namespace bgmv
}  // namespace reference
}  // namespace cakemoe
