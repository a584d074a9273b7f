// The StepFun layer from routing to finalize, the protocol of issue 27 ("Benchmark"): workloads
// step35 (H 4096, I 1280, E 288, K 8) and fi (H 4096, I 1536, E 64, K 8), T in {1, 8, 64, 512,
// 4096, 16384}, five families, the sm90 and / or the portable SIMT path (chosen from plans_for()
// by the plan's unit names and passed through MoeArgs::plan). Random physical weights are filled on
// the device; routing comes from seeded fp32 logits (FromLogits), the same logits that
// bench/anchor_grouped_mm.py builds. Each row prepares the layer once, captures launch() in a CUDA
// graph and times graph replays with cudaEvents, the L2 flushed by a 256 MiB memset before each
// rep (outside the events); the median of --reps is reported with the roofline floor.
// A plain main; --help lists the flags. Without a CUDA device only --dry-run does anything.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "cakemoe/errors.h"
#include "cakemoe/stepfun.h"
#include "core/cuda_check.h"
#include "core/cuda_util.h"
#include "reference/stepfun/families.h"
#include "reference/stepfun/weights.h"
#include "stepfun/catalog.h"
#include "stepfun_layer_inputs.cuh"
#include "stepfun_layer_report.h"

namespace cakemoe {
namespace stepfun {
namespace layer_bench {
namespace {

constexpr int64_t kAllTokens[] = {1, 8, 64, 512, 4096, 16384};
constexpr int64_t kQuickTokens[] = {1, 64, 4096};
constexpr size_t kFlushBytes = size_t(256) << 20;  // > 4x the H200's 60 MB L2
constexpr int kQuickReps = 5;
constexpr double kGpuCheckBudgetS = 120;

struct Options {
  std::vector<const Workload*> workloads;
  std::vector<Family> families;
  std::vector<int64_t> tokens;
  std::vector<std::string> paths;  // "sm90", "simt"
  int reps = 20;
  std::string out;
  double budget_s = 0;  // 0: no budget
  bool dry_run = false, write_routing = false;
  std::string command;
};

const char* kUsage =
    "bench_stepfun_layer [flags]\n"
    "  --workload=step35,fi     workloads (default both)\n"
    "  --family=bf16,fp8,...    families: bf16 fp8 mxfp8 nvfp4 nvfp4_bf16tok (default all)\n"
    "  --tokens=1,8,...         T values (default 1,8,64,512,4096,16384)\n"
    "  --path=sm90|simt|both    kernel path (default sm90: the default sm90 plan); sm90-main:\n"
    "                           the main units only; sm90-e4m3, sm90-g8, sm90-p: that variant\n"
    "  --reps=N                 timed replays per row, median reported (default 20)\n"
    "  --out=DIR                write DIR/stepfun_layer.md and DIR/stepfun_layer.json\n"
    "  --budget=SECONDS         start no new row past this wall time; keep what was measured\n"
    "  --quick                  T 1,64,4096 and 5 reps unless --tokens / --reps say otherwise\n"
    "  --dry-run                print the rows (unique experts, floor; the plan where a GPU is)\n"
    "  --write-routing          with --out: DIR/routing_<workload>_T<T>.bin, int32 top-k ids\n"
    "                           [T, K], read by bench/anchor_grouped_mm.py\n"
    "  --benchmark_*            Google Benchmark flags (scripts/gpu-check.sh passes them):\n"
    "                           ignored, but they mean --quick and --budget=120 by default\n";

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) parts.push_back(item);
  }
  return parts;
}

/// Parses argv; throws InvalidArgument naming the flag and the rule.
Options parse(int argc, char** argv) {
  Options o;
  bool quick = false, tokens_given = false, reps_given = false, from_gpu_check = false;
  for (int i = 0; i < argc; ++i) o.command += (i ? " " : "") + std::string(argv[i]);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    const std::string key = arg.substr(0, eq),
                      value = eq == std::string::npos ? "" : arg.substr(eq + 1);
    if (key == "--workload") {
      for (const std::string& name : split(value)) {
        const Workload* found = nullptr;
        for (const Workload& w : kWorkloads) found = name == w.name ? &w : found;
        if (found == nullptr) {
          throw InvalidArgument("--workload", "must be step35 or fi, got " + name);
        }
        o.workloads.push_back(found);
      }
    } else if (key == "--family") {
      for (const std::string& name : split(value)) o.families.push_back(parse_family(name));
    } else if (key == "--tokens") {
      tokens_given = true;
      for (const std::string& t : split(value)) {
        const long long v = std::atoll(t.c_str());
        if (v <= 0) {
          throw InvalidArgument("--tokens", "every T must be a positive integer, got " + t);
        }
        o.tokens.push_back(v);
      }
    } else if (key == "--path") {
      if (value != "both" && value != "sm90" && value != "simt" && value.rfind("sm90-", 0) != 0) {
        throw InvalidArgument("--path", "must be sm90, simt, both or sm90-VARIANT, got " + value);
      }
      o.paths = value == "both" ? std::vector<std::string>{"sm90", "simt"}
                                : std::vector<std::string>{value};
    } else if (key == "--reps") {
      o.reps = std::atoi(value.c_str());
      reps_given = true;
      if (o.reps < 1) throw InvalidArgument("--reps", "must be >= 1, got " + value);
    } else if (key == "--out") {
      o.out = value;
    } else if (key == "--budget") {
      o.budget_s = std::atof(value.c_str());
      if (o.budget_s <= 0) throw InvalidArgument("--budget", "must be > 0 seconds, got " + value);
    } else if (arg == "--quick") {
      quick = true;
    } else if (arg == "--dry-run") {
      o.dry_run = true;
    } else if (arg == "--write-routing") {
      o.write_routing = true;
    } else if (key.rfind("--benchmark_", 0) == 0) {
      from_gpu_check = true;
    } else {
      throw InvalidArgument(arg, std::string("unknown flag\n") + kUsage);
    }
  }
  if (from_gpu_check) {  // a smoke run that fits the 180 s a bench gets there
    quick = true;
    if (o.budget_s == 0) o.budget_s = kGpuCheckBudgetS;
  }
  if (o.workloads.empty()) {
    for (const Workload& w : kWorkloads) o.workloads.push_back(&w);
  }
  if (o.families.empty()) o.families.assign(std::begin(kAllFamilies), std::end(kAllFamilies));
  if (!tokens_given && quick) o.tokens.assign(std::begin(kQuickTokens), std::end(kQuickTokens));
  if (!tokens_given && !quick) o.tokens.assign(std::begin(kAllTokens), std::end(kAllTokens));
  if (quick && !reps_given) o.reps = kQuickReps;
  if (o.paths.empty()) o.paths = {"sm90"};
  if (o.write_routing && o.out.empty()) {
    throw InvalidArgument("--write-routing", "needs --out=DIR");
  }
  return o;
}

