// probe_cuda_device over kernels/cuda/cuda_check.h's probe.
#include "executor/cuda/device_probe.h"

#include "kernels/cuda/cuda_check.h"

namespace strata::cuda {

DeviceProbe probe_cuda_device() {
  if (kernels::cuda::cuda_device_available()) return {true, ""};
  return {false, kernels::cuda::cuda_unavailable_reason()};
}

}  // namespace strata::cuda
