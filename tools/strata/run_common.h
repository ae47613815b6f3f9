// What `strata run` shares between its two files: run.cc (options, validation, launching
// the ranks, the one run loop for every backend, the printed prediction, the profile
// update) and run_cuda.cc (the CUDA pieces, compiled only with the CUDA toolkit).
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/eval_spec.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/profile.h"
#include "cost_model/specs/step_report.h"
#include "cost_model/specs/train_spec.h"
#include "executor/data/dataset.h"
#include "executor/run/rank_training.h"
#include "executor/runtime/backend_select.h"
#include "tools/strata/profile_choice.h"

namespace strata::cli {

struct RunOptions {
  std::string plan;
  std::string model;
  std::string train;
  std::string cluster = "local-cpu";
  ClusterShape shape;  // --nodes / --gpus-per-node
  std::optional<std::int64_t> steps;  // unset: the train spec's steps
  std::string data;        // empty: the generated corpus
  std::string data_format = "auto";  // auto | bytes | megatron | llmc (executor/data/dataset.h)
  // --valid-data (same format rules as --data), --valid-fraction, --eval-every, --eval-batches.
  EvalSpec eval;
  std::string init_from;             // GPT-2 safetensors to start from (weights_io.h)
  std::string save_weights;          // GPT-2 safetensors written after the last step
  std::string out = "strata-run";
  int max_ranks = 8;
  // Across nodes (executor/comm/node_layout.h): --hostfile FILE launches through mpirun on
  // its hosts; --nodes N --ranks-per-node K groups the ranks of one machine as if on N
  // nodes (the layout rules and node-local files, testable on one machine);
  // --pp-within-node refuses a plan whose pipeline groups would cross nodes.
  std::string hostfile;
  int ranks_per_node = 0;  // 0: not given
  // --nodes (the cluster shape's override, which every command with --cluster takes) is also
  // the simulated node count when --ranks-per-node is given; 0 otherwise.
  int simulated_nodes() const { return ranks_per_node != 0 ? static_cast<int>(shape.nodes) : 0; }
  bool pp_within_node = false;
  std::string nvme_dir = "/tmp";  // offload to NVMe: where the run directory goes
  int prefetch_depth = 2;         // ZeRO-3 offloaded params: layers fetched ahead
  std::optional<double> device_budget_mib;  // the device tier's budget instead of the cluster's
  std::string update_profile;     // fold the measured step into this profile (see update_profile)
  std::string profile;            // --profile: the prediction uses this profile (profile_choice.h)
  bool no_profile = false;        // --no-profile: the prediction uses none (not the cached one)
  std::optional<std::string> backend;  // --backend cpu|cuda; unset: cuda when a GPU is found
  int ranks_per_gpu = 1;          // CUDA: processes sharing one GPU (host-staged communicators)
  bool kernel_trace = false;      // CUDA: every layer op a span of its own in trace.json
  bool no_host_stream = false;    // CUDA: host AdamW on the issuing thread, not host functions
  bool cuda_graphs = false;       // CUDA (and --cuda-semantics): steps captured once, replayed
  std::string attention = "auto";  // CUDA: auto | cudnn | kernels (attention_choice.h)
  bool cuda_semantics = false;    // CPU backend with CUDA's stream semantics and the race check
  int threads = 0;                // CPU kernel threads per rank; 0: max(1, cores / ranks)
  double comm_timeout_s = 300;    // a rank blocked this long in one MPI call ends the job
  double stop_grace_s = 3;        // after SIGINT/SIGTERM: time the ranks get to finish a step
  std::string job_dir;            // hidden: set by the launching `strata run` for its ranks
  std::string liveness;           // hidden: the launcher's HOST:PORT (executor/comm/rank_liveness.h)
  // Checkpoints (executor/checkpoint): --save DIR writes DIR/step-NNNNNN/ every --save-every
  // steps (unset: after the last step only), keeping the last --keep (unset: all), and when a
  // signal stops the run with --save-on-signal; --resume DIR continues from the newest
  // complete one (or from DIR itself when it is a step directory).
  std::string save;
  std::optional<std::int64_t> save_every;
  std::optional<std::int64_t> keep;
  bool save_on_signal = false;
  std::string resume;
  bool plot = false;  // --plot: `strata plot`'s pictures of --out after a run that ends well
};

// Everything a rank needs, loaded and checked before any rank starts.
struct Validated {
  ModelSpec model;
  TrainSpec train;
  ClusterSpec cluster;
  Plan plan;
  ProfileChoice profile;  // --profile, --no-profile, else the cached or bundled one, parsed
  std::optional<double> device_budget_mib;
  std::string model_path, train_path, cluster_path, plan_path;
  std::string data_identity;   // the training tokens' identity, recorded in checkpoints
  std::string resume_dir;      // --resume resolved to one complete step directory
  std::int64_t start_step = 0; // its step: the first step this run trains
  // A GPU cluster run on the CPU backend (--backend cpu or --cuda-semantics) is priced, budgeted
  // and its MFU measured as this machine's CPU (the bundled local-cpu): `cluster` is that one,
  // and this names the GPU cluster asked for. Empty otherwise.
  std::string gpu_cluster_replaced;
  // The cluster with --device-budget-mib applied: what the fit check and the ranks' budgets use.
  ClusterSpec budget_cluster() const;
  bool uses_nvme() const;
  // "PLAN (model MODEL, train TRAIN)": how a refusal of the plan names the files it read.
  std::string plan_source() const;
};

// The run's token streams: training and (when asked for) validation. Opening validates each
// file's format; validate() checks the tokens against the model.
using RunData = data::TokenStreams;
RunData open_run_data(const RunOptions& o, const Validated& v);
// What a checkpoint records of the training tokens and checks on resume: the generated
// corpus, or the file (absolute path, format) and the tokens it trains on.
std::string data_identity(const RunOptions& o, const RunData& d);

// Loads and checks every input of a run (run_checks.cc): the specs, the plan against the
// model, every flag's range, --data and the validation data (every token against the
// model's vocabulary), --init-from and --save-weights, --out and --save (created; writable),
// --resume (a complete checkpoint of this model, seed and data, before the last step), --profile and
// --update-profile (parsed and validated; the latter's directory writable), the NVMe
// directory. ConfigError / InfeasiblePlan naming the flag or file otherwise. Nothing runs
// before it, so a bad argument costs no training.
Validated validate(const RunOptions& o);

// Without --backend, a GPU cluster on a machine with no GPU is refused (ConfigError naming
// --backend cpu and why no GPU was found): it would train on the CPU while named a GPU's.
// Reads only the cluster file, so it runs before validate() creates anything.
void check_cluster_has_its_device(const RunOptions& o, Backend chosen, const std::string& no_gpu_reason);

// Whether the plan fits in the budget_cluster() by the cost model's prediction (the same
// check as `strata predict`); when it does not, the one-line reason (exit 3 before anything
// is allocated). nullopt: it fits, or the cost model cannot price the plan on this cluster.
std::optional<std::string> does_not_fit(const RunOptions& o, const Validated& v);

// The argument list the ranks are started with: every input as an absolute path, the steps
// and backend decided here, and --job-dir.
std::vector<std::string> relaunch_args(const RunOptions& o, const Validated& v, Backend backend,
                                       const std::string& job_dir);

// The most ranks the launch puts on one node: --ranks-per-node, the hostfile's largest
// slot count, the launcher's ranks on this node, else the plan's rank count (one machine).
// What the CUDA check compares with this node's GPUs.
std::int64_t ranks_on_one_node(const RunOptions& o, const Validated& v);

// The measured step time and offload bytes beside the cost model's for the same plan, priced
// with v.profile.
void print_predicted(const Validated& v, const StepReport& rep, std::ostream& out);

// --update-profile: folds the run into the profile's fed-back factors (which run fits which:
// cost_model/pricing/profile_feedback.h) and rewrites the file.
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
