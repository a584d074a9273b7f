// The C++ results the Python StepFun entries are checked against bit for bit: every public entry of
// include/cakemoe/stepfun.h and config.h run through the C++ API on fixed inputs, each input and
// result written as a .npy file (bf16 as uint16 bits, the 8-bit formats as uint8) plus a manifest.
//
//   stepfun_golden OUT_DIR [--cuda]     (--cuda: the inputs on GPU 0, i.e. the GPU kernels)
//
// tests/python/test_stepfun_cpu.py (and _gpu.py) run it and repeat each call from Python.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cakemoe/config.h"
#include "cakemoe/stepfun.h"
#include "core/cuda_util.h"
#include "formats/codecs.h"
#include "reference/stepfun/harness.h"
#include "reference/stepfun/families.h"
#include "stepfun/validate.h"

namespace cakemoe {
namespace stepfun {
namespace {

constexpr int64_t kT = 8, kH = 128, kI = 64, kE = 4, kK = 2;
constexpr int kPoison = 0xA5;

const char* npy_descr(DType d) {
  switch (d) {
    case DType::kBF16:
      return "<u2";
    case DType::kFP16:
      return "<f2";
    case DType::kFP32:
      return "<f4";
    case DType::kInt32:
      return "<i4";
    case DType::kInt64:
      return "<i8";
    default:
      return "|u1";  // e4m3, ue8m0, e2m1x2, uint8: their bytes
  }
}

class Golden {
 public:
  Golden(std::string dir, Device device) : dir_(std::move(dir)), device_(device) {
    manifest_.precision(17);  // doubles round-trip exactly
  }

  /// A host tensor on the run's device (a copy on CUDA).
  Tensor place(const Tensor& host) const {
    return device_.type == DeviceType::kCPU ? host : core::copy_to(host, device_);
  }
  Tensor poisoned(const std::vector<int64_t>& shape, DType dtype) const {
    Tensor t = Tensor::empty(shape, dtype, device_);
    core::fill_bytes(t, kPoison);
    return t;
  }

