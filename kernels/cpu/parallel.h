// When a CPU kernel's loop is worth an OpenMP team. Opening a parallel region wakes the
// team's threads: microseconds on an idle machine, milliseconds when the cores are shared
// (issue 19: a tiny model's step opened ~1,400 regions, and with 2 threads on a busy 2-core
// VM steps got several times slower). A memory-bound pass over n floats streams ~8 n bytes
// at ~10 GB/s a core, so below kParallelMinElements (64 Ki floats: ~50 us of work) the
// region would cost more than it saves and the loop runs on the calling thread. Every loop
// guarded by it computes each element independently, so the result does not depend on
// which path ran.
#pragma once

#include <cstdint>

namespace strata::kernels::cpu {

inline constexpr std::int64_t kParallelMinElements = std::int64_t{1} << 16;

}  // namespace strata::kernels::cpu