// ---- Plans --------------------------------------------------------------------------------------

/// sm90 units are named sm90_* (path "sm90" any of them, so the first candidate is the default
/// sm90 plan; "sm90-main" the main units; "sm90-<variant>" a variant's), the portable SIMT units
/// stepfun_* (src/stepfun/inst/).
bool unit_on_path(const std::string& unit, const std::string& path) {
  if (path == "simt") return unit.rfind("stepfun_", 0) == 0;
  if (unit.rfind("sm90_", 0) != 0) return false;
  if (path == "sm90") return true;
  const std::string variant = unit_variant(unit);
  return path == (variant.empty() ? "sm90-main" : "sm90-" + variant);
}

/// The candidate of plans_for() whose FC1 and FC2 units are both on `path`: at the default plan's
/// tile when there is one (so an A/B of two paths compares units, not tiles), else the first.
std::optional<Plan> plan_for_path(const Workload& w, Family f, int64_t tokens,
                                  const std::string& path) {
  ProblemDesc p;
  p.family = f;
  p.num_tokens = tokens;
  p.top_k = w.top_k;
  p.local_num_experts = w.experts;
  p.hidden_size = w.hidden;
  p.intermediate_size = w.inter;
  p.logits_input = true;
  p.device = Device::cuda(0);
  const std::vector<Plan> plans = plans_for(p);
  std::optional<Plan> first;
  for (const Plan& plan : plans) {
    if (!unit_on_path(plan.fc1_kernel, path) || !unit_on_path(plan.fc2_kernel, path)) continue;
    if (plan.tile == plans.front().tile) return plan;
    if (!first) first = plan;
  }
  if (first || path.rfind("sm90-", 0) != 0 || path == "sm90-main") return first;
  // A variant plans_for does not offer yet: its units by name, at the default tile if it has
  // them there, else at the first tile of the ladder that does.
  const std::string variant = path.substr(5);
  if (auto plan = sm90_variant_plan(p, plans.front().tile, variant)) return plan;
  for (int tile : tile_ladder()) {
    if (auto plan = sm90_variant_plan(p, tile, variant)) return plan;
  }
  return std::nullopt;
}

