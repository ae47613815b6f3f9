// `strata run`: trains a model for real with a plan, on the CPU backend or on GPUs with the
// CUDA backend (chosen by --backend, else CUDA when a GPU is present and the plan fits this
// machine's GPUs). One run loop for both: each rank builds its backend (run_cuda.cc makes the
// CUDA one), then the one engine replays the plan's Program. Everything is validated BEFORE
// any rank starts (run_checks.cc: every file and flag, the data's every token against the
// model's vocabulary, the weights files, and the plan's fit in memory by the cost model, exit
// 3 like `strata predict`), --out is locked for the run (a second run into it is refused),
// then the command re-launches itself under mpirun with t*p*d ranks (one rank runs
// in-process): on this machine, or with --hostfile on that file's hosts. Started by an
// outside launcher (mpirun, srun: executor/runtime/mpi_launch.h) it runs as it is, one rank
// per process, each on GPU (local rank mod the node's GPUs). Across nodes (run_nodes.h) the
// plan's rank layout is checked before any work (executor/comm/node_layout.h: TP groups
// inside a node, the rank counts equal), --out and --save must be one directory for every
// rank (shared_dir_probe.h), and each node's NVMe files go in a directory of its own under
// --nvme-dir; --nodes N --ranks-per-node K groups one machine's ranks as N nodes.
// Rank 0 prints one progress line per step and writes DIR/report.json (a StepReport of
// kind "measurement"), DIR/trace.json (Chrome trace of the last step, one process per
// rank), DIR/memory_tags.json (peak bytes per allocation tag per rank), and
// DIR/metrics.jsonl as the run goes (one line per step: step, loss, lr, grad norm, tokens/s
// and, when measured, the validation loss; flushed every step, so a run that dies keeps what
// it measured).
// Data (executor/data/dataset.h): the generated corpus, or --data in any format;
// --valid-data or --valid-fraction gives the validation stream that --eval-every evaluates.
// Weights: from --init-from and to --save-weights, safetensors with Hugging Face GPT-2 or
// Llama names (a Llama checkpoint may be sharded) under any plan (executor/weights).
// Checkpoints (executor/checkpoint): --save DIR every --save-every steps and after the last
// (and, with --save-on-signal, when a signal stops the run), keeping the last --keep;
// --resume DIR continues from the newest complete one under any plan, at its step (the data
// position and the LR schedule), with its parameters and AdamW state, continuing the
// metrics.jsonl of the same --out.
// Stops: SIGINT / SIGTERM reach every rank (the launcher forwards them through mpirun,
// mpi_launch.h); the ranks agree at the next step boundary, write the report of the steps
// done marked "stopped_by" (and --save-weights), remove their files and exit 130 / 143 with
// one line. A rank blocked in one MPI call for --comm-timeout-s ends the job
// (comm_watch.h), naming the call and the peer: exit 4.
// Offload plans keep their NVMe tensors in a locked run directory of their own under
// --nvme-dir, removed at the end, when a rank fails, and by the launcher after a job whose
// ranks were killed; the report then carries the bytes moved per link per step
// ("transfers"), and the last lines print them and the step time beside the cost model's.
// Deliberately not here: the training itself (executor/engine), the report's arithmetic
// (executor/report), the checks (run_checks.cc).
#include <CLI/CLI.hpp>
#include <mpi.h>


