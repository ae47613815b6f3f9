// What `strata calibrate --backend cuda` accepts and its defaults, decided without the CUDA
// toolkit so that a binary built without it (and its tests) answers the same way.
// Deliberately not here: running anything on a GPU (cuda_calibration.h).
#pragma once

#include <vector>

#include "cost_model/specs/model_spec.h"
#include "executor/calibrate/calibration.h"

namespace strata::calibrate {

// compute_options(models, quick) for a GPU: the backward passes even when quick (each takes
// microseconds on a GPU, and the time model reads their rates on CUDA) and every GEMM at
// `timing` (none is large enough on a GPU to need large_timing's fewer repeats).
ComputeCalibrationOptions gpu_compute_options(std::vector<ModelSpec> models, bool quick);

// ConfigError naming the model and the value when the CUDA kernels cannot run a shape the
// options ask for: no model; head size (hidden / heads) not 64 or 128 (the flash attention
// kernel's); hidden / tp or ffn_hidden / tp not a multiple of 8 (16-byte bf16 rows) for
// options.tp and each gemm_tps value that divides the model (calibration_layers skips the
// others).
void check_cuda_shapes(const ComputeCalibrationOptions& options);

}  // namespace strata::calibrate
