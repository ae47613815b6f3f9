// The CUDA launchers' argument tests (no device): stand-in tensors and the KernelError a call
// throws. The launchers check their arguments before any CUDA call, so these pointers are
// never dereferenced.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <exception>
#include <string>

#include "kernels/check.h"
#include "kernels/cuda/common.h"

namespace strata::kernels::cuda::testing {

// Stand-in tensors: valid-looking, never touched.
struct Fake {
  alignas(16) unsigned char bytes[64] = {};
  bf16* h() { return reinterpret_cast<bf16*>(bytes); }
  float* f() { return reinterpret_cast<float*>(bytes); }
  double* d() { return reinterpret_cast<double*>(bytes); }
  std::int32_t* i() { return reinterpret_cast<std::int32_t*>(bytes); }
};

// Runs fn and returns the KernelError message ("" and a failure if it did not throw one).
template <class Fn>
std::string kernel_error(Fn&& fn) {
  try {
    fn();
  } catch (const KernelError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected KernelError, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected KernelError, nothing thrown";
  return "";
}

}  // namespace strata::kernels::cuda::testing
