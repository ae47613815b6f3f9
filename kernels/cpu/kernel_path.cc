// The kernel path of this process (see kernel_path.h).
#include "kernels/cpu/kernel_path.h"

#include <cblas.h>
#include <fmt/format.h>

#include <sstream>

namespace strata::kernels::cpu {

std::string KernelPath::name() const {
  return fmt::format("{} kernels, OpenBLAS {} {}", isa_name(isa), blas_version, blas_core);
}

KernelPath active_kernel_path() {
  KernelPath p;
  p.isa = active_isa_level();
  p.blas_core = openblas_get_corename();
  // openblas_get_config(): "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...".
  std::istringstream config(openblas_get_config());
  std::string library;
  config >> library >> p.blas_version;
  return p;
}

}  // namespace strata::kernels::cpu
