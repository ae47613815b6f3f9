// `strata run`: trains a model for real with a plan, on the CPU backend or on GPUs with the
// CUDA backend (chosen by --backend, else CUDA when a GPU is present and the plan fits this
// machine's GPUs). One run loop for both: each rank builds its backend (run_cuda.cc makes the
// CUDA one), then the one engine replays the plan's Program. Everything is validated BEFORE
// any rank starts (the plan against the model and the global batch, the rank count against
// --max-ranks and the GPUs, the data file, the output directory), then the command
// re-launches itself under mpirun with t*p*d ranks (one rank runs in-process). Rank 0
// prints one progress line per step and writes DIR/report.json (a StepReport of kind
// "measurement"), DIR/trace.json (Chrome trace of the last step, one process per rank) and
// DIR/memory_tags.json (peak bytes per allocation tag per rank).
// Offload plans keep their NVMe tensors in a run directory of their own under --nvme-dir
// (an existing writable directory, checked before launch), removed at the end and when a
// rank fails; the report then carries the bytes moved per link per step ("transfers"), and
// the last lines print them and the step time beside the cost model's predictions.
// Deliberately not here: the training itself (executor/engine), the report's arithmetic
// (executor/report).
#include <mpi.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <memory>
#include <ostream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cost_model/chrome_trace.h"
#include "cost_model/cost_model.h"
#include "cost_model/errors.h"
#include "cost_model/compute_model.h"
#include "cost_model/profile_feedback.h"
#include "cost_model/time_model.h"
#include "executor/comm/mpi_check.h"
#include "executor/comm/mpi_communicator.h"
#include "executor/data/corpus.h"
#include "executor/engine/rank_training.h"
#include "executor/report/run_report.h"
#include "executor/runtime/backend_select.h"
#include "executor/runtime/mpi_launch.h"
#include "tools/strata/commands.h"
#include "tools/strata/inputs.h"
#include "tools/strata/run_common.h"

namespace strata::cli {
namespace fs = std::filesystem;
namespace {

void check_offload_options(const RunOptions& o, const Plan& plan) {
  if (o.prefetch_depth < 1) {
    throw ConfigError(fmt::format("--prefetch-depth: value {}, expected >= 1", o.prefetch_depth));
  }
  if (o.device_budget_mib < 0) {
    throw ConfigError(fmt::format("--device-budget-mib: value {}, expected > 0 (or 0: the "
                                  "cluster's device memory)", o.device_budget_mib));
  }
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
                                  std::error_code(errno, std::generic_category()).message()));
  }
}

Validated validate(const RunOptions& o) {
  Validated v;
  v.model_path = fs::absolute(resolve_config("models", o.model, "--model")).string();
  v.train_path = fs::absolute(resolve_config("train", o.train, "--train")).string();
  v.cluster_path = fs::absolute(resolve_config("clusters", o.cluster, "--cluster")).string();
  v.plan_path = fs::absolute(resolve_config("plans", o.plan, "--plan")).string();
  v.model = ModelSpec::load(v.model_path);
  v.train = TrainSpec::load(v.train_path);
  v.cluster = ClusterSpec::load(v.cluster_path);
  v.plan = Plan::load(v.plan_path);
  if (o.steps < 0) throw ConfigError(fmt::format("--steps: value {}, expected >= 1", o.steps));
  if (o.steps > 0) v.train.steps = o.steps;
  if (v.train.steps < 1) {
    throw ConfigError(fmt::format("{}: steps = {}, expected >= 1 (or pass --steps)", v.train_path,
                                  v.train.steps));
  }
  v.plan.check_against_model(v.model, v.train,
                             fmt::format("{} (model {}, train {})", v.plan_path, v.model_path,
                                         v.train_path));
  if (v.plan.world_size() > o.max_ranks) {
    throw InfeasiblePlan(fmt::format(
        "{}: tp*pp*dp = {}*{}*{} = {} ranks, more than --max-ranks {} allows on this machine",
        v.plan_path, v.plan.tp, v.plan.pp, v.plan.dp, v.plan.world_size(), o.max_ranks));
  }
  check_offload_options(o, v.plan);
  // Tokens are bytes: every id 0..255 must have an embedding row.
  if (v.model.vocab < 256) {
    throw ConfigError(fmt::format("{}: vocab = {}, expected >= 256 (tokens are bytes)",
                                  v.model_path, v.model.vocab));
  }
  if (!o.data.empty()) data::check_byte_file(o.data, v.model.seq_len + 1, "--data");
  std::error_code ec;
  fs::create_directories(o.out, ec);
  if (ec || !fs::is_directory(o.out)) {
    throw ConfigError(fmt::format("--out: cannot create directory '{}': {}", o.out, ec.message()));
  }
  return v;
}

