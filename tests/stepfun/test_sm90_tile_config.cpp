// The sm90 GEMM tile table and the accumulator-to-column maps its epilogues use, checked on the
// CPU against the weight layouts of spec §4.4 (formats/layouts.h).
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <tuple>

#include "formats/layouts.h"
#include "reference/stepfun/families.h"
#include "stepfun/sm90/tile_config.h"

namespace cakemoe {
namespace stepfun {
namespace sm90 {
namespace {

TEST(Sm90TileConfig, Fc1LaneFeatureMatchesTheW1RowMap) {
  const int64_t inter = 1280;
  for (int64_t block = 0; block < inter / kFc1Features; block += 7) {
    std::set<int> features;
    for (int group = 0; group < 2; ++group) {
      for (int warp = 0; warp < 4; ++warp) {
        for (int lane = 0; lane < 32; ++lane) {
          // Rows r0 (up) and r0 + 8 (gate) of the thread's 16-row accumulator group.
          const int64_t r0 = block * kBlockM + 64 * group + 16 * warp + lane / 4;
          const int f = fc1_lane_feature(group, warp, lane);
          EXPECT_EQ(formats::w1_logical_row(r0, inter), block * kFc1Features + f);
          EXPECT_EQ(formats::w1_logical_row(r0 + 8, inter), inter + block * kFc1Features + f);
          features.insert(f);
        }
      }
    }
    EXPECT_EQ(features.size(), static_cast<size_t>(kFc1Features));
  }
}

TEST(Sm90TileConfig, Fc2RowColumnMatchesTheW2RowMap) {
  std::set<int> columns;
  for (int row = 0; row < kBlockM; ++row) {
    EXPECT_EQ(3 * kBlockM + fc2_row_column(row), formats::w2_logical_row(3 * kBlockM + row));
    columns.insert(fc2_row_column(row));
  }
  EXPECT_EQ(columns.size(), static_cast<size_t>(kBlockM));
}

TEST(Sm90TileConfig, StagesFitSharedMemory) {
  for (int tile : {8, 16, 32, 64, 128, 256}) {
    EXPECT_GE(stages_for(tile), 4) << tile;
    // Two CTAs per SM share 228 KB (1 KB reserved per CTA); one CTA may take 227 KB.
    EXPECT_LE(ctas_per_sm(tile) * (smem_bytes(tile) + 1024), 228 * 1024) << tile;
    // The epilogue staging tiles reuse the stage buffers.
    EXPECT_LE(tile * kFc1StageStride * 4, stage_region_bytes(tile)) << tile;
    EXPECT_LE(tile * kFc2StageStride * 2, stage_region_bytes(tile)) << tile;
  }
}

TEST(Sm90TileConfig, UnitsCoverTheSsFamilies) {
  EXPECT_TRUE(has_sm90_unit(Family::kBF16, 256));
  EXPECT_TRUE(has_sm90_unit(Family::kFP8, 128));
  EXPECT_FALSE(has_sm90_unit(Family::kFP8, 256));
  EXPECT_FALSE(has_sm90_unit(Family::kBF16, 24));
}

// scripts/gen_stepfun_units.py keeps its own family/tile list: the generated unit files must be
// exactly the (stage, family, tile) triples has_sm90_unit admits, or the planner would name a
// unit that was never built (or leave a built one unused).
TEST(Sm90TileConfig, GeneratedUnitFilesAreTheAdmittedTriples) {
  using Triple = std::tuple<std::string, std::string, int>;
  std::set<Triple> admitted;
  for (Family family : kAllFamilies) {
    for (int tile = 1; tile <= 512; ++tile) {
      if (!has_sm90_unit(family, tile)) continue;
      for (const char* stage : {"fc1", "fc2"}) admitted.insert({stage, family_name(family), tile});
    }
  }
  std::set<Triple> files;
  const std::filesystem::path inst = std::filesystem::path(CAKEMOE_SOURCE_DIR) / "src/stepfun/inst";
  ASSERT_TRUE(std::filesystem::is_directory(inst)) << inst;
  for (const auto& entry : std::filesystem::directory_iterator(inst)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("sm90_", 0) != 0) continue;
    // sm90_<stage>_<family>_t<tile>.cu; family names may hold '_' (nvfp4_bf16tok).
    const size_t stage_end = name.find('_', 5);
    const size_t tile_at = name.rfind("_t");
    ASSERT_NE(stage_end, std::string::npos) << name;
    ASSERT_NE(tile_at, std::string::npos) << name;
    ASSERT_EQ(name.substr(name.size() - 3), ".cu") << name;
    files.insert({name.substr(5, stage_end - 5),
                  name.substr(stage_end + 1, tile_at - stage_end - 1),
                  std::stoi(name.substr(tile_at + 2, name.size() - 3 - tile_at - 2))});
  }
  EXPECT_EQ(files, admitted);
  EXPECT_FALSE(admitted.empty());
}

}  // namespace
}  // namespace sm90
}  // namespace stepfun
}  // namespace cakemoe

namespace cakemoe {
namespace stepfun {
namespace sm90 {
namespace {

TEST(Sm90TileConfig, PreferredTileFollowsTheMeasuredTable) {
  EXPECT_EQ(preferred_tile(1), 8);  // decode: T 8, E 64
  EXPECT_EQ(preferred_tile(4), 8);
  EXPECT_EQ(preferred_tile(8), 16);    // T 64, E 64
  EXPECT_EQ(preferred_tile(14), 32);   // Step-3.5 T 512
  EXPECT_EQ(preferred_tile(64), 64);   // T 512, E 64
  EXPECT_EQ(preferred_tile(256), 64);  // T 2048, E 64
  EXPECT_EQ(preferred_tile(int64_t(1) << 40), 64);
  for (int64_t avg = 0; avg < 600; ++avg)
    EXPECT_TRUE(has_sm90_unit(Family::kFP8, preferred_tile(avg)));
}

}  // namespace
}  // namespace sm90
}  // namespace stepfun
}  // namespace cakemoe
