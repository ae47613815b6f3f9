// Which compiled version of a CPU kernel's loops runs. The build targets baseline x86-64
// (the binaries travel to other machines), so loops that AVX2 or AVX-512 speed up are
// compiled again under a target attribute and picked at run time. A kernel's loop body is an
// always-inline function that every version inlines.
//
// The environment variable STRATA_CPU_ISA (baseline, avx2 or avx512) caps the level every
// kernel picks, so that one machine runs each path it supports: a test that pins the bits of
// a path runs under each (tests/CMakeLists.txt), and a user can reproduce another machine's
// results. It is read once per process; an unknown value, or a level this CPU cannot run,
// is a KernelError on every kernel call (tools check it at start-up: check_isa_environment).
#pragma once

#include <optional>
#include <string_view>

namespace strata::kernels::cpu {

// The instruction-set levels the kernels have versions for, in increasing order: x86-64's
// SSE2; x86-64-v3 (AVX2, FMA, BMI, F16C...); x86-64-v4 (AVX-512 F, BW, CD, DQ, VL).
enum class IsaLevel { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

// A kernel's choice: kBest runs active_isa_level(); the others ask for that version (tests
// compare the versions' bits), whatever STRATA_CPU_ISA says, and throw KernelError on a CPU
// without it.
enum class Isa {
  kBest,
  kBaseline,
  kAvx2,
  kAvx512,
};

#define STRATA_TARGET_AVX512 __attribute__((target("avx512f")))
#define STRATA_TARGET_AVX2 __attribute__((target("avx2,fma")))
// The whole levels (IsaLevel's kAvx512 and kAvx2 are these): with AVX-512 BW and VL, GCC
// vectorizes 16-bit stores (a bf16 copy) at full width, which avx512f alone does by halves.
#define STRATA_TARGET_X86_64_V4 __attribute__((target("arch=x86-64-v4")))
#define STRATA_TARGET_X86_64_V3 __attribute__((target("arch=x86-64-v3")))

// "baseline", "avx2", "avx512": STRATA_CPU_ISA's spelling.
const char* isa_name(IsaLevel level);
// The level a name spells; nullopt for any other string.
std::optional<IsaLevel> parse_isa_level(std::string_view name);

// The highest level this CPU runs.
IsaLevel cpu_isa_level();

// The environment variable that caps the level.
inline constexpr const char* kCpuIsaVariable = "STRATA_CPU_ISA";

// The level a CPU that runs at most `cpu` uses under the cap `value` (STRATA_CPU_ISA's
// value; null or empty: no cap). Throws KernelError, naming the variable, the value and what
// was expected, on an unknown value or one above `cpu`.
IsaLevel capped_isa_level(IsaLevel cpu, const char* value);

// The level kBest runs: capped_isa_level(cpu_isa_level(), STRATA_CPU_ISA). Computed once per
// process (an immutable cached value); throws its KernelError on every call.
IsaLevel active_isa_level();

// Throws active_isa_level()'s error, if any: tools call it before any work, so that a bad
// STRATA_CPU_ISA is one clear message rather than a kernel's failure mid-run.
void check_isa_environment();

// The level `kernel` runs for `isa` (see Isa). Call outside OpenMP regions: it may throw.
IsaLevel isa_level_for(Isa isa, const char* kernel);

// The explicit choice of a level: a caller that resolved kBest once (outside its parallel
// region) hands the result to the kernels it calls inside.
constexpr Isa isa_of(IsaLevel level) {
  return level == IsaLevel::kAvx512 ? Isa::kAvx512
         : level == IsaLevel::kAvx2 ? Isa::kAvx2
                                    : Isa::kBaseline;
}

// Of three versions of a loop, the one for `level`.
template <class F>
F version_for(IsaLevel level, F avx512, F avx2, F baseline) {
  return level == IsaLevel::kAvx512 ? avx512 : level == IsaLevel::kAvx2 ? avx2 : baseline;
}

// Whether `kernel` runs its AVX-512 version for `isa`.
inline bool use_avx512(Isa isa, const char* kernel) {
  return isa_level_for(isa, kernel) == IsaLevel::kAvx512;
}

}  // namespace strata::kernels::cpu
