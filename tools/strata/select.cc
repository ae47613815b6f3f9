// `strata select`: trains a workload's jobs together on D devices (model selection, as Hydra
// and Saturn do). Loads and expands the workload, prices every job's ways and schedules them
// under a policy (planner/select.h), prints the plan table with the predicted makespan and
// its lower bound, then (unless --plan-only) runs the schedule on the cluster's backend, one
// worker per device (executor/select; a CUDA cluster's on this machine's GPUs), printing each
// job's progress, and writes DIR/select_report.json
// (per-job losses and validation losses, a leaderboard (executor/select/leaderboard.h),
// measured makespan beside the predicted, per-device utilisation) and DIR/trace.json (one
// track per device, one process per node, slices named by job). On a cluster of several
// nodes the schedule places each job on nodes (planner/select.h) and the table, the report
// and the trace say which node; the run itself is this process's, so a CUDA schedule across
// nodes is --plan-only. Validation (--valid-data / --valid-fraction, or the
// workload's "validation") is what `strata run` does with the same flags, job by job.
// Every input is checked before anything runs: a bad workload is exit 2, a job that fits no
// way exit 3 naming the job. --out is locked for the run (like `strata run`): a second
// select into the same directory is refused at start.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/program/chrome_trace.h"
#include "cost_model/specs/errors.h"
#include "cost_model/specs/json_reader.h"
#include "cost_model/specs/limits.h"
#include "cost_model/program/program.h"
#include "cost_model/specs/eval_spec.h"
#include "cost_model/specs/workload.h"
#include "executor/data/dataset.h"
#include "executor/report/run_report.h"
#include "executor/runtime/plan_checks.h"
#include "executor/select/leaderboard.h"
#include "executor/select/select_runner.h"
#include "planner/select.h"
#include "tools/strata/commands.h"
#include "tools/strata/cuda_pieces.h"
#include "tools/strata/eval_options.h"
#include "tools/strata/out_dir.h"
#include "tools/strata/inputs.h"

