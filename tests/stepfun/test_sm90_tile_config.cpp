// The sm90 GEMM tile table and the accumulator-to-column maps its epilogues use, checked on the
// CPU against the weight layouts of spec §4.4 (formats/layouts.h).
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <tuple>
#include <utility>

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

TEST(Sm90TileConfig, UnitsCoverTheSsAndNvfp4Families) {
  EXPECT_TRUE(has_sm90_unit(Family::kBF16, 256));
  EXPECT_TRUE(has_sm90_unit(Family::kFP8, 128));
  EXPECT_FALSE(has_sm90_unit(Family::kFP8, 256));
  EXPECT_FALSE(has_sm90_unit(Family::kBF16, 24));
  for (Family f : {Family::kNVFP4, Family::kNVFP4BF16Tok, Family::kMXFP8}) {
    EXPECT_TRUE(is_dequant_family(f));
    for (int tile : {8, 16, 32, 64}) EXPECT_TRUE(has_sm90_unit(f, tile)) << tile;
    EXPECT_FALSE(has_sm90_unit(f, 128));
  }
  EXPECT_TRUE(has_sm90_unit(Family::kMXFP8, 64));
  EXPECT_FALSE(has_sm90_unit(Family::kMXFP8, 128));
  EXPECT_TRUE(is_dequant_family(Family::kMXFP8));
  EXPECT_TRUE(sm90_supports_shape(Family::kMXFP8, 4096));
  EXPECT_FALSE(sm90_supports_shape(Family::kMXFP8, 192));  // H / 32 = 6: unaligned scale pieces
  EXPECT_TRUE(sm90_supports_shape(Family::kNVFP4, 192));
  EXPECT_FALSE(is_dequant_family(Family::kBF16));
}

TEST(Sm90TileConfig, DequantStagesFitSharedMemory) {
  for (Family f : {Family::kNVFP4, Family::kNVFP4BF16Tok, Family::kMXFP8}) {
    for (int tile : {8, 16, 32, 64}) {
      // mxfp8 at tile 64: a 33 KB stage (16 KB e4m3 weights, 16 KB bf16 tokens) leaves room for
      // two next to the ring.
      EXPECT_GE(dq_stages_for(f, tile), f == Family::kMXFP8 && tile == 64 ? 2 : 3) << tile;
      EXPECT_LE(2 * (dq_smem_bytes(f, tile) + 1024), 228 * 1024) << tile;
      EXPECT_LE(tile * kFc1StageStride * 4, dq_stage_region_bytes(f, tile)) << tile;
      EXPECT_LE(tile * kFc2StageStride * 2, dq_stage_region_bytes(f, tile)) << tile;
      // The token atoms of a stage stay on the 1024-byte swizzle atom, and so do the weights'
      // (mxfp8's are 128-byte swizzled).
      EXPECT_EQ(tile * kRowBytes % 1024, 0) << tile;
      EXPECT_EQ(kBlockM * dq_raw_row_bytes(f) % 1024, 0);
    }
  }
  EXPECT_EQ(dq_weight_scale_bytes(Family::kNVFP4), 1024);
  EXPECT_EQ(dq_weight_scale_bytes(Family::kMXFP8), 512);
  EXPECT_EQ(dq_token_scale_bytes(Family::kNVFP4), 8);
  EXPECT_EQ(dq_token_scale_bytes(Family::kMXFP8), 4);
}

