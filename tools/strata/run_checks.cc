// `strata run`'s checks before any rank starts (see run_common.h): every input and flag,
// the fit of the plan in memory, and the argument list the ranks get. A bad argument found
// after 17 s of training, or a plan found not to fit after allocating, is what this file is
// here to prevent.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/pricing/cost_model.h"
#include "cost_model/specs/errors.h"
#include "cost_model/specs/limits.h"
#include "cost_model/specs/partition.h"
#include "cost_model/checks/program_check.h"
#include "cost_model/specs/units.h"
#include "executor/checkpoint/manifest.h"
#include "executor/comm/hostfile.h"
#include "executor/data/dataset.h"
#include "executor/runtime/mpi_launch.h"
#include "executor/runtime/plan_checks.h"
#include "executor/weights/hf_tensor.h"
#include "executor/weights/weights_io.h"
#include "planner/planner.h"
#include "tools/strata/inputs.h"
#include "tools/strata/memory_advice.h"
#include "tools/strata/out_dir.h"
#include "tools/strata/run_common.h"

namespace strata::cli {
namespace fs = std::filesystem;
namespace {

std::string errno_message() { return std::error_code(errno, std::generic_category()).message(); }

// A number flag in (0, max]: finite, positive, bounded (NaN fails every comparison).
void check_positive_flag(const char* flag, double value, double max, const char* unit) {
  if (!(value > 0) || !(value <= max)) {
    throw ConfigError(fmt::format("{}: value {}, expected a finite number of {} in (0, {}]",
                                  flag, value, unit, max));
  }
}

void check_flags(const RunOptions& o) {
  if (o.steps && (*o.steps < 1 || *o.steps > limits::kSteps)) {
    throw ConfigError(fmt::format("--steps: value {}, expected an integer in [1, {}]", *o.steps,
                                  limits::kSteps));
  }
  if (o.prefetch_depth < 1 || o.prefetch_depth > limits::kPrefetchDepth) {
    throw ConfigError(fmt::format("--prefetch-depth: value {}, expected an integer in [1, {}]",
                                  o.prefetch_depth, limits::kPrefetchDepth));
  }
  if (o.device_budget_mib) {
    check_positive_flag("--device-budget-mib", *o.device_budget_mib, limits::kBudgetMib, "MiB");
  }
  check_positive_flag("--comm-timeout-s", o.comm_timeout_s, limits::kCommTimeoutS, "seconds");
  check_positive_flag("--stop-grace-s", o.stop_grace_s, limits::kCommTimeoutS, "seconds");
  if (o.max_ranks < 1) {
    throw ConfigError(fmt::format("--max-ranks: value {}, expected >= 1", o.max_ranks));
  }
  if (o.ranks_per_gpu < 1) {
    throw ConfigError(fmt::format("--ranks-per-gpu: value {}, expected >= 1", o.ranks_per_gpu));
  }
  if (o.ranks_per_node < 0) {
    throw ConfigError(fmt::format("--ranks-per-node: value {}, expected an integer >= 1",
                                  o.ranks_per_node));
  }
  if (o.ranks_per_node != 0 && o.shape.nodes == 0) {
    throw ConfigError(fmt::format("--ranks-per-node {}: give --nodes N too (the ranks of this "
                                  "machine grouped as if on N nodes)", o.ranks_per_node));
  }
  if (o.simulated_nodes() != 0 && !o.hostfile.empty()) {
    throw ConfigError("--hostfile and --nodes --ranks-per-node: the hostfile names the nodes; "
                      "give one of the two");
  }
  check_eval_spec(o.eval, EvalSpecNames{});
  if (o.save.empty() && (o.save_every || o.keep || o.save_on_signal)) {
    throw ConfigError("--save-every, --keep and --save-on-signal: need --save DIR");
  }
  if (o.save_every && (*o.save_every < 1 || *o.save_every > limits::kSteps)) {
    throw ConfigError(fmt::format("--save-every: value {}, expected an integer in [1, {}]",
                                  *o.save_every, limits::kSteps));
  }
  if (o.keep && (*o.keep < 1 || *o.keep > limits::kSteps)) {
    throw ConfigError(fmt::format("--keep: value {}, expected an integer in [1, {}]", *o.keep,
                                  limits::kSteps));
  }
  if (!o.resume.empty() && !o.init_from.empty()) {
    throw ConfigError("--resume and --init-from: a resumed run takes its weights from the "
                      "checkpoint; give one of them");
  }
}

// Every training and validation token inside the model's vocabulary, and enough of them
// for one sequence.
void check_data(const RunOptions& o, Validated& v) {
  const RunData d = open_run_data(o, v);
  v.data_identity = data_identity(o, d);
  const std::string train_name =
      o.data.empty() ? "the generated corpus" : fmt::format("--data '{}'", o.data);
  data::check_tokens(d.train_tokens, v.model.vocab, v.model.seq_len,
                     o.eval.valid_fraction > 0 ? train_name + " (its training part)" : train_name,
                     v.model_path);
  if (o.eval.has_validation()) {
    data::check_tokens(d.valid_tokens, v.model.vocab, v.model.seq_len,
                       o.eval.valid_data.empty()
                           ? fmt::format("--valid-fraction {}: the held-out part of {}",
                                         o.eval.valid_fraction, train_name)
                           : fmt::format("--valid-data '{}'", o.eval.valid_data),
                       v.model_path);
  }
}

// --init-from: a weights file of this model's shapes; --save-weights: an existing writable
// directory, or the --out directory that validate() creates.
void check_weights_flags(const RunOptions& o, const Validated& v) {
  // The weights files carry Hugging Face names (executor/weights/hf_tensor.h: GPT-2's or
  // Llama's); a family with neither is refused here, before any rank starts.
  if (!o.init_from.empty() || !o.save_weights.empty()) {
    try {
      weights::hf_names(v.model);
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("{}: --init-from and --save-weights: {}", v.model_path, e.what()));
    }
  }
  if (!o.init_from.empty()) weights::check_weights_file(o.init_from, v.model, "--init-from");
  if (o.save_weights.empty()) return;
  const fs::path parent = fs::absolute(o.save_weights).parent_path();
  const bool is_out = parent.lexically_normal() == fs::absolute(o.out).lexically_normal();
  std::error_code ec;
  if (!is_out && (!fs::is_directory(parent, ec) || ::access(parent.c_str(), W_OK | X_OK) != 0)) {
    throw ConfigError(fmt::format("--save-weights: '{}': directory '{}' does not exist or is "
                                  "not writable", o.save_weights, parent.string()));
  }
}

void check_nvme_dir(const RunOptions& o, const Plan& plan) {
  const OffloadPlan& off = plan.offload;
  if (off.optimizer != OffloadTier::kNvme && off.gradients != OffloadTier::kNvme &&
      off.params != OffloadTier::kNvme) {
    return;
  }
  // Like `strata calibrate --nvme-dir`: an existing directory (a typo creates nothing).
  std::error_code ec;
  if (!fs::is_directory(o.nvme_dir, ec)) {
    throw ConfigError(fmt::format("--nvme-dir: '{}' is not an existing directory{}", o.nvme_dir,
                                  ec ? ": " + ec.message() : std::string()));
  }
  if (::access(o.nvme_dir.c_str(), W_OK | X_OK) != 0) {
    throw ConfigError(fmt::format("--nvme-dir: directory '{}' is not writable: {}", o.nvme_dir,
                                  errno_message()));
  }
}

// --resume: a complete checkpoint of this very model, data stream and batch, and a step
// this run has still to train.
void check_resume(const RunOptions& o, Validated& v) {
  if (o.resume.empty()) return;
  const fs::path dir = fs::absolute(checkpoint::resolve_resume(o.resume));
  const checkpoint::Manifest m = checkpoint::read_complete(dir);
  const std::string file = (dir / checkpoint::kManifestFile).string();
  // Each refusal names the flag that makes this run the checkpoint's.
  const auto differ = [&](const std::string& field, const Json& got, const Json& want,
                          const std::string& whose, const std::string& fix) {
    return ConfigError(fmt::format("--resume: {}: field '{}' is {}, expected {} ({}); {}", file,
                                   field, got.dump(), want.dump(), whose, fix));
  };
  const std::string same_train = "pass the --train the checkpoint's run had";
  const Json got_model = m.model.to_json(), want_model = v.model.to_json();
  for (const auto& [key, want] : want_model.items()) {
    const Json got = got_model.contains(key) ? got_model.at(key) : Json();
    if (got != want) {
      throw differ("model." + key, got, want, "the run's model " + v.model_path,
                   "pass the --model the checkpoint's run had");
    }
  }
  if (m.seed != v.train.seed) {
    throw differ("seed", m.seed, v.train.seed, "the run's train spec " + v.train_path, same_train);
  }
  if (m.train.global_batch != v.train.global_batch) {
    throw differ("train.global_batch", m.train.global_batch, v.train.global_batch,
                 "the run's train spec " + v.train_path, same_train);
  }
  if (m.data != v.data_identity) {
    // data_identity: "generated corpus, N training tokens" or "PATH (FORMAT), N training tokens".
    constexpr std::string_view kGenerated = "generated corpus";
    const bool was_generated = m.data.rfind(kGenerated, 0) == 0;
    std::string fix;
    if (was_generated && !o.data.empty()) {
      fix = "drop --data: the checkpoint's run trained on the generated corpus";
    } else if (!was_generated && o.data.empty()) {
      const std::string source = m.data.substr(0, m.data.rfind(" ("));
      fix = fmt::format("add --data {} (and its --data-format) as the checkpoint's run had", source);
    } else {
      fix = "pass the --data, --data-format and --valid-fraction the checkpoint's run had";
    }
    throw differ("data", m.data, v.data_identity, "the run's data", fix);
  }
  if (m.step >= v.train.steps) {
    throw ConfigError(fmt::format("--resume: {}: field 'step' is {}, expected less than the "
                                  "run's {} steps; add --steps {} or more to train on from it",
                                  file, m.step, v.train.steps, m.step + 1));
  }
  v.resume_dir = dir.string();
  v.start_step = m.step;
}

// --update-profile: parsed and validated now, and its directory writable (the file is
// rewritten atomically beside itself at the end).
void check_update_profile(const std::string& path) {
  if (path.empty()) return;
  Profile::load(path);
  const fs::path dir = fs::absolute(path).parent_path();
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    throw ConfigError(fmt::format("--update-profile: '{}' cannot be rewritten: its directory "
                                  "'{}' is not writable: {}", path, dir.string(),
                                  errno_message()));
  }
}

}  // namespace