  void write(const std::string& name, const TensorView& v) {
    if (!v.defined()) return;
    const Tensor host =
        v.device.type == DeviceType::kCPU ? Tensor() : core::copy_to(v, Device::cpu());
    const TensorView& h = host.defined() ? host.view() : v;
    std::ostringstream shape;
    shape << "(";
    for (int d = 0; d < h.ndim; ++d)
      shape << h.shape[d] << (h.ndim == 1 ? "," : d + 1 < h.ndim ? ", " : "");
    shape << ")";
    std::string header = std::string("{'descr': '") + npy_descr(h.dtype) +
                         "', 'fortran_order': False, 'shape': " + shape.str() + ", }";
    // NOTE: npy 1.0: magic (6) + version (2) + header length (2) + header, padded with spaces to
    // a multiple of 64 bytes and ended by a newline.
    while ((10 + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
    std::ofstream out(dir_ + "/" + name + ".npy", std::ios::binary);
    const uint16_t len = static_cast<uint16_t>(header.size());
    out.write("\x93NUMPY\x01\x00", 8);
    out.put(static_cast<char>(len & 0xFF));
    out.put(static_cast<char>(len >> 8));
    out << header;
    out.write(static_cast<const char*>(h.data), static_cast<std::streamsize>(h.nbytes()));
    if (!out) throw std::runtime_error("cannot write " + name);
  }
  void write_weights(const std::string& prefix, const StepFunWeights& w) {
    write(prefix + "gemm1_weights", w.gemm1_weights);
    write(prefix + "gemm1_weights_scale", w.gemm1_weights_scale);
    write(prefix + "gemm2_weights", w.gemm2_weights);
    write(prefix + "gemm2_weights_scale", w.gemm2_weights_scale);
    write(prefix + "output1_scale_scalar", w.output1_scale_scalar);
    write(prefix + "output1_scale_gate_scalar", w.output1_scale_gate_scalar);
    write(prefix + "output2_scale_scalar", w.output2_scale_scalar);
    write(prefix + "gemm1_clamp_limit", w.gemm1_clamp_limit);
    manifest_ << "  \"" << prefix << "scales\": [" << w.hidden_states_scale_global << ", "
              << w.intermediate_scale_global << "],\n";
  }
  void write_activations(const std::string& prefix, const StepFunActivations& a) {
    write(prefix + "hidden_states", a.hidden_states);
    write(prefix + "hidden_states_scale", a.hidden_states_scale);
    write(prefix + "per_token_scale", a.per_token_scale);
  }
  void write_list(const std::string& prefix, const std::vector<Tensor>& outputs) {
    for (size_t i = 0; i < outputs.size(); ++i) write(prefix + std::to_string(i), outputs[i]);
  }
  void note(const std::string& key, const std::string& json) {
    manifest_ << "  \"" << key << "\": " << json << ",\n";
  }
  void finish() {
    std::ofstream out(dir_ + "/manifest.json");
    out << "{\n"
        << manifest_.str() << "  \"device\": \""
        << (device_.type == DeviceType::kCPU ? "cpu" : "cuda") << "\"\n}\n";
  }
  Device device() const { return device_; }

 private:
  std::string dir_;
  Device device_;
  std::ostringstream manifest_;
};

struct Inputs {
  Tensor w1, w2, hidden, logits_fp32, logits_bf16, topk_ids, topk_weights_bf16;
  double a_gs_nvfp4 = 0, a_gs_fp8 = 0;
};

Inputs make_inputs(Golden& g) {
  namespace ref = reference::stepfun;
  Inputs in;
  in.w1 = ref::normal_bf16({kE, 2 * kI, kH}, 11, 0.0884f);  // randn / sqrt(H)
  in.w2 = ref::normal_bf16({kE, kH, kI}, 12, 0.125f);       // randn / sqrt(I)
  in.hidden = ref::normal_bf16({kT, kH}, 13, 12.0f);
  in.logits_bf16 = ref::normal_bf16({kT, kE}, 14, 1.0f);
  in.logits_fp32 = Tensor::empty({kT, kE}, DType::kFP32);
  for (int64_t i = 0; i < kT * kE; ++i) {
    in.logits_fp32.ptr<float>()[i] =
        formats::bf16_to_float(in.logits_bf16.ptr<uint16_t>()[i]) * 0.75f;
  }
  in.topk_ids = Tensor::empty({kT, kK}, DType::kInt32);
  in.topk_weights_bf16 = Tensor::empty({kT, kK}, DType::kBF16);
  for (int64_t t = 0; t < kT; ++t) {
    for (int64_t k = 0; k < kK; ++k) {
      in.topk_ids.ptr<int32_t>()[t * kK + k] = static_cast<int32_t>((3 * t + k) % kE);  // distinct
      in.topk_weights_bf16.ptr<uint16_t>()[t * kK + k] =
          formats::bf16_from_float(0.25f + 0.125f * static_cast<float>((t + 2 * k) % 5));
    }
  }
  float amax = 0;
  for (int64_t i = 0; i < kT * kH; ++i) {
    const float v = formats::bf16_to_float(in.hidden.ptr<uint16_t>()[i]);
    amax = std::max(amax, v < 0 ? -v : v);
  }
  in.a_gs_nvfp4 = 2688.0 / amax;
  in.a_gs_fp8 = 448.0 / amax;
  g.write("w1", in.w1);
  g.write("w2", in.w2);
  g.write("hidden", in.hidden);
  g.write("logits_fp32", in.logits_fp32);
  g.write("logits_bf16", in.logits_bf16);
  g.write("topk_ids", in.topk_ids);
  g.write("topk_weights_bf16", in.topk_weights_bf16);
  std::ostringstream dims;
  dims << "{\"T\": " << kT << ", \"H\": " << kH << ", \"I\": " << kI << ", \"E\": " << kE
       << ", \"K\": " << kK << ", \"poison\": " << kPoison << "}";
  g.note("dims", dims.str());
  return in;
}

MoeArgs layer_args(Family f, const StepFunWeights& w, const StepFunActivations& a) {
  MoeArgs args;
  args.family = f;
  args.hidden_states = a.hidden_states;
  args.hidden_states_scale = a.hidden_states_scale;
  args.per_token_scale = a.per_token_scale;
  args.gemm1_weights = w.gemm1_weights;
  args.gemm1_weights_scale = w.gemm1_weights_scale;
  args.gemm2_weights = w.gemm2_weights;
  args.gemm2_weights_scale = w.gemm2_weights_scale;
  args.output1_scale_scalar = w.output1_scale_scalar;
  args.output1_scale_gate_scalar = w.output1_scale_gate_scalar;
  args.output2_scale_scalar = w.output2_scale_scalar;
  args.gemm1_clamp_limit = w.gemm1_clamp_limit;
  args.num_experts = kE;
  args.top_k = kK;
  args.local_num_experts = w.gemm1_weights.size(0);
  return args;
}

/// routing -> fc1 -> (requant) -> fc2 -> finalize on poisoned caller buffers, every one written.
void run_stages(Golden& g, const std::string& p, Family f, const StepFunWeights& w,
                const StepFunActivations& a, const Tensor& logits) {
  ProblemDesc problem;
  problem.family = f;
  problem.num_tokens = kT;
  problem.top_k = kK;
  problem.local_num_experts = kE;
  problem.hidden_size = kH;
  problem.intermediate_size = kI;
  problem.device = g.device();
  const int64_t tile = default_plan(problem).tile;
  const int64_t ctas = max_ctas(kT, kK, kE, tile), rows = max_padded(kT, kK, kE, tile);
  const SfLayout layout = act_sf_layout(tile);
  g.note(p + "tile", std::to_string(tile));

  RoutingArgs r;
  r.routing_logits = logits;
  const Tensor topk_weights = g.poisoned({kT, kK}, DType::kBF16);
  const Tensor topk_packed = g.poisoned({kT, kK}, DType::kInt32);
  const Tensor histogram = g.poisoned({512}, DType::kInt32);
  const Tensor total = g.poisoned({1}, DType::kInt32);
  const Tensor e2p = g.poisoned({kT * kK}, DType::kInt32);
  const Tensor p2t = g.poisoned({rows + 1}, DType::kInt32);
  const Tensor cta_batch = g.poisoned({ctas}, DType::kInt32);
  const Tensor cta_limit = g.poisoned({ctas}, DType::kInt32);
  const Tensor num_ctas = g.poisoned({1}, DType::kInt32);
  const Tensor per_expert = g.poisoned({kE}, DType::kInt32);
  r.topk_weights = topk_weights;
  r.topk_packed = topk_packed;
  r.expert_count_histogram = histogram;
  r.total_num_padded_tokens = total;
  r.expanded_idx_to_permuted_idx = e2p;
  r.permuted_idx_to_token_idx = p2t;
  r.cta_idx_xy_to_batch_idx = cta_batch;
  r.cta_idx_xy_to_mn_limit = cta_limit;
  r.num_non_exiting_ctas = num_ctas;
  r.num_tokens_per_expert = per_expert;
  r.num_experts = kE;
  r.top_k = kK;
  r.local_num_experts = kE;
  r.tile_tokens_dim = tile;
  routing(r);

  Fc1Args f1;
  f1.family = f;
  f1.hidden_states = a.hidden_states;
  f1.hidden_states_scale = a.hidden_states_scale;
  f1.per_token_scale = a.per_token_scale;
  f1.gemm1_weights = w.gemm1_weights;
  f1.gemm1_weights_scale = w.gemm1_weights_scale;
  f1.output1_scale_scalar = w.output1_scale_scalar;
  f1.output1_scale_gate_scalar = w.output1_scale_gate_scalar;
  f1.gemm1_clamp_limit = w.gemm1_clamp_limit;
  f1.permuted_idx_to_token_idx = p2t;
  f1.cta_idx_xy_to_batch_idx = cta_batch;
  f1.cta_idx_xy_to_mn_limit = cta_limit;
  f1.num_non_exiting_ctas = num_ctas;
  f1.total_num_padded_tokens = total;
  f1.top_k = kK;
  f1.tile_tokens_dim = tile;
  Tensor g1, g1_scale;
  if (f == Family::kNVFP4) {
    g1 = g.poisoned({rows, kI / 2}, DType::kE2M1x2);
    g1_scale = g.poisoned({act_scale_bytes(f, layout, rows, kI)}, DType::kE4M3);
  } else if (f == Family::kFP8 || f == Family::kMXFP8) {
    g1 = g.poisoned({rows, kI}, DType::kE4M3);
    if (f == Family::kMXFP8)
      g1_scale = g.poisoned({act_scale_bytes(f, layout, rows, kI)}, DType::kUE8M0);
  } else {
    g1 = g.poisoned({rows, kI}, DType::kBF16);
  }
  f1.gemm1_output = g1;
  f1.gemm1_output_scale = g1_scale;
  prepare_fc1(f1).launch();

  Fc2Args f2;
  f2.family = f;
  f2.gemm2_input = g1;
  f2.gemm2_input_scale = g1_scale;
  Tensor q, q_scale, q_token;
  if (f == Family::kNVFP4BF16Tok) {
    q = g.poisoned({rows, kI / 2}, DType::kE2M1x2);
    q_scale = g.poisoned({act_scale_bytes(f, layout, rows, kI)}, DType::kE4M3);
    q_token = g.poisoned({rows}, DType::kFP32);
    RequantArgs rq;
    rq.gemm1_output = g1;
    rq.expanded_idx_to_permuted_idx = e2p;
    rq.output = q;
    rq.output_scale = q_scale;
    rq.per_token_scale = q_token;
    rq.sf_layout = layout;
    requant(rq);
    f2.gemm2_input = q;
    f2.gemm2_input_scale = q_scale;
    f2.per_token_scale = q_token;
  }
  f2.gemm2_weights = w.gemm2_weights;
  f2.gemm2_weights_scale = w.gemm2_weights_scale;
  f2.output2_scale_scalar = w.output2_scale_scalar;
  f2.cta_idx_xy_to_batch_idx = cta_batch;
  f2.cta_idx_xy_to_mn_limit = cta_limit;
  f2.num_non_exiting_ctas = num_ctas;
  const Tensor g2 = g.poisoned({rows, kH}, DType::kBF16);
  f2.gemm2_output = g2;
  f2.num_tokens = kT;
  f2.top_k = kK;
  f2.tile_tokens_dim = tile;
  prepare_fc2(f2).launch();

  FinalizeArgs fin;
  fin.gemm2_output = g2;
  fin.expert_weights = topk_weights;
  fin.expanded_idx_to_permuted_idx = e2p;
  fin.total_num_padded_tokens = total;
  const Tensor out = g.poisoned({kT, kH}, DType::kBF16);
  fin.output = out;
  fin.num_experts = kE;
  finalize(fin);
  if (g.device().type == DeviceType::kCUDA) core::cuda_stream_sync(nullptr);

  const std::pair<const char*, Tensor> buffers[] = {{"topk_weights", topk_weights},
                                                    {"topk_packed", topk_packed},
                                                    {"expert_count_histogram", histogram},
                                                    {"total_num_padded_tokens", total},
                                                    {"expanded_idx_to_permuted_idx", e2p},
                                                    {"permuted_idx_to_token_idx", p2t},
                                                    {"cta_idx_xy_to_batch_idx", cta_batch},
                                                    {"cta_idx_xy_to_mn_limit", cta_limit},
                                                    {"num_non_exiting_ctas", num_ctas},
                                                    {"num_tokens_per_expert", per_expert},
                                                    {"gemm1_output", g1},
                                                    {"gemm1_output_scale", g1_scale},
                                                    {"requant_output", q},
                                                    {"requant_output_scale", q_scale},
                                                    {"requant_per_token_scale", q_token},
                                                    {"gemm2_output", g2},
                                                    {"output", out}};
  for (const auto& b : buffers) g.write(p + "stage_" + b.first, b.second);
}

MoEConfig config_for(Family f, bool precomputed) {
  MoEConfig c;
  c.routing.num_experts = kE;
  c.routing.top_k = kK;
  c.quant = quant_of(f);
  c.experts.intermediate_size = kI;
  c.activation = swiglu_step(16.0f);
  if (precomputed) {
    c.routing_input = RoutingInputMode::kUnpackedPrecomputed;
    c.experts.local_expert_offset = 1;
    c.experts.local_num_experts = 2;
    c.finalize.do_finalize = false;
  } else {
    c.routing.routed_scaling_factor = 2.0;
  }
  return c;
}

void run_family(Golden& g, const Inputs& in, Family f) {
  const std::string p = std::string(family_name(f)) + "_";
  const double a_gs = f == Family::kFP8 ? in.a_gs_fp8 : in.a_gs_nvfp4;
  const Tensor w1 = g.place(in.w1), w2 = g.place(in.w2), hidden = g.place(in.hidden);
  // NOTE: the argument structs hold views: every placed input lives in a named Tensor here (a
  // temporary would be freed before the launch reads it, and on CUDA its memory reused).
  const Tensor logits_fp32 = g.place(in.logits_fp32), topk_ids = g.place(in.topk_ids),
               topk_weights = g.place(in.topk_weights_bf16);

  // Per-family entries: weights, activations, the one-shot and the prepared layer.
  WeightPrepOptions o;
  o.family = f;
  o.step_limits = {7.f, 16.f, 7.f, 16.f};
  o.hidden_states_scale_global = a_gs;
  const StepFunWeights w = prepare_weights(w1, w2, o);
  g.write_weights(p + "W_", w);
  const StepFunActivations a = prepare_activations(f, hidden, a_gs);
  g.write_activations(p + "A_", a);

  MoeArgs args = layer_args(f, w, a);
  args.routing_logits = logits_fp32;
  args.routed_scaling_factor = 1.5;
  g.write_list(p + "moe_logits_", stepfun_moe(args));

  WeightPrepOptions ol = o;
  ol.step_limits = {16.f, 7.f};
  ol.local_expert_offset = 1;
  ol.local_num_experts = 2;
  const StepFunWeights wl = prepare_weights(w1, w2, ol);
  g.write_weights(p + "WL_", wl);
  MoeArgs ids = layer_args(f, wl, a);
  ids.topk_ids = topk_ids;
  ids.topk_weights = topk_weights;
  ids.local_expert_offset = 1;
  ids.do_finalize = false;
  const StepFunMoeLaunch launch = prepare_stepfun_moe(ids);
  // The prepared layer's own plan: on SM90 its tile follows E_loc (2 here), not the stages' 4.
  g.note(p + "ids_tile", std::to_string(launch.plan().tile));
  launch.launch();
  if (g.device().type == DeviceType::kCUDA) core::cuda_stream_sync(nullptr);
  const std::vector<TensorView> views = launch.outputs();
  for (size_t i = 0; i < views.size(); ++i) g.write(p + "moe_ids_" + std::to_string(i), views[i]);

  run_stages(g, p, f, w, a, g.place(in.logits_bf16));

  // The unified configuration: FromLogits with a routed scale, and UnpackedPrecomputed on local
  // experts without finalize.
  const MoEConfig c = config_for(f, false);
  const StepFunWeights wc = prepare_weights(c, w1, w2, {}, a_gs);
  g.write_weights(p + "WC_", wc);
  const StepFunActivations ac = prepare_activations(c, wc, hidden);
  g.write_activations(p + "AC_", ac);
  MoeInputs inputs = moe_inputs(ac);
  inputs.routing_logits = logits_fp32;
  g.write_list(p + "run_moe_logits_", run_moe(c, wc, inputs));

  const MoEConfig cl = config_for(f, true);
  const StepFunWeights wcl = prepare_weights(cl, w1, w2, {}, a_gs);
  g.write_weights(p + "WCL_", wcl);
  MoeInputs ids_inputs = moe_inputs(ac);
  ids_inputs.topk_ids = topk_ids;
  ids_inputs.topk_weights = topk_weights;
  g.write_list(p + "run_moe_ids_", run_moe(cl, wcl, ids_inputs));
  std::ostringstream exact;
  exact.precision(17);
  exact << a_gs;
  g.note(p + "a_gs", exact.str());
}

void write_plans(Golden& g) {
  std::ostringstream json;
  json << "[";
  const int64_t tokens[] = {1, 8, 64, 512};
  bool first = true;
  for (Family f : kAllFamilies) {
    for (int64_t t : tokens) {
      ProblemDesc problem;
      problem.family = f;
      problem.num_tokens = t;
      problem.top_k = 8;
      problem.local_num_experts = 64;
      problem.hidden_size = 4096;
      problem.intermediate_size = 1536;
      problem.logits_input = t != 64;
      problem.device = g.device();
      std::ostringstream row;
      row << (first ? "" : ",") << "\n    {\"family\": \"" << family_name(f) << "\", \"T\": " << t
          << ", \"logits\": " << (problem.logits_input ? "true" : "false") << ", \"default\": \""
          << default_plan(problem) << "\", \"all\": [";
      const std::vector<Plan> plans = plans_for(problem);
      for (size_t i = 0; i < plans.size(); ++i) row << (i ? ", " : "") << "\"" << plans[i] << "\"";
      json << row.str() << "]}";
      first = false;
    }
  }
  g.note("plans", json.str() + "\n  ]");
}

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe

int main(int argc, char** argv) {
  using namespace cakemoe;
  if (argc < 2 || argc > 3 || (argc == 3 && std::string(argv[2]) != "--cuda")) {
    std::fprintf(stderr, "usage: %s OUT_DIR [--cuda]\n", argv[0]);
    return 2;
  }
  try {
    stepfun::Golden g(argv[1], argc == 3 ? Device::cuda(0) : Device::cpu());
    const stepfun::Inputs in = stepfun::make_inputs(g);
    for (stepfun::Family f : stepfun::kAllFamilies) stepfun::run_family(g, in, f);
    stepfun::write_plans(g);
    g.finish();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stepfun_golden: %s\n", e.what());
    return 1;
  }
  return 0;
}
