// The static catalog of StepFun kernel units: a plan names units from here, never anything else.
// CPU units are the reference engine; CUDA units join as their inst/*.cu files land.
#pragma once

#include <cstdint>
#include <optional>
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
  Arch arch;      ///< the unit's own: kCpu, kSm90 (Hopper-only units) or kPortable
  std::string name;
  /// "" for a stage's main unit; for the sm90 variant units listed after it (by name): "e4m3"
  /// (mxfp8 on e4m3 wgmma, tile_config.h has_sm90_e4m3_unit), "g8" (raster groups of 8 tiles,
  /// has_sm90_group_unit). A plan pairs units of one variant.
  std::string variant;
};

/// "routing", "fc1", "requant", "fc2", "finalize": the stage names of the kernel registry.
const char* stage_name(Stage stage);
/// The dense tile ladder every family supports (spec §8 DECISION).
const std::vector<int>& tile_ladder();
/// True for the compute capabilities this build carries native code for (9.0, 10.0, 10.3).
bool has_native_code(int compute_capability);
/// The arch a CUDA device of `compute_capability` runs: its own when it has native code in this
/// build and the driver loads it, else kPortable (the compute_80 PTX) from 8.0 on. Throws
/// Unsupported below 8.0.
Arch arch_for(int compute_capability, bool native_code_loads);
/// The arch a device runs (kCpu for the CPU backend; CUDA devices through arch_for with a probe
/// of the native code). Throws Unsupported for unknown devices.
Arch arch_of(Device device);
/// The unit for (stage, family, tile) on `arch`, or nullptr: the preferred one (on SM90 the
/// tile's measured Hopper unit, sm90/tile_config.h sm90_tile_variant, before the portable one).
const KernelUnit* find_unit(Stage stage, Family family, int tile, Arch arch);
/// Every unit for (stage, family, tile) that `arch` runs, preferred first; on SM90 the tile's
/// measured sm90 unit, the other sm90 units (main, variants by name), the portable one last.
std::vector<const KernelUnit*> find_units(Stage stage, Family family, int tile, Arch arch);
/// The unit named `name` if it serves (stage, family, tile) and `arch` runs it, else nullptr.
const KernelUnit* find_unit_named(const std::string& name, Stage stage, Family family, int tile,
                                  Arch arch);
/// Whether `unit` takes a problem of hidden size `hidden` beyond its (stage, family, tile): the
/// sm90 units' shape rule (sm90/tile_config.h sm90_supports_shape); every other unit takes all.
bool unit_takes_shape(const KernelUnit& unit, Family family, int64_t hidden);
/// The first of find_units that takes a problem of hidden size `hidden` (unit_takes_shape): the
/// unit a stage runs when no plan names one. nullptr when none does.
const KernelUnit* preferred_unit(Stage stage, Family family, int tile, Arch arch, int64_t hidden);
/// The sm90 plan of `problem` at `tile` on the units of `variant` ("" the main units), offered by
/// plans_for or not (tile_config.h sm90_variant_offered): how benches and tests reach a variant
/// not yet among the candidates. nullopt when those units do not exist or take the shape.
std::optional<Plan> sm90_variant_plan(const ProblemDesc& problem, int tile,
                                      const std::string& variant);
/// The variant of the kernel unit named `name` (KernelUnit::variant): "" for a stage's main unit,
/// a CPU unit or an unknown name.
std::string unit_variant(const std::string& name);
/// "sm90" (Hopper tensor-core units), "simt" (portable units), "cpu" (reference engine).
const char* path_name(Arch unit_arch);

}  // namespace stepfun
}  // namespace cakemoe
