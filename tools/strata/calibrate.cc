// `strata calibrate`: measures this machine's rates through the project's own kernels and
// communicators and writes them as a Profile (cost_model/specs/profile.h) that `strata plan /
// predict --profile` use in place of the cluster file's estimates:
//   - compute (executor/calibrate/calibration.h): the GEMMs of the models' linear layers,
//     forward and backward, memory-bound kernels, attention, AdamW, copies;
//   - collectives (collective_bench.h) over 2..--ranks ranks, each count one run of the
//     hidden `strata calibrate-collectives` under mpirun (relaunch_under_mpirun), which
//     writes its fits to a scratch Profile file this process merges; across nodes
//     (--hostfile, or --nodes N --ranks-per-node K grouping this machine's ranks) one such
//     run over every rank measures both links instead (node_collectives.h);
//   - NVMe read/write (executor/offload/nvme_bandwidth.h) when --nvme-dir is given.
// A progress bar goes to stderr, a one-screen summary to stdout; the Profile is written
// atomically, only once everything has been measured, to --out and to the per-machine cache
// (profile_cache.h) that the pricing commands read by default.
// --backend cuda (calibrate_cuda.h) measures one GPU through the CUDA backend's kernels
// instead of the compute part, plus its memory headroom; no collectives (one GPU has none to
// measure; several: not yet). Without CUDA in the binary or a device: exit 2 before any work.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <ostream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/json_reader.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/profile.h"
#include "executor/calibrate/calibration.h"
#include "executor/calibrate/collective_bench.h"
#include "executor/calibrate/gpu_options.h"
#include "executor/calibrate/node_collectives.h"
#include "executor/comm/hostfile.h"
#include "executor/comm/mpi_communicator.h"
#include "executor/offload/nvme_bandwidth.h"
#include "executor/runtime/mpi_launch.h"
#include "tools/strata/calibrate_cuda.h"
#include "tools/strata/commands.h"
#include "tools/strata/inputs.h"
#include "tools/strata/profile_cache.h"
#include "tools/strata/run_nodes.h"

