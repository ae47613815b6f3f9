// The scratch the CUDA kernels ask their caller for, as plain C++ with no CUDA include: the
// CUDA backend allocates it from its device pool before each call, and the memory model's
// CPU-side check of that pool's allocations (executor/cuda/cuda_op_allocations.h) computes
// the same sizes without a GPU, from this one definition.
// Deliberately not here: the kernels themselves (layernorm.h, attention.h).
#pragma once

#include <algorithm>
#include <cstdint>

namespace strata::kernels::cuda {

// LayerNorm backward's dweight/dbias partials: one (2 C) row per block, at most this many
// blocks (1024 keeps every SM of an H100 busy; 256 left the kernel latency-bound at ~500 GB/s
// on GPT-2 1.5B's (8192, 1600) rows).
inline constexpr int kLayerNormMaxPartialBlocks = 1024;

// Blocks the LayerNorm backward runs over BT rows (>= 1).
inline int layernorm_backward_blocks(int BT) { return std::min(BT, kLayerNormMaxPartialBlocks); }

// Floats of scratch layernorm_backward needs: 2 * C per partial-sum block.
inline std::int64_t layernorm_backward_scratch_floats(int BT, int C) {
  return static_cast<std::int64_t>(layernorm_backward_blocks(std::max(BT, 1))) * 2 * C;
}

// Floats of scratch rmsnorm_backward (rmsnorm.h) needs: one dweight partial of C per block,
// as many blocks as LayerNorm's backward.
inline std::int64_t rmsnorm_backward_scratch_floats(int BT, int C) {
  return static_cast<std::int64_t>(layernorm_backward_blocks(std::max(BT, 1))) * C;
}

// Floats of scratch attention_backward needs: B * NH * T (rowsum(dout * out) per row; the
// same count as the CPU backward's scratch).
inline std::int64_t attention_backward_scratch_floats(int B, int T, int NH) {
  return static_cast<std::int64_t>(B) * NH * T;
}

}  // namespace strata::kernels::cuda