std::string plan_text(const Plan& plan) {
  std::ostringstream s;
  s << plan;
  return s.str();
}

// ---- Timing -------------------------------------------------------------------------------------

__global__ void count_nonfinite_kernel(const uint16_t* bf16, int64_t n, unsigned long long* count) {
  unsigned long long local = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    local += (bf16[i] & 0x7F80u) == 0x7F80u;  // exponent all ones: inf or NaN
  }
  if (local) atomicAdd(count, local);
}

/// CUDA objects of one row, released on every exit path.
struct GraphRun {
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  ~GraphRun() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    if (stream) cudaStreamDestroy(stream);
  }
};

/// Median µs of `reps` graph replays of launch(), each after an L2 flush; counts the non-finite
/// outputs left by the last replay into *nonfinite.
double time_layer(const StepFunMoeLaunch& launch, void* flush, int reps, int64_t* nonfinite) {
  GraphRun g;
  CAKEMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
  CAKEMOE_CUDA_CHECK(cudaEventCreate(&g.start));
  CAKEMOE_CUDA_CHECK(cudaEventCreate(&g.stop));
  launch.launch(g.stream);  // eager warm-up: module loading stays out of the capture
  CAKEMOE_CUDA_CHECK(cudaStreamSynchronize(g.stream));
  CAKEMOE_CUDA_CHECK(cudaStreamBeginCapture(g.stream, cudaStreamCaptureModeGlobal));
  launch.launch(g.stream);
  CAKEMOE_CUDA_CHECK(cudaStreamEndCapture(g.stream, &g.graph));
  CAKEMOE_CUDA_CHECK(cudaGraphInstantiate(&g.exec, g.graph, 0));
  for (int i = 0; i < 2; ++i) CAKEMOE_CUDA_CHECK(cudaGraphLaunch(g.exec, g.stream));
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) {
    CAKEMOE_CUDA_CHECK(cudaMemsetAsync(flush, r & 0xFF, kFlushBytes, g.stream));
    CAKEMOE_CUDA_CHECK(cudaEventRecord(g.start, g.stream));
    CAKEMOE_CUDA_CHECK(cudaGraphLaunch(g.exec, g.stream));
    CAKEMOE_CUDA_CHECK(cudaEventRecord(g.stop, g.stream));
    CAKEMOE_CUDA_CHECK(cudaEventSynchronize(g.stop));
    float ms = 0;
    CAKEMOE_CUDA_CHECK(cudaEventElapsedTime(&ms, g.start, g.stop));
    us.push_back(ms * 1e3);
  }
  const TensorView out = launch.outputs().at(0);
  auto* count = static_cast<unsigned long long*>(flush);  // the flush buffer is free again
  CAKEMOE_CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof(*count), g.stream));
  count_nonfinite_kernel<<<1024, 256, 0, g.stream>>>(out.ptr<uint16_t>(), out.numel(), count);
  CAKEMOE_CUDA_CHECK(cudaGetLastError());
  unsigned long long host_count = 0;
  CAKEMOE_CUDA_CHECK(
      cudaMemcpyAsync(&host_count, count, sizeof(host_count), cudaMemcpyDeviceToHost, g.stream));
  CAKEMOE_CUDA_CHECK(cudaStreamSynchronize(g.stream));
  *nonfinite = static_cast<int64_t>(host_count);
  std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
  double median = us[us.size() / 2];
  if (us.size() % 2 == 0) {
    median = (median + *std::max_element(us.begin(), us.begin() + us.size() / 2)) / 2;
  }
  return median;
}

