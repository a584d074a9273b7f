// cakemoe CLI. `cakemoe run` is the project's main job: one StepFun MoE layer per family and one
// BGMV MoE-LoRA plan through the public C++ API, each checked against the fp64 oracle.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cakemoe/bgmv.h"
#include "cakemoe/errors.h"
#include "cakemoe/stepfun.h"
#include "core/cuda_util.h"
#include "tools/run_bgmv.h"
#include "tools/run_stepfun.h"

namespace {

void usage() {
  std::puts(
      "usage: cakemoe run [--family NAME|all] [--tokens T] [--full] [--seed S] [--cpu]\n"
      "  Runs one StepFun MoE layer per family and one BGMV MoE-LoRA plan through the public API\n"
      "  and checks each against the fp64 oracle, on CUDA device 0 when there is one (--cpu: the\n"
      "  CPU reference backend). --full uses the FlashInfer geometry\n"
      "  (H 4096, I 1536, E 64, K 8, T 512 unless --tokens) for the StepFun layer.");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "run") != 0) {
    usage();
    return argc < 2 ? 0 : 2;
  }
  cakemoe::tools::RunOptions options;
  options.gpu = true;  // when a device is present
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--family" && has_value) {
      options.family = argv[++i];
    } else if (arg == "--tokens" && has_value) {
      options.tokens = std::atoll(argv[++i]);
    } else if (arg == "--seed" && has_value) {
      options.seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--cpu") {
      options.gpu = false;
    } else if (arg == "--full") {
      options.full = true;
    } else {
      usage();
      return 2;
    }
  }
  options.gpu = options.gpu && cakemoe::core::cuda_device_count() > 0;
  std::printf("cakemoe run: %s\n", options.gpu
                                       ? "CUDA device 0 (checked against the host oracle)"
                                       : "no CUDA device (or --cpu): CPU reference backend");
  try {
    const bool stepfun_ok = cakemoe::tools::run_stepfun(options);
    const bool bgmv_ok = cakemoe::tools::run_bgmv(options);
    std::printf("\nresult: %s\n", stepfun_ok && bgmv_ok ? "PASS" : "FAIL");
    return stepfun_ok && bgmv_ok ? 0 : 1;
  } catch (const cakemoe::Error& e) {
    std::fprintf(stderr, "cakemoe run: %s\n", e.what());
    return 1;
  }
}
