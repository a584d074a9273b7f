// cakemoe public API: StepFun fused MoE (routing -> FC1 + SwiGLUStep -> requant -> FC2 ->
// finalize). Contract: ../shared/spec/stepfun.md. Tensors on the CPU run the reference engine; CUDA
// tensors run the GPU kernels (where built). Every call validates all of its arguments before
// writing anything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cakemoe/tensor.h"

namespace cakemoe {
namespace stepfun {

/// Weight families (spec §4.2).
enum class Family : uint8_t { kBF16, kFP8, kMXFP8, kNVFP4, kNVFP4BF16Tok };
const char* family_name(Family family);        ///< "bf16", "fp8", "mxfp8", "nvfp4", "nvfp4_bf16tok"
Family parse_family(const std::string& name);  ///< throws InvalidArgument("family", ...)

/// Scale-factor layouts of activations / FC1 outputs (spec §4.4 (c), (e)).
enum class SfLayout : uint8_t { kLinear, kR8C4, kR128C4 };
const char* sf_layout_name(SfLayout layout);

// ------------------------------------------------------------------------------------------------
// Bounds and validation.
//
// Every entry below checks all of its arguments before it allocates or writes anything and throws
// InvalidArgument (bad value) or Unsupported (valid, not served here) whose argument() names the
// argument of the call. Sizes derived from arguments use overflow-checked arithmetic. The rules
// beyond the per-stage shapes of spec §9.3:
//  - Every view passes the TensorView rules of tensor.h (no negative size or stride, no int64
//    overflow, no null data with elements); the [1] device scalars are exactly shape [1].
//  - Enum values outside their enums are rejected (Family: "family", SfLayout: "sf_layout", or
//    "plan" for the fields of a Plan).
//  - routed_scaling_factor and global_scale_inv are finite and > 0.
//  - local_expert_offset >= 0, local_num_experts > 0, local_expert_offset + local_num_experts <=
//    num_experts (checked without overflow).
//  - max_padded(T, K, E, tile) + 1 fits in int32 (the routing tables hold int32 slots).
//  - FC1's gemm1_output has exactly max_padded(T, K, E_loc, tile) rows (spec §9.3).
//  - Precomputed topk_ids hold K distinct ids per token (spec §2.2; the CPU engine checks the
//    values at every launch, before writing).
//  - num_non_exiting_ctas, read at launch, is at most the entries of the CTA tables (CPU engine;
//    CUDA grids are sized from the validated tables).
//  - prepare_stepfun_moe: gemm2_weights holds the experts, H and I of gemm1_weights; every stage is
//    validated over the planned buffers before the first buffer is allocated.

constexpr int64_t kMaxNumTokens = int64_t{1} << 20;  ///< T
constexpr int64_t kMaxNumExperts = 65535;  ///< E and E_loc (16-bit ids in topk_packed, §2.2)
constexpr int64_t kMaxTopK = 32;           ///< K
constexpr int64_t kMaxHiddenSize = int64_t{1} << 20;        ///< H, a multiple of 64
constexpr int64_t kMaxIntermediateSize = int64_t{1} << 20;  ///< I, a multiple of 64
constexpr int64_t kMaxTileTokensDim = 65536;                ///< tile_tokens_dim (plans pick 8..256)

/// Static buffer bounds of spec §2.5. Arguments: 0 <= num_tokens <= kMaxNumTokens,
/// 0 <= top_k <= kMaxTopK, 1 <= num_experts <= kMaxNumExperts, 1 <= tile <= kMaxTileTokensDim.
int64_t max_ctas(int64_t num_tokens, int64_t top_k, int64_t num_experts, int64_t tile);
int64_t max_padded(int64_t num_tokens, int64_t top_k, int64_t num_experts, int64_t tile);

/// A launch plan (spec §8 DECISION). Kernel names are catalog unit names; on a GPU
/// prepare_stepfun_moe runs exactly the units a plan names (a name the device does not run is an
/// InvalidArgument naming `kernel`); the CPU backend runs its reference engine whatever they are.
struct Plan {
  Family family = Family::kNVFP4;
  int tile = 8;            ///< tile_tokens_dim: tokens per CTA tile and routing padding
  std::string path;        ///< "sm90" (Hopper tensor-core units), "simt" (portable), "cpu"
  std::string fc1_kernel;  ///< catalog unit for FC1 (e.g. "sm90_fc1_bf16_t8", "cpu_fc1_bf16_t8")
  std::string fc2_kernel;  ///< catalog unit for FC2
  SfLayout act_sf_layout = SfLayout::kR8C4;  ///< r8c4 if tile <= 64 else r128c4
  std::string routing_variant;
  std::string finalize_variant;
};
std::ostream& operator<<(std::ostream& os, const Plan& plan);

/// The problem a plan is chosen for.
struct ProblemDesc {
  Family family = Family::kNVFP4;
  int64_t num_tokens = 0;
  int64_t top_k = 0;
  int64_t local_num_experts = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  bool logits_input = true;  ///< FromLogits (true) or UnpackedPrecomputed (false)
  Device device;             ///< where the plan runs (CPU = reference engine)
};

/// Candidate plans: the native tile window (prev, center, next, next^2) on the dense ladder
/// 8..256; per tile, on SM90, the tile's measured sm90 plan, then the other sm90 plans of that
/// tile (the main units and the variants, units named sm90_*_<variant>_t<tile>: mxfp8 "e4m3" at
/// tile 8, bf16 / fp8 "g8" at tile 64; variants compiled but not yet run on a GPU are left out),
/// then the portable one. On SM90 the measured sm90 plan (tile and unit variant) for T*K/E_loc
/// comes first (when its units exist).
std::vector<Plan> plans_for(const ProblemDesc& problem);
/// The first candidate: on SM90 the measured sm90 plan, elsewhere the smallest tile (the native
/// rule of spec §8).
Plan default_plan(const ProblemDesc& problem);

// ------------------------------------------------------------------------------------------------
// Per-stage arguments (spec §9.1). Absent optional tensors are default-constructed views.

struct RoutingArgs {
  TensorView routing_logits;           ///< [T, E] bf16|fp32 (FromLogits) -- xor topk_ids
  TensorView topk_ids;                 ///< [T, K] int32 global expert ids (UnpackedPrecomputed)
  TensorView topk_weights;             ///< [T, K]: written bf16 (logits) / read bf16|fp32 (ids)
  TensorView topk_packed;              ///< [T, K] int32 (logits mode output: id<<16 | bf16 bits)
  TensorView expert_count_histogram;   ///< int32 scratch >= max(2E, 512)
  TensorView total_num_padded_tokens;  ///< int32 [1]
  TensorView expanded_idx_to_permuted_idx;  ///< int32 [T*K]
  TensorView permuted_idx_to_token_idx;     ///< int32 [>= max_padded]
  TensorView cta_idx_xy_to_batch_idx;       ///< int32 [>= max_ctas]
  TensorView cta_idx_xy_to_mn_limit;        ///< int32 [>= max_ctas]
  TensorView num_non_exiting_ctas;          ///< int32 [1]
  TensorView num_tokens_per_expert;         ///< optional int32 [E_loc]
  int64_t num_experts = 0;
  int64_t top_k = 0;
  int64_t local_expert_offset = 0;
  int64_t local_num_experts = 0;
  int64_t tile_tokens_dim = 8;
  double routed_scaling_factor = 1.0;  ///< FromLogits: multiplies the fp32 softmax weights
  bool enable_pdl = true;
  bool poison_routing_tail = false;  ///< debug: poison instead of benign tail
};

struct Fc1Args {
  Family family = Family::kNVFP4;
  TensorView hidden_states;              ///< per family (spec §4.2), [T, ...]
  TensorView hidden_states_scale;        ///< nvfp4*: e4m3 [T, H/16] linear; mxfp8: ue8m0 [T, H/32]
  TensorView gemm1_weights;              ///< physical view (spec §4.2)
  TensorView gemm1_weights_scale;        ///< nvfp4*/mxfp8 swizzled block scales
  TensorView output1_scale_scalar;       ///< fp32 [E_loc] (nvfp4*, fp8)
  TensorView output1_scale_gate_scalar;  ///< fp32 [E_loc] (nvfp4*, fp8)
  TensorView gemm1_clamp_limit;          ///< fp32 [E_loc], family units (spec §3.2)
  TensorView per_token_scale;            ///< nvfp4_bf16tok: fp32 [>= T]
  TensorView permuted_idx_to_token_idx;
  TensorView cta_idx_xy_to_batch_idx;
  TensorView cta_idx_xy_to_mn_limit;
  TensorView num_non_exiting_ctas;
  TensorView total_num_padded_tokens;
  TensorView gemm1_output;        ///< [max_padded, I/2] u8 | [max_padded, I] e4m3/bf16
  TensorView gemm1_output_scale;  ///< nvfp4: e4m3 SF, mxfp8: ue8m0 SF (r8c4 / r128c4)
  int64_t top_k = 0;
  int64_t tile_tokens_dim = 8;
  bool enable_pdl = true;
  std::string kernel;  ///< a Plan's fc1_kernel; empty: the device's preferred unit (CPU: ignored)
};

struct RequantArgs {
  TensorView gemm1_output;                  ///< bf16 [rows, I]
  TensorView expanded_idx_to_permuted_idx;  ///< int32 [T*K]
  TensorView output;                        ///< u8 [rows, I/2] packed e2m1
  TensorView output_scale;                  ///< e4m3 SF bytes in `sf_layout`
  TensorView per_token_scale;               ///< fp32 [>= rows] (decode scale per row)
  SfLayout sf_layout = SfLayout::kR8C4;
  double global_scale_inv = 1.0 / 2688.0;  ///< 1 / (448 * 6)
  bool enable_pdl = true;
};

struct Fc2Args {
  Family family = Family::kNVFP4;
  TensorView gemm2_input;  ///< FC1 output (nvfp4_bf16tok: requant output)
  TensorView gemm2_input_scale;
  TensorView gemm2_weights;
  TensorView gemm2_weights_scale;
  TensorView output2_scale_scalar;  ///< fp32 [E_loc] (nvfp4*, fp8)
  TensorView per_token_scale;       ///< nvfp4_bf16tok: fp32 [>= max_padded]
  TensorView cta_idx_xy_to_batch_idx;
  TensorView cta_idx_xy_to_mn_limit;
  TensorView num_non_exiting_ctas;
  TensorView gemm2_output;  ///< bf16 [max_padded, H]
  int64_t num_tokens = 0;
  int64_t top_k = 0;
  int64_t tile_tokens_dim = 8;
  bool enable_pdl = true;
  std::string kernel;  ///< a Plan's fc2_kernel; empty: the device's preferred unit (CPU: ignored)
};

struct FinalizeArgs {
  TensorView gemm2_output;                  ///< bf16 [max_padded, H]
  TensorView expert_weights;                ///< [T, K] bf16 | fp32
  TensorView expanded_idx_to_permuted_idx;  ///< int32 [T*K]
  TensorView total_num_padded_tokens;       ///< int32 [1]
  TensorView output;                        ///< bf16 [T, H]
  int64_t num_experts = 0;
  bool enable_pdl = true;
};

/// A launch bound to caller-owned buffers: `launch()` allocates nothing and never syncs the host.
class StepFunStageLaunch {
 public:
  class Impl;
  StepFunStageLaunch();
  explicit StepFunStageLaunch(std::shared_ptr<Impl> impl);
  void launch(Stream stream = nullptr) const;

