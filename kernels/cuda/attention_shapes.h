// The shapes the CUDA attention kernels run (attention.h), as plain C++ with no CUDA include:
// the launchers check them before any CUDA call, and the CUDA backend replayed without a GPU
// (executor/cuda/pool_recorder.h) checks them too, so that a model whose heads the kernels
// were not built for is refused on any machine, as a GPU run would refuse it.
// Deliberately not here: the pointers' checks (attention.cu), the kernels.
#pragma once

#include <fmt/format.h>

#include "kernels/check.h"
#include "kernels/cpu/arg_checks.h"

namespace strata::kernels::cuda {

// Positive sizes, C = NH * HS with HS 64 or 128 (the compiled head sizes), NH % KVH == 0,
// B and NH within the grid; KernelError naming `kernel`, the size and what was expected.
inline void check_attention_shapes(const char* kernel, int B, int T, int C, int NH, int KVH) {
  cpu::detail::require_positive(kernel, "B", B);
  cpu::detail::require_positive(kernel, "T", T);
  cpu::detail::require_positive(kernel, "C", C);
  cpu::detail::require_positive(kernel, "NH", NH);
  cpu::detail::require_positive(kernel, "KVH", KVH);
  if (C % NH != 0) {
    throw KernelError(fmt::format("{}: C = {} is not divisible by NH = {}; expected C = NH * HS",
                                  kernel, C, NH));
  }
  if (NH % KVH != 0) {
    throw KernelError(fmt::format("{}: NH = {} is not divisible by KVH = {}; expected groups "
                                  "of NH / KVH query heads per key/value head",
                                  kernel, NH, KVH));
  }
  if (C / NH != 64 && C / NH != 128) {
    throw KernelError(fmt::format("{}: HS = C / NH = {}; expected 64 or 128", kernel, C / NH));
  }
  if (B > 65535 || NH > 65535) {
    throw KernelError(fmt::format("{}: B = {}, NH = {}; expected both <= 65535 (grid limit)",
                                  kernel, B, NH));
  }
}

}  // namespace strata::kernels::cuda