std::vector<std::string> relaunch_args(const RunOptions& o, const Validated& v, Backend backend) {
  std::vector<std::string> args = {"run",       "--plan",    v.plan_path,
                                   "--model",   v.model_path, "--train",
                                   v.train_path, "--cluster", v.cluster_path,
                                   "--steps",   std::to_string(v.train.steps),
                                   "--out",     fs::absolute(o.out).string(),
                                   "--max-ranks", std::to_string(o.max_ranks),
                                   "--nvme-dir",  fs::absolute(o.nvme_dir).string(),
                                   "--prefetch-depth", std::to_string(o.prefetch_depth),
                                   "--device-budget-mib", fmt::format("{}", o.device_budget_mib)};
  args.push_back("--backend");
  args.push_back(to_string(backend));  // every rank runs the backend chosen here
  args.push_back("--ranks-per-gpu");
  args.push_back(std::to_string(o.ranks_per_gpu));
  if (!o.data.empty()) {
    args.push_back("--data");
    args.push_back(fs::absolute(o.data).string());
  }
  if (!o.update_profile.empty()) {
    args.push_back("--update-profile");
    args.push_back(fs::absolute(o.update_profile).string());
  }
  if (!o.profile.empty()) {
    args.push_back("--profile");
    args.push_back(fs::absolute(o.profile).string());
  }
  return args;
}

}  // namespace

// The measured step time and offload bytes beside the cost model's for the same plan: with
// --profile the calibrated rates, else the cluster file's.
void print_predicted(const Validated& v, const StepReport& rep, const std::string& profile_path,
                     std::ostream& out) {
  double predicted_s = 0;
  std::optional<Profile> profile;
  if (!profile_path.empty()) profile = Profile::load(profile_path);
  try {
    predicted_s = predict(v.model, v.cluster, v.train, v.plan,
                          profile ? &*profile : nullptr).step_time_s;
  } catch (const InfeasiblePlan& e) {
    out << fmt::format("no prediction for this plan on cluster {}: {}\n", v.cluster.name, e.what());
  }
  if (predicted_s > 0) {
    out << fmt::format("step time {:.4f} s measured, {:.4f} s predicted by the cost model "
                       "(cluster {}, {})\n", rep.step_time_s, predicted_s, v.cluster.name,
                       profile ? "profile " + profile_path : std::string("no profile"));
  }
  if (rep.transfers.empty()) return;
  TransferBytes want;
  for (std::int64_t r = 0; r < v.plan.pp; ++r) {
    const TransferBytes t = offload_transfer_bytes(v.model, v.plan, v.train, r);
    want.device_to_host = std::max(want.device_to_host, t.device_to_host);
    want.host_to_device = std::max(want.host_to_device, t.host_to_device);
    want.host_to_nvme = std::max(want.host_to_nvme, t.host_to_nvme);
    want.nvme_to_host = std::max(want.nvme_to_host, t.nvme_to_host);
  }
  const TransferBytes& got = rep.transfers;
  out << fmt::format("offload bytes per step (worst rank), measured / predicted: device->host "
                     "{:.0f} / {:.0f}, host->device {:.0f} / {:.0f}, host->nvme {:.0f} / {:.0f}, "
                     "nvme->host {:.0f} / {:.0f}\n",
                     got.device_to_host, want.device_to_host, got.host_to_device,
                     want.host_to_device, got.host_to_nvme, want.host_to_nvme, got.nvme_to_host,
                     want.nvme_to_host);
}

// --update-profile: the run's report against the prediction with the same profile, folded
// into the profile's compute_time_scale and comm_time_scale (profile_feedback.h) and written
// back atomically. Rank 0 only, after the report is written.
void update_profile(const std::string& path, const Validated& v, const StepReport& measured,
                    std::ostream& out) {
  Profile profile = Profile::load(path);
  // On the CPU backend a rank keeps threads_per_rank cores busy; a GPU rank, one GPU.
  const std::int64_t threads =
      v.cluster.backend == Backend::kCpu ? std::max<std::int64_t>(profile.threads_per_rank, 1) : 1;
  RunPlacement placement;
  placement.busy_cores = plan_ranks_per_node(v.plan, v.cluster) * threads;
  placement.node_cores =
      v.cluster.backend == Backend::kCpu ? v.cluster.host.cpu_cores : v.cluster.gpus_per_node;
  const FeedbackFit fit =
      fold_run_into_profile(profile, measured, placement, [&](const Profile& p) {
        return predict(v.model, v.cluster, v.train, v.plan, &p);
      });
  write_json_file(path, profile.to_json());
  std::string fitted;
  for (const auto& [name, u] : {std::pair{"compute_time_scale", fit.compute},
                                std::pair{"comm_time_scale", fit.comm},
                                std::pair{"busy_cores_slowdown", fit.busy_cores},
                                std::pair{"time_sliced_sync_s", fit.time_sliced}}) {
    if (!u.fitted) continue;
    fitted += fmt::format("{}{} {:.4g} -> {:.4g} (this run asks for {:.4g}; trimmed mean of {} runs)",
                          fitted.empty() ? "" : "; ", name, u.old_scale, u.new_scale,
                          u.run_scale, u.runs);
  }
  out << fmt::format("updated {} (step measured {:.4f} s, predicted {:.4f} s): {}\n", path,
                     fit.measured_step_s, fit.predicted_step_s, fitted);
}