 private:
  std::shared_ptr<Impl> impl_;
};

StepFunStageLaunch prepare_routing(const RoutingArgs& args);
StepFunStageLaunch prepare_fc1(const Fc1Args& args);
StepFunStageLaunch prepare_requant(const RequantArgs& args);
StepFunStageLaunch prepare_fc2(const Fc2Args& args);
StepFunStageLaunch prepare_finalize(const FinalizeArgs& args);
/// One-shots: prepare_<stage>(args).launch(stream).
void routing(const RoutingArgs& args, Stream stream = nullptr);
void fc1(const Fc1Args& args, Stream stream = nullptr);
void requant(const RequantArgs& args, Stream stream = nullptr);
void fc2(const Fc2Args& args, Stream stream = nullptr);
void finalize(const FinalizeArgs& args, Stream stream = nullptr);

// ------------------------------------------------------------------------------------------------
// Whole layer.

struct MoeArgs {
  Family family = Family::kNVFP4;
  TensorView hidden_states;
  TensorView hidden_states_scale;
  TensorView gemm1_weights;
  TensorView gemm1_weights_scale;
  TensorView output1_scale_scalar;
  TensorView output1_scale_gate_scalar;
  TensorView gemm1_clamp_limit;
  TensorView per_token_scale;  ///< nvfp4_bf16tok: fp32 [T]
  TensorView gemm2_weights;
  TensorView gemm2_weights_scale;
  TensorView output2_scale_scalar;
  TensorView routing_logits;  ///< xor topk_ids
  TensorView topk_ids;
  TensorView topk_weights;  ///< with topk_ids: bf16|fp32 [T, K], read only
  int64_t num_experts = 0;
  int64_t top_k = 0;
  int64_t local_expert_offset = 0;
  int64_t local_num_experts = 0;
  std::optional<Plan> plan;  ///< wins over autotune; default_plan() (or autotune) when absent
  TensorView output;         ///< optional bf16 [T, H]; allocated when absent
  bool do_finalize = true;
  bool enable_pdl = true;
  int reserved_sms = 8;
  double global_scale_inv = 1.0 / 2688.0;
  double routed_scaling_factor = 1.0;
  bool poison_routing_tail = false;
  /// Opt-in autotune (used only when `plan` is absent): prepare_stepfun_moe prepares every
  /// candidate of plans_for() on these arguments, times autotune_reps launches of each after one
  /// warm-up (CUDA events on autotune_stream on a GPU, steady_clock on the CPU backend), keeps the
  /// fastest (ties: the earlier candidate; a candidate that throws Unsupported is skipped) and
  /// caches the choice per (device, family, T rounded up to a power of two, K, E_loc, H, I,
  /// logits_input) for the process. A cache hit measures nothing, and a hit from another T of the
  /// same bucket reuses that T's plan (every plan runs every T). A miss runs kernels, writes the
  /// outputs (as every launch does) and synchronises autotune_stream, so never prepare with
  /// autotune while a stream is being captured into a CUDA graph (InvalidArgument `autotune` when
  /// autotune_stream is capturing). All candidates agree within the family's tolerance; on the
  /// CPU engine they agree bitwise (the tile changes only padding and buffer sizes).
  bool autotune = false;
  int autotune_reps = 3;             ///< timed launches per candidate, in [1, 1000]
  Stream autotune_stream = nullptr;  ///< the caller's stream (CUDA); stepfun_moe uses its own
};

/// Plans chosen by autotune so far in this process (thread-safe).
size_t autotune_cache_size();
/// Forgets every autotuned choice: the next autotuned prepare of each shape measures again.
void clear_autotune_cache();

/// A prepared layer: owns every intermediate buffer, zero-filled once at prepare (which waits for
/// that fill); `launch()` allocates nothing, never syncs the host and can be captured in a CUDA
/// graph. Valid for the T it was prepared with. Rows a launch does not route to (padding) keep
/// zeros or what an earlier launch left there.
class StepFunMoeLaunch {
 public:
  class Impl;
  StepFunMoeLaunch();
  explicit StepFunMoeLaunch(std::shared_ptr<Impl> impl);
  void launch(Stream stream = nullptr) const;
  /// [output] or, with do_finalize = false, [gemm2_output, expert_weights,
  /// expanded_idx_to_permuted_idx].
  std::vector<TensorView> outputs() const;
  const Plan& plan() const;

