// The kernel path a process runs: what decides the last bits of the CPU backend's results on
// a machine. Two things: the level of strata's own kernels (isa.h: the CPU's, capped by
// STRATA_CPU_ISA) and OpenBLAS's version and kernel family (openblas_get_corename; OpenBLAS
// picks it from the CPU when it loads, OPENBLAS_CORETYPE overrides it). Two runs on one path
// give the same bits on any machine (and any thread count where the kernels promise it); two
// paths differ in the order of floating-point sums, so tests pin bits per path.
#pragma once

#include <string>

#include "kernels/cpu/isa.h"

namespace strata::kernels::cpu {

struct KernelPath {
  IsaLevel isa = IsaLevel::kBaseline;
  std::string blas_version;  // OpenBLAS's, e.g. "0.3.21"
  std::string blas_core;     // the kernel family, e.g. "Haswell", "Zen", "SkylakeX"

  // "avx2 kernels, OpenBLAS 0.3.21 Haswell": for reports and test messages.
  std::string name() const;
};

// This process's path. Throws KernelError as active_isa_level does.
KernelPath active_kernel_path();

}  // namespace strata::kernels::cpu