#include <algorithm>
#include <chrono>
#include <fstream>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <memory>
#include <ostream>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/program/chrome_trace.h"
#include "cost_model/specs/errors.h"
#include "executor/checkpoint/checkpoint_io.h"
#include "executor/comm/comm_watch.h"
#include "executor/comm/mpi_communicator.h"
#include "executor/comm/node_layout.h"
#include "executor/comm/rank_liveness.h"
#include "executor/comm/shared_dir_probe.h"
#include "executor/cpu/cuda_semantics/cuda_semantics_backend.h"
#include "executor/data/dataset.h"
#include "executor/run/rank_training.h"
#include "executor/run/rank_loop.h"
#include "executor/report/run_report.h"
#include "executor/runtime/backend_select.h"
#include "executor/runtime/file_lock.h"
#include "executor/runtime/mpi_launch.h"
#include "executor/runtime/stop_signals.h"
#include "executor/weights/weights_io.h"
#include "tools/strata/commands.h"
#include "tools/strata/eval_options.h"
#include "tools/strata/inputs.h"
#include "tools/strata/out_dir.h"
#include "tools/strata/plot.h"
#include "tools/strata/run_common.h"
#include "tools/strata/run_launch.h"
#include "tools/strata/run_nodes.h"
#include "tools/strata/setup_progress.h"

namespace strata::cli {
namespace fs = std::filesystem;
namespace {

// Every rank agrees at each step boundary whether to stop: the largest signal any of them
// received (one 8-byte all-reduce per step), so all stop after the same step.
int agreed_stop(MpiCommunicator& world) {
  std::int64_t signal = StopSignals::received();
  world.all_reduce_max(&signal, 1);
  return static_cast<int>(signal);
}

// A resumed run into the same --out continues its metrics.jsonl: the lines of the steps up
// to the checkpoint stay, those a killed run wrote after it (and a line it was killed
// writing) go, so each step appears once. Rewritten beside itself, then renamed.
void keep_metrics_until(const std::string& path, std::int64_t step) {
  std::ifstream in(path);
  if (!in) return;  // another --out: a fresh file
  std::string kept;
  for (std::string line; std::getline(in, line);) {
    const Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
        j["step"].get<std::int64_t>() <= step) {
      kept += line + "\n";
    }
  }
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::trunc);
  out << kept;
  out.close();
  std::error_code ec;
  if (out.fail() || (fs::rename(tmp, path, ec), ec)) {
    throw SystemError(fmt::format("cannot rewrite '{}' through '{}'{}", path, tmp,
                                  ec ? ": " + ec.message() : std::string()));
  }
}

