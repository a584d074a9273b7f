// bench_bgmv --timeline=H,R,T,k,L[,E]: per-CTA event stamps of one table row's Cake plan and its
// portable plan, each in one graph replay after the usual flush (builds configured with
// -DCAKEMOE_BGMV_TIMELINE=ON; other builds say so and stop). Thread 0 of every shrink and expand
// CTA records (%globaltimer, clock64, %smid) at each event of cake_device.cuh timeline_stamp:
//   shrink: 0 entry, 1 route known, 3 FMAs done, 4 exit (2 unused);
//   expand: 0 entry, 1 pre-wait work done, 2 griddepcontrol.wait returned, 3 accumulated, 4 exit,
//   5 the pre-wait B registers landed (the CTA waits for them before its PDL wait; Cake: early
//   path only), 6 the first shrink rows landed after the wait (Cake: first batch of the route
//   list; portable: thread 0's element of the pair's row).
// Grouped plans (two-kernel form with the one-CTA index): the index stamps CTA 0 of the first
// buffer (0 entry, 1 loads landed, 2 counts done, 3 scanned, 4 tiles written, 5 exit) and the
// grouped shrink CTAs 1.. (0 entry, 2 wait returned, 4 exit); the grouped expand stamps the
// second (0 entry, 1 pre-wait reads and copies issued, 2 wait returned, 3 rows staged, 4 exit).
// Times print in ns from the earliest stamp of the replay; "cyc" columns are clock64 deltas from
// the CTA's own entry (one SM's clock, immune to a coarse %globaltimer tick).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_bgmv_common.cuh"
#include "bgmv/cake_device.cuh"
#include "bgmv/plan.h"