// ---- Rows ---------------------------------------------------------------------------------------

/// Logits and host top-k of one workload and T, on the host and (measured runs) on the device.
struct RoutingInput {
  Routing host;
  Tensor device_logits;  // fp32 [T, E]
};

class Bench {
 public:
  explicit Bench(Options o) : o_(std::move(o)) {}

  int run() {
    const bool gpu = core::cuda_device_count() > 0;
    if (!gpu && !o_.dry_run) {
      std::printf(
          "bench_stepfun_layer: no CUDA device visible; nothing measured (--dry-run "
          "lists the rows)\n");
      return 0;
    }
    if (gpu) {
      cudaDeviceProp prop{};
      CAKEMOE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
      gpu_name_ = prop.name;
    }
    if (const char* c = std::getenv("CAKEMOE_COMMIT")) commit_ = c;
    std::error_code ec;  // a failure shows when the files are written
    if (!o_.out.empty()) std::filesystem::create_directories(o_.out, ec);
    std::printf("bench_stepfun_layer on %s, commit %s, %d reps, L2 flush %zu MiB\n",
                gpu_name_.c_str(), commit_.c_str(), o_.reps, kFlushBytes >> 20);
    if (!o_.dry_run) CAKEMOE_CUDA_CHECK(cudaMalloc(&flush_, kFlushBytes));
    for (const Workload* w : o_.workloads) {
      routing_.clear();
      for (Family f : o_.families) {
        if (stopped_) break;
        run_family(*w, f, gpu);
      }
    }
    if (flush_) cudaFree(flush_);
    return write() ? 0 : 1;
  }

 private:
  const RoutingInput& routing_of(const Workload& w, int64_t tokens, bool device) {
    RoutingInput& r = routing_[tokens];
    if (r.host.topk.empty()) {
      r.host = make_routing(w, tokens);
      if (o_.write_routing) {
        write_routing(o_.out + "/routing_" + w.name + "_T" + std::to_string(tokens) + ".bin",
                      r.host);
      }
    }
    if (device && !r.device_logits.defined()) {
      r.device_logits = core::copy_to(
          TensorView(r.host.logits.data(), DType::kFP32, {tokens, w.experts}), Device::cuda(0));
    }
    return r;
  }

  bool over_budget() const {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    return o_.budget_s > 0 && s > o_.budget_s;
  }

