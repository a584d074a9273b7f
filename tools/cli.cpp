#include "tools/cli.h"

#include <cstdio>
#include <exception>

#include "cakemoe/errors.h"
#include "cakemoe/stepfun.h"
#include "core/cuda_util.h"
#include "reference/stepfun/families.h"
#include "tools/cli_args.h"
#include "tools/cli_bench.h"
#include "tools/run_bgmv.h"
#include "tools/run_stepfun.h"

namespace cakemoe {
namespace tools {

namespace {

const char* const kTopLevelHelp =
    "usage: cakemoe <command> [options]\n"
    "\n"
    "commands:\n"
    "  run     the main job: one StepFun MoE layer per family and one BGMV MoE-LoRA plan\n"
    "          through the public API, each checked against the fp64 oracle (CUDA device 0\n"
    "          when there is one, else the CPU reference engine)\n"
    "  bench   StepFun and BGMV timings with the fraction of the roofline reached (GPU); without\n"
    "          a GPU, CPU engine timings (no roofline)\n"
    "  help    this text (`cakemoe help <command>` = `cakemoe <command> --help`)\n"
    "\n"
    "`cakemoe <command> --help` lists a command's options. Exit status: 0 success, 1 a check\n"
    "failed or the library raised an error, 2 a bad command line.\n";

std::vector<std::string> family_choices() {
  std::vector<std::string> names = {"all"};
  for (stepfun::Family f : stepfun::kAllFamilies) names.push_back(stepfun::family_name(f));
  return names;
}

bool gpu_present() { return core::cuda_device_count() > 0; }

int run_command(const std::vector<std::string>& args) {
  RunOptions options;
  bool cpu = false;
  ArgParser parser(
      "cakemoe run [options]",
      "Runs one StepFun MoE layer per family and one BGMV MoE-LoRA plan through the public API\n"
      "and checks each against the fp64 oracle, on CUDA device 0 when there is one, else on the\n"
      "CPU reference engine (about a minute at the default sizes). Prints one line per check and\n"
      "`result: PASS` or `result: FAIL` last; exits 1 on a failure.");
  parser.add_choice("--family", "the StepFun families to run (default all)", family_choices(),
                    &options.family);
  parser.add_int("--tokens", "T",
                 "tokens of each layer and of the BGMV plan (default: 64; 512 with --full)", 1,
                 kMaxRunTokens, &options.tokens);
  parser.add_flag(
      "--full", "the FlashInfer geometry for StepFun (H 4096, I 1536, E 64, K 8; slow on the CPU)",
      &options.full);
  parser.add_uint("--seed", "S", "seed of the random data (default 20261004)", &options.seed);
  parser.add_flag("--cpu", "the CPU reference engine even when a GPU is present", &cpu);
  if (!parser.parse(args)) {
    std::fputs(parser.help().c_str(), stdout);
    return kExitOk;
  }
  options.gpu = !cpu && gpu_present();
  std::printf("cakemoe run: %s\n", options.gpu ? "CUDA device 0 (checked against the host oracle)"
                                               : "CPU reference engine (no CUDA device, or --cpu)");
  std::fflush(stdout);
  try {
    const bool stepfun_ok = run_stepfun(options);
    const bool bgmv_ok = run_bgmv(options);
    std::printf("\nresult: %s\n", stepfun_ok && bgmv_ok ? "PASS" : "FAIL");
    return stepfun_ok && bgmv_ok ? kExitOk : kExitFailed;
  } catch (const Error& e) {
    std::fprintf(stderr, "cakemoe run: %s\n", e.what());
    std::printf("\nresult: FAIL\n");
    return kExitFailed;
  }
}

int bench_command(const std::vector<std::string>& args) {
  BenchOptions options;
  bool cpu = false;
  ArgParser parser(
      "cakemoe bench [options]",
      "Times the StepFun layer (routing to finalize) per family and the BGMV MoE-LoRA plan.\n"
      "On a GPU: CUDA-graph replays, L2 flushed before each rep, median; each row gives us, the\n"
      "roofline floor max(bytes / HBM, FLOPs / MMA peak) and the fraction of it reached\n"
      "(floor / time). Without a GPU (or with --cpu) it times the CPU reference engine at small\n"
      "sizes and prints no roofline: the GPU tables need a CUDA device.");
  parser.add_choice("--pipeline", "which tables (default all)", {"all", "stepfun", "bgmv"},
                    &options.pipeline);
  parser.add_choice("--family", "StepFun families (default all)", family_choices(),
                    &options.family);
  parser.add_choice("--workload",
                    "StepFun geometry: step35 (H 4096, I 1280, E 288, K 8), fi (H 4096, I 1536, "
                    "E 64, K 8) or all (default)",
                    {"all", "step35", "fi"}, &options.workload);
  parser.add_int_list("--tokens", "T1,T2,..",
                      "token counts (default GPU: StepFun 1,8,64,512,4096,16384, BGMV "
                      "1,8,64,512,2048; CPU: 1,8,64)",
                      1, kMaxBenchTokens, &options.tokens);
  parser.add_int("--reps", "N", "timed repetitions per row, median reported (default 20; CPU 3)", 1,
                 1000, &options.reps);
  parser.add_string("--json", "PATH",
                    "also write the rows as JSON (the bench/results format that "
                    "scripts/plot_roofline.py reads)",
                    &options.json_path);
  parser.add_flag("--cpu", "time the CPU reference engine even when a GPU is present", &cpu);
  if (!parser.parse(args)) {
    std::fputs(parser.help().c_str(), stdout);
    return kExitOk;
  }
  options.gpu = !cpu && gpu_present();
  try {
    return run_bench(options) ? kExitOk : kExitFailed;
  } catch (const Error& e) {
    std::fprintf(stderr, "cakemoe bench: %s\n", e.what());
    return kExitFailed;
  }
}

}  // namespace

int cli_main(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::fputs(kTopLevelHelp, stderr);
    std::fputs("\ncakemoe: a command is needed (run, bench or help)\n", stderr);
    return kExitUsage;
  }
  const std::string& command = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (command == "help" && rest.size() == 1 && (rest[0] == "run" || rest[0] == "bench")) {
    return cli_main({rest[0], "--help"});
  }
  if (command == "help" || command == "-h" || command == "--help") {
    if (!rest.empty()) {
      std::fprintf(stderr, "cakemoe %s: unexpected argument '%s' (see cakemoe --help)\n",
                   command.c_str(), rest[0].c_str());
      return kExitUsage;
    }
    std::fputs(kTopLevelHelp, stdout);
    return kExitOk;
  }
  try {
    if (command == "run") return run_command(rest);
    if (command == "bench") return bench_command(rest);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "cakemoe %s: %s\nsee `cakemoe %s --help`\n", command.c_str(), e.what(),
                 command.c_str());
    return kExitUsage;
  } catch (const std::exception& e) {  // e.g. std::bad_alloc for sizes the machine cannot hold
    std::fprintf(stderr, "cakemoe %s: %s\n", command.c_str(), e.what());
    return kExitFailed;
  }
  std::fprintf(stderr, "cakemoe: unknown command '%s' (commands: run, bench, help)\n",
               command.c_str());
  return kExitUsage;
}

}  // namespace tools
}  // namespace cakemoe
