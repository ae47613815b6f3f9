// What `strata run` shares between its two files: run.cc (options, validation, launching
// the ranks, the one run loop for every backend, the printed prediction, the profile
// update) and run_cuda.cc (the CUDA pieces, compiled only with the CUDA toolkit).
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "cost_model/cluster_spec.h"
#include "cost_model/model_spec.h"
#include "cost_model/plan.h"
#include "cost_model/step_report.h"
#include "cost_model/train_spec.h"
#include "executor/engine/rank_training.h"
#include "executor/runtime/backend_select.h"

namespace strata::cli {

struct RunOptions {
  std::string plan;
  std::string model;
  std::string train;
  std::string cluster = "local-cpu";
  std::int64_t steps = 0;  // 0: the train spec's steps
  std::string data;        // empty: the generated corpus
  std::string data_format = "auto";  // auto | bytes | megatron | llmc (executor/data/dataset.h)
  std::string valid_data;            // validation tokens from another file (same format rules)
  double valid_fraction = 0;         // or the last fraction of the training tokens, held out
  std::int64_t eval_every = 0;       // validation loss every N steps (and after the last)
  std::int64_t eval_batches = 4;     // global batches per evaluation
  std::string init_from;             // GPT-2 safetensors to start from (weights_io.h)
  std::string save_weights;          // GPT-2 safetensors written after the last step
  std::string out = "strata-run";
  int max_ranks = 8;
  std::string nvme_dir = "/tmp";  // offload to NVMe: where the run directory goes
  int prefetch_depth = 2;         // ZeRO-3 offloaded params: layers fetched ahead
  double device_budget_mib = 0;   // > 0: the device tier's budget instead of the cluster's
  std::string update_profile;     // fold the measured step into this profile (see update_profile)
  std::string profile;            // the printed prediction uses this calibrated profile
  std::optional<std::string> backend;  // --backend cpu|cuda; unset: cuda when a GPU is found
  int ranks_per_gpu = 1;          // CUDA: processes sharing one GPU (host-staged communicators)
};

// Everything a rank needs, loaded and checked before any rank starts.
struct Validated {
  ModelSpec model;
  TrainSpec train;
  ClusterSpec cluster;
  Plan plan;
  std::string model_path, train_path, cluster_path, plan_path;
};

// The measured step time and offload bytes beside the cost model's for the same plan.
void print_predicted(const Validated& v, const StepReport& rep, const std::string& profile_path,
                     std::ostream& out);

// --update-profile: folds the run into the profile's fed-back factors (which run fits which:
// cost_model/profile_feedback.h) and rewrites the file.
void update_profile(const std::string& path, const Validated& v, const StepReport& measured,
                    std::ostream& out);

// The CUDA backend's checks before any rank starts: the model's shapes against the CUDA
// kernels, bf16 training, and the plan's ranks against this machine's GPUs (ranks <= GPUs x
// --ranks-per-gpu). ConfigError naming the field otherwise; also when this binary was built
// without CUDA.
void check_cuda_run(const RunOptions& o, const Validated& v);

// The BackendMaker of a CUDA rank (executor/cuda/cuda_backend.h).
engine::BackendMaker cuda_backend_maker(const RunOptions& o);

// The device probe of this binary: the CUDA runtime's when built with CUDA, else "none".
DeviceProbeFn cuda_device_probe();

}  // namespace strata::cli