namespace strata::cli {
namespace fs = std::filesystem;
namespace {

struct SelectOptionsCli {
  std::string workload;
  std::optional<std::string> cluster;  // unset: the workload's "cluster", else local-cpu
  ClusterShape shape;  // --nodes / --gpus-per-node
  std::int64_t gpus = 2;
  std::string policy = "strata";
  bool plan_only = false;
  std::string out = "strata-select";
  std::optional<double> device_budget_mib;  // unset: the cluster's device memory
  ProfileFlags profile;
  EvalSpec eval;           // --valid-data, --valid-fraction, --eval-every, --eval-batches
  EvalOptions eval_flags;  // which of them were given
};

// A workload's reference: a bundled name, or a path (relative to the workload's directory).
std::string resolve_ref(const std::string& kind, const std::string& ref, const fs::path& base,
                        const std::string& field) {
  const bool path_like = ref.find('/') != std::string::npos || fs::path(ref).extension() == ".json";
  if (path_like && fs::path(ref).is_relative() && fs::exists(base / ref)) return (base / ref).string();
  return resolve_config(kind, ref, field);
}

std::string seconds(double s) { return fmt::format("{:.2f}", s); }

// The run's validation settings: the workload's "validation", each setting replaced by its
// flag when given; a flag's source of validation tokens (--valid-data or --valid-fraction)
// replaces the workload's source whole. The names say where each setting came from, for the
// one check (cost_model/specs/eval_spec.h) and the messages about the data.
struct SelectEval {
  EvalSpec spec;
  EvalSpecNames names;  // the flags' unless the workload gave the setting
};

SelectEval select_eval(const WorkloadSpec& w, const std::string& workload_path,
                       const fs::path& base, const SelectOptionsCli& o) {
  SelectEval e;
  if (w.validation) {
    e.spec = *w.validation;
    const auto key = [&](const char* k) { return fmt::format("{}: validation.{}", workload_path, k); };
    e.names = {key("data"), key("fraction"), key("eval_every"), key("eval_batches")};
    // A file the workload names is found beside it, as its model and train files are.
    if (!e.spec.valid_data.empty() && fs::path(e.spec.valid_data).is_relative()) {
      e.spec.valid_data = (base / e.spec.valid_data).string();
    }
  }
  const EvalOptions& given = o.eval_flags;
  const EvalSpecNames flags;
  if (given.valid_data->count() > 0 || given.valid_fraction->count() > 0) {
    e.spec.valid_data = o.eval.valid_data;
    e.spec.valid_fraction = o.eval.valid_fraction;
    e.names.valid_data = flags.valid_data;
    e.names.valid_fraction = flags.valid_fraction;
  }
  if (given.eval_every->count() > 0) {
    e.spec.eval_every = o.eval.eval_every;
    e.names.eval_every = flags.eval_every;
  }
  if (given.eval_batches->count() > 0) {
    e.spec.eval_batches = o.eval.eval_batches;
    e.names.eval_batches = flags.eval_batches;
  }
  check_eval_spec(e.spec, e.names);
  return e;
}

// The cluster the grid is priced on: --cluster, else the workload's "cluster", else local-cpu.
// Pricing a grid on a cluster other than the one it names is a fair question, so it is
// allowed, but said in one line on stderr: the figures are not for the machine it was
// written for.
struct SelectCluster {
  std::string file;   // what load_cluster reads
  std::string named;  // as the command line or the workload wrote it (the report's "cluster")
  // Printed once every input has been checked: a refusal is then the one line on stderr.
  std::string warning;
};

SelectCluster select_cluster(const WorkloadSpec& w, const std::string& workload_path,
                             const fs::path& base, const SelectOptionsCli& o) {
  const std::optional<std::string> written_for =
      w.cluster ? std::optional(resolve_ref("clusters", *w.cluster, base, workload_path + ": cluster"))
                : std::nullopt;
  if (!o.cluster) {
    return written_for ? SelectCluster{*written_for, *w.cluster, ""}
                       : SelectCluster{"local-cpu", "local-cpu", ""};
  }
  const std::string given = resolve_config("clusters", *o.cluster, "--cluster");
  std::string warning;
  if (written_for && fs::weakly_canonical(given) != fs::weakly_canonical(*written_for)) {
    warning = fmt::format("strata select: warning: workload {} was written for cluster {}; "
                          "pricing it on {} (--cluster)", w.name, *w.cluster, *o.cluster);
  }
  return {given, *o.cluster, warning};
}

// Every job's tokens, opened as `strata run` opens them (data::open_token_streams): the
// generated corpus of its seed and the validation tokens. Read once per seed before the
// clock starts, as Hydra loads a dataset once for all its models (a grid's jobs share a seed,
// so they share it), and checked against every job's model before anything runs.
struct SelectData {
  std::map<std::uint64_t, data::TokenStreams> by_seed;  // the views below point into these
  std::vector<select::JobTokens> tokens;                 // [job]
};

SelectData open_select_data(const std::vector<Job>& jobs, const SelectEval& eval,
                            const std::string& workload_path) {
  SelectData d;
  for (const Job& job : jobs) {
    const std::uint64_t seed = job.train.seed;
    if (!d.by_seed.contains(seed)) {
      d.by_seed.emplace(seed, data::open_token_streams(
                                  data::Dataset::generated(seed), eval.spec.valid_data,
                                  eval.spec.valid_fraction, data::DataFormat::kAuto,
                                  eval.names.valid_data));
    }
    const data::TokenStreams& streams = d.by_seed.at(seed);
    const std::string model = fmt::format("{}: job '{}' (model {})", workload_path, job.name, job.model_ref);
    const std::string corpus = fmt::format("the generated corpus of seed {}", seed);
    data::check_tokens(streams.train_tokens, job.model.vocab, job.model.seq_len,
                       eval.spec.valid_fraction > 0 ? corpus + " (its training part)" : corpus, model);
    if (eval.spec.has_validation()) {
      data::check_tokens(streams.valid_tokens, job.model.vocab, job.model.seq_len,
                         eval.spec.valid_data.empty()
                             ? fmt::format("{} {}: the held-out part of {}", eval.names.valid_fraction,
                                           eval.spec.valid_fraction, corpus)
                             : fmt::format("{} '{}'", eval.names.valid_data, eval.spec.valid_data),
                         model);
    }
    d.tokens.push_back({streams.train_tokens, streams.valid_tokens});
  }
  return d;
}

// The leaderboard's inputs, in job order: a job's validation batches are drawn from its seed
// and global batch of seq_len-token sequences (executor/data/batch.h), so those name them.
std::vector<select::LeaderboardEntry> leaderboard_entries(const std::vector<Job>& jobs,
                                                          const select::SelectRun& run) {
  std::vector<select::LeaderboardEntry> entries;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const select::JobRun& r = run.jobs[i];
    const TrainSpec& t = jobs[i].train;
    entries.push_back({t.steps * t.global_batch * jobs[i].model.seq_len, r.losses.back(),
                       r.evals.empty() ? std::nullopt : std::optional(r.evals.back().loss),
                       fmt::format("seed {}, {} x {} tokens", t.seed, t.global_batch,
                                   jobs[i].model.seq_len)});
  }
  return entries;
}


// The devices of a job's slices, in rank order of its first slice, then any others (an lrtf
// job steps on several devices of its node).
std::vector<std::int64_t> job_devices(const SelectSchedule& s, std::size_t job) {
  std::vector<std::int64_t> devices;
  for (const ScheduleSlice& slice : s.slices) {
    if (slice.job != job) continue;
    for (std::int64_t d : slice.devices) {
      if (std::find(devices.begin(), devices.end(), d) == devices.end()) devices.push_back(d);
    }
  }
  return devices;
}

// Where devices are, node by node with the node's own device numbers: "n0:0-3", "n0:0,2",
// "n0:0-7 n1:0-7".
std::string placement(const SelectDevices& layout, std::vector<std::int64_t> devices) {
  std::sort(devices.begin(), devices.end());
  std::string out;
  for (std::size_t i = 0; i < devices.size();) {
    const std::int64_t node = layout.node_of(devices[i]);
    out += fmt::format("{}n{}:", out.empty() ? "" : " ", node);
    bool first = true;
    while (i < devices.size() && layout.node_of(devices[i]) == node) {
      std::size_t run = i;  // devices[i..run] consecutive
      while (run + 1 < devices.size() && devices[run + 1] == devices[run] + 1 &&
             layout.node_of(devices[run + 1]) == node) {
        ++run;
      }
      const std::int64_t a = layout.local_of(devices[i]), b = layout.local_of(devices[run]);
      out += fmt::format("{}{}", first ? "" : ",", a == b ? fmt::format("{}", a) : fmt::format("{}-{}", a, b));
      first = false;
      i = run + 1;
    }
  }
  return out;
}

std::vector<std::int64_t> nodes_of(const SelectDevices& layout, const std::vector<std::int64_t>& devices) {
  std::vector<std::int64_t> nodes;
  for (std::int64_t d : devices) nodes.push_back(layout.node_of(d));
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  return nodes;
}

void print_plan(std::ostream& out, const std::vector<Job>& jobs, const std::vector<JobWays>& ways,
                const SelectSchedule& s) {
  out << fmt::format("{:>3}  {:<28} {:<44} {:>7} {:<14} {:>8} {:>8} {:>9}\n", "#", "job", "way",
                     "devices", "on", "start_s", "end_s", "tokens/s");
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    const JobWay& w = ways[j].ways[s.way_of_job[j]];
    double start = 1e300, end = 0;
    for (const ScheduleSlice& slice : s.slices) {
      if (slice.job != j) continue;
      start = std::min(start, slice.start_s);
      end = std::max(end, slice.end_s);
    }
    out << fmt::format("{:>3}  {:<28} {:<44} {:>7} {:<14} {:>8} {:>8} {:>9.0f}\n", j + 1, jobs[j].name,
                       w.plan.label() + (w.spilled ? " spilled" : ""), w.devices,
                       placement(s.layout, job_devices(s, j)), seconds(start), seconds(end),
                       w.prediction.tokens_per_s);
  }
  out << fmt::format("predicted makespan {} s (lower bound {} s), policy {}\n",
                     seconds(s.makespan_s), seconds(s.lower_bound_s), to_string(s.policy));
}

