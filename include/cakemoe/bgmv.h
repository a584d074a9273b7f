// cakemoe public API: BGMV MoE-LoRA prepared plan (shrink + expand). Contract:
// ../shared/spec/bgmv.md. CPU tensors run the reference engine in the canonical FP32 order of
// spec §3.2; CUDA tensors run the Cake path or the portable fallback (where built).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cakemoe/tensor.h"

namespace cakemoe {
namespace bgmv {

// ------------------------------------------------------------------------------------------------
// Bounds and validation.
//
// prepare_bgmv_moe checks every argument before it reads index data, allocates or writes anything,
// and throws InvalidArgument (or Unsupported, spec §9 with fallback = false) whose argument() names
// the argument of the call. Beyond the rules of spec §10: every view passes the TensorView rules of
// tensor.h; the dimensions lie within the bounds below; and on every path (Cake, portable, CPU)
// each tensor, the default y_accum [T, S*F] and shrink_out [S, P, R] have at most INT32_MAX
// elements and y_accum's (T - 1) * row_stride + S*F is at most INT32_MAX (the kernels index with
// int32). A num_experts that disagrees with dim 1 of all LoRA tensors is blamed on num_experts.

constexpr int64_t kMaxNumTokens = int64_t{1} << 24;   ///< T (x rows; 0 allowed)
constexpr int64_t kMaxNumPairs = int64_t{1} << 26;    ///< P (sorted_token_ids entries)
constexpr int64_t kMaxHiddenSize = int64_t{1} << 20;  ///< H
constexpr int64_t kMaxFeatOut = int64_t{1} << 20;     ///< F
constexpr int64_t kMaxRank = 512;                     ///< R (Cake 8..64, portable <= 128)
constexpr int64_t kMaxNumLoras = 65536;    ///< L (0 allowed: every lora_indices entry is -1)
constexpr int64_t kMaxNumExperts = 65536;  ///< E
constexpr int64_t kMaxNumSlices = 64;      ///< S (portable: <= 8)

struct BgmvOptions {
  std::string backend = "cake";  ///< the only accepted value
  bool fallback = true;          ///< false: inputs outside the Cake support set raise Unsupported
  TensorView shrink_out;         ///< optional [S, P, R] weight dtype workspace
  TensorView y_accum;            ///< optional [T, S*F] fp32 (Cake: may be a column slice)
  std::optional<bool> grouped;   ///< unset: heuristic (spec §5)
  std::optional<bool> order_remap;  ///< unset: heuristic (spec §6)
};

/// How the generic Cake shrink streams x and A (spec §4.1's forms, with cakemoe's register
/// forms). Every kind gives the same bits for the same splits.
enum class ShrinkKind : int32_t {
  kRing2Stage,            ///< spec form 0: a 2-stage cp.async ring in shared memory
  kRing3Stage,            ///< spec form 2: a 3-stage ring ("deep ring")
  kRegisters,             ///< four k tiles per trip through registers, 8 rank rows per CTA
  kRegistersOneTile,      ///< one k tile per trip (few registers, many CTAs per SM)
  kRegistersHalfBlock,    ///< kRegisters over 4 rank rows per CTA (one split)
  kRegistersQuarterBlock  ///< kRegisters over 2 rank rows per CTA (one split)
};

/// "ring2", "ring3", "registers", "registers_one_tile", "registers_half_block",
/// "registers_quarter_block".
inline const char* shrink_kind_name(ShrinkKind kind) {
  switch (kind) {
    case ShrinkKind::kRing2Stage:
      return "ring2";
    case ShrinkKind::kRing3Stage:
      return "ring3";
    case ShrinkKind::kRegisters:
      return "registers";
    case ShrinkKind::kRegistersOneTile:
      return "registers_one_tile";
    case ShrinkKind::kRegistersHalfBlock:
      return "registers_half_block";
    case ShrinkKind::kRegistersQuarterBlock:
      return "registers_quarter_block";
  }
  return "unknown";
}

/// The form number of spec §1's `shrink_launch = (form, splits)` attribute (the Python plan
/// reports it): 0 and 2 are the spec's rings, 3-6 cakemoe's register kinds in the order above.
inline int shrink_form_number(ShrinkKind kind) {
  switch (kind) {
    case ShrinkKind::kRing2Stage:
      return 0;
    case ShrinkKind::kRing3Stage:
      return 2;
    case ShrinkKind::kRegisters:
      return 3;
    case ShrinkKind::kRegistersOneTile:
      return 4;
    case ShrinkKind::kRegistersHalfBlock:
      return 5;
    case ShrinkKind::kRegistersQuarterBlock:
      return 6;
  }
  return -1;
}

/// Shrink launch of the generic Cake variant (spec §4.1): its kind and hidden splits; the bits
/// depend on splits only.
struct ShrinkLaunch {
  ShrinkKind kind = ShrinkKind::kRing2Stage;
  int splits = 1;
};

class BgmvPlan {
 public:
  class Impl;
  BgmvPlan();
  explicit BgmvPlan(std::shared_ptr<Impl> impl);

  /// Computes y_accum from scratch (spec §2 rule 4) and returns it. No allocation after prepare.
  TensorView run(Stream stream = nullptr);
  /// Waits for pending replays and releases the captured graph; a later run() recaptures.
  void close();

  const std::string& backend_used() const;  ///< "cake", "portable" or "cpu_reference"
  const std::string& variant() const;       ///< "generic" | "specialized" | "portable"
  std::optional<ShrinkLaunch> shrink_launch() const;
  bool grouped() const;
  bool order_remap() const;
  /// The grouped pipeline's expand runs on tensor cores (CUDA, ranks 32 and 64): its
  /// per-route partials equal the canonical order's within fp32 rounding, not bit for bit, so y
  /// is within 1e-5 of the CPU engine's (spec §3.2 holds grouped to that); replays stay bitwise
  /// identical. False when not grouped or on the CPU engine.
  bool grouped_mma() const;
  int pdl_mode() const;                        ///< 0 plain, 1 early, 2 late (spec §4.4)
  /// Cake generic: 0 t64, 1 t128, 2 decode; Cake specialized: 0 t64, 1 t128, 2 dual_col; portable:
  /// none.
  std::optional<int> schedule_id() const;
  const std::string& fallback_reason() const;  ///< empty unless the portable semantics were chosen
  TensorView route_index() const;              ///< int32 workspace (Cake), else undefined
  TensorView y_accum() const;
  TensorView shrink_out() const;
  TensorView x() const;

 private:
  std::shared_ptr<Impl> impl_;
};

/// x [T, H]; lora_a[s] [L, E, R, H]; lora_b[s] [L, E, F, R]; sorted_token_ids, expert_ids int64
/// [P]; lora_indices int64 [T] (-1 = no LoRA); topk_weights fp32 [P].
BgmvPlan prepare_bgmv_moe(const TensorView& x, const std::vector<TensorView>& lora_a_weights,
                          const std::vector<TensorView>& lora_b_weights,
                          const TensorView& sorted_token_ids, const TensorView& expert_ids,
                          const TensorView& lora_indices, const TensorView& topk_weights,
                          int64_t num_experts, const BgmvOptions& options = BgmvOptions());

/// Receives each fallback warning once per distinct reason per process. Default: stderr.
using WarningHook = std::function<void(const std::string& message)>;
/// Installs `hook` (nullptr restores the default) and returns the previous one.
WarningHook set_warning_hook(WarningHook hook);

}  // namespace bgmv
}  // namespace cakemoe