RunData open_run_data(const RunOptions& o, const Validated& v) {
  const data::DataFormat format = data::parse_data_format(o.data_format, "--data-format");
  return data::open_token_streams(o.data.empty() ? data::Dataset::generated(v.train.seed)
                                                 : data::Dataset::open(o.data, format, "--data"),
                                  o.eval.valid_data, o.eval.valid_fraction, format, "--valid-data");
}

std::string data_identity(const RunOptions& o, const RunData& d) {
  const std::string source =
      o.data.empty() ? std::string("generated corpus")
                     : fmt::format("{} ({})", fs::absolute(o.data).string(), o.data_format);
  return fmt::format("{}, {} training tokens", source, d.train_tokens.count);
}

ClusterSpec Validated::budget_cluster() const {
  ClusterSpec c = cluster;
  if (device_budget_mib) c.device.memory_bytes = *device_budget_mib * units::kMiB;
  return c;
}

std::string Validated::plan_source() const {
  return fmt::format("{} (model {}, train {})", plan_path, model_path, train_path);
}

bool Validated::uses_nvme() const {
  return plan.offload.optimizer == OffloadTier::kNvme ||
         plan.offload.gradients == OffloadTier::kNvme || plan.offload.params == OffloadTier::kNvme;
}

Validated validate(const RunOptions& o) {
  check_flags(o);
  Validated v;
  v.model_path = fs::absolute(resolve_config("models", o.model, "--model")).string();
  v.train_path = fs::absolute(resolve_config("train", o.train, "--train")).string();
  v.cluster_path = fs::absolute(resolve_config("clusters", o.cluster, "--cluster")).string();
  v.plan_path = fs::absolute(resolve_config("plans", o.plan, "--plan")).string();
  v.model = ModelSpec::load(v.model_path);
  v.train = TrainSpec::load(v.train_path);
  // --nodes N --ranks-per-node K: the prediction and the budgets see the nodes the ranks are
  // grouped into (K "GPUs" a node, unless --gpus-per-node says otherwise).
  ClusterShape shape = o.shape;
  if (o.ranks_per_node != 0 && shape.gpus_per_node == 0) shape.gpus_per_node = o.ranks_per_node;
  v.cluster = load_cluster(v.cluster_path, shape);
  const bool on_cpu = o.cuda_semantics || (o.backend && *o.backend == "cpu");
  if (on_cpu && v.cluster.backend == Backend::kCuda) {
    // What trains is this machine's CPU: the prediction, the ranks' budgets and MFU say so.
    v.gpu_cluster_replaced = v.cluster.name;
    v.cluster_path = fs::absolute(resolve_config("clusters", "local-cpu", "--cluster")).string();
    v.cluster = load_cluster(v.cluster_path, ClusterShape{});
  }
  v.plan = Plan::load(v.plan_path);
  v.device_budget_mib = o.device_budget_mib;
  if (o.steps) v.train.steps = *o.steps;
  // What every backend needs of the plan (the CUDA backend's own limits: check_cuda_run,
  // once that backend is chosen), its Program's deadlock freedom included.
  check_plan_runs(v.model, v.train, v.plan, Backend::kCpu, o.prefetch_depth, v.plan_source());
  // --max-ranks bounds what this machine starts (--nodes included: its nodes are this
  // machine); a hostfile or an outside launcher (mpirun, srun) says how many ranks there
  // are and where, checked against the plan by check_node_layout.
  const bool launched_elsewhere = !o.hostfile.empty() || detect_launch_env().under_launcher;
  if (!launched_elsewhere && v.plan.world_size() > o.max_ranks) {
    throw InfeasiblePlan(fmt::format(
        "{}: tp*pp*dp = {}*{}*{} = {} ranks, more than --max-ranks {} allows on this machine",
        v.plan_path, v.plan.tp, v.plan.pp, v.plan.dp, v.plan.world_size(), o.max_ranks));
  }
  check_nvme_dir(o, v.plan);
  check_data(o, v);
  check_weights_flags(o, v);
  v.profile = choose_profile(ProfileFlags{o.profile, o.no_profile}, v.cluster);
  check_update_profile(o.update_profile);
  check_out_dir(o.out);
  if (!o.save.empty()) check_out_dir(o.save, "--save");
  check_resume(o, v);
  return v;
}

