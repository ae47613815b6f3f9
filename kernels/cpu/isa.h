// Which compiled version of a CPU kernel's loops runs. The build targets baseline x86-64
// (the binaries travel to other machines), so loops that AVX-512 speeds up are compiled a
// second time under STRATA_TARGET_AVX512 and picked at run time. A kernel's loop body is an
// always-inline function that both versions inline; kBaseline and kAvx512 exist for tests.
#pragma once

namespace strata::kernels::cpu {

enum class Isa {
  kBest,      // AVX-512 where the CPU has it (every kernel's default)
  kBaseline,  // x86-64's SSE2
  kAvx512,    // throws KernelError on a CPU without avx512f
};

#define STRATA_TARGET_AVX512 __attribute__((target("avx512f")))

// Whether `kernel` runs its AVX-512 version for `isa` on this CPU.
bool use_avx512(Isa isa, const char* kernel);

// Inline: the tiled attention asks once per tile.
inline bool cpu_has_avx512() { return __builtin_cpu_supports("avx512f"); }

}  // namespace strata::kernels::cpu