 private:
  std::shared_ptr<Impl> impl_;
};

StepFunMoeLaunch prepare_stepfun_moe(const MoeArgs& args);
/// One-shot: prepare, launch on `stream`, return owning copies of outputs().
std::vector<Tensor> stepfun_moe(const MoeArgs& args, Stream stream = nullptr);

// ------------------------------------------------------------------------------------------------
// Weight and activation preparation (spec §4.3, §4.4): logical bf16 -> a family's physical view.

struct WeightPrepOptions {
  Family family = Family::kNVFP4;
  std::vector<float> step_limits;         ///< SwiGLUStep L per local expert ([E] or one value)
  int64_t local_expert_offset = 0;        ///< experts [off, off + count) of w1/w2 are prepared
  int64_t local_num_experts = -1;         ///< -1: all
  double hidden_states_scale_global = 0;  ///< a_gs (encode); required for fp8 and nvfp4
  double intermediate_scale_global = 0;   ///< c_gs (encode); 0 -> bound default (spec §12.7)
};

/// A family's weight view ("cake_stepfun" weight view keys of spec §9.4).
struct StepFunWeights {
  Family family = Family::kNVFP4;
  Tensor gemm1_weights, gemm1_weights_scale, gemm2_weights, gemm2_weights_scale;
  Tensor output1_scale_scalar, output1_scale_gate_scalar, output2_scale_scalar;
  Tensor gemm1_clamp_limit;  ///< family units (spec §3.2)
  double hidden_states_scale_global = 0;
  double intermediate_scale_global = 0;
};

/// w1: bf16 [E, 2I, H] (rows [up; gate]); w2: bf16 [E, H, I]. Result lives on w1's device.
StepFunWeights prepare_weights(const TensorView& w1, const TensorView& w2,
                               const WeightPrepOptions& options);

struct StepFunActivations {
  Tensor hidden_states;        ///< family input format
  Tensor hidden_states_scale;  ///< linear block scales (nvfp4*, mxfp8), else undefined
  Tensor per_token_scale;      ///< nvfp4_bf16tok: fp32 [T] decode scales, else undefined
};

/// hidden: bf16 [T, H]. `hidden_states_scale_global` is the a_gs of the weights (fp8, nvfp4).
StepFunActivations prepare_activations(Family family, const TensorView& hidden,
                                       double hidden_states_scale_global = 0);

}  // namespace stepfun
}  // namespace cakemoe