void check_cluster_has_its_device(const RunOptions& o, Backend chosen, const std::string& no_gpu_reason) {
  if (o.backend || o.cuda_semantics || chosen != Backend::kCpu) return;
  const ClusterSpec cluster = load_cluster(o.cluster, o.shape);
  if (cluster.backend != Backend::kCuda) return;
  throw ConfigError(fmt::format(
      "--cluster {}: a GPU cluster (backend cuda), and this machine has no GPU ({}); add "
      "--backend cpu to train on this machine's CPU (priced as local-cpu), or run where the "
      "cluster's GPUs are", o.cluster, no_gpu_reason));
}

std::optional<std::string> does_not_fit(const RunOptions& o, const Validated& v) {
  const ClusterSpec cluster = v.budget_cluster();
  Prediction prediction;
  try {
    CostModelOptions options;
    options.prefetch_depth = o.prefetch_depth;  // the Program the ranks will replay
    prediction = predict(v.model, cluster, v.train, v.plan, v.profile ? &*v.profile : nullptr,
                         options);
  } catch (const InfeasiblePlan&) {
    // The plan breaks a rule of this cluster's shape (it has fewer "GPUs" than --max-ranks
    // lets the CPU backend start): no prediction to judge by; the allocator still guards.
    return std::nullopt;
  }
  const MemoryOvershoot over = memory_overshoot(prediction, cluster, v.plan.world_size());
  if (over.fits()) return std::nullopt;
  const RankMemory* worst = worst_device_rank(prediction.per_rank);
  const std::string advice = worst != nullptr ? memory_advice(*worst, v.plan, cluster) : "";
  return fmt::format(
      "{}: the plan does not fit on cluster {}{}: predicted peak device {} per rank of {} "
      "(over by device {}/rank, host {}/node, nvme {}/node){}; `strata predict` with the same "
      "--plan, --model, --train and --cluster shows each stage's memory by kind",
      v.plan_path, v.cluster.name,
      v.device_budget_mib ? fmt::format(" with --device-budget-mib {:g}", *v.device_budget_mib)
                          : std::string(),
      bytes_label(prediction.memory_bytes.device), bytes_label(cluster.device.memory_bytes),
      bytes_label(std::max(over.device_bytes, 0.0)), bytes_label(std::max(over.host_bytes, 0.0)),
      bytes_label(std::max(over.nvme_bytes, 0.0)), advice.empty() ? "" : ": " + advice);
}

