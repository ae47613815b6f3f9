// The CUDA pieces of `strata calibrate` (calibrate.cc): whether this binary can calibrate a
// GPU at all, and the run. Built without the CUDA toolkit, both say so (ConfigError: exit 2
// with one line) instead.
#pragma once

#include "cost_model/specs/profile.h"
#include "executor/calibrate/calibration.h"

namespace strata::cli {

// ConfigError unless this binary was built with CUDA and the runtime sees a device; cheap,
// so the CLI calls it before any work.
void require_cuda_device();

// executor/calibrate/cuda_calibration.h's calibrate_cuda_compute.
Profile calibrate_cuda(const calibrate::ComputeCalibrationOptions& options,
                       const calibrate::Progress& progress);

}  // namespace strata::cli
