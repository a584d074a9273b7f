// BGMV MoE-LoRA plan benchmark (spec bgmv §12 protocol, §14 roofline): CUDA-graph replay of
// plan.run() on one stream, L2 flushed before every rep (a 256 MB clean read; see FlushMode in
// bench_bgmv_common.cuh), median of >= 50 reps, GB/s against bytes_min, and the ratio to the
// portable path of the same inputs in the same run.
//
//   bench_bgmv [--quick] [--variants] [--specialized] [--flush=memset|none] [--reps=N]
//              [--budget=SECONDS] [--rows=H,R,T,k,L[,E];...] [--benchmark_out=FILE ...]
//              [--override=KEY=VALUE[,KEY=VALUE...]] [--digest]
//
// --quick: H 3072 only (plus the 4-LoRA comparison rows). The default matrix is hidden {2688,
// 3072, 4096} x rank {16, 32, 64} x T {1 .. 2048} x top-k {2, 6, 8}, 8 LoRAs x 128 experts; it
// stops early (and says so) when the time budget (default 150 s) runs out. --benchmark_out
// (passed by scripts/gpu-check.sh) receives a small JSON copy of the table. --rows keeps only
// the table rows of those shapes (e.g. one row's Cake and portable graphs under ncu).
// --override: the table's Cake plans with those forced choices (PlanOverrides' text form,
// src/bgmv/overrides.h; docs/decisions/bgmv-overrides.md), the A/B runs of the selector's
// defaults; a forced specialized variant applies to the rows that can take it, the others keep
// their plan. --variants: every Cake pipeline forced on the same inputs
// (bench_bgmv_variants.cuh), T >= 128, to place the selector's crossovers;
// --shape=H,R,T,k,L runs one shape of it (E 128), e.g. under ncu. --specialized: the specialized
// variant (spec §7) in each schedule against the generic plan, H 2688 / 3072, rank 32, T 1..2048
// (bench_bgmv_variants.cuh). --flush=memset: the flush of the
// first results tables (a 256 MB memset per rep, which leaves dirty lines in L2); --flush=none: no
// flush (diagnostics: what a phase waits on HBM for). The per-stage table is
// bench/lab/bench_bgmv_stages.cu (its own binary). --digest: after each table row, a line
// "digest H R T k L E y=<hex> rows=<hex>" with FNV-1a hashes of the Cake plan's y and shrink rows
// after its last timed replay (scripts/bgmv_table_compare.py compares two tables' digests, so two
// trees' default plans can be checked bit for bit in one device call).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_bgmv_common.cuh"
#include "bench_bgmv_variants.cuh"
#include "bgmv/overrides.h"
#include "bgmv/plan_impl.h"
#include "cakemoe/bgmv.h"
#include "core/cuda_check.h"
#include "core/cuda_util.h"

