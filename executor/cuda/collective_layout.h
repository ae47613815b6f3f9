// The data layout of NcclCommunicator's deterministic sums, as pure functions (host only, so
// they are tested without a GPU). It is the same split as MpiCommunicator's
// (mpi_communicator.cc): n elements over s ranks form s contiguous blocks, the first n % s
// of them one element longer; rank r owns block r, receives every rank's copy of it
// (rank-major, `copies` below), adds them in rank order 0..s-1, and the owners' blocks are
// then gathered back. Only bytes move through NCCL; the order of every addition is fixed here.
#pragma once

#include <algorithm>
#include <cstdint>

namespace strata::cuda {

// First element of block r of n elements over s ranks (0 <= r <= s; block_begin(n, s, s) == n).
inline std::int64_t block_begin(std::int64_t n, int s, int r) {
  const std::int64_t base = n / s;
  const std::int64_t extra = n % s;
  return base * r + std::min<std::int64_t>(r, extra);
}

inline std::int64_t block_length(std::int64_t n, int s, int r) {
  return block_begin(n, s, r + 1) - block_begin(n, s, r);
}

// Elements of scratch one all-reduce of n needs on rank r: s copies of its block.
inline std::int64_t all_reduce_scratch_elements(std::int64_t n, int s, int r) {
  return block_length(n, s, r) * s;
}

}  // namespace strata::cuda
