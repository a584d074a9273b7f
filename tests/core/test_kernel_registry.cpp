// The kernel catalog's compute_80 PTX bookkeeping (CAKEMOE_PORTABLE_PTX,
// cmake/cakemoe_kernels.cmake): the units that carry PTX must be exactly the ones the planners hand
// to devices without native code (every portable StepFun unit, the BGMV portable pair), judged by
// the catalog's own fields rather than by the file-name pattern CMake uses.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "core/kernel_registry.h"
#include "reference/stepfun/families.h"
#include "stepfun/catalog.h"
#include "stepfun/sm90/tile_config.h"

namespace cakemoe {
namespace {

bool runs_on_other_devices(const core::KernelUnit& u) {
  // The sm90 wgmma units are Hopper-only (sm_90a SASS); every other StepFun unit is portable.
  if (std::strcmp(u.pipeline, "stepfun") == 0) return std::strcmp(u.arch, "sm90a") != 0;
  return std::strcmp(u.pipeline, "bgmv") == 0 && std::strncmp(u.stage, "portable_", 9) == 0;
}

bool build_has_ptx() {
  for (const core::KernelUnit* u : core::kernel_units()) {
    if (core::kernel_unit_has_ptx(*u)) return true;
  }
  return false;
}

TEST(KernelRegistry, PtxUnitsAreTheOnesOtherDevicesRun) {
  if (core::kernel_units().empty()) GTEST_SKIP() << "no CUDA kernel units in this build";
  if (!build_has_ptx()) GTEST_SKIP() << "built with CAKEMOE_PORTABLE_PTX=OFF";
  int with_ptx = 0;
  for (const core::KernelUnit* u : core::kernel_units()) {
    EXPECT_EQ(core::kernel_unit_has_ptx(*u), runs_on_other_devices(*u)) << u->name;
    with_ptx += core::kernel_unit_has_ptx(*u) ? 1 : 0;
  }
  EXPECT_GE(with_ptx, 2) << "at least the BGMV portable pair";
}

// StepFun's planner finds a unit for a device without native code (Arch::kPortable) exactly where
// it finds one for SM90 (every portable StepFun unit carries PTX in such a build); where SM90
// prefers a Hopper-only unit, the portable one is its last choice.
TEST(KernelRegistry, StepFunPortableArchFindsTheSm90Units) {
  if (core::kernel_units().empty()) GTEST_SKIP() << "no CUDA kernel units in this build";
  if (!build_has_ptx()) GTEST_SKIP() << "built with CAKEMOE_PORTABLE_PTX=OFF";
  using stepfun::Arch;
  using stepfun::Stage;
  int found = 0;
  for (const Stage stage :
       {Stage::kRouting, Stage::kFc1, Stage::kRequant, Stage::kFc2, Stage::kFinalize}) {
    for (const stepfun::Family family : stepfun::kAllFamilies) {
      for (const int tile : stepfun::tile_ladder()) {
        const stepfun::KernelUnit* sm90 = stepfun::find_unit(stage, family, tile, Arch::kSm90);
        const stepfun::KernelUnit* other = stepfun::find_unit(stage, family, tile, Arch::kPortable);
        EXPECT_EQ(sm90 != nullptr, other != nullptr)
            << stepfun::stage_name(stage) << " " << stepfun::family_name(family) << " " << tile;
        if (sm90 != nullptr && other != nullptr) {
          if (sm90->arch == Arch::kSm90) {
            EXPECT_EQ(sm90->name.rfind("sm90_", 0), 0u) << sm90->name;
            // The tile's measured sm90 unit, the other sm90 units, the portable one last.
            const auto all = stepfun::find_units(stage, family, tile, Arch::kSm90);
            ASSERT_GE(all.size(), 2u) << sm90->name;
            if (stage == Stage::kFc1 || stage == Stage::kFc2) {
              EXPECT_EQ(all.front()->variant,
                        stepfun::sm90::sm90_variant_name(
                            stepfun::sm90::sm90_tile_variant(family, tile)))
                  << all.front()->name;
            }
            for (size_t i = 0; i + 1 < all.size(); ++i) {
              EXPECT_EQ(all[i]->arch, Arch::kSm90) << all[i]->name;
            }
            EXPECT_EQ(all.back()->name, other->name);
          } else {
            EXPECT_EQ(sm90->name, other->name);
          }
          EXPECT_EQ(other->arch, Arch::kPortable);
          ++found;
        }
      }
    }
  }
  EXPECT_GT(found, 0);
}

}  // namespace
}  // namespace cakemoe