namespace {

// One rank's training, the same loop for every backend; rank 0 prints progress to `out` and
// writes the files.
void train_rank(const RunOptions& o, const Validated& v, MpiCommunicator& world, Backend backend,
                std::ostream& out) {
  if (world.size() != v.plan.world_size()) {
    throw InfeasiblePlan(fmt::format("{}: the plan needs {} ranks, mpirun started {}", v.plan_path,
                                     v.plan.world_size(), world.size()));
  }
  const std::vector<std::uint8_t> corpus =
      o.data.empty() ? data::generated_corpus(v.train.seed, data::kGeneratedCorpusBytes)
                     : data::load_byte_file(o.data, v.model.seq_len + 1, "--data");
  TierBudgets budgets = TierBudgets::per_rank(v.cluster);
  if (o.device_budget_mib > 0) {
    budgets.device_bytes = static_cast<std::int64_t>(o.device_budget_mib * (1 << 20));
  }
  engine::OffloadOptions offload;
  offload.nvme_dir = o.nvme_dir;
  offload.prefetch_depth = o.prefetch_depth;
  const engine::BackendMaker make_backend =
      backend == Backend::kCuda ? cuda_backend_maker(o) : engine::cpu_backend_maker();
  engine::RankTraining rank(v.model, v.train, v.plan, world, budgets, corpus, offload,
                            make_backend);
  const bool printer = world.rank() == 0;
  if (printer) {
    out << fmt::format("strata run: {} on {} ranks ({} backend, {}), model {}, {} steps of {} "
                       "sequences x {} tokens, data {}\n",
                       v.plan.label(), v.plan.world_size(), to_string(backend),
                       to_string(rank.backend().compute_dtype()), v.model.name, v.train.steps,
                       v.train.global_batch, v.model.seq_len, o.data.empty() ? "generated" : o.data);
  }
  std::vector<report::StepSample> samples;
  std::vector<double> losses;
  std::vector<TraceEvent> last_events;
  TransferBytes transfers;  // this rank's, last step (the same every step)
  const double tokens = static_cast<double>(v.train.global_batch * v.model.seq_len);
  const auto t0 = std::chrono::steady_clock::now();
  for (std::int64_t s = 0; s < v.train.steps; ++s) {
    engine::StepResult r = rank.engine().step(s);
    samples.push_back({r.step_s, r.parts});
    losses.push_back(r.loss);
    last_events = std::move(r.events);
    transfers = r.transfers;
    if (printer) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double eta = elapsed / static_cast<double>(s + 1) * static_cast<double>(v.train.steps - s - 1);
      out << fmt::format("step {:>5}/{}  loss {:.4f}  {:>9.0f} tokens/s  ETA {:.1f} s\n", s + 1,
                         v.train.steps, r.loss, tokens / r.step_s, eta)
          << std::flush;
    }
  }
  const auto summaries = report::gather_summaries(
      world, report::summarize_rank(rank.groups(), rank.allocator(), samples, last_events));
  // The worst rank's bytes per link (ranks of different pipeline stages move different bytes).
  double mine[4] = {transfers.device_to_host, transfers.host_to_device, transfers.host_to_nvme,
                    transfers.nvme_to_host};
  double worst[4] = {0, 0, 0, 0};
  MPI_CHECK(MPI_Reduce(mine, worst, 4, MPI_DOUBLE, MPI_MAX, 0, world.handle()));
  if (!printer) return;
  StepReport rep =
      report::build_run_report(v.model, v.cluster, v.train, v.plan, summaries, losses);
  rep.transfers = TransferBytes{worst[0], worst[1], worst[2], worst[3]};
  const fs::path dir(o.out);
  write_json_file((dir / "report.json").string(), rep.to_json());
  write_chrome_trace((dir / "trace.json").string(), report::build_run_trace(summaries));
  write_json_file((dir / "memory_tags.json").string(), report::memory_tags_json(summaries));
  out << fmt::format("median step {:.4f} s, {:.0f} tokens/s, {:.4f} TFLOP/s per rank (MFU {}), "
                     "peak device memory {} GiB (worst rank)\n",
                     rep.step_time_s, rep.tokens_per_s, rep.tflops_per_gpu, percent(rep.mfu),
                     gib(rep.memory_bytes.device));
  print_predicted(v, rep, o.profile, out);
  out << fmt::format("wrote {}/report.json, trace.json, memory_tags.json\n", o.out);
  if (!o.update_profile.empty()) update_profile(o.update_profile, v, rep, out);
}