// Every (tile < max_ctas, weight block) gets exactly one CTA of the grid, in any raster group;
// group 1 is weight block fastest.
TEST(Sm90TileConfig, CtaOrderCoversEveryTileAndBlockOnce) {
  for (int group : {1, 2, kRasterGroup}) {
    for (int64_t max_ctas : {1, 7, 8, 9, 61}) {
      for (int32_t m_blocks : {1, 3, 24}) {
        std::set<std::pair<int64_t, int32_t>> seen;
        const int64_t ctas = grid_ctas(max_ctas, m_blocks, group);
        EXPECT_LT(ctas, (max_ctas + group) * m_blocks);
        for (int64_t id = 0; id < ctas; ++id) {
          const CtaCoord c = cta_coord(id, m_blocks, group);
          ASSERT_GE(c.m_block, 0);
          ASSERT_LT(c.m_block, m_blocks);
          if (c.tile < max_ctas) EXPECT_TRUE(seen.insert({c.tile, c.m_block}).second);
        }
        EXPECT_EQ(seen.size(), static_cast<size_t>(max_ctas * m_blocks));
      }
    }
  }
  EXPECT_EQ(cta_coord(5, 24, 1).tile, 0);
  EXPECT_EQ(cta_coord(5, 24, 1).m_block, 5);
  EXPECT_EQ(cta_coord(24, 24, 1).tile, 1);
  // Group 8: the group's 8 tiles first take weight block 0, then block 1.
  EXPECT_EQ(cta_coord(7, 24, 8).tile, 7);
  EXPECT_EQ(cta_coord(7, 24, 8).m_block, 0);
  EXPECT_EQ(cta_coord(8, 24, 8).tile, 0);
  EXPECT_EQ(cta_coord(8, 24, 8).m_block, 1);
  EXPECT_EQ(cta_coord(8 * 24, 24, 8).tile, 8);
  EXPECT_EQ(grid_ctas(61, 24, 8), 64 * 24);  // whole groups
  EXPECT_TRUE(has_sm90_group_unit(Family::kBF16, 64));
  EXPECT_TRUE(has_sm90_group_unit(Family::kFP8, 64));
  EXPECT_FALSE(has_sm90_group_unit(Family::kBF16, 32));
  EXPECT_FALSE(has_sm90_group_unit(Family::kNVFP4, 64));
}

// The default-plan table names only units that exist: its tile has an sm90 unit of the family,
// and a variant entry a unit of that variant.
TEST(Sm90TileConfig, DefaultChoiceNamesBuiltUnits) {
  for (Family f : kAllFamilies) {
    for (int64_t avg : {1, 2, 3, 5, 8, 16, 31, 64, 100, 1000, 100000}) {
      const Sm90Choice c = sm90_choice(f, avg);
      EXPECT_TRUE(has_sm90_unit(f, c.tile)) << family_name(f) << " " << avg;
      EXPECT_EQ(c.tile, preferred_tile(avg));
      switch (c.variant) {
        case Sm90Variant::kMain:
          break;
        case Sm90Variant::kE4m3:
          EXPECT_TRUE(has_sm90_e4m3_unit(f, c.tile));
          break;
        case Sm90Variant::kG8:
          EXPECT_TRUE(has_sm90_group_unit(f, c.tile));
          break;
      }
    }
  }
  EXPECT_STREQ(sm90_variant_name(Sm90Variant::kMain), "");
  EXPECT_STREQ(sm90_variant_name(Sm90Variant::kE4m3), "e4m3");
  EXPECT_STREQ(sm90_variant_name(Sm90Variant::kG8), "g8");
}

// The persistent variant: bf16 / fp8 tiles 8..128; ctas_per_sm CTAs per SM with the staging tile
// beside at least four stages.
TEST(Sm90TileConfig, PersistentVariantIsSsAndFitsItsCtasPerSm) {
  for (Family f : kAllFamilies) {
    for (int tile : {8, 16, 32, 64, 128, 256}) {
      const bool ss = f == Family::kBF16 || f == Family::kFP8;
      EXPECT_EQ(has_sm90_persistent_unit(f, tile), ss && tile <= 128) << family_name(f) << tile;
      if (!has_sm90_persistent_unit(f, tile)) continue;
      EXPECT_GE(p_stages_for(tile), tile == 64 ? 3 : 4) << tile;  // 64: 3 x 24 KB beside 17 KB
      EXPECT_LE(ctas_per_sm(tile) * (p_smem_bytes(tile) + 1024), 228 * 1024) << tile;
      EXPECT_EQ(p_group(tile), tile >= 64 ? kRasterGroup : 1);
      EXPECT_GE(p_staging_bytes(tile), tile * kFc2StageStride * 2);
    }
  }
  EXPECT_EQ(p_stages_for(8), 6);
  EXPECT_STREQ(sm90_variant_name(Sm90Variant::kPersistent), "p");
}