  void run_family(const Workload& w, Family f, bool gpu) {
    StepFunWeights weights;  // freed when the family is done
    for (int64_t t : o_.tokens) {
      StepFunActivations act;
      for (const std::string& path : o_.paths) {
        if (!o_.dry_run && over_budget()) {
          std::printf("budget of %.0f s reached: no new rows\n", o_.budget_s);
          stopped_ = true;
          return;
        }
        Row row;
        row.workload = w.name, row.family = family_name(f), row.path = path, row.tokens = t;
        try {
          const RoutingInput& routing = routing_of(w, t, !o_.dry_run);
          row.unique_experts = routing.host.unique_experts;
          row.floor_us = floor_us(f, t, w.top_k, w.hidden, w.inter, w.experts, row.unique_experts);
          const std::optional<Plan> plan = gpu ? plan_for_path(w, f, t, path) : std::nullopt;
          if (gpu && !plan) {
            row.status = "no " + path + " unit";
          } else if (o_.dry_run) {
            std::printf(
                "%-7s %-14s T=%6lld %-5s experts %3lld  floor %9.1f us  topk checksum "
                "%lld  %s\n",
                w.name, row.family.c_str(), static_cast<long long>(t), path.c_str(),
                static_cast<long long>(row.unique_experts), row.floor_us,
                static_cast<long long>(routing.host.checksum),
                plan ? plan_text(*plan).c_str() : "(no GPU: plan not chosen)");
            continue;
          } else {
            if (!weights.gemm1_weights.defined()) {
              weights = random_weights(w, f);
              std::printf("%s %s: %.2f GB of random physical weights on the device\n", w.name,
                          row.family.c_str(), weight_bytes(weights) * 1e-9);
            }
            if (!act.hidden_states.defined()) act = device_activations(w, f, t);
            measure(w, f, *plan, weights, act, routing, &row);
          }
        } catch (const CudaError& e) {
          row.status = std::string("CUDA error (run stopped): ") + e.what();
          stopped_ = true;
        } catch (const std::exception& e) {  // cakemoe::Error and the rest: this row only
          row.status = std::string("error: ") + e.what();
        }
        print_row(row);
        rows_.push_back(row);
        if (!o_.dry_run) write();  // after every row: a killed run keeps what it measured
        if (stopped_) return;
      }
    }
  }

  void measure(const Workload& w, Family f, const Plan& plan, const StepFunWeights& weights,
               const StepFunActivations& act, const RoutingInput& routing, Row* row) {
    MoeArgs a;
    a.family = f;
    a.hidden_states = act.hidden_states;
    a.hidden_states_scale = act.hidden_states_scale;
    a.per_token_scale = act.per_token_scale;
    reference::stepfun::set_weight_args(&a, weights);
    a.routing_logits = routing.device_logits;
    a.num_experts = w.experts;
    a.top_k = w.top_k;
    a.local_num_experts = w.experts;
    a.plan = plan;
    const StepFunMoeLaunch launch = prepare_stepfun_moe(a);
    row->tile = launch.plan().tile;
    row->fc1_kernel = launch.plan().fc1_kernel;
    row->fc2_kernel = launch.plan().fc2_kernel;
    std::printf("  %s\n", plan_text(launch.plan()).c_str());
    row->us = time_layer(launch, flush_, o_.reps, &row->nonfinite);
    row->tflops = layer_flops(row->tokens, w.top_k, w.hidden, w.inter) / (row->us * 1e-6) * 1e-12;
  }

  bool write() const {
    if (o_.out.empty() || o_.dry_run) return true;
    const std::string md = o_.out + "/stepfun_layer.md", json = o_.out + "/stepfun_layer.json";
    const bool ok = write_markdown(md, rows_, gpu_name_, commit_, o_.command, o_.reps) &&
                    write_json(json, rows_);
    if (!ok) std::fprintf(stderr, "cannot write %s or %s\n", md.c_str(), json.c_str());
    return ok;
  }

  Options o_;
  std::vector<Row> rows_;
  std::map<int64_t, RoutingInput> routing_;  // of the current workload, by T
  std::string gpu_name_ = "no GPU", commit_ = "unknown";
  void* flush_ = nullptr;
  bool stopped_ = false;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

}  // namespace
}  // namespace layer_bench
}  // namespace stepfun
}  // namespace cakemoe

int main(int argc, char** argv) {
  using namespace cakemoe::stepfun::layer_bench;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::printf("%s", kUsage);
      return 0;
    }
  }
  try {
    Bench bench(parse(argc, argv));
    return bench.run();
  } catch (const cakemoe::Error& e) {
    std::fprintf(stderr, "bench_stepfun_layer: %s\n", e.what());
    return 2;
  }
}