namespace cakemoe {
namespace {

struct Row {
  Shape s;
  std::string plan;
  double cake_us = 0, portable_us = 0, bytes_min = 0;
  uint64_t y_digest = 0, rows_digest = 0;
};

/// FNV-1a over the bytes of a device tensor (copied to the host).
uint64_t digest(const TensorView& device_view) {
  const Tensor host = core::copy_to(device_view, Device::cpu());
  const auto* bytes = static_cast<const unsigned char*>(host.view().data);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < host.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  return h;
}

/// Rows whose plan refused the --override set (they keep their default plan) and the first
/// reason.
struct Refusals {
  int rows = 0;
  std::string first;
};

/// The Cake plan of a table row with `overrides`; where the row's problem refuses them (e.g. a
/// specialized variant outside its shapes, the one-CTA index past 16384 pairs) the row keeps its
/// default plan and `refusals` counts it.
bgmv::BgmvPlan prepare_row(const Inputs& in, const Shape& s, const bgmv::PlanOverrides& overrides,
                           Refusals& refusals) {
  const auto prepare = [&](const bgmv::PlanOverrides& o) {
    return bgmv::BgmvPlan(bgmv::detail::prepare_impl(in.x, {in.a}, {in.b}, in.sorted, in.experts,
                                                     in.loras, in.weights, s.experts, {}, o));
  };
  try {
    return prepare(overrides);
  } catch (const Error& e) {
    if (bgmv::describe_plan_overrides(overrides).empty()) throw;
    if (refusals.rows++ == 0) refusals.first = e.what();
    return prepare({});
  }
}

Row run_shape(Bench& bench, const Shape& s, void* a_buf, void* b_buf, void* x_buf, bool digests,
              const bgmv::PlanOverrides& overrides, Refusals& refusals) {
  const Inputs in(s, a_buf, b_buf, x_buf);
  Row row;
  row.s = s;
  row.bytes_min = bytes_min(s, in.routing.bins_touched);
  {
    bgmv::BgmvPlan cake = prepare_row(in, s, overrides, refusals);
    row.plan = plan_label(cake);
    row.cake_us = bench.time_plan(cake);
    if (digests) {
      row.y_digest = digest(cake.y_accum());
      row.rows_digest = digest(cake.shrink_out());
    }
  }
  {
    bgmv::PlanOverrides forced;
    forced.variant = bgmv::Variant::kPortable;
    bgmv::BgmvPlan portable(bgmv::detail::prepare_impl(
        in.x, {in.a}, {in.b}, in.sorted, in.experts, in.loras, in.weights, s.experts, {}, forced));
    row.portable_us = bench.time_plan(portable);
  }
  return row;
}

void print_header() {
  std::printf("%5s %3s %5s %2s %2s %4s | %-22s | %9s %8s %6s | %9s %7s\n", "H", "R", "T", "k", "L",
              "E", "plan", "cake us", "GB/s", "%roof", "port. us", "speedup");
}

void print_row(const Row& r) {
  const double gbs = r.bytes_min / (r.cake_us * 1e3);
  std::printf("%5lld %3lld %5lld %2lld %2lld %4lld | %-22s | %9.2f %8.1f %5.1f%% | %9.2f %6.2fx\n",
              (long long)r.s.hidden, (long long)r.s.rank, (long long)r.s.tokens,
              (long long)r.s.top_k, (long long)r.s.loras, (long long)r.s.experts, r.plan.c_str(),
              r.cake_us, gbs, 100.0 * gbs / (kHbmTbPerS * 1e3), r.portable_us,
              r.portable_us / r.cake_us);
  std::fflush(stdout);
}

/// A reference point of issue #4 (H 3072, rank 32, E 128): `us` for `loras` LoRAs at (T, k).
struct ReferencePoint {
  int64_t tokens, top_k, loras;
  double us;
};

/// The row of shape (H, R 32, T, k, L, E 128), or nullptr.
const Row* find_row(const std::vector<Row>& rows, int64_t hidden, int64_t tokens, int64_t top_k,
                    int64_t loras) {
  for (const Row& r : rows) {
    if (r.s.hidden == hidden && r.s.rank == 32 && r.s.tokens == tokens && r.s.top_k == top_k &&
        r.s.loras == loras && r.s.experts == 128) {
      return &r;
    }
  }
  return nullptr;
}

/// Issue #4's targets against the rows measured (their feasibility: bench/NOTES.md): 3x the vLLM
/// points (4 LoRAs, E 128, top-2, rank 32), <= 6 us at T <= 8, >= 80 % of bytes_min at T >= 512,
/// faster than the portable path everywhere; and its two other reference sets: the portable
/// path at least as fast as FlashInfer's portable kernels on the H200 (4 LoRAs), and the Cake
/// path against FlashInfer's Cake path on a GB200 (8 LoRAs; ~1.7x the H200's bandwidth).
void print_targets(const std::vector<Row>& rows) {
  struct VllmPoint {
    int64_t hidden, tokens;
    double us;
  };
  constexpr VllmPoint kVllm[] = {{3072, 1, 80.5},     {3072, 16, 91.9},    {3072, 128, 170.8},
                                 {3072, 1024, 268.8}, {3072, 2048, 296.0}, {2688, 1, 73.2},
                                 {2688, 1024, 237.1}};
  std::printf("targets (#4):\n");
  for (const VllmPoint& v : kVllm) {
    const Row* r = find_row(rows, v.hidden, v.tokens, 2, 4);
    if (r == nullptr) continue;
    std::printf("  vLLM H %lld T %lld: %.2f us vs %.1f = %.2fx (3x needs <= %.1f) %s\n",
                (long long)v.hidden, (long long)v.tokens, r->cake_us, v.us, v.us / r->cake_us,
                v.us / 3, r->cake_us <= v.us / 3 ? "met" : "MISSED");
  }
  int decode = 0, decode_met = 0, large = 0, large_met = 0, slower = 0;
  const Row* worst_decode = nullptr;
  for (const Row& r : rows) {
    const double roof = r.bytes_min / (r.cake_us * 1e3) / (kHbmTbPerS * 1e3);
    if (r.s.tokens <= 8) {
      ++decode;
      decode_met += r.cake_us <= 6.0;
      if (worst_decode == nullptr || r.cake_us > worst_decode->cake_us) worst_decode = &r;
    }
    if (r.s.tokens >= 512) {
      ++large;
      large_met += roof >= 0.8;
    }
    slower += r.cake_us >= r.portable_us;
  }
  if (worst_decode != nullptr) {
    std::printf(
        "  T <= 8: %d of %d rows <= 6 us (slowest %.2f us at H %lld R %lld T %lld k %lld)\n",
        decode_met, decode, worst_decode->cake_us, (long long)worst_decode->s.hidden,
        (long long)worst_decode->s.rank, (long long)worst_decode->s.tokens,
        (long long)worst_decode->s.top_k);
  }
  std::printf("  T >= 512: %d of %d rows at >= 80 %% of bytes_min\n", large_met, large);
  std::printf("  Cake not faster than portable: %d of %zu rows\n", slower, rows.size());
  constexpr ReferencePoint kFlashInferPortableH200[] = {
      {1, 2, 4, 22.4},     {8, 2, 4, 34.6},     {32, 2, 4, 24.0},    {256, 2, 4, 87.7},
      {1024, 2, 4, 292.2}, {2048, 2, 4, 566.3}, {1024, 8, 4, 1102.0}};
  for (const ReferencePoint& f : kFlashInferPortableH200) {
    const Row* r = find_row(rows, 3072, f.tokens, f.top_k, f.loras);
    if (r == nullptr) continue;
    std::printf("  portable vs FlashInfer portable (H200) T %lld k %lld: %.2f us vs %.1f %s\n",
                (long long)f.tokens, (long long)f.top_k, r->portable_us, f.us,
                r->portable_us <= f.us ? "met" : "MISSED");
  }
  constexpr ReferencePoint kFlashInferCakeGb200[] = {
      {1, 2, 8, 16.3}, {32, 2, 8, 13.3}, {256, 2, 8, 43.6}, {1024, 2, 8, 116.3}};
  for (const ReferencePoint& f : kFlashInferCakeGb200) {
    const Row* r = find_row(rows, 3072, f.tokens, f.top_k, f.loras);
    if (r == nullptr) continue;
    std::printf("  Cake vs FlashInfer Cake (GB200) T %lld: %.2f us vs %.1f (%.2fx)\n",
                (long long)f.tokens, r->cake_us, f.us, f.us / r->cake_us);
  }
}

/// --rows=H,R,T,k,L[,E][;...]: whether table shape s is one of them (any E when E is left out).
bool row_selected(const std::string& rows, const Shape& s) {
  size_t at = 0;
  while (at < rows.size()) {
    const size_t end = std::min(rows.find(';', at), rows.size());
    Shape want{};
    bool has_experts = false;
    if (parse_shape(rows.substr(at, end - at), &want, &has_experts) &&
        want.hidden == s.hidden && want.rank == s.rank && want.tokens == s.tokens &&
        want.top_k == s.top_k && want.loras == s.loras &&
        (!has_experts || want.experts == s.experts)) {
      return true;
    }
    at = end + 1;
  }
  return false;
}

void write_json(const std::string& path, const std::vector<Row>& rows) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return;
  std::fprintf(f, "{\"benchmarks\": [\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::fprintf(f,
                 "  {\"name\": \"bgmv/H%lld/R%lld/T%lld/k%lld/L%lld/E%lld\", \"plan\": \"%s\", "
                 "\"real_time\": %.3f, \"time_unit\": \"us\", \"portable_us\": %.3f, "
                 "\"bytes_min\": %.0f}%s\n",
                 (long long)r.s.hidden, (long long)r.s.rank, (long long)r.s.tokens,
                 (long long)r.s.top_k, (long long)r.s.loras, (long long)r.s.experts, r.plan.c_str(),
                 r.cake_us, r.portable_us, r.bytes_min, i + 1 < rows.size() ? "," : "");
  }
  std::fprintf(f, "]}\n");
  std::fclose(f);
}

