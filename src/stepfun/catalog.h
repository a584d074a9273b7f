// The static catalog of StepFun kernel units: a plan names units from here, never anything else.
// CPU units are the reference engine; CUDA units join as their inst/*.cu files land.
#pragma once

#include <string>
#include <vector>

#include "cakemoe/stepfun.h"

namespace cakemoe {
namespace stepfun {

enum class Stage : uint8_t { kRouting, kFc1, kRequant, kFc2, kFinalize };
enum class Arch : uint8_t { kCpu, kSm90, kSm100, kSm103, kPortable };

struct KernelUnit {
  Stage stage;
  Family family;  ///< ignored for routing / requant / finalize
  int tile;       ///< 0: any tile
  Arch arch;
  std::string name;
};

/// "routing", "fc1", "requant", "fc2", "finalize": the stage names of the kernel registry.
const char* stage_name(Stage stage);
/// The dense tile ladder every family supports (spec §8 DECISION).
const std::vector<int>& tile_ladder();
/// The arch a device runs (kCpu for the CPU backend). Throws Unsupported for unknown devices.
Arch arch_of(Device device);
/// The unit for (stage, family, tile) on `arch`, or nullptr.
const KernelUnit* find_unit(Stage stage, Family family, int tile, Arch arch);

}  // namespace stepfun
}  // namespace cakemoe
