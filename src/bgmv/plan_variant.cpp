// Which variant a problem takes (spec bgmv §7, §9): the Cake support set (the portable path
// outside it), generic or specialized, and the specialized body's schedule; Arch and Variant names.
#include <array>
#include <string>

#include "bgmv/plan.h"
#include "bgmv/plan_limits.h"
#include "core/checked.h"

namespace cakemoe {
namespace bgmv {
namespace {

// spec §7 specialized bodies.
constexpr int64_t kSpecializedRank = 32;
constexpr int64_t kSpecializedMinTokens = 32;
constexpr int64_t kSpecializedMaxTokens = 1024;

/// Where the specialized body is chosen on SM90: tokens [min_tokens, max_tokens] and pairs
/// [min_pairs, max_pairs] (the win depends on T * k, not on T alone).
struct SpecializedWindow {
  int64_t min_tokens;
  int64_t max_tokens;
  int64_t min_pairs;
  int64_t max_pairs;
};
// SM90 windows from the measurements of bench_bgmv --specialized
// (bench/results/*_3b10a19_bgmv-specialized.md; both hidden sizes alike): specialized
// wins at decode (T <= 8, 1.03-1.29x, ahead of the fused decode path) and for T 32-512 at k 2 /
// T 16-128 at k 8 (1.05-1.23x); it loses at T 16, k 2 (P 32: 0.90x) and from P 2048 on, where
// the grouped pipeline wins (0.61-0.98x). The SM90 grouped rule is applied first (choose_variant),
// so P 1024 at T >= 128 goes grouped (its tensor-core expand beat the body).
constexpr std::array<SpecializedWindow, 2> kSm90SpecializedWindows{{
    {1, 8, 1, 1024},
    {9, 1024, 64, 1024},
}};
// SM90 schedules (same table): 256 columns from T 64 on, 64 columns below that at k >= 4,
// 128 columns otherwise.
constexpr int64_t kSm90DualColMinTokens = 64;
constexpr int64_t kSm90T64MinTopK = 4;

}  // namespace

const char* arch_name(Arch arch) {
  switch (arch) {
    case Arch::kSm90a:
      return "sm90a";
    case Arch::kSm100a:
      return "sm100a";
    case Arch::kSm103a:
      return "sm103a";
    case Arch::kOther:
      return "other";
  }
  return "other";
}

Arch arch_from_capability(int major, int minor) {
  if (major == 9 && minor == 0) return Arch::kSm90a;
  if (major == 10 && minor == 0) return Arch::kSm100a;
  if (major == 10 && minor == 3) return Arch::kSm103a;
  return Arch::kOther;
}

bool is_blackwell(Arch arch) { return arch == Arch::kSm100a || arch == Arch::kSm103a; }

const char* variant_name(Variant variant) {
  switch (variant) {
    case Variant::kGeneric:
      return "generic";
    case Variant::kSpecialized:
      return "specialized";
    case Variant::kPortable:
      return "portable";
  }
  return "portable";
}

bool is_specialized_shape(int64_t hidden, int64_t rank) {
  return (hidden == 2688 || hidden == 3072) && rank == kSpecializedRank;
}

Variant select_variant(int64_t num_tokens, int64_t num_pairs, int64_t hidden, int64_t rank,
                       Arch arch, bool specialized_built) {
  // NOTE: spec §7 (newest JIT): [32, 1024] tokens on Blackwell; SM90 by the measured windows.
  bool in_window = is_blackwell(arch) && num_tokens >= kSpecializedMinTokens &&
                   num_tokens <= kSpecializedMaxTokens;
  if (arch == Arch::kSm90a) {
    for (const SpecializedWindow& w : kSm90SpecializedWindows) {
      in_window = in_window || (num_tokens >= w.min_tokens && num_tokens <= w.max_tokens &&
                                num_pairs >= w.min_pairs && num_pairs <= w.max_pairs);
    }
  }
  return specialized_built && is_specialized_shape(hidden, rank) && in_window
             ? Variant::kSpecialized
             : Variant::kGeneric;
}

int select_specialized_schedule(int64_t num_tokens, int64_t num_pairs, int64_t hidden, Arch arch) {
  if (arch == Arch::kSm90a) {
    if (num_tokens >= kSm90DualColMinTokens) return 2;
    return num_pairs >= core::checked_mul(kSm90T64MinTopK, num_tokens, "num_tokens") ? 0 : 1;
  }
  if (num_tokens == 1 || num_tokens == 4 || num_tokens == 8) return 0;
  if (hidden == 3072 && (num_tokens == 512 || num_tokens == 1024)) return 2;
  if (hidden == 2688 && num_tokens == 1024) return 2;
  return 1;
}

CakeSupport cake_support(const SupportQuery& q) {
  const std::string prefix = "Cake BGMV MoE ";
  if (q.capability &&
      arch_from_capability(q.capability->major, q.capability->minor) == Arch::kOther) {
    return {"device", prefix +
                          "requires an exact SM90, SM100 or SM103 CUDA device; got capability=(" +
                          std::to_string(q.capability->major) + ", " +
                          std::to_string(q.capability->minor) + ")"};
  }
  if (q.capability && !q.native_code_loads) {
    return {"device", prefix +
                          "needs this build's native sm_90a / sm_100a / sm_103a code, which the "
                          "driver does not load on this device (CUDA_FORCE_PTX_JIT set?)"};
  }
  if (q.num_slices != 1) {
    return {"lora_a_weights",
            prefix + "requires exactly one LoRA slice, got " + std::to_string(q.num_slices)};
  }
  if (!is_generic_rank(q.rank)) {
    return {"lora_a_weights",
            prefix + "requires LoRA rank in (8, 16, 32, 64), got " + std::to_string(q.rank)};
  }
  if (q.hidden <= 0 || q.hidden % 8 != 0) {
    return {"x", prefix + "hidden_size must be a positive multiple of 8, got " +
                     std::to_string(q.hidden)};
  }
  if (q.feat_out != q.hidden) {
    return {"lora_b_weights", prefix + "requires LoRA-B feat_out == hidden_size, got feat_out=" +
                                  std::to_string(q.feat_out) +
                                  " for hidden_size=" + std::to_string(q.hidden)};
  }
  return {};
}

std::string fallback_warning(const std::string& reason) {
  return "prepare_bgmv_moe: falling back to the portable bgmv_moe_shrink/bgmv_moe_expand path (" +
         reason + "). Pass fallback=false to raise instead.";
}

}  // namespace bgmv
}  // namespace cakemoe