int run_command(const RunOptions& o, std::ostream& out) {
  // --backend wins; without it a GPU is used when present and the plan fits this machine's
  // GPUs, and the CPU backend otherwise. Chosen first, so a bad --backend leaves nothing
  // behind (validate creates the output directory).
  Backend backend = choose_backend(o.backend, cuda_device_probe());
  const Validated v = validate(o);
  if (backend == Backend::kCuda) {
    try {
      check_cuda_run(o, v);
    } catch (const ConfigError& e) {
      if (o.backend) throw;  // asked for by name: the reason is the answer
      out << fmt::format("backend cpu: a GPU is present, but {}\n", e.what());
      backend = Backend::kCpu;
    }
  }
  if (v.plan.world_size() > 1 && !running_under_mpirun()) {
    RelaunchOptions relaunch;
    relaunch.ranks = static_cast<int>(v.plan.world_size());
    const int rc = relaunch_under_mpirun(relaunch, relaunch_args(o, v, backend));
    return rc;  // the ranks printed their own errors
  }
  MpiSession session(nullptr, nullptr);
  std::unique_ptr<MpiCommunicator> world = session.world();
  if (world->size() == 1) {
    train_rank(o, v, *world, backend, out);  // errors reach main's single catch point
    return 0;
  }
  // Several ranks: a rank that fails cannot unwind alone (its peers would wait forever in a
  // collective), so it prints its error once and aborts the whole job with exit code 2.
  try {
    train_rank(o, v, *world, backend, out);
  } catch (const std::exception& e) {
    std::cerr << fmt::format("strata: rank {}: {}\n", world->rank(), e.what()) << std::flush;
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  world.reset();  // communicators go before the session finalises MPI
  return 0;
}

}  // namespace

void add_run_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* command = app.add_subcommand(
      "run", "Train a model with a plan on the CPU backend or on GPUs (re-launched under mpirun "
             "for t*p*d ranks), and write a measured report and trace");
  command->add_option("--plan", options->plan, "plan: a JSON file or a bundled name")->required();
  command->add_option("--model", options->model, "model: a JSON file or a bundled name")->required();
  command->add_option("--train", options->train, "training setup: a JSON file or a bundled name")
      ->required();
  command->add_option("--cluster", options->cluster,
                      "cluster (memory budget and peak FLOP/s for MFU); default local-cpu");
  command->add_option("--steps", options->steps, "steps to train (default: the train spec's)");
  command->add_option("--data", options->data,
                      "train on the bytes of this file (default: generated pseudo-English)");
  command->add_option("--out", options->out, "directory for report.json and trace.json");
  command->add_option("--max-ranks", options->max_ranks,
                      "largest rank count this machine may start (default 8)");
  command->add_option("--nvme-dir", options->nvme_dir,
                      "existing directory for the NVMe tier's files of offload plans (default "
                      "/tmp); a run directory of its own is made and removed in it");
  command->add_option("--prefetch-depth", options->prefetch_depth,
                      "ZeRO-3 offloaded parameters: layers fetched ahead of use (default 2)");
  command->add_option("--device-budget-mib", options->device_budget_mib,
                      "device memory budget per rank in MiB (default: the cluster's)");
  command->add_option("--update-profile", options->update_profile,
                      "fold this run into the profile's fed-back factors (each a trimmed mean of "
                      "what the last 32 runs of its kind asked for), rewriting the file")
      ->check(CLI::ExistingFile);
  command->add_option("--profile", options->profile,
                      "calibrated profile (strata calibrate) for the prediction printed beside "
                      "the measurement")
      ->check(CLI::ExistingFile);
  command->add_option_function<std::string>(
      "--backend", [options](const std::string& b) { options->backend = b; },
      "cpu or cuda (default: cuda when a GPU is present and the plan fits this machine's GPUs)");
  command->add_option("--ranks-per-gpu", options->ranks_per_gpu,
                      "CUDA: processes that may share one GPU (host-staged communicators; "
                      "default 1: one GPU per rank, NCCL)");
  command->callback([options, &context] { context.exit_code = run_command(*options, *context.out); });
}

}  // namespace strata::cli
