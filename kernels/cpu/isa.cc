// Run-time choice between a kernel's baseline and AVX-512 loops (see isa.h).
#include "kernels/cpu/isa.h"

#include <fmt/format.h>

#include "kernels/check.h"

namespace strata::kernels::cpu {

bool use_avx512(Isa isa, const char* kernel) {
  const bool has = cpu_has_avx512();
  if (isa == Isa::kAvx512 && !has) {
    throw KernelError(fmt::format("{}: the AVX-512 version was asked for; this CPU has no "
                                  "avx512f", kernel));
  }
  return isa == Isa::kAvx512 || (isa == Isa::kBest && has);
}

}  // namespace strata::kernels::cpu
