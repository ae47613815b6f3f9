// How the multi-tensor AdamW (adamw.h) shares its tensors out among thread blocks: each
// non-empty tensor is cut into tiles of kAdamWTile elements, a launch's tiles are numbered
// tensor after tensor, and block b updates tile b (thread t: elements t, t + kAdamWThreads, ...
// of it, so a warp's loads are consecutive). A tile never spans two tensors, so a block looks
// its tensor up once. Host and device share these functions: the CPU tests check on the host
// that the tiles cover every element exactly once, which the kernel relies on.
#pragma once

#include <cstdint>

#include "kernels/host_device.h"

namespace strata::kernels::cuda {

inline constexpr int kAdamWThreads = 256;
inline constexpr int kAdamWPerThread = 4;  // loads in flight per thread and array
inline constexpr std::int64_t kAdamWTile = std::int64_t{kAdamWThreads} * kAdamWPerThread;
// Tensors per launch: their pointers travel in the kernel's parameters, which may hold up to
// 32,764 bytes on Volta and later with CUDA 12.1 or later (adamw.cu checks the size). GPT-2
// 124M's 12 layers are ~110 tensors of one weight decay each: one launch.
inline constexpr int kAdamWTensorsPerLaunch = 320;

// Tiles of a tensor of n elements.
STRATA_HOST_DEVICE std::int64_t adamw_tiles(std::int64_t n) {
  return (n + kAdamWTile - 1) / kAdamWTile;
}

// The tensor of tile `tile`: the largest k in [0, count) with tile_begin[k] <= tile, where
// tile_begin[k] (ascending, tile_begin[0] = 0) is the number of tiles before tensor k.
STRATA_HOST_DEVICE int adamw_tile_tensor(const std::int64_t* tile_begin, int count,
                                         std::int64_t tile) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (tile_begin[mid] <= tile) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Element of its tensor that thread `thread`'s r-th access of tile `tile` (of tensor k) is.
STRATA_HOST_DEVICE std::int64_t adamw_tile_element(const std::int64_t* tile_begin, int k,
                                                   std::int64_t tile, int thread, int r) {
  return (tile - tile_begin[k]) * kAdamWTile + std::int64_t{r} * kAdamWThreads + thread;
}

}  // namespace strata::kernels::cuda
