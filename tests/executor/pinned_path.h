// For tests that pin the exact bits of a run: the kernel path those bits belong to
// (kernels/cpu/kernel_path.h), whether this CPU can run the path the environment forces, and
// one thread for the scope of a pinned run. tests/CMakeLists.txt's
// strata_add_kernel_path_tests runs such tests once per path CI forces.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <cstdlib>
#include <string>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernel_path.h"

namespace strata::testing_support {

// OpenBLAS kernel families that gave the same bits in every pinned run (OpenBLAS 0.3.21 under
// each OPENBLAS_CORETYPE on one AVX-512 EPYC, 2026-11-28): "haswell" for the Haswell and Zen
// kernels (the default on every AVX2 machine and on AMD's AVX-512 ones, which 0.3.21 does
// not know), "skylakex" for the SkylakeX and Cooperlake ones (Intel's AVX-512 machines).
// Empty for another version or core: no pins there.
inline std::string blas_family(const kernels::cpu::KernelPath& p) {
  if (p.blas_version != "0.3.21") return {};
  if (p.blas_core == "Haswell" || p.blas_core == "Zen") return "haswell";
  if (p.blas_core == "SkylakeX" || p.blas_core == "Cooperlake") return "skylakex";
  return {};
}

// Why this CPU cannot run the path the environment forces, or "" where it can:
// STRATA_CPU_ISA above the CPU's level (the kernels would refuse it), or OPENBLAS_CORETYPE
// naming kernels that need AVX2 or AVX-512 (OpenBLAS loads them unchecked, and the first
// sgemm would stop at an illegal instruction).
inline std::string path_out_of_reach() {
  using kernels::cpu::IsaLevel;
  const IsaLevel cpu = kernels::cpu::cpu_isa_level();
  // An unknown value is no reason to skip: the kernels' error fails the test.
  const char* value = std::getenv(kernels::cpu::kCpuIsaVariable);
  if (const auto cap = kernels::cpu::parse_isa_level(value ? value : ""); cap && *cap > cpu) {
    return std::string("STRATA_CPU_ISA asks for ") + kernels::cpu::isa_name(*cap) +
           "; this CPU runs at most " + kernels::cpu::isa_name(cpu);
  }
  const kernels::cpu::KernelPath p = kernels::cpu::active_kernel_path();
  const std::string family = blas_family(p);
  const IsaLevel needs = family == "skylakex" ? IsaLevel::kAvx512
                         : family == "haswell" ? IsaLevel::kAvx2
                                               : IsaLevel::kBaseline;
  if (needs > cpu) {
    return "OpenBLAS runs its " + p.blas_core + " kernels (OPENBLAS_CORETYPE), which need " +
           kernels::cpu::isa_name(needs) + "; this CPU runs at most " +
           kernels::cpu::isa_name(cpu);
  }
  return {};
}

// One OpenMP and one OpenBLAS thread for a scope: a pinned run's last bits must not depend
// on the machine's core count (OpenBLAS splits large products by thread). Restores the
// OpenMP count; OpenBLAS goes back to the same number.
class OneThread {
 public:
  OneThread() : saved_(omp_get_max_threads()) {
    omp_set_num_threads(1);
    kernels::cpu::set_blas_threads(1);
  }
  ~OneThread() {
    omp_set_num_threads(saved_);
    kernels::cpu::set_blas_threads(saved_);
  }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int saved_;
};

}  // namespace strata::testing_support
