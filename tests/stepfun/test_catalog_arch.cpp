// The arch a CUDA device runs (stepfun/catalog.h arch_for): native units only where this build
// has native code and the driver loads it; the compute_80 PTX everywhere else from 8.0 on.
#include <gtest/gtest.h>

#include "cakemoe/errors.h"
#include "stepfun/catalog.h"

namespace cakemoe {
namespace stepfun {
namespace {

TEST(CatalogArch, NativeCodeThatLoadsGivesTheDevicesOwnArch) {
  EXPECT_EQ(arch_for(90, true), Arch::kSm90);
  EXPECT_EQ(arch_for(100, true), Arch::kSm100);
  EXPECT_EQ(arch_for(103, true), Arch::kSm103);
}

TEST(CatalogArch, NativeCodeTheDriverDoesNotLoadFallsBackToPtx) {
  // CUDA_FORCE_PTX_JIT=1 on an H200: no sm_90a unit may be planned.
  EXPECT_EQ(arch_for(90, false), Arch::kPortable);
  EXPECT_EQ(arch_for(100, false), Arch::kPortable);
  EXPECT_EQ(arch_for(103, false), Arch::kPortable);
}

TEST(CatalogArch, OtherDevicesRunThePtxFrom80On) {
  for (int cc : {80, 86, 87, 89, 101, 110, 120, 121}) {
    EXPECT_FALSE(has_native_code(cc)) << cc;
    EXPECT_EQ(arch_for(cc, true), Arch::kPortable) << cc;
    EXPECT_EQ(arch_for(cc, false), Arch::kPortable) << cc;
  }
  EXPECT_TRUE(has_native_code(90) && has_native_code(100) && has_native_code(103));
}

TEST(CatalogArch, OlderDevicesAreRefusedByName) {
  for (int cc : {0, 52, 75}) {
    try {
      arch_for(cc, false);
      ADD_FAILURE() << "cc " << cc << " was accepted";
    } catch (const Unsupported& e) {
      EXPECT_EQ(e.argument(), "device") << e.what();
    }
  }
}

TEST(CatalogArch, PtxOnlyDevicesGetNoHopperUnits) {
  // Whatever this build holds, a portable device is never offered an sm90 unit.
  for (const KernelUnit* u : find_units(Stage::kFc1, Family::kBF16, 64, Arch::kPortable)) {
    EXPECT_NE(u->arch, Arch::kSm90) << u->name;
  }
}

}  // namespace
}  // namespace stepfun
}  // namespace cakemoe