// One rank's training, the same loop for every backend; rank 0 prints progress to `out` and
// writes the files. Returns the stop signal the ranks agreed on, or 0 when every step ran.
int train_rank(const RunOptions& o, const Validated& v, MpiCommunicator& world, Backend backend,
               const std::string& nvme_dir, std::ostream& out) {
  if (world.size() != v.plan.world_size()) {
    throw InfeasiblePlan(fmt::format("{}: the plan needs {} ranks, mpirun started {}", v.plan_path,
                                     v.plan.world_size(), world.size()));
  }
  // Rank 0 says what it is doing when set-up takes over a second (setup_progress.h).
  SetupProgress setup(out, v.model.name, v.model.total_params(), world.rank() == 0);
  setup.phase("opening the data");
  const RunData run_data = open_run_data(o, v);
  TierBudgets budgets = TierBudgets::per_rank(v.cluster);
  if (v.device_budget_mib) {
    budgets.device_bytes = static_cast<std::int64_t>(*v.device_budget_mib * (1 << 20));
  }
  engine::OffloadOptions offload;
  offload.nvme_dir = nvme_dir;
  offload.prefetch_depth = o.prefetch_depth;
  offload.on_placed = setup.placement();
  const engine::BackendMaker make_backend =
      backend == Backend::kCuda ? cuda_backend_maker(o)
      : o.cuda_semantics        ? cuda_semantics::cuda_semantics_backend_maker(o.cuda_graphs)
                                : engine::cpu_backend_maker();
  // A resumed run's parameters come in where a fresh run's initial values do; the moments
  // after the state exists. The checkpoint's full tensors are let go of before training.
  std::optional<checkpoint::CheckpointReader> resume;
  if (!v.resume_dir.empty()) resume.emplace(v.resume_dir, v.model);
  const model::UnitInit init = model::with_progress(
      resume ? resume->params()
      : o.init_from.empty() ? model::SeededInit{v.train.seed, {}}
                            : weights::weights_file_init(o.init_from, v.model, "--init-from"),
      setup.counter());
  setup.phase("initialising parameters");
  engine::RankTraining rank(v.model, v.train, v.plan, world, budgets, run_data.train_tokens,
                            offload, make_backend, init);
  if (resume) resume->load_moments(rank.engine().state());
  resume.reset();
  // Host memory on CUDA is pinned (offloaded state, staging); on the CPU it is the tier.
  const double host_bytes =
      static_cast<double>(rank.allocator().usage(MemoryTier::kHost).current_bytes);
  setup.finish(backend == Backend::kCuda && host_bytes > 0
                   ? fmt::format("{} GiB of host memory pinned", gib(host_bytes))
                   : std::string());
  std::int64_t saved_step = v.start_step;  // the newest checkpoint of this run's state
  const auto save_checkpoint = [&](std::int64_t done) {
    checkpoint::Manifest m;
    m.step = done;
    m.model = v.model;
    m.train = v.train;
    m.plan = v.plan;
    m.seed = v.train.seed;
    m.data = v.data_identity;
    m.vocab_row_alignment = rank.backend().vocab_row_alignment();
    const fs::path dir = checkpoint::save_checkpoint(o.save, std::move(m), rank.engine().state(),
                                                     rank.groups(), world, o.keep);
    saved_step = done;
    if (world.rank() == 0) out << fmt::format("wrote checkpoint {}\n", dir.string()) << std::flush;
  };
  engine::RankLoop loop(rank, o.eval,
                        run_data.has_valid() ? run_data.valid_tokens : data::TokenView{});
  const bool printer = world.rank() == 0;
  std::ofstream metrics;
  if (printer) {
    out << fmt::format("strata run: {} on {} ranks ({} backend, {}), model {}, {} steps of {} "
                       "sequences x {} tokens, data {}{}{}\n",
                       v.plan.label(), v.plan.world_size(), to_string(backend),
                       to_string(rank.backend().compute_dtype()), v.model.name, v.train.steps,
                       v.train.global_batch, v.model.seq_len, run_data.train.description(),
                       loop.validates()
                           ? fmt::format(", validation {} tokens", run_data.valid_tokens.count)
                           : "",
                       o.init_from.empty() ? "" : ", weights from " + o.init_from)
        << (v.resume_dir.empty() ? std::string()
                                 : fmt::format("resumed from {} after step {}\n", v.resume_dir,
                                               v.start_step))
        << std::flush;  // before a first step that may take minutes, even into a pipe
    const std::string path = (fs::path(o.out) / "metrics.jsonl").string();
    if (v.start_step > 0) keep_metrics_until(path, v.start_step);
    metrics.open(path, v.start_step > 0 ? std::ios::app : std::ios::trunc);
    if (!metrics) throw SystemError(fmt::format("cannot write '{}'", path));
  }
  std::vector<report::StepSample> samples;
  std::vector<double> losses;
  std::vector<TraceEvent> last_events;
  TransferBytes transfers;  // this rank's, last step (the same every step)
  const double tokens = static_cast<double>(v.train.global_batch * v.model.seq_len);
  const auto t0 = std::chrono::steady_clock::now();
  int stop = 0;
  loop.run(
      v.start_step, v.train.steps,
      [&](engine::LoopStep& step) {
        const std::int64_t s = step.step;
        engine::StepResult& r = step.result;
        samples.push_back({r.step_s, r.parts});
        losses.push_back(r.loss);
        last_events = std::move(r.events);
        transfers = r.transfers;
        if (printer && s == v.start_step) {
          for (const std::string& note : rank.backend().notes()) out << note << "\n";
          if (o.cuda_graphs) {
            out << (rank.engine().captures_steps()
                        ? std::string("--cuda-graphs: the first step runs op by op, the second is "
                                      "captured as a graph, the rest replay it\n")
                        : "--cuda-graphs: steps not captured: " + rank.engine().why_not_captured() +
                              "\n");
          }
        }
        if (printer) {
          const double elapsed =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          const double eta = elapsed / static_cast<double>(s + 1 - v.start_step) *
                             static_cast<double>(v.train.steps - s - 1);
          out << fmt::format("step {:>5}/{}  loss {:.4f}  {:>9.0f} tokens/s  ETA {:.1f} s{}\n",
                             s + 1, v.train.steps, r.loss, tokens / r.step_s, eta,
                             step.eval_loss
                                 ? fmt::format("  validation loss {:.4f}", *step.eval_loss)
                                 : "")
              << std::flush;
          Json line{{"step", s + 1}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm},
                    {"tokens_per_s", tokens / r.step_s}};
          if (step.eval_loss) line["eval_loss"] = *step.eval_loss;
          metrics << line.dump() << "\n" << std::flush;
        }
        const bool last = s + 1 == v.train.steps;
        if (!o.save.empty() && (last || (o.save_every && (s + 1) % *o.save_every == 0))) {
          save_checkpoint(s + 1);
        }
      },
      [&] { return (stop = agreed_stop(world)) != 0; });
  const std::int64_t done = v.start_step + static_cast<std::int64_t>(samples.size());
  // A stop keeps the steps done: with --save-on-signal as a checkpoint to resume from.
  if (stop != 0 && o.save_on_signal && done > saved_step) save_checkpoint(done);
  const std::string stopped = stop != 0 ? StopSignals::name(stop) : std::string();
  if (samples.empty()) {  // stopped before the first step: nothing measured to write
    if (printer) {
      std::cerr << fmt::format("strata: stopped by {} before the first step; no report written\n",
                               stopped) << std::flush;
    }
    return stop;
  }
  // A stopped run saves too: the weights of the steps done are what the stop should keep.
  if (!o.save_weights.empty()) {
    weights::save_weights(o.save_weights, v.model, v.plan, rank.engine().state(), rank.groups(),
                          world, rank.backend().vocab_row_alignment());
    if (printer) out << fmt::format("wrote weights {}\n", o.save_weights);
  }
  const auto summaries = report::gather_summaries(
      world, report::summarize_rank(rank.groups(), rank.allocator(), samples, last_events));
  // The worst rank's bytes per link (ranks of different pipeline stages move different bytes).
  double worst[4] = {transfers.device_to_host, transfers.host_to_device, transfers.host_to_nvme,
                     transfers.nvme_to_host};
  world.all_reduce_max(worst, 4);
  if (!printer) return stop;
  StepReport rep =
      report::build_run_report(v.model, v.cluster, v.train, v.plan,
                               v.profile ? &*v.profile : nullptr, summaries, losses);
  rep.transfers = TransferBytes{worst[0], worst[1], worst[2], worst[3]};
  rep.stopped_by = stopped;
  rep.captured_steps = rank.engine().captures_steps();
  const fs::path dir(o.out);
  write_json_file((dir / "report.json").string(), rep.to_json());
  write_chrome_trace((dir / "trace.json").string(), report::build_run_trace(summaries));
  write_json_file((dir / "memory_tags.json").string(), report::memory_tags_json(summaries));
  if (stop != 0) {
    // The one line of a stopped run; a partial run does not feed the profile.
    std::cerr << fmt::format("strata: stopped by {} after {} of {} steps; wrote {}/report.json "
                             "(\"stopped_by\": \"{}\"), trace.json, memory_tags.json\n",
                             stopped, done, v.train.steps, o.out, stopped)
              << std::flush;
    return stop;
  }
  out << fmt::format("median step {:.4f} s, {:.0f} tokens/s, {:.4f} TFLOP/s per rank (MFU {}), "
                     "peak device memory {} (worst rank)\n",
                     rep.step_time_s, rep.tokens_per_s, rep.tflops_per_gpu, percent(rep.mfu),
                     bytes_label(rep.memory_bytes.device));
  print_predicted(v, rep, out);
  out << fmt::format("wrote {}/report.json, trace.json, memory_tags.json\n", o.out);
  if (!o.update_profile.empty()) update_profile(o.update_profile, v, rep, out);
  return 0;
}