Json report_json(const std::vector<Job>& jobs, const std::vector<JobWays>& ways,
                 const SelectSchedule& s, const select::SelectRun& run,
                 const SelectOptionsCli& o, const std::string& cluster, const SelectEval& eval,
                 const ProfileChoice& profile) {
  Json j;
  j["workload"] = o.workload;
  j["cluster"] = cluster;
  j["devices"] = o.gpus;
  j["nodes"] = s.layout.nodes();
  j["gpus_per_node"] = s.layout.per_node();
  j["policy"] = to_string(s.policy);
  j["profile"] = profile.name;
  j["predicted_makespan_s"] = s.makespan_s;
  j["lower_bound_s"] = s.lower_bound_s;
  j["measured_makespan_s"] = run.makespan_s;
  j["validation"] = nullptr;
  if (eval.spec.has_validation()) {
    j["validation"] = {{"data", eval.spec.valid_data},
                       {"fraction", eval.spec.valid_fraction},
                       {"eval_every", eval.spec.eval_every},
                       {"eval_batches", eval.spec.eval_batches}};
  }
  j["jobs"] = Json::array();
  const std::vector<select::LeaderboardEntry> entries = leaderboard_entries(jobs, run);
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    const JobWay& w = ways[i].ways[s.way_of_job[i]];
    const select::JobRun& r = run.jobs[i];
    Json evals = Json::array();
    for (const select::EvalPoint& e : r.evals) evals.push_back({{"step", e.step}, {"loss", e.loss}});
    j["jobs"].push_back({{"name", jobs[i].name},
                         {"model", jobs[i].model_ref},
                         {"model_spec", jobs[i].model.to_json()},
                         {"train_spec", jobs[i].train.to_json()},
                         {"plan", w.plan.to_json()},
                         {"devices", w.devices},
                         {"nodes", nodes_of(s.layout, job_devices(s, i))},
                         {"placement", placement(s.layout, job_devices(s, i))},
                         {"inter_node_comm_s", w.prediction.inter_node_comm_s
                                                   ? Json(*w.prediction.inter_node_comm_s) : Json()},
                         {"spilled", w.spilled},
                         {"predicted_step_s", w.step_s},
                         {"measured_start_s", r.start_s},
                         {"measured_end_s", r.end_s},
                         {"measured_step_s", report::median(r.step_s)},
                         {"step_s", r.step_s},
                         {"losses", r.losses},
                         {"final_loss", r.losses.empty() ? 0.0 : r.losses.back()},
                         {"train_tokens", entries[i].train_tokens},
                         {"eval_losses", evals},
                         {"valid_loss", entries[i].valid_loss ? Json(*entries[i].valid_loss) : Json()},
                         {"peak_device_bytes", r.peak_device_bytes}});
  }
  const select::Leaderboard board = select::rank_jobs(entries);
  j["leaderboard_metric"] = board.by_validation ? "validation loss" : "train loss";
  j["leaderboard_reason"] = board.by_validation
                                ? fmt::format("every job trained {} tokens and validated on the "
                                              "same batches", entries.front().train_tokens)
                                : board.reason;
  j["leaderboard"] = Json::array();
  for (std::size_t i : board.order) {
    j["leaderboard"].push_back(
        {{"job", jobs[i].name}, {"final_loss", entries[i].final_train_loss},
         {"valid_loss", entries[i].valid_loss ? Json(*entries[i].valid_loss) : Json()}});
  }
  j["device_utilisation"] = Json::array();
  for (std::size_t d = 0; d < run.device_busy_s.size(); ++d) {
    j["device_utilisation"].push_back(run.makespan_s > 0 ? run.device_busy_s[d] / run.makespan_s : 0.0);
  }
  j["predicted_slices"] = Json::array();
  for (const ScheduleSlice& slice : s.slices) {
    j["predicted_slices"].push_back({{"job", jobs[slice.job].name}, {"devices", slice.devices},
                                     {"nodes", nodes_of(s.layout, slice.devices)},
                                     {"first_step", slice.first_step}, {"steps", slice.steps},
                                     {"start_s", slice.start_s}, {"end_s", slice.end_s}});
  }
  return j;
}

