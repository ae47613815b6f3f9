// When a CPU kernel's loop is worth an OpenMP team. Opening a parallel region wakes the
// team's threads: microseconds on an idle machine, milliseconds when the cores are shared
// (issue 19: a tiny model's step opened ~1,400 regions, and with 2 threads on a busy 2-core
// VM steps got several times slower). A memory-bound pass over n floats streams ~8 n bytes
// at ~10 GB/s a core, so below kParallelMinElements (64 Ki floats: ~50 us of work) the
// region would cost more than it saves and the loop runs on the calling thread. Every loop
// guarded by it computes each element independently, so the result does not depend on
// which path ran.
#pragma once

#include <algorithm>
#include <cstdint>

namespace strata::kernels::cpu {

inline constexpr std::int64_t kParallelMinElements = std::int64_t{1} << 16;

// Runs span(begin, count) over [0, N) in blocks of kSpanBlock elements, on the OpenMP team
// when N is worth one: the shape of an elementwise kernel whose loop body is a dispatched
// span (isa.h).
inline constexpr std::int64_t kSpanBlock = std::int64_t{1} << 14;
template <typename Span>
void parallel_spans(std::int64_t N, const Span& span) {
  const std::int64_t blocks = (N + kSpanBlock - 1) / kSpanBlock;
#pragma omp parallel for schedule(static) if (N >= kParallelMinElements)
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t begin = b * kSpanBlock;
    span(begin, std::min(N, begin + kSpanBlock) - begin);
  }
}

}  // namespace strata::kernels::cpu