// A rank of several that cannot go on: its peers would wait for it forever in a collective,
// and it cannot unwind alone, so it prints its error once and aborts the whole job (exit
// code 2, mpirun's too).
[[noreturn]] void abort_job_from_rank(int rank, const std::exception& e) {
  std::cerr << fmt::format("strata: rank {}: {}\n", rank, e.what()) << std::flush;
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::_Exit(2);  // MPI_Abort does not return
}

int run_command(const RunOptions& o, std::ostream& out) {
  // Before anything is opened or locked: the exec keeps file descriptors and locks.
  if (!detect_launch_env().under_launcher) reexec_with_thread_env(o.threads);
  // --plot draws after the run: a missing matplotlib is said before it trains, not after.
  if (o.plot && !detect_launch_env().under_launcher) {
    if (const int missing = check_plot_available(); missing != 0) return missing;
  }
  const StopSignals stops;  // from here on SIGINT / SIGTERM ask for a clean stop
  // --backend wins; without it a GPU is used when present and the plan fits this machine's
  // GPUs, and the CPU backend otherwise. Chosen first, so a bad --backend leaves nothing
  // behind (validate creates the output directory).
  if (o.cuda_semantics && o.backend && *o.backend != "cpu") {
    throw ConfigError(fmt::format("--cuda-semantics: a mode of the CPU backend, not of "
                                  "--backend {}; drop one of the two", *o.backend));
  }
  const DeviceProbeFn probe = cuda_device_probe();
  Backend backend = o.cuda_semantics ? Backend::kCpu : choose_backend(o.backend, probe);
  if (backend == Backend::kCpu && !o.backend && !o.cuda_semantics) {
    check_cluster_has_its_device(o, backend, probe().reason);
  }
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
  if (o.cuda_graphs && o.kernel_trace) {
    throw ConfigError("--cuda-graphs with --kernel-trace: a captured step is timed op by op, not "
                      "kernel by kernel; drop one of them");
  }
  if (o.kernel_trace && backend != Backend::kCuda) {
    throw ConfigError("--kernel-trace: times the CUDA backend's layer ops, but this run uses the "
                      "cpu backend; drop --kernel-trace or run on a GPU with --backend cuda");
  }
  if (o.cuda_graphs && backend != Backend::kCuda && !o.cuda_semantics) {
    throw ConfigError("--cuda-graphs: captures the CUDA backend's steps as CUDA graphs, but this "
                      "run uses the cpu backend; run on a GPU with --backend cuda, or add "
                      "--cuda-semantics to check the captured steps on the CPU");
  }
  if (o.no_host_stream && backend != Backend::kCuda) {
    throw ConfigError("--no-host-stream: moves the CUDA backend's host AdamW onto the thread that "
                      "issues the GPU's work, but this run uses the cpu backend; drop it or run "
                      "on a GPU with --backend cuda");
  }
  if (o.attention != "auto" && backend != Backend::kCuda) {
    throw ConfigError(fmt::format("--attention {}: chooses the CUDA backend's attention, but this "
                                  "run uses the cpu backend; drop it or run with --backend cuda",
                                  o.attention));
  }
  const LaunchEnv launch = detect_launch_env();
  if (launch.under_launcher && launch.world_size != v.plan.world_size()) {
    // Before MPI starts: the launcher's count against the plan, said once (rank 0).
    if (launch.world_rank != 0) return 2;
    throw InfeasiblePlan(fmt::format("{}: the plan needs tp*pp*dp = {}*{}*{} = {} ranks, but {} "
                                     "starts {}", v.plan_path, v.plan.tp, v.plan.pp, v.plan.dp,
                                     v.plan.world_size(), launch.launcher, launch.world_size));
  }
  if (!launch.under_launcher) {
    if (!v.gpu_cluster_replaced.empty()) {
      out << fmt::format("backend cpu: cluster {} is a GPU cluster; this run trains on this "
                         "machine's CPU and is priced, budgeted and measured as {}\n",
                         v.gpu_cluster_replaced, v.cluster.name);
    }
    out << v.profile.line() << "\n" << std::flush;  // once, by the launcher, not every rank
    if (const std::optional<std::string> why = does_not_fit(o, v)) {
      std::cerr << "strata: " << *why << "\n";
      return kExitDoesNotFit;
    }
  }
  // The launcher holds --out for its ranks; a run started by hand under mpirun, its rank 0.
  std::optional<FileLock> out_lock;
  if (o.job_dir.empty() && launch.world_rank == 0) out_lock.emplace(lock_out_dir(o.out));
  if (!launch.under_launcher) {
    // The rank layout across nodes, before anything starts (exit 2 naming plan and launch).
    const auto [layout, source] = planned_layout(o, v);
    check_node_layout(parallel_dims(v.plan), layout, o.pp_within_node, v.plan_path, source);
    if (v.plan.world_size() > 1 || !o.hostfile.empty()) return launch_job(o, v, backend);
  }

  MpiSession session(nullptr, nullptr);
  // The job directory is the launching machine's: a rank on another node has none, and
  // keeps its status record to itself.
  std::error_code ec;
  const bool job_dir_here = !o.job_dir.empty() && fs::is_directory(o.job_dir, ec);
  CommWatch watch(session.world_rank(), session.world_size(), job_dir_here ? o.job_dir : "");
  std::unique_ptr<MpiCommunicator> world = session.world(&watch);
  // The layout of the job as it runs, the same verdict on every rank, before any work: a
  // plan that does not fit it, or an --out / --save that is not one directory for every
  // rank, ends each rank with exit 2 and the message printed once (rank 0).
  std::string nvme_dir;
  NodeLayout layout = NodeLayout::uniform(1, world->size());
  try {
    std::string source;
    std::tie(layout, source) = running_layout(o, *world, launch);
    check_node_layout(parallel_dims(v.plan), layout, o.pp_within_node, v.plan_path, source);
    if (layout.nodes() > 1) {
      check_dir_shared("--out", fs::absolute(o.out), *world, layout);
      if (!o.save.empty()) check_dir_shared("--save", fs::absolute(o.save), *world, layout);
    }
    nvme_dir = node_nvme_dir(o, v, layout, world->rank());
  } catch (const ConfigError&) {
    if (world->rank() == 0) throw;
    return 2;
  } catch (const InfeasiblePlan&) {
    if (world->rank() == 0) throw;
    return 2;
  } catch (const std::exception& e) {
    // Not a verdict every rank shares (a system call failed here): the peers may wait in
    // the next collective for this rank.
    if (world->size() == 1) throw;
    abort_job_from_rank(world->rank(), e);
  }
  std::optional<LivenessBeacon> beacon;  // to the launcher: this rank is alive, then done
  try {
    if (!o.liveness.empty()) beacon.emplace(o.liveness, world->rank(), layout.host_of(world->rank()));
  } catch (const std::exception& e) {
    if (world->size() == 1) throw;
    abort_job_from_rank(world->rank(), e);
  }
  if (world->size() == 1) {
    const int stop = train_rank(o, v, *world, backend, nvme_dir, out);  // errors reach main
    return stop != 0 ? StopSignals::exit_code(stop) : 0;
  }
  // A rank blocked too long in one call ends the job: mpirun sees it exit without
  // finalising and ends every other rank.
  std::optional<CommWatchdog> watchdog;
  // Across nodes the message says where each rank runs: status records of other nodes'
  // ranks cannot be read from here, the hosts can.
  const std::string hosts =
      layout.nodes() > 1 ? fmt::format(" (ranks by host: {})", layout.describe()) : std::string();
  watchdog.emplace(watch, o.comm_timeout_s, [&watch, &hosts](const std::string& message) {
    if (watch.claim_report()) {  // the first rank of the job to time out speaks for it
      std::cerr << "strata: " << message << hosts << "; ending the job\n" << std::flush;
    }
    kill_stopped_peers(watch);  // after the message, which reads their state
    std::_Exit(kExitCommTimeout);
  });
  // Several ranks: a rank that fails ends the job (abort_job_from_rank).
  int stop = 0;
  try {
    stop = train_rank(o, v, *world, backend, nvme_dir, out);
  } catch (const std::exception& e) {
    abort_job_from_rank(world->rank(), e);
  }
  watchdog.reset();
  const int exit_code = stop != 0 ? StopSignals::exit_code(stop) : 0;
  if (beacon) beacon->finished(exit_code);
  world.reset();  // communicators go before the session finalises MPI
  return exit_code;
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
  add_cluster_shape_options(*command, options->shape);
  command->add_option_function<std::int64_t>(
      "--steps", [options](const std::int64_t& n) { options->steps = n; },
      "steps to train, 1 or more (default: the train spec's)");
  command->add_option("--data", options->data,
                      "train on this file's tokens: a Megatron PREFIX(.bin/.idx), an llm.c .bin or "
                      "raw bytes (default: generated pseudo-English)");
  command->add_option("--data-format", options->data_format,
                      "auto (default: PREFIX.idx beside it is Megatron, other *.bin llm.c, anything "
                      "else bytes), bytes, megatron or llmc");
  add_eval_options(*command, options->eval);
  command->add_option("--init-from", options->init_from,
                      "start from these weights: safetensors with Hugging Face GPT-2 or Llama names (a "
                      "file, or a sharded checkpoint's model.safetensors.index.json or directory)");
  command->add_option("--save-weights", options->save_weights,
                      "write the trained weights here as one safetensors file (Hugging Face GPT-2 or "
                      "Llama names)");
  command->add_option("--out", options->out,
                      "directory for report.json and trace.json, locked for the run");
  command->add_option("--max-ranks", options->max_ranks,
                      "largest rank count this machine may start (default 8)");
  command->add_option("--hostfile", options->hostfile,
                      "start the ranks through mpirun on the hosts of this Open MPI hostfile "
                      "('host slots=K' lines; ranks fill each host's slots in order)")
      ->check(CLI::ExistingFile);
  command->add_option("--ranks-per-node", options->ranks_per_node,
                      "with --nodes N: group this machine's ranks as if on N nodes of K ranks "
                      "(the layout rules and node-local files, without a second machine)");
  command->add_flag("--pp-within-node", options->pp_within_node,
                    "refuse a plan whose pipeline groups would cross nodes (TP groups never may)");
  command->add_option("--nvme-dir", options->nvme_dir,
                      "existing directory for the NVMe tier's files of offload plans (default "
                      "/tmp); a run directory of its own is made and removed in it");
  command->add_option("--prefetch-depth", options->prefetch_depth,
                      "ZeRO-3 offloaded parameters: layers fetched ahead of use (default 2)");
  command->add_option_function<double>(
      "--device-budget-mib", [options](const double& mib) { options->device_budget_mib = mib; },
      "device memory budget per rank in MiB, > 0 (default: the cluster's)");
  command->add_option("--update-profile", options->update_profile,
                      "fold this run into the profile's fed-back factors (each a trimmed mean of "
                      "what the last 32 runs of its kind asked for), rewriting the file")
      ->check(CLI::ExistingFile);
  // The prediction printed beside the measurement, and the fit check.
  add_profile_options(*command, options->profile, options->no_profile);
  command->add_option_function<std::string>(
      "--backend", [options](const std::string& b) { options->backend = b; },
      "cpu or cuda (default: cuda when a GPU is present and the plan fits this machine's GPUs)");
  command->add_option("--threads", options->threads,
                      "OpenMP and OpenBLAS threads per rank (default: the environment's "
                      "OMP_NUM_THREADS / OPENBLAS_NUM_THREADS, else max(1, cores / ranks))")
      ->check(CLI::Range(1, 1024));
  command->add_flag("--cuda-semantics", options->cuda_semantics,
                    "CPU backend with CUDA's semantics: work queued on the streams the GPU "
                    "would use, freed memory reused at once as NaN, and every access from "
                    "another stream without an ordering edge reported as a race (exit 2); "
                    "slower, for checking the engine's ordering on a machine without a GPU");
  command->add_option("--ranks-per-gpu", options->ranks_per_gpu,
                      "CUDA: processes that may share one GPU (host-staged communicators; "
                      "default 1: one GPU per rank, NCCL)");
  command->add_option("--attention", options->attention,
                      "CUDA: auto (cuDNN's fused attention where cuDNN 9 is found, takes the shape "
                      "and agrees with strata's kernels on its first call; else the kernels, "
                      "saying why), cudnn (cuDNN or an error) or kernels (default auto)")
      ->check(CLI::IsMember({"auto", "cudnn", "kernels"}));
  command->add_flag("--kernel-trace", options->kernel_trace,
                    "CUDA: time every layer op on its own and put each in trace.json as a span "
                    "(category \"kernel\") inside the op that ran it; the events between the "
                    "ops slow the steps a little, so time speed without it");
  command->add_flag("--cuda-graphs", options->cuda_graphs,
                    "CUDA (or --cuda-semantics): capture a step's ops once as a CUDA graph and "
                    "replay it each step, one launch instead of thousands, where the plan allows "
                    "(no pipeline, model state on the GPU, NCCL between GPUs; else the run "
                    "says why not)");
  command->add_flag("--no-host-stream", options->no_host_stream,
                    "CUDA: run the CPU AdamW of a plan whose ZeRO-3 state is all in host memory "
                    "on the thread that issues the GPU's work, not as host functions on a "
                    "stream of their own (which let it run beside the GPU's next forward)");
  command->add_option("--comm-timeout-s", options->comm_timeout_s,
                      "a rank blocked this long in one MPI call (a hung or stopped peer) ends "
                      "the job naming the call and the peer, exit 4 (default 300)");
  command->add_option("--stop-grace-s", options->stop_grace_s,
                      "after SIGINT/SIGTERM: how long the ranks get to finish their step and "
                      "write the report before they are killed (default 3)");
  command->add_option("--save", options->save,
                      "write checkpoints (parameters, AdamW state, step) to DIR/step-NNNNNN/, "
                      "one shard per rank and a manifest; resumable under any plan");
  command->add_option_function<std::int64_t>(
      "--save-every", [options](const std::int64_t& n) { options->save_every = n; },
      "--save: a checkpoint every N steps, N >= 1 (default: after the last step only)");
  command->add_option_function<std::int64_t>(
      "--keep", [options](const std::int64_t& k) { options->keep = k; },
      "--save: keep the last K complete checkpoints, K >= 1 (default: all)");
  command->add_flag("--save-on-signal", options->save_on_signal,
                    "--save: a run stopped by SIGINT/SIGTERM writes a checkpoint of its steps");
  command->add_option("--resume", options->resume,
                      "continue from the newest complete checkpoint under DIR (or the step "
                      "directory DIR), under this run's plan");
  // Set by the launching `strata run` for its ranks, never by hand.
  command->add_option("--job-dir", options->job_dir)->group("");
  command->add_option("--liveness", options->liveness)->group("");
  command->add_flag("--plot", options->plot,
                    "after the run, draw --out as `strata plot` does (loss.png, step_parts.png, "
                    "memory.png, timeline.png; needs python3-matplotlib)");
  command->callback([options, &context] {
    context.exit_code = run_command(*options, *context.out);
    // The launching process draws, once, after its ranks wrote the report.
    if (context.exit_code == 0 && options->plot && !detect_launch_env().under_launcher) {
      context.exit_code = draw_run(options->out, "", options->out);
    }
  });
}

}  // namespace strata::cli
