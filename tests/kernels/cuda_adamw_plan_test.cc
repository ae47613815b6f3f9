// The fused AdamW's division of work (kernels/cuda/adamw_tiles.h), checked on the host where
// CI can run it: the tiles of a launch cover every element of every tensor exactly once and
// each tile lies inside one tensor (the kernel updates an element once per step and looks a
// block's tensor up once), and the launch count is the non-empty tensors over the launch's
// capacity (empty tensors take no tile and no place).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/adamw.h"
#include "kernels/cuda/adamw_tiles.h"

namespace strata::kernels::cuda {
namespace {

TEST(CudaAdamWTiles, TilesCoverEveryElementOnceAndNeverSpanTwoTensors) {
  // Odd sizes around the tile (1024): less, equal, one more, several and a bit, one element.
  const std::vector<std::int64_t> sizes = {1023, 1024, 1025, 3 * kAdamWTile + 5, 1, 7};
  std::vector<std::int64_t> tile_begin;  // tiles before each tensor, as the launcher counts
  std::int64_t tiles = 0;
  for (std::int64_t n : sizes) {
    tile_begin.push_back(tiles);
    tiles += adamw_tiles(n);
  }
  EXPECT_EQ(tiles, 1 + 1 + 2 + 4 + 1 + 1);
  const int count = static_cast<int>(sizes.size());
  std::vector<std::vector<int>> hits(sizes.size());
  for (std::size_t k = 0; k < sizes.size(); ++k) hits[k].assign(sizes[k], 0);
  for (std::int64_t tile = 0; tile < tiles; ++tile) {
    const int k = adamw_tile_tensor(tile_begin.data(), count, tile);
    ASSERT_GE(k, 0);
    ASSERT_LT(k, count);
    ASSERT_LE(tile_begin[k], tile);
    if (k + 1 < count) {
      ASSERT_LT(tile, tile_begin[k + 1]) << "tile " << tile;
    }
    for (int thread = 0; thread < kAdamWThreads; ++thread) {
      for (int r = 0; r < kAdamWPerThread; ++r) {
        const std::int64_t e = adamw_tile_element(tile_begin.data(), k, tile, thread, r);
        ASSERT_GE(e, 0);
        if (e < sizes[k]) ++hits[k][e];
      }
    }
  }
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    for (std::int64_t e = 0; e < sizes[k]; ++e) {
      ASSERT_EQ(hits[k][e], 1) << "tensor " << k << " element " << e;
    }
  }
}

TEST(CudaAdamWTiles, LaunchesAreTheNonEmptyTensorsOverTheCapacity) {
  const AdamWTensor empty{};
  AdamWTensor one{};
  one.n = 5;
  std::vector<AdamWTensor> list(3, empty);
  EXPECT_EQ(adamw_launches(list), 0);
  list.insert(list.end(), kAdamWTensorsPerLaunch, one);
  EXPECT_EQ(adamw_launches(list), 1);  // the empty ones take no place
  list.push_back(one);
  EXPECT_EQ(adamw_launches(list), 2);
}

}  // namespace
}  // namespace strata::kernels::cuda
