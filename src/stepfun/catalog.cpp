#include "stepfun/catalog.h"

#include "cakemoe/errors.h"

namespace cakemoe {
namespace stepfun {
namespace {

const Family kFamilies[] = {Family::kBF16, Family::kFP8, Family::kMXFP8, Family::kNVFP4,
                            Family::kNVFP4BF16Tok};

std::vector<KernelUnit> build_cpu_units() {
  std::vector<KernelUnit> units;
  units.push_back({Stage::kRouting, Family::kBF16, 0, Arch::kCpu, "cpu_routing"});
  units.push_back({Stage::kRequant, Family::kNVFP4BF16Tok, 0, Arch::kCpu, "cpu_requant_nvfp4"});
  units.push_back({Stage::kFinalize, Family::kBF16, 0, Arch::kCpu, "cpu_finalize"});
  for (Family f : kFamilies) {
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

std::vector<KernelUnit> catalog_units(Arch arch) {
  static const std::vector<KernelUnit> cpu = build_cpu_units();
  // TODO(issue #3): CUDA units (routing, fc1/fc2 per family and tile, requant, finalize).
  if (arch == Arch::kCpu) return cpu;
  return {};
}

Arch arch_of(Device device) {
  if (device.type == DeviceType::kCPU) return Arch::kCpu;
  // TODO(issue #3): query the compute capability (9.0 -> kSm90, 10.0 -> kSm100, 10.3 -> kSm103).
  return Arch::kPortable;
}

const KernelUnit* find_unit(Stage stage, Family family, int tile, Arch arch) {
  static const std::vector<KernelUnit> cpu = catalog_units(Arch::kCpu);
  if (arch != Arch::kCpu) return nullptr;
  for (const KernelUnit& u : cpu) {
    if (u.stage != stage) continue;
    if (stage_has_family(stage) && (u.family != family || u.tile != tile)) continue;
    return &u;
  }
  return nullptr;
}

}  // namespace stepfun
}  // namespace cakemoe
