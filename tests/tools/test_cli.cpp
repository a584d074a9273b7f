// The `cakemoe` command in-process (tools/cli.h): exit statuses (0 help / success, 2 a bad command
// line naming the flag), the zero-reference BGMV check, and `run --cpu --tokens 1` (issue 25:
// it reported a false FAIL when the only token had no LoRA).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "tools/cli.h"
#include "tools/run_bgmv.h"

namespace cakemoe {
namespace tools {
namespace {

struct Outcome {
  int status;
  std::string out, err;
};

Outcome cli(const std::vector<std::string>& args) {
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  const int status = cli_main(args);
  std::fflush(stdout);
  std::fflush(stderr);
  Outcome o{status, "", ""};
  o.out = testing::internal::GetCapturedStdout();
  o.err = testing::internal::GetCapturedStderr();
  return o;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Cli, HelpExitsZeroForEveryCommand) {
  const std::vector<std::vector<std::string>> helps = {
      {"--help"},        {"-h"},
      {"help"},          {"run", "--help"},
      {"run", "-h"},     {"bench", "--help"},
      {"bench", "-h"},   {"help", "run"},
      {"help", "bench"}, {"run", "--tokens", "x", "--help"}};
  for (const auto& args : helps) {
    const Outcome o = cli(args);
    EXPECT_EQ(o.status, kExitOk) << args[0] << " " << o.err;
    EXPECT_TRUE(contains(o.out, "usage: cakemoe")) << o.out;
  }
  EXPECT_TRUE(contains(cli({"run", "--help"}).out, "--tokens T"));
  EXPECT_TRUE(contains(cli({"bench", "--help"}).out, "--json PATH"));
}

TEST(Cli, BadCommandLinesExitTwoNamingTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{}, "a command is needed"},
      {{"frobnicate"}, "unknown command 'frobnicate'"},
      {{"help", "extra"}, "'extra'"},
      {{"run", "--tokens", "99999999999"}, "--tokens: '99999999999' is out of range"},
      {{"run", "--tokens", "0"}, "--tokens: '0' is out of range"},
      {{"run", "--tokens", "-4"}, "--tokens"},
      {{"run", "--tokens", "12abc"}, "--tokens: '12abc' is not an integer"},
      {{"run", "--tokens"}, "--tokens: needs a value"},
      {{"run", "--family", "nvfp8"}, "--family: 'nvfp8' is not one of"},
      {{"run", "--seed", "-1"}, "--seed"},
      {{"run", "--bogus"}, "--bogus: unknown option"},
      {{"run", "--cpu=yes"}, "--cpu: takes no value"},
      {{"run", "all"}, "all: unexpected argument"},
      {{"bench", "--tokens", "1,,8"}, "--tokens"},
      {{"bench", "--tokens", "70000"}, "--tokens"},
      {{"bench", "--reps", "0"}, "--reps"},
      {{"bench", "--pipeline", "moe"}, "--pipeline"},
      {{"bench", "--workload", "step3"}, "--workload"},
      {{"bench", "--json="}, "--json"},
  };
  for (const auto& [args, message] : cases) {
    const Outcome o = cli(args);
    const std::string line = args.empty() ? "(none)" : args[0];
    EXPECT_EQ(o.status, kExitUsage) << line;
    EXPECT_TRUE(contains(o.err, message)) << line << ": " << o.err;
    EXPECT_FALSE(contains(o.out, "result:")) << line << ": nothing may run";
  }
}

TEST(CliCheck, ZeroReferenceIsExactZeroNotNaN) {
  const std::vector<double> zeros(6, 0.0);
  const std::vector<float> y_zero(6, 0.f);
  const YCheck ok = check_y(y_zero.data(), 3, zeros.data(), 2, 3);
  EXPECT_TRUE(ok.pass);
  EXPECT_TRUE(ok.reference_is_zero);
  EXPECT_EQ(ok.rel_frob, 0.0);
  EXPECT_EQ(ok.fraction_within, 1.0);

  std::vector<float> y_bad = y_zero;
  y_bad[4] = 0.5f;  // a no-LoRA token that got written
  const YCheck bad = check_y(y_bad.data(), 3, zeros.data(), 2, 3);
  EXPECT_FALSE(bad.pass);
  EXPECT_TRUE(std::isinf(bad.rel_frob));
  EXPECT_TRUE(contains(bad.summary(), "FAIL"));
}

TEST(CliCheck, ToleranceStrideAndNaN) {
  const std::vector<double> want = {1.0, -2.0, 0.0, 4.0};
  // Row stride 3: the third float of each row is outside the view and never read.
  std::vector<float> y = {1.001f, -2.001f, 99.f, 0.f, 4.0f, 99.f};
  EXPECT_TRUE(check_y(y.data(), 3, want.data(), 2, 2).pass);
  y[1] = -2.5f;
  EXPECT_FALSE(check_y(y.data(), 3, want.data(), 2, 2).pass);
  y[1] = std::numeric_limits<float>::quiet_NaN();
  const YCheck nan = check_y(y.data(), 3, want.data(), 2, 2);
  EXPECT_FALSE(nan.pass);
  EXPECT_TRUE(std::isnan(nan.max_abs));
  EXPECT_TRUE(contains(nan.summary(), "nan")) << nan.summary();
}

TEST(Cli, RunOneTokenOnTheCpuEnginePasses) {
  const Outcome o = cli({"run", "--cpu", "--tokens", "1", "--family", "nvfp4"});
  EXPECT_EQ(o.status, kExitOk) << o.out << o.err;
  EXPECT_TRUE(contains(o.out, "T=1 H=1024")) << o.out;
  EXPECT_TRUE(contains(o.out, "shape T=1 H=3072")) << o.out;
  EXPECT_TRUE(contains(o.out, "result: PASS")) << o.out;
  EXPECT_FALSE(contains(o.out, "nan")) << o.out;
  EXPECT_TRUE(contains(o.err, "[cakemoe]")) << "progress lines on stderr";
}

TEST(Cli, BenchOnTheCpuEngineWritesJsonRows) {
  const std::string path = testing::TempDir() + "cakemoe_cli_bench.json";
  const Outcome o =
      cli({"bench", "--cpu", "--family", "bf16", "--tokens", "1", "--reps", "1", "--json", path});
  ASSERT_EQ(o.status, kExitOk) << o.out << o.err;
  EXPECT_TRUE(contains(o.out, "need a CUDA device")) << o.out;
  std::FILE* f = std::fopen(path.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string json(4096, '\0');
  json.resize(std::fread(&json[0], 1, json.size(), f));
  std::fclose(f);
  std::remove(path.c_str());
  EXPECT_TRUE(contains(json, "\"family\": \"bf16\", \"T\": 1, \"us\": ")) << json;
  EXPECT_TRUE(contains(json, "\"family\": \"bgmv\", \"T\": 1, \"us\": ")) << json;
  EXPECT_TRUE(contains(json, "\"floor_us\": null")) << json;
}

}  // namespace
}  // namespace tools
}  // namespace cakemoe
