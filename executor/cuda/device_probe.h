// probe_cuda_device: the CUDA backend's DeviceProbe for choose_backend
// (executor/runtime/backend_select.h): available when cudaGetDeviceCount sees a device, with
// the runtime's reason otherwise. Never throws for a missing driver or GPU.
#pragma once

#include "executor/runtime/backend_select.h"

namespace strata::cuda {

DeviceProbe probe_cuda_device();

}  // namespace strata::cuda
