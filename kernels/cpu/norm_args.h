// The argument checks of LayerNorm and RMSNorm, one contract for the CPU kernels
// (layernorm.cc, rmsnorm.cc) and their CUDA twins (kernels/cuda/layernorm.cu, rmsnorm.cu,
// which check their scratch and aliasing besides). Each throws KernelError naming the kernel,
// the argument and what was expected (arg_checks.h).
#pragma once

#include <fmt/format.h>

#include "kernels/cpu/arg_checks.h"

namespace strata::kernels::cpu::detail {

inline void check_rows(const char* kernel, int BT, int C) {
  require_positive(kernel, "BT", BT);
  require_positive(kernel, "C", C);
}

inline void check_layernorm_forward_args(const char* kernel, const void* out, const void* mean,
                                         const void* rstd, const void* inp, const void* weight,
                                         const void* bias, int BT, int C) {
  require_tensors(kernel, {{"out", out}, {"mean", mean}, {"rstd", rstd}, {"inp", inp},
                           {"weight", weight}, {"bias", bias}});
  check_rows(kernel, BT, C);
}

inline void check_layernorm_backward_args(const char* kernel, const void* dinp,
                                          const void* dweight, const void* dbias,
                                          const void* dout, const void* inp, const void* weight,
                                          const void* mean, const void* rstd, int BT, int C) {
  require_tensors(kernel, {{"dinp", dinp}, {"dweight", dweight}, {"dbias", dbias},
                           {"dout", dout}, {"inp", inp}, {"weight", weight}, {"mean", mean},
                           {"rstd", rstd}});
  check_rows(kernel, BT, C);
}

inline void check_rmsnorm_forward_args(const char* kernel, const void* out, const void* rstd,
                                       const void* inp, const void* weight, int BT, int C,
                                       float eps) {
  require_tensors(kernel, {{"out", out}, {"rstd", rstd}, {"inp", inp}, {"weight", weight}});
  check_rows(kernel, BT, C);
  if (!(eps >= 0.0f)) {
    throw KernelError(fmt::format("{}: eps = {}; expected >= 0", kernel, eps));
  }
}

inline void check_rmsnorm_backward_args(const char* kernel, const void* dinp,
                                        const void* dweight, const void* dout, const void* inp,
                                        const void* weight, const void* rstd, int BT, int C) {
  require_tensors(kernel, {{"dinp", dinp}, {"dweight", dweight}, {"dout", dout},
                           {"inp", inp}, {"weight", weight}, {"rstd", rstd}});
  check_rows(kernel, BT, C);
}

}  // namespace strata::kernels::cpu::detail