// One process per node, one track per device (its global index, as the report's).
ChromeTrace device_trace(const std::vector<Job>& jobs, const select::SelectRun& run,
                         const SelectDevices& layout) {
  std::vector<TraceEvent> events;
  for (const select::MeasuredSlice& s : run.slices) {
    TraceEvent e;
    e.name = jobs[s.job].name;
    e.category = "select";
    e.pid = layout.node_of(s.device);
    e.tid = s.device;
    e.start_s = s.start_s;
    e.duration_s = s.end_s - s.start_s;
    e.args = Json{{"first_step", s.first_step}, {"steps", s.steps}};
    events.push_back(std::move(e));
  }
  std::map<ThreadKey, std::string> threads;
  std::map<std::int64_t, std::string> processes;
  for (std::int64_t n = 0; n < layout.nodes(); ++n) {
    processes[n] = layout.nodes() == 1 ? "strata select" : fmt::format("strata select: node {}", n);
  }
  for (std::int64_t d = 0; d < layout.devices; ++d) {
    threads[{layout.node_of(d), d}] =
        layout.nodes() == 1 ? fmt::format("device {}", d)
                            : fmt::format("device {} (node {} device {})", d, layout.node_of(d), layout.local_of(d));
  }
  return ChromeTrace{std::move(events), std::move(processes), std::move(threads)};
}