// The persistent walk (gemm_persistent.cuh): CTA b of `grid` takes ids b, b + grid, ... below
// grid_ctas(live tiles, m_blocks, p_group(tile)); together they cover every (live tile, weight
// block) exactly once, whatever the grid, and no id names a tile past the live ones as work.
TEST(Sm90TileConfig, PersistentWalkCoversEveryLiveItemOnce) {
  for (int tile : {8, 64, 128}) {
    const int group = p_group(tile);
    for (int32_t m_blocks : {1, 3, 24}) {
      for (int64_t live : {1, 7, 8, 61}) {
        for (int64_t grid : {1, 5, 132, 264, 10000}) {
          const int64_t items = grid_ctas(live, m_blocks, group);
          std::set<std::pair<int64_t, int32_t>> seen;
          for (int64_t b = 0; b < grid && b < items; ++b) {
            for (int64_t id = b; id < items; id += grid) {
              const CtaCoord c = cta_coord(id, m_blocks, group);
              if (c.tile >= live) continue;  // tile_work_at: no work
              EXPECT_TRUE(seen.insert({c.tile, c.m_block}).second) << id;
            }
          }
          EXPECT_EQ(seen.size(), static_cast<size_t>(live * m_blocks))
              << tile << " " << m_blocks << " " << live << " " << grid;
        }
      }
    }
  }
}

// plans_for (and so autotune) offers the measured variants only; the default plan's units are
// always among them.
TEST(Sm90TileConfig, OfferedVariantsAreTheMeasuredOnes) {
  EXPECT_TRUE(sm90_variant_offered(""));
  EXPECT_TRUE(sm90_variant_offered("e4m3"));
  EXPECT_TRUE(sm90_variant_offered("g8"));
  EXPECT_FALSE(sm90_variant_offered("p"));
  for (Family f : kAllFamilies) {
    for (int tile : {8, 16, 32, 64, 128, 256}) {
      EXPECT_TRUE(sm90_variant_offered(sm90_variant_name(sm90_tile_variant(f, tile))))
          << family_name(f) << " " << tile;
    }
  }
}

TEST(Sm90TileConfig, E4m3VariantIsMxfp8DecodeAndFitsSharedMemory) {
  for (Family f : kAllFamilies) {
    for (int tile : {8, 16, 32, 64, 128, 256}) {
      EXPECT_EQ(has_sm90_e4m3_unit(f, tile), f == Family::kMXFP8 && tile == 8) << tile;
    }
  }
  const int tile = 8;
  EXPECT_GE(mx_stages_for(tile), 4);
  EXPECT_LE(2 * (mx_smem_bytes(tile) + 1024), 228 * 1024);
  // The epilogue staging tiles reuse the weight and token stage buffers at the base.
  const int region = mx_stages_for(tile) * (a_stage_bytes() + b_stage_bytes(tile));
  EXPECT_LE(tile * kFc1StageStride * 4, region);
  EXPECT_LE(tile * kFc2StageStride * 2, region);
  // A row's 4 block scales of a stage are one aligned 4-byte word of the 128x4 group.
  for (int r = 0; r < kBlockM; ++r) {
    const int at = dq_weight_scale_offset(Family::kMXFP8, r, 0);
    EXPECT_EQ(at % 4, 0) << r;
    for (int b = 0; b < 4; ++b) EXPECT_EQ(dq_weight_scale_offset(Family::kMXFP8, r, b), at + b);
  }
}

