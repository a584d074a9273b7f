// Pieces shared by the reference FC1 and FC2 (spec stepfun §5.1, §7.1): the routing tables they
// read, the grouping of valid permuted rows by expert, and the fp32 row-dot kernel.
#pragma once

#include <cstdint>
#include <vector>

namespace cakemoe {
namespace reference {
namespace stepfun {

/// The permutation tables of spec §2.4 that the GEMM stages read (caller-owned, plain pointers).
struct GemmTables {
  const int32_t* permuted_idx_to_token_idx = nullptr;  ///< [>= rows]; FC1 only
  const int32_t* cta_idx_xy_to_batch_idx = nullptr;    ///< [>= num_non_exiting_ctas]
  const int32_t* cta_idx_xy_to_mn_limit = nullptr;     ///< [>= num_non_exiting_ctas]
  int64_t num_non_exiting_ctas = 0;
  int64_t cta_table_entries = 0;  ///< entries of each CTA table: num_non_exiting_ctas <= this
  int64_t tile = 8;               ///< tile_tokens_dim
};

/// Valid permuted rows of every local expert, in CTA order: tile n contributes
/// [n*tile, mn_limit[n]) to expert cta_idx_xy_to_batch_idx[n].
struct ExpertRows {
  std::vector<std::vector<int64_t>> rows;  ///< [E_loc] lists of permuted rows
};

/// Groups the valid rows; throws InvalidArgument (naming the table) when num_non_exiting_ctas
/// exceeds the CTA tables, a tile's expert is outside [0, num_experts) or its mn_limit outside
/// [n*tile, min((n+1)*tile, output_rows)].
ExpertRows group_rows_by_expert(const GemmTables& tables, int64_t num_experts, int64_t output_rows);

/// c[i*ldc + j] = sum_kk a_rows[i][kk] * b[j*k + kk] for i < m, j < n: fp32 dot products of m
/// gathered rows with n contiguous rows of b ([n, k] row-major). The summation order is
/// unspecified (blocked, 8-lane FMA accumulators): tolerance-level, not bitwise, results.
void rows_dot(const float* const* a_rows, int64_t m, const float* b, int64_t n, int64_t k, float* c,
              int64_t ldc);

}  // namespace stepfun
}  // namespace reference
}  // namespace cakemoe