int select_command(const SelectOptionsCli& o, std::ostream& out) {
  const SelectPolicy policy = select_policy_from_string(o.policy);
  const std::string workload_path = resolve_config("workloads", o.workload, "--workload");
  const WorkloadSpec spec = WorkloadSpec::load(workload_path);
  const fs::path base = fs::path(workload_path).parent_path();
  WorkloadResolver resolve;
  // A referenced file's error names the workload and the key that led to it as well.
  const auto referenced = [&](const std::string& field, const auto& load) {
    try {
      return load();
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("{}: {}: {}", workload_path, field, e.what()));
    }
  };
  resolve.model = [&](const std::string& ref, const std::string& field) {
    const std::string file = resolve_ref("models", ref, base, workload_path + ": " + field);
    return referenced(field, [&] { return ModelSpec::load(file); });
  };
  resolve.train = [&](const std::string& ref, const std::string& field) {
    const std::string file = resolve_ref("train", ref, base, workload_path + ": " + field);
    return referenced(field, [&] { return TrainSpec::load(file); });
  };
  const std::vector<Job> jobs = expand(spec, resolve, workload_path);
  const SelectEval eval = select_eval(spec, workload_path, base, o);
  const SelectCluster cluster_choice = select_cluster(spec, workload_path, base, o);
  const ClusterSpec cluster = load_cluster(cluster_choice.file, o.shape);
  const ProfileChoice profile = choose_profile(o.profile, cluster);
  if (o.device_budget_mib &&
      (!(*o.device_budget_mib > 0) || !(*o.device_budget_mib <= limits::kBudgetMib))) {
    throw ConfigError(fmt::format("--device-budget-mib: value {}, expected a finite number of "
                                  "MiB in (0, {}]", *o.device_budget_mib, limits::kBudgetMib));
  }
  // select runs every worker in this process (executor/select): a GPU schedule over several
  // nodes would need the other nodes' GPUs, so it is planned only.
  const SelectDevices layout{o.gpus, cluster.gpus_per_node};
  if (!o.plan_only && cluster.backend == Backend::kCuda && layout.nodes() > 1 &&
      o.gpus <= cluster.total_gpus()) {  // more than the cluster has: job_ways names --gpus
    throw ConfigError(fmt::format("--gpus {}: spans {} nodes of cluster {} ({} GPU(s) per node) and "
                                  "select runs every job in one process on this machine; use "
                                  "--plan-only to schedule across nodes without running",
                                  o.gpus, layout.nodes(), cluster.name, cluster.gpus_per_node));
  }
  // A GPU cluster runs on this machine's GPUs, worker d on GPU d: one per device asked for.
  if (!o.plan_only && cluster.backend == Backend::kCuda && o.gpus > cuda_device_count()) {
    throw ConfigError(fmt::format("--gpus {}: cluster {} runs on this machine's GPUs and it has "
                                  "{}; use --plan-only to schedule without running",
                                  o.gpus, cluster.name, cuda_device_count()));
  }
  const SelectData select_data = open_select_data(jobs, eval, workload_path);
  if (!cluster_choice.warning.empty()) std::cerr << cluster_choice.warning << "\n" << std::flush;
  SelectOptions options;
  options.devices = o.gpus;
  options.device_budget_bytes = o.device_budget_mib ? *o.device_budget_mib * 1024.0 * 1024.0 : 0;
  options.profile = profile.get();
  std::vector<JobWays> ways;
  try {
    ways = job_ways(jobs, cluster, options);
  } catch (const InfeasiblePlan& e) {
    out << fmt::format("strata select: {}\n", e.what());
    return kExitDoesNotFit;
  }
  SelectSchedule schedule;
  try {
    schedule = schedule_jobs(jobs, ways, layout, policy);
  } catch (const InfeasiblePlan& e) {
    out << fmt::format("strata select: {}\n", e.what());
    return kExitDoesNotFit;
  }
  out << fmt::format("strata select: workload {} ({} jobs) on {} device(s) of {}{}\n", spec.name,
                     jobs.size(), o.gpus, cluster.name,
                     o.device_budget_mib ? fmt::format(", {} MiB per device", *o.device_budget_mib)
                                         : std::string());
  print_plan(out, jobs, ways, schedule);
  out << profile.line() << "\n";
  if (o.plan_only) return 0;
  if (layout.nodes() > 1) {
    out << fmt::format("the {} nodes' devices run as worker threads of this process: the "
                       "inter-node link is priced, not exercised\n", layout.nodes());
  }
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    check_plan_runs(jobs[j].model, jobs[j].train, ways[j].ways[schedule.way_of_job[j]].plan,
                    cluster.backend, kDefaultPrefetchDepth,
                    fmt::format("{}: job '{}' (model {}, train {})", workload_path, jobs[j].name,
                                jobs[j].model_ref, jobs[j].train_ref));
  }
  // --out once the schedule stands (a workload that fits nowhere leaves nothing behind) and
  // before any training: created, writable and ours for the whole run.
  const FileLock out_lock = lock_out_dir(o.out);

  std::vector<Plan> plans;
  for (std::size_t j = 0; j < jobs.size(); ++j) plans.push_back(ways[j].ways[schedule.way_of_job[j]].plan);
  select::RunOptions run_options;
  run_options.device_budget_bytes = options.device_budget_bytes;
  run_options.tokens = select_data.tokens;
  run_options.eval = eval.spec;
  if (cluster.backend == Backend::kCuda) run_options.make_backend = cuda_select_backend_maker();
  std::mutex print;
  // The workload's ETA: the predicted makespan at the pace measured so far (measured over
  // predicted step seconds of every step reported), less the time gone.
  double measured_steps_s = 0, predicted_steps_s = 0;
  run_options.progress = [&](const select::Progress& p) {
    const std::lock_guard<std::mutex> lock(print);
    measured_steps_s += p.step_s;
    predicted_steps_s += ways[p.job].ways[schedule.way_of_job[p.job]].step_s;
    const double pace = predicted_steps_s > 0 ? measured_steps_s / predicted_steps_s : 1.0;
    const double left = std::max(0.0, schedule.makespan_s * pace - p.elapsed_s);
    out << fmt::format("[{:<26}] step {:>4}/{}  loss {:.4f}  job ETA {:.1f} s  workload {:.1f} s "
                       "in, ~{:.1f} s left{}\n", jobs[p.job].name, p.step, jobs[p.job].train.steps,
                       p.loss, p.job_eta_s, p.elapsed_s, left,
                       p.eval_loss ? fmt::format("  validation loss {:.4f}", *p.eval_loss) : "")
        << std::flush;
  };
  run_options.fatal = [&](std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      std::cerr << "strata select: " << x.what() << "\n" << std::flush;
    }
    std::fflush(nullptr);
    std::_Exit(2);
  };
  const select::SelectRun run = run_schedule(jobs, plans, schedule, o.gpus, cluster, run_options);

  const Json report = report_json(jobs, ways, schedule, run, o, cluster_choice.named, eval, profile);
  write_json_file((fs::path(o.out) / "select_report.json").string(), report);
  write_chrome_trace((fs::path(o.out) / "trace.json").string(), device_trace(jobs, run, schedule.layout));
  out << fmt::format("leaderboard: ranked by {}: {}\n", report["leaderboard_metric"].get<std::string>(),
                     report["leaderboard_reason"].get<std::string>());
  out << fmt::format("{:>3}  {:<28} {:>10} {:>10}\n", "#", "job", "train loss", "valid loss");
  int place = 1;
  for (const Json& row : report["leaderboard"]) {
    out << fmt::format("{:>3}  {:<28} {:>10.4f} {:>10}\n", place++, row["job"].get<std::string>(),
                       row["final_loss"].get<double>(),
                       row["valid_loss"].is_null() ? std::string("-")
                                                   : fmt::format("{:.4f}", row["valid_loss"].get<double>()));
  }
  const double err = (schedule.makespan_s - run.makespan_s) / run.makespan_s;
  std::string utilisation;
  for (std::size_t d = 0; d < run.device_busy_s.size(); ++d) {
    utilisation += fmt::format("{}device {} {}", d ? ", " : "", d,
                               percent(run.device_busy_s[d] / run.makespan_s));
  }
  out << fmt::format("makespan measured {} s, predicted {} s ({:+.1f}%), lower bound {} s; {}\n",
                     seconds(run.makespan_s), seconds(schedule.makespan_s), 100 * err,
                     seconds(schedule.lower_bound_s), utilisation);
  out << fmt::format("wrote {}/select_report.json, trace.json\n", o.out);
  return 0;
}

}  // namespace

