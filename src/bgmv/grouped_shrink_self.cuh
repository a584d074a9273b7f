// Self-indexed grouped shrink (spec bgmv §5; docs/decisions/bgmv-gpu-runtime.md): CTA = (bin,
// rank block) finds its bin's routes itself from the pair arrays instead of waiting for the
// index, so the index kernel runs beside it instead of before it. Only the tail waits for the
// index (griddepcontrol.wait): it copies the rows into tile_rows at the positions the index gave
// the bin's routes. Same per-route arithmetic as grouped_shrink_kernel (the staged-A body of
// grouped_staged.cuh): the rows are bitwise equal, and so is everything after them.
//
// The routes are found in rounds: each warp scans a contiguous quarter of the pairs for the
// bin's expert (candidates, kSelfWindow per warp per round), then the candidates' tokens and
// LoRAs are checked. A bin whose expert has more than kSelfWindow pairs in one quarter takes
// more rounds (each re-scans; A stays staged).
#pragma once

#include <cstdint>

#include "bgmv/grouped_staged.cuh"

namespace cakemoe {
namespace bgmv {
namespace grouped {

constexpr int kSelfWindow = 64;  ///< candidates per warp per round
constexpr int kSelfWarps = kShrinkThreads / 32;
constexpr int kSelfRoundMax = kSelfWarps * kSelfWindow;
constexpr int kSelfScanUnroll = 8;  ///< expert ids in flight per lane

/// grid (L * E, R / 8) x 128, dynamic smem 8 * grouped_stage_row_bytes(H).
template <bool kBf16>
// NOTE: 4 CTAs per SM at H <= 3072 (48 KB staged + ~4 KB static each).
__global__ void __launch_bounds__(kShrinkThreads, 4) grouped_shrink_self_kernel(GroupedParams p) {
  extern __shared__ uint4 stage[];
  __shared__ SplitSums red;
  __shared__ int cand[kSelfWarps][kSelfWindow];  // per warp, ascending pair ids
  __shared__ int keep[kSelfRoundMax];            // 1 / 0, then exclusive positions
  __shared__ int route_pair[kSelfRoundMax];
  __shared__ int route_token[kSelfRoundMax];
  __shared__ int warp_total[kSelfWarps];
  __shared__ int scan_sums[32];
  // NOTE: no griddepcontrol.wait before the tail: nothing read before it is written by the
  // index (pair arrays, x, A are inputs; the rows written are of valid pairs, the index zeroes
  // invalid ones).
  dev::pdl_trigger();
  const int bin = static_cast<int>(blockIdx.x), rank_block = static_cast<int>(blockIdx.y);
  const int lora = bin / p.num_experts, expert = bin % p.num_experts;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t h = p.hidden;
  bool staged = false;
  int rows_done = 0;  // routes of this bin computed so far (CTA-uniform)
  for (int round = 0;; ++round) {
    // ---- candidates: this warp's pairs of the bin's expert with ordinal in the window ----
    const int lo = round * kSelfWindow;
    // NOTE: recomputed per round (not live across the part loop, which needs ~125 registers).
    const int quarter = (p.num_pairs + kSelfWarps - 1) / kSelfWarps;
    const int begin = min(p.num_pairs, warp * quarter), end = min(p.num_pairs, begin + quarter);
    int count = 0;
    for (int base = begin; base < end; base += 32 * kSelfScanUnroll) {
      int64_t e[kSelfScanUnroll];
#pragma unroll
      for (int u = 0; u < kSelfScanUnroll; ++u) {
        const int i = base + u * 32 + lane;
        e[u] = i < end ? p.expert_ids[i] : -1;
      }
#pragma unroll
      for (int u = 0; u < kSelfScanUnroll; ++u) {
        const bool match = e[u] == expert;
        const unsigned ballot = __ballot_sync(0xFFFFFFFFu, match);
        if (match) {
          const int o = count + __popc(ballot & ((1u << lane) - 1u)) - lo;
          if (o >= 0 && o < kSelfWindow) cand[warp][o] = base + u * 32 + lane;
        }
        count += __popc(ballot);
      }
    }
    if (lane == 0) warp_total[warp] = count;
    __syncthreads();
    // ---- routes: candidates whose token is in range and has this LoRA, in candidate order ----
    int in_round[kSelfWarps], round_cands = 0, more = 0;
#pragma unroll
    for (int w = 0; w < kSelfWarps; ++w) {
      in_round[w] = min(kSelfWindow, max(0, warp_total[w] - lo));
      round_cands += in_round[w];
      more |= warp_total[w] > lo + kSelfWindow;
    }
    if (round_cands == 0 && !more) break;
    int token[kSelfRoundMax / kShrinkThreads], pair[kSelfRoundMax / kShrinkThreads];
#pragma unroll
    for (int j = 0; j < kSelfRoundMax / kShrinkThreads; ++j) {
      const int c = tid + j * kShrinkThreads;  // candidate c of the round, warp-major
      int w = 0, o = c;
#pragma unroll
      for (int ww = 0; ww < kSelfWarps - 1; ++ww) {
        if (w == ww && o >= in_round[ww]) {
          o -= in_round[ww];
          ++w;
        }
      }
      pair[j] = c < round_cands ? cand[w][o] : -1;
      const int64_t t = pair[j] >= 0 ? p.sorted_token_ids[pair[j]] : -1;
      token[j] = t >= 0 && t < p.num_tokens ? static_cast<int>(t) : -1;
    }
#pragma unroll
    for (int j = 0; j < kSelfRoundMax / kShrinkThreads; ++j) {
      keep[tid + j * kShrinkThreads] = token[j] >= 0 && p.lora_indices[token[j]] == lora ? 1 : 0;
    }
    __syncthreads();
    const int routes = block_exclusive_scan(keep, kSelfRoundMax, scan_sums);
#pragma unroll
    for (int j = 0; j < kSelfRoundMax / kShrinkThreads; ++j) {
      const int c = tid + j * kShrinkThreads;
      const bool kept = c + 1 < kSelfRoundMax ? keep[c + 1] > keep[c] : routes > keep[c];
      if (kept) {
        route_pair[keep[c]] = pair[j];
        route_token[keep[c]] = token[j];
      }
    }
    __syncthreads();
    // ---- the round's rows (grouped_shrink_kernel's arithmetic) ----
    if (routes > 0 && !staged) {
      stage_a_block(p,
                    static_cast<const uint16_t*>(p.lora_a) +
                        (static_cast<int64_t>(bin) * p.rank + rank_block * kRankTile) * h,
                    stage);
    }
    for (int part = 0; part < routes; part += kGroupShrinkPart) {
      const int n = min(kGroupShrinkPart, routes - part);
      const uint16_t* xs[kGroupShrinkPart];
#pragma unroll
      for (int i = 0; i < kGroupShrinkPart; ++i) {
        xs[i] = static_cast<const uint16_t*>(p.x) +
                static_cast<int64_t>(route_token[part + min(i, n - 1)]) * h;
      }
      const float total = shrink_staged_part<kBf16>(p, stage, n, xs, !staged && part == 0, red);
      if (tid < n * kRankTile) {
        const int i = tid / kRankTile, r = tid % kRankTile;
        static_cast<uint16_t*>(p.shrink_out)[static_cast<int64_t>(route_pair[part + i]) * p.rank +
                                             rank_block * kRankTile + r] = narrow<kBf16>(total);
      }
    }
    staged = staged || routes > 0;
    rows_done += routes;
    if (!more) break;
    __syncthreads();  // cand, keep and the route lists are rewritten by the next round
  }
  // NOTE: CTA (0, 0) always waits, so this grid never completes before the index does (the
  // expand's and the combine's reads rely on that).
  if (rows_done == 0 && (blockIdx.x != 0 || blockIdx.y != 0)) return;
  dev::pdl_wait();  // the index is complete: bin_offset, sorted_routes
  __syncthreads();  // this CTA's shrink_out rows, written by threads < 32, are visible to all
  if (rows_done == 0) return;
  // ---- tail: the rows again in the index's sorted-route order (tile_rows, for the expand) ----
  const GroupedWs w = grouped_ws(p);
  const int start = w.bin_offset[bin];
  const uint16_t* rows = static_cast<const uint16_t*>(p.shrink_out);
  for (int v = tid; v < rows_done * kRankTile; v += kShrinkThreads) {
    const int j = v / kRankTile, column = rank_block * kRankTile + v % kRankTile;
    const int64_t pair_id = w.sorted_routes[start + j];
    w.tile_rows[static_cast<int64_t>(start + j) * p.rank + column] =
        __ldcg(rows + pair_id * p.rank + column);
  }
}

}  // namespace grouped
}  // namespace bgmv
}  // namespace cakemoe
