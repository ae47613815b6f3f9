// The CUDA pieces of `strata calibrate`; see calibrate_cuda.h.
#include "tools/strata/calibrate_cuda.h"

#include "cost_model/specs/errors.h"

#if STRATA_HAVE_CUDA
#include "executor/calibrate/cuda_calibration.h"
#include "kernels/cuda/cuda_check.h"
#endif

namespace strata::cli {

#if STRATA_HAVE_CUDA

void require_cuda_device() {
  if (!kernels::cuda::cuda_device_available()) {
    throw ConfigError("calibrate --backend cuda: no CUDA device: " +
                      kernels::cuda::cuda_unavailable_reason());
  }
}

Profile calibrate_cuda(const calibrate::ComputeCalibrationOptions& options,
                       const calibrate::Progress& progress) {
  return calibrate::calibrate_cuda_compute(options, progress);
}

#else

void require_cuda_device() {
  throw ConfigError(
      "calibrate --backend cuda: this strata was built without the CUDA toolkit (use "
      "--backend cpu, or rebuild where nvcc is found)");
}

Profile calibrate_cuda(const calibrate::ComputeCalibrationOptions&, const calibrate::Progress&) {
  require_cuda_device();
  return {};
}

#endif

}  // namespace strata::cli
