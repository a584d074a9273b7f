#include "reference/stepfun/gemm_common.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "core/check.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define CAKEMOE_REFERENCE_AVX2 1
#endif

namespace cakemoe {
namespace reference {
namespace stepfun {
namespace {

// NOTE: a K block of 512 floats keeps the kNr b-row slices (8 KB) in L1 while the a rows stream.
constexpr int64_t kKBlock = 512;
constexpr int kMr = 3;  // a rows per micro tile
constexpr int kNr = 4;  // b rows per micro tile (3x4 = 12 accumulators + 4 operands = 16 ymm)

#if defined(CAKEMOE_REFERENCE_AVX2)
inline float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

/// c (+)= a[0..MR) . b[0..NR) over kc elements starting at column k0 of the a rows.
template <int MR, int NR>
void micro_tile(const float* const* a, int64_t k0, const float* b, int64_t ldb, int64_t kc,
                float* c, int64_t ldc, bool accumulate) {
  float sums[MR][NR];
  int64_t kk = 0;
#if defined(CAKEMOE_REFERENCE_AVX2)
  __m256 acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  for (; kk + 8 <= kc; kk += 8) {
    __m256 av[MR];
    for (int i = 0; i < MR; ++i) av[i] = _mm256_loadu_ps(a[i] + k0 + kk);
    for (int j = 0; j < NR; ++j) {
      const __m256 bv = _mm256_loadu_ps(b + j * ldb + kk);
      for (int i = 0; i < MR; ++i) acc[i][j] = _mm256_fmadd_ps(av[i], bv, acc[i][j]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) sums[i][j] = horizontal_sum(acc[i][j]);
#else
  float lanes[MR][NR][8] = {};
  for (; kk + 8 <= kc; kk += 8) {
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j)
        for (int l = 0; l < 8; ++l)
          lanes[i][j][l] = std::fma(a[i][k0 + kk + l], b[j * ldb + kk + l], lanes[i][j][l]);
  }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      float s = 0.0f;
      for (int l = 0; l < 8; ++l) s += lanes[i][j][l];
      sums[i][j] = s;
    }
#endif
  for (; kk < kc; ++kk)
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j)
        sums[i][j] = std::fma(a[i][k0 + kk], b[j * ldb + kk], sums[i][j]);
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) {
      float& out = c[i * ldc + j];
      out = accumulate ? out + sums[i][j] : sums[i][j];
    }
}

using MicroTile = void (*)(const float* const*, int64_t, const float*, int64_t, int64_t, float*,
                           int64_t, bool);

template <int MR>
constexpr std::array<MicroTile, kNr> micro_row() {
  return {&micro_tile<MR, 1>, &micro_tile<MR, 2>, &micro_tile<MR, 3>, &micro_tile<MR, 4>};
}

const std::array<std::array<MicroTile, kNr>, kMr> kMicroTiles = {micro_row<1>(), micro_row<2>(),
                                                                 micro_row<3>()};

}  // namespace

ExpertRows group_rows_by_expert(const GemmTables& tables, int64_t num_experts,
                                int64_t output_rows) {
  core::require(tables.tile > 0, "tile_tokens_dim", "must be > 0");
  core::require(tables.num_non_exiting_ctas >= 0, "num_non_exiting_ctas", "must be >= 0");
  // NOTE: a live device value: the entries are checked at prepare, the count only here.
  core::require(tables.num_non_exiting_ctas <= tables.cta_table_entries, "num_non_exiting_ctas",
                "= " + std::to_string(tables.num_non_exiting_ctas) + " exceeds the " +
                    std::to_string(tables.cta_table_entries) + " entries of the CTA tables");
  if (tables.num_non_exiting_ctas > 0) {
    core::require(tables.cta_idx_xy_to_batch_idx != nullptr, "cta_idx_xy_to_batch_idx",
                  "is required");
    core::require(tables.cta_idx_xy_to_mn_limit != nullptr, "cta_idx_xy_to_mn_limit",
                  "is required");
  }
  ExpertRows groups;
  groups.rows.resize(static_cast<size_t>(num_experts));
  for (int64_t n = 0; n < tables.num_non_exiting_ctas; ++n) {
    const int64_t expert = tables.cta_idx_xy_to_batch_idx[n];
    core::require(expert >= 0 && expert < num_experts, "cta_idx_xy_to_batch_idx",
                  "entry " + std::to_string(n) + " holds expert " + std::to_string(expert) +
                      ", outside [0, E_loc = " + std::to_string(num_experts) + ")");
    const int64_t begin = n * tables.tile;
    const int64_t limit = tables.cta_idx_xy_to_mn_limit[n];
    core::require(
        limit >= begin && limit <= begin + tables.tile && limit <= output_rows,
        "cta_idx_xy_to_mn_limit",
        "entry " + std::to_string(n) + " = " + std::to_string(limit) +
            " must lie in [n*tile, min((n+1)*tile, rows = " + std::to_string(output_rows) + ")]");
    for (int64_t r = begin; r < limit; ++r) groups.rows[expert].push_back(r);
  }
  return groups;
}

void rows_dot(const float* const* a_rows, int64_t m, const float* b, int64_t n, int64_t k, float* c,
              int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    return;
  }
  for (int64_t k0 = 0; k0 < k; k0 += kKBlock) {
    const int64_t kc = std::min(kKBlock, k - k0);
    for (int64_t j0 = 0; j0 < n; j0 += kNr) {
      const int64_t nr = std::min<int64_t>(kNr, n - j0);
      for (int64_t i0 = 0; i0 < m; i0 += kMr) {
        const int64_t mr = std::min<int64_t>(kMr, m - i0);
        kMicroTiles[mr - 1][nr - 1](a_rows + i0, k0, b + j0 * k + k0, k, kc, c + i0 * ldc + j0, ldc,
                                    k0 > 0);
      }
    }
  }
}

}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
