// The run-time choice between a kernel's compiled versions (see isa.h).
#include "kernels/cpu/isa.h"

#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "kernels/check.h"

namespace strata::kernels::cpu {
namespace {

// The capped level, or the error that reading the variable gave.
struct ActiveIsa {
  IsaLevel level = IsaLevel::kBaseline;
  std::string error;
};

const ActiveIsa& active() {
  static const ActiveIsa cached = [] {
    try {
      return ActiveIsa{capped_isa_level(cpu_isa_level(), std::getenv(kCpuIsaVariable)), {}};
    } catch (const KernelError& e) {
      return ActiveIsa{IsaLevel::kBaseline, e.what()};
    }
  }();
  return cached;
}

}  // namespace

const char* isa_name(IsaLevel level) {
  switch (level) {
    case IsaLevel::kBaseline: return "baseline";
    case IsaLevel::kAvx2: return "avx2";
    case IsaLevel::kAvx512: return "avx512";
  }
  return "?";
}

std::optional<IsaLevel> parse_isa_level(std::string_view name) {
  for (const IsaLevel l : {IsaLevel::kBaseline, IsaLevel::kAvx2, IsaLevel::kAvx512}) {
    if (name == isa_name(l)) return l;
  }
  return std::nullopt;
}

IsaLevel cpu_isa_level() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("x86-64-v4")) return IsaLevel::kAvx512;
  if (__builtin_cpu_supports("x86-64-v3")) return IsaLevel::kAvx2;
#endif
  return IsaLevel::kBaseline;
}

IsaLevel capped_isa_level(IsaLevel cpu, const char* value) {
  if (value == nullptr || *value == '\0') return cpu;
  const std::optional<IsaLevel> cap = parse_isa_level(value);
  if (!cap) {
    throw KernelError(fmt::format("{} = '{}': not a level the CPU kernels know; expected "
                                  "baseline, avx2 or avx512 (or unset: the CPU's best)",
                                  kCpuIsaVariable, value));
  }
  if (*cap > cpu) {
    throw KernelError(fmt::format("{} = '{}': this CPU runs at most '{}' (avx2 needs "
                                  "x86-64-v3: AVX2 and FMA; avx512 needs x86-64-v4: AVX-512 F, "
                                  "BW, CD, DQ, VL); expected a level up to it",
                                  kCpuIsaVariable, value, isa_name(cpu)));
  }
  return *cap;
}

IsaLevel active_isa_level() {
  const ActiveIsa& a = active();
  if (!a.error.empty()) throw KernelError(a.error);
  return a.level;
}

void check_isa_environment() { (void)active_isa_level(); }

IsaLevel isa_level_for(Isa isa, const char* kernel) {
  if (isa == Isa::kBest) return active_isa_level();
  const IsaLevel asked = isa == Isa::kAvx512 ? IsaLevel::kAvx512
                         : isa == Isa::kAvx2 ? IsaLevel::kAvx2
                                             : IsaLevel::kBaseline;
  if (asked > cpu_isa_level()) {
    throw KernelError(fmt::format("{}: the {} version was asked for; this CPU runs at most {}",
                                  kernel, isa_name(asked), isa_name(cpu_isa_level())));
  }
  return asked;
}

}  // namespace strata::kernels::cpu