void add_select_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<SelectOptionsCli>();
  CLI::App* command = app.add_subcommand(
      "select", "Train a workload's jobs together on D devices (model selection: Hydra, Saturn), "
                "scheduled by a policy whose makespan is predicted, then measured");
  command->add_option("--workload", options->workload, "workload: a JSON file or a bundled name")
      ->required();
  command->add_option_function<std::string>(
      "--cluster", [options](const std::string& c) { options->cluster = c; },
      "cluster (default: the one the workload names, else local-cpu; another is a warning)");
  add_cluster_shape_options(*command, options->shape);
  command->add_option("--gpus", options->gpus, "devices to use (default 2)");
  command->add_option("--policy", options->policy, "strata, lrtf or sequential (default strata)");
  command->add_flag("--plan-only", options->plan_only, "print the schedule, run nothing");
  command->add_option("--out", options->out,
                      "directory for select_report.json and trace.json, locked for the run");
  command->add_option_function<double>(
      "--device-budget-mib", [options](const double& mib) { options->device_budget_mib = mib; },
      "each device's memory budget in MiB, > 0 (default: the cluster's)");
  options->eval_flags = add_eval_options(*command, options->eval);
  add_profile_options(*command, options->profile.profile, options->profile.no_profile);
  command->callback([options, &context] { context.exit_code = select_command(*options, *context.out); });
}

}  // namespace strata::cli
