// Counter-based normal draws in bulk: the parameter initialiser's hot loop
// (executor/model/param_init.h). kernels/counter_normal.h has the formula, and why the fast
// path below gives exactly its bits; kernels/cuda/normal_init.h is the GPU twin.
#pragma once

#include <cstdint>

namespace strata::kernels::cpu {

// The draw of element `index` under `key`, by the formula itself (glibc's log, cos and
// sin): sqrt(-2 log u1) times cos(2 pi u2) for an even index, sin(2 pi u2) for an odd one,
// u1 and u2 the pair's (kernels/counter_normal.h). ~50 ns; the reference every fast path
// is held to.
double normal_exact(std::uint64_t key, std::int64_t index);

// Which compiled loop normal_fill runs: kBest picks AVX2 + FMA where active_isa_level() is
// avx2 or above (isa.h; the bits do not depend on it; tests run both).
enum class NormalFillPath { kBest, kBaseline };

// dst[j] = float(scale * normal_exact(key, first + j)) for j in [0, n), bit for bit, on the
// calling thread (callers split the work: every element is independent). first >= 0.
void normal_fill(float* dst, std::uint64_t key, std::int64_t first, std::int64_t n,
                 double scale, NormalFillPath path = NormalFillPath::kBest);

}  // namespace strata::kernels::cpu
