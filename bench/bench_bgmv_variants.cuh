// bench_bgmv --variants: every Cake pipeline forced on the same inputs, side by side, to place
// the selector's crossovers on the H200 (bench/NOTES.md). Columns: the default plan, per-route
// (grouped=false; remap by its heuristic), per-route with remap forced on, per-route with remap
// off, grouped (index form by grouped_geometry()), grouped with the hist / scan / scatter index,
// the specialized variant (spec §7, H 2688 / 3072 at rank 32; -1 elsewhere).
// --specialized: the specialized variant in each schedule against the generic plan, H 2688 and
// 3072 at rank 32 from 1 to 2048 tokens: the evidence for plan_variant.cpp's kSm90SpecializedWindows.
#pragma once

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "bench_bgmv_common.cuh"
#include "bgmv/plan_impl.h"
#include "cakemoe/bgmv.h"

namespace cakemoe {
namespace {

/// Median µs of the plan that `prepare` builds, or -1 when prepare refuses the forced pipeline.
template <typename Prepare>
double time_or_skip(Bench& bench, Prepare prepare, std::string* label) {
  try {
    bgmv::BgmvPlan plan(prepare());
    if (label != nullptr) {
      *label = plan.variant() == "specialized"
                   ? "spec s" + std::to_string(plan.schedule_id().value_or(-1))
                   : std::string(plan.grouped() ? "grouped" : "route") +
                         (plan.order_remap() ? "+remap" : "");
    }
    return bench.time_plan(plan);
  } catch (const Error&) {
    return -1.0;
  }
}

/// `only`: "H,R,T,k,L" (E 128) to run one shape (e.g. under ncu), empty for the matrix.
int run_variant_mode(Bench& bench, double budget_s, const std::string& only) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::vector<Shape> shapes;
  for (int64_t t : {1024, 2048}) shapes.push_back({3072, 32, t, 2, 4, 128});
  for (int64_t h : {3072, 2688, 4096}) {
    for (int64_t r : {32, 16, 64}) {
      for (int64_t k : {2, 8, 6}) {
        for (int64_t t : {128, 256, 512, 1024, 2048}) shapes.push_back({h, r, t, k, 8, 128});
      }
    }
  }
  if (!only.empty()) {
    long long h = 0, r = 0, t = 0, k = 0, l = 0;
    if (std::sscanf(only.c_str(), "%lld,%lld,%lld,%lld,%lld", &h, &r, &t, &k, &l) != 5) {
      std::printf("--shape=H,R,T,k,L expected, got %s\n", only.c_str());
      return 2;
    }
    shapes = {{h, r, t, k, l, 128}};
  }
  std::printf(
      "BGMV variant bench: graph replay, L2 flush (%s) per rep, median of %d reps, bf16; "
      "us per forced pipeline (-1: refused); %%roof of the best vs bytes_min at %.2f "
      "TB/s\n",
      bench.flush_name(), bench.reps, kHbmTbPerS);
  std::printf("%5s %3s %5s %2s %2s | %-14s %9s | %9s %9s %9s %9s %9s %9s | %6s\n", "H", "R", "T",
              "k", "L", "default", "us", "route", "remap", "noremap", "grouped", "grp idx3",
              "special", "%roof");
  const TableBuffers buf(8 * 128 * 64 * 4096, 2048 * 4096);
  size_t done = 0;
  for (const Shape& s : shapes) {
    if (elapsed() > budget_s) break;
    const Inputs in(s, buf.a, buf.b, buf.x);
    const auto prep = [&](std::optional<bool> grouped, std::optional<bool> remap, int index,
                          int variant = -1) {
      return [&, grouped, remap, index, variant] {
        bgmv::BgmvOptions o;
        o.grouped = grouped;
        o.order_remap = remap;
        bgmv::PlanOverrides overrides;
        if (index >= 0) overrides.fused_index = index == 1;
        if (variant >= 0) {
          overrides.variant = variant == 1 ? bgmv::Variant::kSpecialized : bgmv::Variant::kGeneric;
        }
        return bgmv::detail::prepare_impl(in.x, {in.a}, {in.b}, in.sorted, in.experts, in.loras,
                                          in.weights, s.experts, o, overrides);
      };
    };
    std::string label;
    const double def = time_or_skip(bench, prep(std::nullopt, std::nullopt, -1), &label);
    const double route = time_or_skip(bench, prep(false, std::nullopt, -1), nullptr);
    const double remap = time_or_skip(bench, prep(false, true, -1), nullptr);
    const double noremap = time_or_skip(bench, prep(false, false, -1), nullptr);
    const double grouped = time_or_skip(bench, prep(true, std::nullopt, -1), nullptr);
    const double index3 = time_or_skip(bench, prep(true, std::nullopt, 0), nullptr);
    const double special = time_or_skip(bench, prep(std::nullopt, std::nullopt, -1, 1), nullptr);
    double best = def;
    for (double v : {route, remap, noremap, grouped, index3, special}) {
      if (v > 0 && (best <= 0 || v < best)) best = v;
    }
    const double gbs = bytes_min(s, in.routing.bins_touched) / (best * 1e3);
    std::printf(
        "%5lld %3lld %5lld %2lld %2lld | %-14s %9.2f | %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f | "
        "%5.1f%%\n",
        (long long)s.hidden, (long long)s.rank, (long long)s.tokens, (long long)s.top_k,
        (long long)s.loras, label.c_str(), def, route, remap, noremap, grouped, index3, special,
        100.0 * gbs / (kHbmTbPerS * 1e3));
    std::fflush(stdout);
    ++done;
  }
  report_budget_stop(done, shapes.size(), budget_s);
  return 0;
}

/// --specialized: H 2688 / 3072, rank 32, T 1..2048, k 2 and 8, L 8, E 128. Columns: the default
/// plan, the generic variant forced, the specialized variant with the selector's schedule and
/// with each schedule forced, and generic / best specialized (> 1: specialized faster).
int run_specialized_mode(Bench& bench, double budget_s) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::vector<Shape> shapes;
  for (int64_t h : {3072, 2688}) {
    for (int64_t k : {2, 8}) {
      for (int64_t t : {1, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048}) {
        shapes.push_back({h, 32, t, k, 8, 128});
      }
    }
  }
  std::printf(
      "BGMV specialized bench: graph replay, L2 flush (%s) per rep, median of %d reps, bf16; "
      "us (-1: refused); gen/spec = generic / best specialized\n",
      bench.flush_name(), bench.reps);
  std::printf("%5s %5s %2s | %-14s %9s | %9s %9s %9s %9s %9s | %8s\n", "H", "T", "k", "default",
              "us", "generic", "spec", "spec s0", "spec s1", "spec s2", "gen/spec");
  const TableBuffers buf(8 * 128 * 32 * 3072, 2048 * 3072);
  size_t done = 0;
  for (const Shape& s : shapes) {
    if (elapsed() > budget_s) break;
    const Inputs in(s, buf.a, buf.b, buf.x);
    const auto prep = [&](int variant, int schedule) {
      return [&, variant, schedule] {
        bgmv::PlanOverrides overrides;
        if (variant >= 0) {
          overrides.variant = variant == 1 ? bgmv::Variant::kSpecialized : bgmv::Variant::kGeneric;
        }
        if (schedule >= 0) overrides.specialized_schedule = schedule;
        return bgmv::detail::prepare_impl(in.x, {in.a}, {in.b}, in.sorted, in.experts, in.loras,
                                          in.weights, s.experts, bgmv::BgmvOptions(), overrides);
      };
    };
    std::string label;
    const double def = time_or_skip(bench, prep(-1, -1), &label);
    const double generic = time_or_skip(bench, prep(0, -1), nullptr);
    const double spec = time_or_skip(bench, prep(1, -1), nullptr);
    double best = -1.0;
    double sched[3];
    for (int i = 0; i < 3; ++i) {
      sched[i] = time_or_skip(bench, prep(1, i), nullptr);
      if (sched[i] > 0 && (best <= 0 || sched[i] < best)) best = sched[i];
    }
    std::printf("%5lld %5lld %2lld | %-14s %9.2f | %9.2f %9.2f %9.2f %9.2f %9.2f | %8.3f\n",
                (long long)s.hidden, (long long)s.tokens, (long long)s.top_k, label.c_str(), def,
                generic, spec, sched[0], sched[1], sched[2],
                best > 0 && generic > 0 ? generic / best : -1.0);
    std::fflush(stdout);
    ++done;
  }
  report_budget_stop(done, shapes.size(), budget_s);
  return 0;
}

}  // namespace
}  // namespace cakemoe
