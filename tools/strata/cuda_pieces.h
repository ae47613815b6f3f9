// The CUDA pieces that `strata run` and `strata select` share (run_cuda.cc; built without the
// CUDA toolkit, they say so with a ConfigError): what the CUDA kernels require of a job, the
// device count, and the backend of a select job's rank.
#pragma once

#include <string>

#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/train_spec.h"
#include "executor/engine/backend.h"

namespace strata::cli {

// GPUs the CUDA runtime sees (0 when none or when built without CUDA).
int cuda_device_count();

// A select job rank's CUDA backend (executor/cuda: host-staged communicators over the job's
// thread world).
engine::BackendMaker cuda_select_backend_maker();

}  // namespace strata::cli
