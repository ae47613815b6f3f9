// The CUDA pieces that `strata run` and `strata select` share (run_cuda.cc; built without the
// CUDA toolkit, they say so with a ConfigError): what the CUDA kernels require of a job, the
// device count, and the backend of a select job's rank.
#pragma once

#include <string>

#include "cost_model/model_spec.h"
#include "cost_model/plan.h"
#include "cost_model/train_spec.h"
#include "executor/engine/backend.h"

namespace strata::cli {

// The model's shapes against the CUDA kernels (head size 64 or 128; hidden / tp and
// ffn_hidden / tp multiples of 8) and bf16 training. ConfigError naming `model_source` or
// `train_source` (a file, or a select job) and the field otherwise.
void check_cuda_job(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
                    const std::string& model_source, const std::string& train_source);

// GPUs the CUDA runtime sees (0 when none or when built without CUDA).
int cuda_device_count();

// A select job rank's CUDA backend (executor/cuda: host-staged communicators over the job's
// thread world).
engine::ThreadBackendMaker cuda_select_backend_maker();

}  // namespace strata::cli