namespace cakemoe {
namespace {

struct TimelineBuffers {
  unsigned long long* shrink = nullptr;
  unsigned long long* expand = nullptr;
  int64_t words = 0;
  explicit TimelineBuffers(int64_t ctas) : words(ctas * bgmv::dev::kTimelineEvents *
                                                 bgmv::dev::kTimelineWords) {
    CAKEMOE_CUDA_CHECK(cudaMalloc(&shrink, words * 8));
    CAKEMOE_CUDA_CHECK(cudaMalloc(&expand, words * 8));
  }
  ~TimelineBuffers() {
    cudaFree(shrink);
    cudaFree(expand);
  }
  TimelineBuffers(const TimelineBuffers&) = delete;
  TimelineBuffers& operator=(const TimelineBuffers&) = delete;
  void clear() const {
    CAKEMOE_CUDA_CHECK(cudaMemset(shrink, 0, words * 8));
    CAKEMOE_CUDA_CHECK(cudaMemset(expand, 0, words * 8));
  }
  std::vector<unsigned long long> fetch(const unsigned long long* buf) const {
    std::vector<unsigned long long> host(static_cast<size_t>(words));
    CAKEMOE_CUDA_CHECK(cudaMemcpy(host.data(), buf, words * 8, cudaMemcpyDeviceToHost));
    return host;
  }
};

/// One kernel's stamps: per CTA that stamped its entry, the events' (ns, cycles, sm).
void print_kernel(const char* name, const std::vector<unsigned long long>& tl,
                  unsigned long long t0) {
  constexpr int kE = bgmv::dev::kTimelineEvents, kW = bgmv::dev::kTimelineWords;
  const int64_t ctas = static_cast<int64_t>(tl.size()) / (kE * kW);
  std::vector<std::vector<double>> at(kE);  // ns from t0, per event, over CTAs
  int printed = 0, live = 0;
  std::printf("  %s: cta sm | ns from t0 for events 0..%d | cycles from entry\n", name, kE - 1);
  for (int64_t c = 0; c < ctas; ++c) {
    const unsigned long long* e = &tl[static_cast<size_t>(c * kE * kW)];
    if (e[0] == 0) continue;  // no entry stamp: not launched in this replay
    ++live;
    for (int i = 0; i < kE; ++i) {
      if (e[i * kW] != 0) at[i].push_back(static_cast<double>(e[i * kW] - t0));
    }
    if (printed++ >= 48) continue;
    std::printf("    %5lld %3llu |", static_cast<long long>(c), e[2]);
    for (int i = 0; i < kE; ++i) {
      if (e[i * kW] == 0) {
        std::printf("      -");
      } else {
        std::printf(" %6llu", e[i * kW] - t0);
      }
    }
    std::printf(" |");
    for (int i = 1; i < kE; ++i) {
      if (e[i * kW] == 0 || e[i * kW + 2] != e[2]) {
        std::printf("      -");
      } else {
        std::printf(" %6llu", e[i * kW + 1] - e[1]);
      }
    }
    std::printf("\n");
  }
  std::printf("  %s: %d CTAs stamped; per event min / median / max ns from t0:", name, live);
  for (int i = 0; i < kE; ++i) {
    std::vector<double>& v = at[i];
    if (v.empty()) {
      std::printf("  e%d -", i);
      continue;
    }
    std::sort(v.begin(), v.end());
    std::printf("  e%d %.0f/%.0f/%.0f", i, v.front(), v[v.size() / 2], v.back());
  }
  std::printf("\n");
}

/// Smallest non-zero globaltimer of both buffers.
unsigned long long first_stamp(const std::vector<unsigned long long>& a,
                               const std::vector<unsigned long long>& b) {
  unsigned long long t0 = ~0ull;
  for (const auto* tl : {&a, &b}) {
    for (size_t i = 0; i < tl->size(); i += bgmv::dev::kTimelineWords) {
      if ((*tl)[i] != 0) t0 = std::min(t0, (*tl)[i]);
    }
  }
  return t0;
}

int run_timeline_mode(Bench& bench, const std::string& row) {
#ifndef CAKEMOE_BGMV_TIMELINE
  (void)bench;
  std::printf("bench_bgmv --timeline=%s: this build has no stamps; configure with "
              "-DCAKEMOE_BGMV_TIMELINE=ON\n",
              row.c_str());
  return 2;
#else
  Shape s{};
  if (!parse_shape(row, &s)) {
    std::printf("--timeline=H,R,T,k,L[,E], got %s\n", row.c_str());
    return 2;
  }
  const TableBuffers buf(s.loras * s.experts * s.rank * s.hidden, s.tokens * s.hidden);
  const Inputs in(s, buf.a, buf.b, buf.x);
  // The widest grids: shrink P x R/8 x 8 splits, expand T x H/8 (cake) or P x H/128 (portable);
  // grouped: 1 + max_tiles x R/8 shrink CTAs, max_tiles x H/256 expand CTAs at most.
  const int64_t pairs = s.tokens * s.top_k;
  const int64_t max_tiles =
      bgmv::grouped_workspace(pairs, s.tokens, s.loras, s.experts, s.hidden).max_tiles;
  const int64_t ctas =
      std::max({pairs * s.rank, std::max(s.tokens, pairs) * (s.hidden / 8 + 1),
                1 + max_tiles * (s.rank / 8), max_tiles * (s.hidden / 256 + 1)});
  const TimelineBuffers tl(ctas);
  for (const bool portable : {false, true}) {
    bgmv::detail::PrepareInternals internals;
    internals.force_portable = portable;
    internals.timeline_shrink = tl.shrink;
    internals.timeline_expand = tl.expand;
    bgmv::BgmvPlan plan(bgmv::detail::prepare_impl(in.x, {in.a}, {in.b}, in.sorted, in.experts,
                                                   in.loras, in.weights, s.experts, {},
                                                   internals));
    const double us = bench.time_plan(plan);  // captures, then the usual reps
    tl.clear();
    const int reps = bench.reps;
    bench.reps = 1;
    const double one = bench.time_plan(plan);  // one flushed replay into cleared buffers
    bench.reps = reps;
    const std::vector<unsigned long long> sh = tl.fetch(tl.shrink), ex = tl.fetch(tl.expand);
    const unsigned long long t0 = first_stamp(sh, ex);
    std::printf("%s H %lld R %lld T %lld k %lld L %lld E %lld: %s, median %.2f us, stamped "
                "replay %.2f us\n",
                portable ? "portable" : "cake", (long long)s.hidden, (long long)s.rank,
                (long long)s.tokens, (long long)s.top_k, (long long)s.loras, (long long)s.experts,
                plan_label(plan).c_str(), us, one);
    if (t0 == ~0ull) {
      std::printf("  no stamps (specialized shrink or multi-kernel index: not instrumented)\n");
      continue;
    }
    const bool grouped = plan.grouped();
    print_kernel(grouped ? "index (cta 0) + grouped shrink" : "shrink", sh, t0);
    print_kernel(grouped ? "grouped expand" : "expand", ex, t0);
  }
  return 0;
#endif
}

}  // namespace
}  // namespace cakemoe
