#include "stepfun/catalog.h"

#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "cakemoe/errors.h"
#include "core/cuda_util.h"
#include "core/kernel_registry.h"
#include "stepfun/families.h"

namespace cakemoe {
namespace stepfun {
namespace {

std::vector<KernelUnit> build_cpu_units() {
  std::vector<KernelUnit> units;
  units.push_back({Stage::kRouting, Family::kBF16, 0, Arch::kCpu, "cpu_routing"});
  units.push_back({Stage::kRequant, Family::kNVFP4BF16Tok, 0, Arch::kCpu, "cpu_requant_nvfp4"});
  units.push_back({Stage::kFinalize, Family::kBF16, 0, Arch::kCpu, "cpu_finalize"});
  for (Family f : kAllFamilies) {
    for (int tile : tile_ladder()) {
      const std::string suffix = std::string(family_name(f)) + "_t" + std::to_string(tile);
      units.push_back({Stage::kFc1, f, tile, Arch::kCpu, "cpu_fc1_" + suffix});
      units.push_back({Stage::kFc2, f, tile, Arch::kCpu, "cpu_fc2_" + suffix});
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

Arch arch_of(Device device) {
  if (device.type == DeviceType::kCPU) return Arch::kCpu;
  const int cc = core::cuda_capability(device.index);
  if (cc == 90) return Arch::kSm90;
  if (cc == 100) return Arch::kSm100;
  if (cc == 103) return Arch::kSm103;
  if (cc >= 80) return Arch::kPortable;
  throw Unsupported("device", "cakemoe needs a CUDA device of compute capability >= 8.0, got " +
                                  std::to_string(cc / 10) + "." + std::to_string(cc % 10));
}

const KernelUnit* find_unit(Stage stage, Family family, int tile, Arch arch) {
  if (arch == Arch::kCpu) {
    static const std::vector<KernelUnit> cpu = build_cpu_units();
    for (const KernelUnit& u : cpu) {
      if (u.stage != stage) continue;
      if (stage_has_family(stage) && (u.family != family || u.tile != tile)) continue;
      return &u;
    }
    return nullptr;
  }
  // CUDA: the compiled units of the registry. Portable units run on every arch >= 8.0 that the
  // build targets; Hopper-only units on SM90 alone.
  // NOTE: units are cached per (stage, family, tile, arch) so plan() can hand out stable pointers.
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int, int>, std::unique_ptr<KernelUnit>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = cache[{int(stage), int(family), tile, int(arch)}];
  if (!slot) {
    const core::KernelUnit* u = core::find_kernel_unit(
        "stepfun", stage_name(stage), stage_has_family(stage) ? family_name(family) : "", tile,
        arch == Arch::kSm90);
    if (!u) return nullptr;
    // Devices without native code in this build run a unit only from its compute_80 PTX.
    if (arch == Arch::kPortable && !core::kernel_unit_has_ptx(*u)) return nullptr;
    slot = std::make_unique<KernelUnit>(KernelUnit{stage, family, tile, arch, u->name});
  }
  return slot.get();
}

}  // namespace stepfun
}  // namespace cakemoe
