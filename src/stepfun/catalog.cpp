#include "stepfun/catalog.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "cakemoe/errors.h"
#include "core/cuda_util.h"
#include "core/kernel_registry.h"
#include "reference/stepfun/families.h"
#include "stepfun/sm90/tile_config.h"

namespace cakemoe {
namespace stepfun {
namespace {

std::vector<KernelUnit> build_cpu_units() {
  std::vector<KernelUnit> units;
  units.push_back({Stage::kRouting, Family::kBF16, 0, Arch::kCpu, "cpu_routing", ""});
  units.push_back({Stage::kRequant, Family::kNVFP4BF16Tok, 0, Arch::kCpu, "cpu_requant_nvfp4", ""});
  units.push_back({Stage::kFinalize, Family::kBF16, 0, Arch::kCpu, "cpu_finalize", ""});
  for (Family f : kAllFamilies) {
    for (int tile : tile_ladder()) {
      const std::string suffix = std::string(family_name(f)) + "_t" + std::to_string(tile);
      units.push_back({Stage::kFc1, f, tile, Arch::kCpu, "cpu_fc1_" + suffix, ""});
      units.push_back({Stage::kFc2, f, tile, Arch::kCpu, "cpu_fc2_" + suffix, ""});
    }
  }
  return units;
}

bool stage_has_family(Stage stage) { return stage == Stage::kFc1 || stage == Stage::kFc2; }

}  // namespace

const std::vector<int>& tile_ladder() {
  static const std::vector<int> ladder = {8, 16, 32, 64, 128, 256};
  return ladder;
}

const char* stage_name(Stage stage) {
  switch (stage) {
    case Stage::kRouting:
      return "routing";
    case Stage::kFc1:
      return "fc1";
    case Stage::kRequant:
      return "requant";
    case Stage::kFc2:
      return "fc2";
    case Stage::kFinalize:
      return "finalize";
  }
  return "?";
}

bool has_native_code(int compute_capability) {
  return compute_capability == 90 || compute_capability == 100 || compute_capability == 103;
}

Arch arch_for(int compute_capability, bool native_code_loads) {
  const int cc = compute_capability;
  // NOTE: a device whose native code this build has but whose driver does not load it (a forced
  // PTX JIT) runs the compute_80 PTX like any other device.
  if (has_native_code(cc) && native_code_loads) {
    return cc == 90 ? Arch::kSm90 : cc == 100 ? Arch::kSm100 : Arch::kSm103;
  }
  if (cc >= 80) return Arch::kPortable;
  throw Unsupported("device", "cakemoe needs a CUDA device of compute capability >= 8.0, got " +
                                  std::to_string(cc / 10) + "." + std::to_string(cc % 10));
}

Arch arch_of(Device device) {
  if (device.type == DeviceType::kCPU) return Arch::kCpu;
  const int cc = core::cuda_capability(device.index);
  return arch_for(cc, core::cuda_native_code_loads(device.index));
}

namespace {

const std::vector<KernelUnit>& cpu_units() {
  static const std::vector<KernelUnit> cpu = build_cpu_units();
  return cpu;
}

/// A registry unit's variant: its registry variant is the family name, or "family:variant" for a
/// stage's further units.
std::string variant_of(const core::KernelUnit& u) {
  const std::string registry_variant = u.variant;
  const size_t colon = registry_variant.find(':');
  return colon == std::string::npos ? std::string() : registry_variant.substr(colon + 1);
}

/// The catalog entry of a registry unit, cached so plans can hand out stable pointers.
const KernelUnit* wrap(const core::KernelUnit* u, Stage stage, Family family) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<KernelUnit>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = cache[u->name];
  if (!slot) {
    const Arch own = std::string(u->arch) == "sm90a" ? Arch::kSm90 : Arch::kPortable;
    slot = std::make_unique<KernelUnit>(
        KernelUnit{stage, family, u->size, own, u->name, variant_of(*u)});
  }
  return slot.get();
}

bool serves(const KernelUnit& u, Stage stage, Family family, int tile) {
  if (u.stage != stage) return false;
  return !stage_has_family(stage) || (u.family == family && (u.tile == 0 || u.tile == tile));
}

}  // namespace

std::vector<const KernelUnit*> find_units(Stage stage, Family family, int tile, Arch arch) {
  std::vector<const KernelUnit*> out;
  if (arch == Arch::kCpu) {
    for (const KernelUnit& u : cpu_units()) {
      if (serves(u, stage, family, tile)) {
        out.push_back(&u);
        break;
      }
    }
    return out;
  }
  const std::string variant = stage_has_family(stage) ? family_name(family) : "";
  // NOTE: SM90 runs its Hopper-only units and the portable ones; devices without native code in
  // this build run a unit only from its compute_80 PTX.
  if (arch == Arch::kSm90) {
    const core::KernelUnit* u =
        core::find_kernel_unit("stepfun", stage_name(stage), variant, tile, true);
    if (u && std::string(u->arch) == "sm90a") out.push_back(wrap(u, stage, family));
    if (stage_has_family(stage)) {
      // The stage's variant units ("<family>:<variant>", this exact tile), by name.
      std::vector<const core::KernelUnit*> variants;
      for (const core::KernelUnit* v : core::kernel_units()) {
        if (std::string(v->pipeline) == "stepfun" && stage_name(stage) == std::string(v->stage) &&
            std::string(v->variant).rfind(variant + ":", 0) == 0 && v->size == tile &&
            std::string(v->arch) == "sm90a") {
          variants.push_back(v);
        }
      }
      std::sort(variants.begin(), variants.end(),
                [](const core::KernelUnit* a, const core::KernelUnit* b) {
                  return std::string(a->name) < std::string(b->name);
                });
      for (const core::KernelUnit* v : variants) out.push_back(wrap(v, stage, family));
      // The tile's measured units first (sm90/tile_config.h sm90_tile_variant).
      const std::string preferred =
          sm90::sm90_variant_name(sm90::sm90_tile_variant(family, tile));
      std::stable_partition(out.begin(), out.end(),
                            [&](const KernelUnit* k) { return k->variant == preferred; });
    }
  }
  const core::KernelUnit* p =
      core::find_kernel_unit("stepfun", stage_name(stage), variant, tile, false);
  if (p && !(arch == Arch::kPortable && !core::kernel_unit_has_ptx(*p))) {
    out.push_back(wrap(p, stage, family));
  }
  return out;
}

const KernelUnit* find_unit(Stage stage, Family family, int tile, Arch arch) {
  const std::vector<const KernelUnit*> units = find_units(stage, family, tile, arch);
  return units.empty() ? nullptr : units.front();
}

bool unit_takes_shape(const KernelUnit& unit, Family family, int64_t hidden) {
  return unit.arch != Arch::kSm90 || sm90::sm90_supports_shape(family, hidden);
}

const KernelUnit* preferred_unit(Stage stage, Family family, int tile, Arch arch,
                                 int64_t hidden) {
  for (const KernelUnit* u : find_units(stage, family, tile, arch)) {
    if (unit_takes_shape(*u, family, hidden)) return u;
  }
  return nullptr;
}

const KernelUnit* find_unit_named(const std::string& name, Stage stage, Family family, int tile,
                                  Arch arch) {
  for (const KernelUnit* u : find_units(stage, family, tile, arch)) {
    if (u->name == name) return u;
  }
  return nullptr;
}

std::string unit_variant(const std::string& name) {
  const core::KernelUnit* u = core::find_kernel_unit_by_name(name);
  return u == nullptr ? std::string() : variant_of(*u);
}

const char* path_name(Arch unit_arch) {
  switch (unit_arch) {
    case Arch::kCpu:
      return "cpu";
    case Arch::kSm90:
      return "sm90";
    default:
      return "simt";
  }
}

}  // namespace stepfun
}  // namespace cakemoe