int run(int argc, char** argv) {
  bool quick = false, variants = false, specialized = false, digests = false;
  double budget_s = 150;
  int reps = 50;
  FlushMode flush = FlushMode::kRead;
  std::string json, only_shape, only_rows, override_text;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") quick = true;
    if (arg == "--variants") variants = true;
    if (arg == "--specialized") specialized = true;
    if (arg == "--digest") digests = true;
    if (arg.rfind("--shape=", 0) == 0) only_shape = arg.substr(8);
    if (arg.rfind("--rows=", 0) == 0) only_rows = arg.substr(7);
    if (arg.rfind("--override=", 0) == 0) override_text = arg.substr(11);
    if (arg == "--flush=memset") flush = FlushMode::kMemset;
    if (arg == "--flush=none") flush = FlushMode::kNone;
    if (arg.rfind("--reps=", 0) == 0) reps = std::max(1, std::stoi(arg.substr(7)));
    if (arg.rfind("--budget=", 0) == 0) budget_s = std::stod(arg.substr(9));
    if (arg.rfind("--benchmark_out=", 0) == 0) json = arg.substr(16);
  }
  if (core::cuda_device_count() == 0) {
    std::printf("bench_bgmv: no CUDA device, nothing to measure\n");
    return 0;
  }
  const bgmv::PlanOverrides overrides = bgmv::parse_plan_overrides(override_text);
  Bench bench;
  bench.reps = reps;
  bench.flush_mode = flush;
  if (variants) return run_variant_mode(bench, budget_s, only_shape);
  if (specialized) return run_specialized_mode(bench, budget_s);
  const auto t0 = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::vector<Shape> shapes;
  const std::vector<int64_t> hiddens =
      quick ? std::vector<int64_t>{3072} : std::vector<int64_t>{2688, 3072, 4096};
  for (int64_t t : {1, 16, 128, 1024, 2048}) {  // the issue's vLLM reference points
    for (int64_t e : {64, 128}) shapes.push_back({3072, 32, t, 2, 4, e});
  }
  // FlashInfer's portable points on the H200 not covered above (4 LoRAs, E 128).
  for (int64_t t : {8, 32, 256}) shapes.push_back({3072, 32, t, 2, 4, 128});
  shapes.push_back({3072, 32, 1024, 8, 4, 128});
  shapes.push_back({2688, 32, 1, 2, 4, 128});
  shapes.push_back({2688, 32, 1024, 2, 4, 128});
  for (int64_t h : hiddens) {
    for (int64_t r : {16, 32, 64}) {
      for (int64_t k : {2, 6, 8}) {
        for (int64_t t : {1, 4, 8, 32, 256, 512, 1024, 2048}) {
          shapes.push_back({h, r, t, k, 8, 128});
        }
      }
    }
  }
  std::printf(
      "BGMV plan bench: graph replay, L2 flushed (%s) per rep, median of %d reps, "
      "bf16, GB/s vs spec §14 bytes_min, roofline %.2f TB/s; overrides: %s\n",
      bench.flush_name(), bench.reps, kHbmTbPerS,
      override_text.empty() ? "none" : bgmv::describe_plan_overrides(overrides).c_str());
  print_header();
  const TableBuffers buf(8 * 128 * 64 * 4096, 2048 * 4096);
  std::vector<Row> rows;
  Refusals refusals;
  size_t done = 0;
  for (const Shape& s : shapes) {
    if (elapsed() > budget_s) break;
    if (!only_rows.empty() && !row_selected(only_rows, s)) continue;
    rows.push_back(run_shape(bench, s, buf.a, buf.b, buf.x, digests, overrides, refusals));
    print_row(rows.back());
    if (digests) {
      const Row& r = rows.back();
      std::printf("digest %lld %lld %lld %lld %lld %lld y=%016llx rows=%016llx\n",
                  (long long)s.hidden, (long long)s.rank, (long long)s.tokens, (long long)s.top_k,
                  (long long)s.loras, (long long)s.experts, (unsigned long long)r.y_digest,
                  (unsigned long long)r.rows_digest);
    }
    ++done;
  }
  report_budget_stop(done, shapes.size(), budget_s);
  if (refusals.rows > 0) {
    std::printf("overrides refused on %d rows (default plan kept), first: %s\n", refusals.rows,
                refusals.first.c_str());
  }
  print_targets(rows);
  std::printf("total %.1f s\n", elapsed());
  if (!json.empty()) write_json(json, rows);
  return 0;
}

}  // namespace
}  // namespace cakemoe

int main(int argc, char** argv) {
  try {
    return cakemoe::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_bgmv: %s\n", e.what());
    return 1;
  }
}
