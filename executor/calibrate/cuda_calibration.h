// The single-process part of `strata calibrate --backend cuda`: the CUDA twin of
// calibration.h's calibrate_compute, on device 0, through the CUDA backend's kernels
// (cuda_compute_bench.h), with the same shapes (calibration_layers, elementwise_model) and
// the same conversion into the Profile's units (compute_profile.h, at the CUDA backend's
// kernel conventions: flash attention, fused biases, bf16 activations). Adds the CPU AdamW
// rate (the offloaded optimizer's, measured as the CPU calibration does) and the device
// headroom (cuda_headroom.h).
// CUDA-backend meaning of the fields: the kernels' rates are one GPU's; host<->device are
// pinned cudaMemcpyAsync each way; cpu_adam_params_per_s uses options.adam_threads threads.
// Deliberately not here: collectives (one GPU: none; several: not yet), NVMe (the CLI's),
// writing the file.
#pragma once

#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/profile.h"
#include "executor/calibrate/calibration.h"

namespace strata::calibrate {

// Runs the CUDA calibration on device 0 and returns the Profile: backend "cuda", machine the
// GPU's name, memory and CUDA driver/runtime versions (and the host's), the compute fields of
// compute_profile, cpu_adam_params_per_s, and device_headroom measured (its source says on
// which device and how). options: gpu_compute_options (gpu_options.h) and the caller's
// shapes. Throws ConfigError (check_cuda_shapes; no CUDA device) before any work, SystemError when a CUDA call fails.
Profile calibrate_cuda_compute(const ComputeCalibrationOptions& options, const Progress& progress);

}  // namespace strata::calibrate