namespace strata::cli {
namespace {

struct CalibrateOptions {
  std::string backend = "cpu";
  std::string out = "profile.json";
  int ranks = 2;
  std::string nvme_dir;
  bool quick = false;
  std::vector<std::string> models;  // default: tiny and gpt2-124m (quick: tiny)
  std::vector<std::int64_t> micro_batches = {1};  // GEMM shapes; the first also attention's
  std::vector<std::int64_t> tps = {1};            // tensor-parallel splits of the GEMM shapes
  int threads = 0;  // kernel threads per rank; 0: what `strata run` gives one of --ranks ranks
  bool ranks_given = false;    // --ranks or --threads on the command line: CPU only
  bool threads_given = false;
  // Across nodes: an Open MPI hostfile, or this machine's ranks grouped as `nodes` nodes of
  // ranks_per_node (0: not given).
  std::string hostfile;
  int nodes = 0;
  int ranks_per_node = 0;
  bool across_nodes() const { return !hostfile.empty() || nodes != 0; }
};

struct CollectivesOptions {
  std::string out;
  bool quick = false;
  bool across_nodes = false;  // measure both links of the job's layout
  int nodes = 0;              // with ranks_per_node: the layout; 0: the ranks' hosts
  int ranks_per_node = 0;
};

// The ranks of a job over the hostfile: every slot (ConfigError naming the file when it is
// not a hostfile).
int hostfile_ranks(const std::string& path) {
  int ranks = 0;
  for (const HostSlots& host : read_hostfile(path)) ranks += host.slots;
  return ranks;
}

// The flags' checks, before any work (ConfigError, exit 2).
void check_options(const CalibrateOptions& o) {
  if ((o.nodes != 0) != (o.ranks_per_node != 0)) {
    throw ConfigError(fmt::format("--nodes {} --ranks-per-node {}: give both (this machine's "
                                  "ranks grouped as N nodes of K ranks) or neither",
                                  o.nodes, o.ranks_per_node));
  }
  if (o.nodes != 0 && !o.hostfile.empty()) {
    throw ConfigError("--hostfile and --nodes --ranks-per-node: the hostfile names the nodes; "
                      "give one of the two");
  }
  if (o.across_nodes() && o.ranks_given) {
    throw ConfigError("--ranks: across nodes the ranks are the hostfile's slots or --nodes x "
                      "--ranks-per-node; leave --ranks out");
  }
  if (o.across_nodes() && o.backend == "cuda") {
    throw ConfigError("--hostfile / --nodes: the CUDA calibration measures no collectives "
                      "(one GPU has none; several: not yet); leave them out with --backend cuda");
  }
  if (!o.hostfile.empty()) hostfile_ranks(o.hostfile);
}

calibrate::CollectiveBenchOptions collective_options(bool quick) {
  calibrate::CollectiveBenchOptions o;
  if (quick) {
    o.buffer_floats = {1 << 10, 1 << 16, 1 << 20};  // 4 KiB .. 4 MiB
    o.repeats = 3;
    o.bytes_per_repeat = 4.0 * (1 << 20);
  } else {
    o.buffer_floats = {1 << 8, 1 << 12, 1 << 16, 1 << 18, 1 << 20, 1 << 22};  // 1 KiB .. 16 MiB
    o.repeats = 5;
    o.bytes_per_repeat = 16.0 * (1 << 20);
  }
  return o;
}

// "\r[#####-----]  45% <step>" on stderr, over one range [begin, end) of the whole run.
class ProgressBar {
 public:
  void set_range(double begin, double end) { begin_ = begin, end_ = end; }
  void update(double fraction, const std::string& step) {
    constexpr int kWidth = 30;
    const double f = begin_ + (end_ - begin_) * std::clamp(fraction, 0.0, 1.0);
    const int filled = static_cast<int>(f * kWidth);
    std::string label = step.size() > 60 ? step.substr(0, 57) + "..." : step;
    std::cerr << fmt::format("\r[{}{}] {:>3.0f}% {:<60}", std::string(filled, '#'),
                             std::string(kWidth - filled, '-'), 100.0 * f, label)
              << std::flush;
  }
  void finish() { std::cerr << "\n"; }

