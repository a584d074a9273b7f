// The unified configuration API (spec §9.3, §9.4): every rejection is typed and names its field,
// prepare_weights maps the config onto the family view, run_moe runs the layer the config
// describes (checked against the fp64 oracle) and honours CAKEMOE_STEPFUN_FULL_PATH.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cakemoe/config.h"
#include "cakemoe/errors.h"
#include "formats/codecs.h"
#include "reference/stepfun/harness.h"
#include "reference/stepfun/families.h"
#include "testbed/testbed.h"

namespace cakemoe {
namespace stepfun {
namespace {
namespace ref = reference::stepfun;

enum class Kind { kInvalid, kUnsupported };

/// fn must throw `kind` whose argument() is `arg` and whose message contains `words`.
void expect_error(const std::function<void()>& fn, Kind kind, const std::string& arg,
                  const std::string& words) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one for " << arg;
  } catch (const Unsupported& e) {
    EXPECT_EQ(kind, Kind::kUnsupported) << "got Unsupported: " << e.what();
    EXPECT_EQ(e.argument(), arg) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(kind, Kind::kInvalid) << "got InvalidArgument: " << e.what();
    EXPECT_EQ(e.argument(), arg) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

MoEConfig valid_config(Family f = Family::kNVFP4) {
  MoEConfig c;
  c.routing.num_experts = 8;
  c.routing.top_k = 2;
  c.quant = quant_of(f);
  c.experts.intermediate_size = 128;
  c.activation = swiglu_step(7.0f);
  return c;
}

/// CAKEMOE_STEPFUN_FULL_PATH set (or cleared, for nullptr) for one scope.
struct FullPathEnv : testbed::ScopedEnv {
  explicit FullPathEnv(const char* value) : ScopedEnv("CAKEMOE_STEPFUN_FULL_PATH", value) {}
};

TEST(Config, BackendSupportsSm90AndSm100Family) {
  for (int cc : {90, 100, 103}) EXPECT_TRUE(CakeStepFunConfig::supported(cc)) << cc;
  for (int cc : {75, 80, 86, 89, 101, 107, 110, 120, 121}) {
    EXPECT_FALSE(CakeStepFunConfig::supported(cc)) << cc;
  }
  EXPECT_EQ(CakeStepFunConfig().backend, "cake_stepfun");
}

TEST(Config, QuantPairsSelectTheFamilies) {
  EXPECT_EQ(family_of({QuantFormat::kNVFP4, QuantFormat::kNVFP4, false}), Family::kNVFP4);
  EXPECT_EQ(family_of({QuantFormat::kNVFP4, QuantFormat::kNVFP4, true}), Family::kNVFP4BF16Tok);
  EXPECT_EQ(family_of({QuantFormat::kBF16, QuantFormat::kBF16, false}), Family::kBF16);
  EXPECT_EQ(family_of({QuantFormat::kFP8PerTensor, QuantFormat::kFP8PerTensor, false}),
            Family::kFP8);
  EXPECT_EQ(family_of({QuantFormat::kMXFP8, QuantFormat::kMXFP8, false}), Family::kMXFP8);
  for (Family f : kAllFamilies) EXPECT_EQ(family_of(quant_of(f)), f) << family_name(f);
  const QuantConfig rejected[] = {
      {QuantFormat::kNVFP4, QuantFormat::kBF16, false},
      {QuantFormat::kMXFP8, QuantFormat::kBF16, false},
      {QuantFormat::kFP8BlockScale, QuantFormat::kFP8BlockScale, false},
      {QuantFormat::kMXFP4, QuantFormat::kMXFP4, false},
      {QuantFormat::kMXFP4, QuantFormat::kMXFP8, false},
  };
  for (const QuantConfig& q : rejected) {
    expect_error([&] { family_of(q); }, Kind::kUnsupported, "quant", "supports NVFP4xNVFP4");
  }
  expect_error([] { family_of({QuantFormat::kBF16, QuantFormat::kBF16, true}); },
               Kind::kUnsupported, "quant", "per_token_scale");
}

TEST(Config, ValidConfigsPassForEveryFamily) {
  for (Family f : kAllFamilies) EXPECT_EQ(validate_config(valid_config(f)), f) << family_name(f);
  MoEConfig c = valid_config();
  c.routing.n_group = 1;
  c.routing.topk_group = 1;
  c.routing.routed_scaling_factor = 3.0;
  c.experts.local_expert_offset = 2;
  c.experts.local_num_experts = 6;
  EXPECT_NO_THROW(validate_config(c));
  c.routing_input = RoutingInputMode::kUnpackedPrecomputed;
  c.routing.routed_scaling_factor = 1.0;  // a neutral factor is accepted with precomputed ids
  EXPECT_NO_THROW(validate_config(c));
}

struct Rejection {
  const char* name;
  std::function<void(MoEConfig&)> mutate;
  Kind kind;
  const char* arg;
  const char* words;
};

TEST(Config, EveryRejectionIsTypedAndNamesTheField) {
  float dummy_bias[8] = {};
  const TensorView bias(dummy_bias, DType::kFP32, {8});
  const std::vector<Rejection> cases = {
      {"backend", [](MoEConfig& c) { c.backend.backend = "trtllm_gen"; }, Kind::kInvalid,
       "backend", "must be 'cake_stepfun'"},
      {"default", [](MoEConfig& c) { c.routing.method = RoutingMethod::kDefault; },
       Kind::kUnsupported, "routing.method", "Renormalize"},
      {"deepseek", [](MoEConfig& c) { c.routing.method = RoutingMethod::kDeepSeekV3; },
       Kind::kUnsupported, "routing.method", "DeepSeekV3"},
      {"llama4", [](MoEConfig& c) { c.routing.method = RoutingMethod::kLlama4; },
       Kind::kUnsupported, "routing.method", "Llama4"},
      {"naive", [](MoEConfig& c) { c.routing.method = RoutingMethod::kRenormalizeNaive; },
       Kind::kUnsupported, "routing.method", "RenormalizeNaive"},
      {"topk", [](MoEConfig& c) { c.routing.method = RoutingMethod::kTopK; },
       Kind::kUnsupported, "routing.method", "TopK"},
      {"bias flag", [](MoEConfig& c) { c.routing.use_routing_bias = true; }, Kind::kUnsupported,
       "routing.routing_bias", "routing bias"},
      {"bias tensor", [&](MoEConfig& c) { c.routing.routing_bias = bias; }, Kind::kUnsupported,
       "routing.routing_bias", "routing bias"},
      {"groups", [](MoEConfig& c) { c.routing.n_group = 4; }, Kind::kUnsupported,
       "routing.n_group", "groups"},
      {"topk groups", [](MoEConfig& c) { c.routing.topk_group = 2; }, Kind::kUnsupported,
       "routing.n_group", "groups"},
      {"scale nan", [](MoEConfig& c) { c.routing.routed_scaling_factor = NAN; }, Kind::kInvalid,
       "routing.routed_scaling_factor", "finite"},
      {"scale with ids",
       [](MoEConfig& c) {
         c.routing_input = RoutingInputMode::kUnpackedPrecomputed;
         c.routing.routed_scaling_factor = 3.0;
       },
       Kind::kInvalid, "routing.routed_scaling_factor", "bake it into topk_weights"},
      {"packed", [](MoEConfig& c) { c.routing_input = RoutingInputMode::kPackedPrecomputed; },
       Kind::kUnsupported, "routing_input", "PackedPrecomputed"},
      {"top_k 0", [](MoEConfig& c) { c.routing.top_k = 0; }, Kind::kInvalid, "routing.top_k",
       "1 <= top_k"},
      {"top_k > E", [](MoEConfig& c) { c.routing.top_k = 9; }, Kind::kInvalid, "routing.top_k",
       "1 <= top_k"},
      {"no experts", [](MoEConfig& c) { c.routing.num_experts = 0; }, Kind::kInvalid,
       "routing.num_experts", "> 0"},
      {"shared", [](MoEConfig& c) { c.experts.num_fused_shared_experts = 1; },
       Kind::kUnsupported, "experts.num_fused_shared_experts", "fused shared experts"},
      {"lora", [](MoEConfig& c) { c.lora_deltas = true; }, Kind::kUnsupported, "lora_deltas",
       "LoRA"},
      {"swiglu", [](MoEConfig& c) { c.activation.type = ActivationType::kSwiGLU; },
       Kind::kUnsupported, "activation", "SwiGLUStep"},
      {"swiglu bias", [](MoEConfig& c) { c.activation.type = ActivationType::kSwiGLUBias; },
       Kind::kUnsupported, "activation", "SwiGLUStep"},
      {"geglu", [](MoEConfig& c) { c.activation.type = ActivationType::kGeGLU; },
       Kind::kUnsupported, "activation", "SwiGLUStep"},
      {"limit 0", [](MoEConfig& c) { c.activation = swiglu_step(0.0f); }, Kind::kInvalid,
       "activation", "limit"},
      {"quant", [](MoEConfig& c) { c.quant.activations = QuantFormat::kBF16; },
       Kind::kUnsupported, "quant", "supports NVFP4xNVFP4"},
      {"I", [](MoEConfig& c) { c.experts.intermediate_size = 96; }, Kind::kInvalid,
       "experts.intermediate_size", "multiple of 64"},
      {"offset", [](MoEConfig& c) { c.experts.local_expert_offset = 8; }, Kind::kInvalid,
       "experts.local_expert_offset", "[0, num_experts"},
      {"local 0", [](MoEConfig& c) { c.experts.local_num_experts = 0; }, Kind::kInvalid,
       "experts.local_num_experts", "-1 (all) or > 0"},
      {"local range",
       [](MoEConfig& c) {
         c.experts.local_expert_offset = 4;
         c.experts.local_num_experts = 5;
       },
       Kind::kInvalid, "experts.local_num_experts", "<= num_experts"},
      {"tune", [](MoEConfig& c) { c.execution.tune_max_num_tokens = 0; }, Kind::kInvalid,
       "execution.tune_max_num_tokens", "> 0"},
  };
  for (const Rejection& r : cases) {
    SCOPED_TRACE(r.name);
    MoEConfig c = valid_config();
    r.mutate(c);
    expect_error([&] { validate_config(c); }, r.kind, r.arg, r.words);
  }
}

TEST(Config, FullPathEnvironmentVariable) {
  for (const char* ok : {static_cast<const char*>(nullptr), "auto", "1", ""}) {
    FullPathEnv env(ok);
    EXPECT_NO_THROW(check_full_path_env()) << (ok ? ok : "(unset)");
  }
  {
    FullPathEnv env("0");
    expect_error([] { check_full_path_env(); }, Kind::kUnsupported, "CAKEMOE_STEPFUN_FULL_PATH",
                 "FC1-only hybrid path does not exist in cakemoe");
  }
  for (const char* bad : {"2", "true", "AUTO", "full", " 1"}) {
    FullPathEnv env(bad);
    expect_error([] { check_full_path_env(); }, Kind::kInvalid, "CAKEMOE_STEPFUN_FULL_PATH",
                 "auto, 0 or 1");
  }
}

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe
