// as_system_error(fn): runs fn and turns the kernels layer's CudaError (thrown by CUDA_CHECK,
// CUBLAS_CHECK and NCCL_CHECK, which sit below cost_model/specs/errors.h) into strata::SystemError
// with the same text, so executor callers catch one type for a failed library call
// (communicator.h's contract). Other exceptions (OutOfMemory, std::invalid_argument) pass
// through unchanged. Deliberately not a new macro: the *_CHECK macros stay the only place
// that formats call/file/line.
#pragma once

#include <utility>

#include "cost_model/specs/errors.h"
#include "kernels/cuda/cuda_check.h"

namespace strata::cuda {

template <class Fn>
decltype(auto) as_system_error(Fn&& fn) {
  try {
    return std::forward<Fn>(fn)();
  } catch (const kernels::cuda::CudaError& e) {
    throw SystemError(e.what());
  }
}

}  // namespace strata::cuda