 private:
  double begin_ = 0, end_ = 1;
};

std::string rate(double value, double unit, const char* name) {
  return value > 0 ? fmt::format("{:.2f} {}", value / unit, name) : "not measured";
}

void print_summary(std::ostream& out, const Profile& p, const std::string& path) {
  const bool both_links =
      std::any_of(p.collectives.begin(), p.collectives.end(),
                  [](const CollectiveFit& c) { return c.link == "inter_node"; });
  double best_gemm = 0;
  for (const GemmSample& s : p.gemm) best_gemm = std::max(best_gemm, s.flops_per_s);
  out << fmt::format("machine: {}\n", p.machine);
  out << fmt::format("gemm: {} shapes, best {}\n", p.gemm.size(), rate(best_gemm, 1e9, "GFLOP/s"));
  out << fmt::format("elementwise: {}\n", rate(p.elementwise_bytes_per_s, 1e9, "GB/s"));
  out << fmt::format("elementwise backward: {}\n",
                     rate(p.elementwise_backward_bytes_per_s, 1e9, "GB/s"));
  out << fmt::format("attention: {}\n", rate(p.attention_flops_per_s, 1e9, "GFLOP/s"));
  out << fmt::format("attention backward: {}\n",
                     rate(p.attention_backward_flops_per_s, 1e9, "GFLOP/s"));
  out << fmt::format("llama: rmsnorm {} (backward {}), swiglu {} (backward {}), rotary {} "
                     "(backward {})\n",
                     rate(p.rmsnorm_bytes_per_s, 1e9, "GB/s"),
                     rate(p.rmsnorm_backward_bytes_per_s, 1e9, "GB/s"),
                     rate(p.swiglu_bytes_per_s, 1e9, "GB/s"),
                     rate(p.swiglu_backward_bytes_per_s, 1e9, "GB/s"),
                     rate(p.rope_bytes_per_s, 1e9, "GB/s"),
                     rate(p.rope_backward_bytes_per_s, 1e9, "GB/s"));
  for (const AttentionSample& a : p.gqa_attention) {
    out << fmt::format("grouped-query attention, head size {}: {} (backward {})\n", a.head_size,
                       rate(a.flops_per_s, 1e9, "GFLOP/s"),
                       rate(a.backward_flops_per_s, 1e9, "GFLOP/s"));
  }
  if (p.backend == "cpu") {
    out << fmt::format("kernels timed at {} thread(s) per rank\n", p.threads_per_rank);
  }
  if (p.busy_cores >= 2) {
    out << fmt::format("with all {} cores busy, kernels run {:.2f}x slower\n", p.busy_cores,
                       p.busy_cores_slowdown);
  }
  out << fmt::format("adamw: {}\n", rate(p.cpu_adam_params_per_s, 1e6, "Mparams/s"));
  if (p.host_memory_bytes_per_s > 0) {
    out << fmt::format("host memory: {}; adamw moves {} ({:.0f}%) at {} bytes a parameter\n",
                       rate(p.host_memory_bytes_per_s, 1e9, "GB/s"),
                       rate(p.cpu_adam_params_per_s * kCpuAdamBytesPerParam, 1e9, "GB/s"),
                       100 * p.cpu_adam_params_per_s * kCpuAdamBytesPerParam /
                           p.host_memory_bytes_per_s,
                       kCpuAdamBytesPerParam);
    out << fmt::format("host memory timed on {} MiB of arrays ({:.1f}x the {} MiB last-level "
                       "cache)\n", p.memory_working_set_bytes >> 20,
                       p.last_level_cache_bytes > 0
                           ? static_cast<double>(p.memory_working_set_bytes) /
                                 static_cast<double>(p.last_level_cache_bytes)
                           : 0.0,
                       p.last_level_cache_bytes >> 20);
  }
  if (p.backend == "cuda") {
    out << fmt::format("device adamw: {}\n", rate(p.device_adam_params_per_s, 1e6, "Mparams/s"));
    out << fmt::format("copy: host->device {}, device->host {}\n",
                       rate(p.host_to_device_bytes_per_s, 1e9, "GB/s"),
                       rate(p.device_to_host_bytes_per_s, 1e9, "GB/s"));
    out << fmt::format("headroom: context {:.0f} MiB, communicator {:.0f} MiB\n",
                       p.headroom.context_bytes / (1 << 20),
                       p.headroom.communicator_bytes / (1 << 20));
  } else {
    out << fmt::format("copy: {}\n", rate(p.host_to_device_bytes_per_s, 1e9, "GB/s"));
  }
  for (const CollectiveFit& c : p.collectives) {
    out << fmt::format("{} x{}{}: latency {:.1f} us, bus bandwidth {}\n", c.op, c.ranks,
                       both_links ? " " + c.link : std::string(), c.latency_s * 1e6,
                       rate(c.bus_bandwidth_bytes_per_s, 1e9, "GB/s"));
  }
  out << fmt::format("nvme: read {}, write {}\n", rate(p.nvme_read_bytes_per_s, 1e9, "GB/s"),
                     rate(p.nvme_write_bytes_per_s, 1e9, "GB/s"));
  out << fmt::format("wrote {}\n", path);
}

// One mpirun job of the hidden subcommand; its fits (a Profile in a scratch file) join
// `profile`'s.
void collectives_job(const CalibrateOptions& options, RelaunchOptions relaunch,
                     std::vector<std::string> args, const std::string& scratch,
                     Profile& profile) {
  args.insert(args.begin(), {"calibrate-collectives", "--out", scratch});
  if (options.quick) args.push_back("--quick");
  const int rc = relaunch_under_mpirun(relaunch, args).exit_code;
  if (rc != 0) {
    std::remove(scratch.c_str());
    throw SystemError(fmt::format(
        "calibrate: the collectives run under mpirun -np {} exited with code {}", relaunch.ranks, rc));
  }
  const Profile part = Profile::load(scratch);
  std::remove(scratch.c_str());
  profile.collectives.insert(profile.collectives.end(), part.collectives.begin(),
                             part.collectives.end());
}

// On this machine: one job per rank count 2..--ranks.
void calibrate_collectives(const CalibrateOptions& options, Profile& profile, ProgressBar& bar) {
  for (int n = 2; n <= options.ranks; ++n) {
    bar.update(static_cast<double>(n - 2) / (options.ranks - 1),
               fmt::format("collectives over {} ranks (mpirun)", n));
    RelaunchOptions relaunch;
    relaunch.ranks = n;
    collectives_job(options, relaunch, {}, fmt::format("{}.ranks{}.tmp.json", options.out, n),
                    profile);
  }
}

// Across nodes: one job over the hostfile's slots (mpirun places them, by slot, as `run`
// does) or this machine's ranks grouped as --nodes x --ranks-per-node.
void calibrate_node_collectives(const CalibrateOptions& options, Profile& profile,
                                ProgressBar& bar) {
  RelaunchOptions relaunch;
  std::vector<std::string> args = {"--across-nodes"};
  std::string launch;
  if (!options.hostfile.empty()) {
    relaunch.ranks = hostfile_ranks(options.hostfile);
    relaunch.extra_args = {"--hostfile", std::filesystem::absolute(options.hostfile).string()};
    relaunch.quiet = false;  // mpirun names a node it lost
    relaunch.mpi_files_in_job_dir = false;
    launch = "--hostfile " + options.hostfile;
  } else {
    relaunch.ranks = options.nodes * options.ranks_per_node;
    args.insert(args.end(), {"--nodes", std::to_string(options.nodes), "--ranks-per-node",
                             std::to_string(options.ranks_per_node)});
    launch = fmt::format("--nodes {} --ranks-per-node {}", options.nodes, options.ranks_per_node);
  }
  bar.update(0.0, fmt::format("collectives within and across nodes, {} ranks (mpirun {})",
                              relaunch.ranks, launch));
  collectives_job(options, relaunch, args, options.out + ".nodes.tmp.json", profile);
  const auto has = [&](const char* link) {
    return std::any_of(profile.collectives.begin(), profile.collectives.end(),
                       [&](const CollectiveFit& c) { return c.link == link; });
  };
  for (const char* link : {"intra_node", "inter_node"}) {
    if (!has(link)) {
      std::cerr << fmt::format("\nstrata: warning: {}: no {} collectives measured ({})\n", launch,
                               link,
                               std::string(link) == "intra_node"
                                   ? "no node holds two ranks: give a node two slots"
                                   : "one node: the ranks need two nodes or more");
    }
  }
}

int run_calibrate(const CalibrateOptions& options, std::ostream& out) {
  check_options(options);
  const bool cuda = options.backend == "cuda";
  if (cuda) {
    if (options.ranks_given) {
      throw ConfigError("--ranks: the CUDA calibration measures no collectives (one GPU has "
                        "none; several: not yet); leave --ranks out with --backend cuda");
    }
    if (options.threads_given) {
      throw ConfigError("--threads: kernel threads are the CPU backend's; leave --threads out "
                        "with --backend cuda");
    }
    require_cuda_device();
  }
  // The CUDA attention kernel needs head size 64 or 128: tiny-gpu, not tiny.
  const std::string small = cuda ? "tiny-gpu" : "tiny";
  std::vector<std::string> names = options.models;
  if (names.empty()) names = options.quick ? std::vector<std::string>{small}
                                           : std::vector<std::string>{small, "gpt2-124m"};
  std::vector<ModelSpec> models;
  for (const std::string& name : names) {
    models.push_back(ModelSpec::load(resolve_config("models", name, "--model")));
  }
  calibrate::ComputeCalibrationOptions compute =
      cuda ? calibrate::gpu_compute_options(std::move(models), options.quick)
           : calibrate::compute_options(std::move(models), options.quick);
  compute.micro_batch = options.micro_batches.front();
  compute.gemm_micro_batches = options.micro_batches;
  compute.gemm_tps = options.tps;
  // A rank of an N-rank run gets max(1, cores / N) threads (mpi_launch.h); the whole
  // machine's AdamW rate uses every core.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  compute.kernel_threads =
      options.threads > 0 ? options.threads : threads_per_rank(options.ranks, cores);
  compute.adam_threads = cores;
  compute.busy_cores = cores;

  if (cuda) calibrate::check_cuda_shapes(compute);  // before any work

  // Share of the bar per phase, roughly their share of the time.
  const bool collectives = !cuda && (options.ranks >= 2 || options.across_nodes());
  const bool nvme = !options.nvme_dir.empty();
  const double compute_end = 1.0 - (collectives ? 0.25 : 0.0) - (nvme ? 0.1 : 0.0);
  ProgressBar bar;
  bar.set_range(0.0, compute_end);
  const calibrate::Progress progress = [&bar](double f, const std::string& step) {
    bar.update(f, step);
  };
  Profile profile = cuda ? calibrate_cuda(compute, progress)
                         : calibrate::calibrate_compute(compute, progress);
  if (collectives) {
    bar.set_range(compute_end, compute_end + 0.25);
    if (options.across_nodes()) {
      calibrate_node_collectives(options, profile, bar);
    } else {
      calibrate_collectives(options, profile, bar);
    }
  }
  if (nvme) {
    bar.set_range(1.0 - 0.1, 1.0);
    bar.update(0.0, fmt::format("nvme read/write in {}", options.nvme_dir));
    // 1 MiB blocks, 8 in flight: the offload path's own request size and depth.
    const std::int64_t block = std::int64_t{1} << 20;
    // At least the host-memory arrays' size in a full run: where the filesystem refuses
    // O_DIRECT the page cache serves it, and a file it holds would time the cache.
    const std::int64_t file_bytes =
        options.quick ? 64 * block
                      : std::max<std::int64_t>(512 * block, (compute.memory_working_set_bytes +
                                                             block - 1) / block * block);
    const offload::NvmeBandwidth bw =
        offload::measure_nvme_bandwidth(options.nvme_dir, file_bytes, block, 8);
    profile.nvme_read_bytes_per_s = bw.read_bytes_per_s;
    profile.nvme_write_bytes_per_s = bw.write_bytes_per_s;
  }
  bar.set_range(0.0, 1.0);
  bar.update(1.0, "done");
  bar.finish();
  // What a load would refuse (an AdamW rate the measured memory cannot carry) is refused
  // here, before anything is written.
  (void)Profile::from_json(profile.to_json(), options.out);
  write_json_file(options.out, profile.to_json());
  print_summary(out, profile, options.out);
  // Also the machine's newest in the cache, which the pricing commands use by default; a
  // cache that cannot be written costs the default, not the calibration (--out has it).
  const CacheStore cached = store_in_profile_cache(profile);
  if (!cached.path.empty()) {
    out << fmt::format("cached {} (predict, plan, run and select on this machine's cluster "
                       "use it unless --profile or --no-profile say otherwise)\n", cached.path);
  } else if (!cached.warning.empty()) {
    std::cerr << fmt::format("strata: warning: {}; the profile is only in {} (pass it with "
                             "--profile)\n", cached.warning, options.out);
  } else {
    out << "not cached: STRATA_CACHE_DIR=off (or no home directory)\n";
  }
  return 0;
}

// The hidden subcommand each mpirun rank runs: every rank measures, rank 0 writes.
int run_collectives(const CollectivesOptions& options) {
  MpiSession session(nullptr, nullptr);
  Profile part;
  {
    std::unique_ptr<MpiCommunicator> world = session.world();
    if (options.across_nodes) {
      const NodeLayout layout = options.nodes != 0
                                    ? NodeLayout::uniform(options.nodes, options.ranks_per_node)
                                    : gathered_layout(*world);
      part.collectives =
          calibrate::measure_node_links(*world, layout, collective_options(options.quick));
    } else {
      part.collectives =
          calibrate::measure_collectives(*world, collective_options(options.quick));
    }
    part.machine = calibrate::describe_machine();
    part.backend = "cpu";
    if (world->rank() == 0) write_json_file(options.out, part.to_json());
    world->barrier();
  }  // the communicator goes before the session finalises MPI
  return 0;
}

}  // namespace

void add_calibrate_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<CalibrateOptions>();
  CLI::App* command = app.add_subcommand(
      "calibrate", "Measure this machine's GEMM, memory, optimizer, collective and NVMe rates "
                   "into a profile for `plan`/`predict --profile`");
  command->add_option("--backend", options->backend, "backend to calibrate")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  command->add_option("--out", options->out, "profile file to write")->capture_default_str();
  CLI::Option* ranks =
      command->add_option("--ranks", options->ranks,
                          "measure collectives over 2..N ranks under mpirun (1: skip them; "
                          "cpu only)")
          ->check(CLI::Range(1, 64))
          ->capture_default_str();
  command->add_option("--nvme-dir", options->nvme_dir,
                      "measure NVMe read/write bandwidth with a scratch file in this (existing) "
                      "directory")
      ->check(CLI::ExistingDirectory);
  command->add_flag("--quick", options->quick, "fewer shapes, sizes and repeats (~10 s)");
  command->add_option("--model", options->models,
                      "model(s) whose layer shapes to time (default: tiny gpt2-124m; "
                      "--quick: tiny; with --backend cuda tiny-gpu for tiny)");
  command->add_option("--hostfile", options->hostfile,
                      "measure the collectives within and across the nodes of this Open MPI "
                      "hostfile ('host slots=K' lines), through mpirun: inside the first node "
                      "with two slots, and over one rank per node (cpu only)")
      ->check(CLI::ExistingFile);
  command->add_option("--nodes", options->nodes,
                      "with --ranks-per-node K: this machine's ranks grouped as N nodes, both "
                      "links measured as across nodes (cpu only)")
      ->check(CLI::Range(1, 64));
  command->add_option("--ranks-per-node", options->ranks_per_node,
                      "with --nodes N: ranks on each of the N nodes")
      ->check(CLI::Range(1, 64));
  CLI::Option* threads =
      command->add_option("--threads", options->threads,
                          "kernel threads per rank (default: what `strata run` gives each of "
                          "--ranks ranks, max(1, cores / ranks); cpu only)")
          ->check(CLI::PositiveNumber);
  command->add_option("--micro-batch", options->micro_batches,
                      "micro-batch(es) of the GEMM shapes; attention and elementwise kernels "
                      "run at the first")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command->add_option("--tp", options->tps,
                      "tensor-parallel degree(s) of the GEMM shapes (those dividing a model's "
                      "heads, ffn and vocabulary)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command->callback([options, ranks, threads, &context] {
    options->ranks_given = ranks->count() > 0;
    options->threads_given = threads->count() > 0;
    context.exit_code = run_calibrate(*options, *context.out);
  });

  // Internal: what each rank of the collectives' mpirun job runs. Hidden from --help.
  auto internal = std::make_shared<CollectivesOptions>();
  CLI::App* collectives =
      app.add_subcommand("calibrate-collectives", "internal: one mpirun job of `calibrate`");
  collectives->group("");
  collectives->add_option("--out", internal->out, "scratch profile to write")->required();
  collectives->add_flag("--quick", internal->quick, "fewer sizes and repeats");
  collectives->add_flag("--across-nodes", internal->across_nodes,
                        "both links of the job's layout (node_collectives.h)");
  collectives->add_option("--nodes", internal->nodes, "the layout's nodes (0: the ranks' hosts)");
  collectives->add_option("--ranks-per-node", internal->ranks_per_node, "ranks on each node");
  collectives->callback([internal, &context] { context.exit_code = run_collectives(*internal); });
}

}  // namespace strata::cli