// The consumers' reads of a stage's raw weights and scales, against the layouts the TMA box and
// the bulk copy of 128x4 groups produce: stage k of a 128-row block holds 128 K elements, i.e.
// the block's 128x4 groups [k * G, (k + 1) * G) back to back (G = 2 for nvfp4, 1 for mxfp8).
TEST(Sm90TileConfig, DequantConsumerOffsetsMatchTheLayouts) {
  for (Family f : {Family::kNVFP4, Family::kMXFP8}) {
    const int per_block = dq_block_elems(f);
    const int64_t kblocks = 4096 / per_block;  // K 4096
    for (int k : {0, 3}) {
      for (int r = 0; r < kBlockM; ++r) {
        for (int q = 0; q < 4; ++q) {
          const int block = 32 * q / per_block;  // first block of elements [32q, 32q + 32)
          const int64_t stage_base =
              formats::sf_offset_128x4(0, int64_t(k) * 128 / per_block, kblocks);
          const int64_t want =
              formats::sf_offset_128x4(r, int64_t(k) * 128 / per_block + block, kblocks) -
              stage_base;
          EXPECT_EQ(dq_weight_scale_offset(f, r, q), want) << r << " " << q;
          EXPECT_LT(dq_weight_scale_offset(f, r, q), dq_weight_scale_bytes(f));
        }
      }
    }
    // Chunks: a row's chunks are distinct and inside the row; in the 128-byte swizzle the 8 rows
    // a warp reads for one chunk land on 8 different 16-byte bank groups.
    const int chunks = dq_raw_row_bytes(f) / 16;
    for (int r = 0; r < kBlockM; ++r) {
      std::set<int> seen;
      for (int c = 0; c < chunks; ++c) {
        const int off = dq_weight_chunk_offset(f, r, c);
        EXPECT_GE(off, r * dq_raw_row_bytes(f));
        EXPECT_LT(off, (r + 1) * dq_raw_row_bytes(f));
        seen.insert(off);
      }
      EXPECT_EQ(seen.size(), static_cast<size_t>(chunks));
    }
    if (!dq_fp4(f)) {
      for (int c = 0; c < 8; ++c) {
        std::set<int> banks;
        for (int r = 0; r < 8; ++r) banks.insert(dq_weight_chunk_offset(f, r, c) % 128 / 16);
        EXPECT_EQ(banks.size(), 8u) << c;
      }
    }
  }
}

// Each consumer thread (lane quad q) decodes K elements [32q, 32q + 32) of a stage; word j
// (elements 32q + 8j + i) becomes pairs (i, i + 4), and pair t feeds k16 step 2j + t / 2 at
// A-fragment k 2q (t even) or 2q + 8 (t odd) (PTX ISA wgmma m64nNk16 register A fragment).
// dq_logical_k must place the tokens exactly there, and be a permutation of 0..127.
TEST(Sm90TileConfig, DequantKOrderMatchesTheAFragment) {
  std::set<int> seen;
  for (int q = 0; q < 4; ++q) {
    for (int j = 0; j < 4; ++j) {
      for (int i = 0; i < 8; ++i) {
        const int p = 32 * q + 8 * j + i, t = i % 4;
        const int step = 2 * j + t / 2;
        const int expected = 16 * step + (t % 2 ? 8 : 0) + 2 * q + i / 4;
        EXPECT_EQ(dq_logical_k(p), expected) << p;
        seen.insert(dq_logical_k(p));
      }
    }
  }
  EXPECT_EQ(seen.size(), 128u);
  EXPECT_EQ(*seen.begin(), 0);
  EXPECT_EQ(*seen.rbegin(), 127);
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
    for (int tile = 1; tile <= 512; ++tile) {
      for (const char* stage : {"fc1", "fc2"}) {
        if (has_sm90_e4m3_unit(family, tile)) {
          admitted.insert({stage, std::string(family_name(family)) + "_e4m3", tile});
        }
        if (has_sm90_group_unit(family, tile)) {
          admitted.insert({stage,
                           std::string(family_name(family)) + "_g" + std::to_string(kRasterGroup),
                           tile});
        }
        if (has_sm90_persistent_unit(family, tile)) {
          admitted.insert({stage, std::string(family_name(family)) + "_p", tile});
        }
      }
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