std::int64_t ranks_on_one_node(const RunOptions& o, const Validated& v) {
  if (o.ranks_per_node != 0) return o.ranks_per_node;
  if (!o.hostfile.empty()) {
    std::int64_t most = 0;
    for (const HostSlots& h : read_hostfile(o.hostfile)) most = std::max<std::int64_t>(most, h.slots);
    return std::min(most, v.plan.world_size());
  }
  const LaunchEnv launch = detect_launch_env();
  if (launch.under_launcher) return launch.local_size;
  return v.plan.world_size();
}

std::vector<std::string> relaunch_args(const RunOptions& o, const Validated& v, Backend backend,
                                       const std::string& job_dir) {
  std::vector<std::string> args = {"run",       "--plan",    v.plan_path,
                                   "--model",   v.model_path, "--train",
                                   v.train_path, "--cluster", v.cluster_path,
                                   "--steps",   std::to_string(v.train.steps),
                                   "--out",     fs::absolute(o.out).string(),
                                   "--max-ranks", std::to_string(o.max_ranks),
                                   "--nvme-dir",  fs::absolute(o.nvme_dir).string(),
                                   "--prefetch-depth", std::to_string(o.prefetch_depth),
                                   "--comm-timeout-s", fmt::format("{}", o.comm_timeout_s),
                                   "--job-dir", job_dir};
  for (auto [flag, value] : {std::pair{"--nodes", o.shape.nodes},
                             std::pair{"--gpus-per-node", o.shape.gpus_per_node}}) {
    if (value == 0) continue;  // the file's
    args.push_back(flag);
    args.push_back(std::to_string(value));
  }
  // The ranks of a --hostfile job find their hosts themselves (run.cc); those of --nodes
  // --ranks-per-node are told the grouping.
  if (o.ranks_per_node != 0) {
    args.insert(args.end(), {"--ranks-per-node", std::to_string(o.ranks_per_node)});
  }
  if (o.pp_within_node) args.push_back("--pp-within-node");
  if (o.device_budget_mib) {
    args.push_back("--device-budget-mib");
    args.push_back(fmt::format("{}", *o.device_budget_mib));
  }
  args.push_back("--backend");
  args.push_back(to_string(backend));  // every rank runs the backend chosen here
  if (o.cuda_semantics) args.push_back("--cuda-semantics");
  args.push_back("--ranks-per-gpu");
  args.push_back(std::to_string(o.ranks_per_gpu));
  if (o.kernel_trace) args.push_back("--kernel-trace");
  if (o.no_host_stream) args.push_back("--no-host-stream");
  if (o.cuda_graphs) args.push_back("--cuda-graphs");
  args.insert(args.end(), {"--attention", o.attention});
  if (!o.data.empty()) {
    args.push_back("--data");
    args.push_back(fs::absolute(o.data).string());
  }
  args.insert(args.end(), {"--data-format", o.data_format, "--valid-fraction",
                           fmt::format("{}", o.eval.valid_fraction), "--eval-every",
                           std::to_string(o.eval.eval_every), "--eval-batches",
                           std::to_string(o.eval.eval_batches)});
  for (const auto& [flag, path] : {std::pair{"--valid-data", o.eval.valid_data},
                                   std::pair{"--init-from", o.init_from},
                                   std::pair{"--save-weights", o.save_weights}}) {
    if (path.empty()) continue;
    args.push_back(flag);
    args.push_back(fs::absolute(path).string());
  }
  if (!o.update_profile.empty()) {
    args.push_back("--update-profile");
    args.push_back(fs::absolute(o.update_profile).string());
  }
  // The profile chosen here, so that every rank prices with it even if a calibration
  // caches a newer one meanwhile.
  if (v.profile) {
    args.push_back("--profile");
    args.push_back(fs::absolute(v.profile.path).string());
  } else {
    args.push_back("--no-profile");
  }
  if (!o.save.empty()) {
    args.push_back("--save");
    args.push_back(fs::absolute(o.save).string());
  }
  if (o.save_every) args.insert(args.end(), {"--save-every", std::to_string(*o.save_every)});
  if (o.keep) args.insert(args.end(), {"--keep", std::to_string(*o.keep)});
  if (o.save_on_signal) args.push_back("--save-on-signal");
  // The checkpoint chosen here, so every rank resumes from the same one.
  if (!v.resume_dir.empty()) args.insert(args.end(), {"--resume", v.resume_dir});
  return args;
}

}  // namespace strata::cli
