// strata_setup_bench: where a one-rank CPU run's set-up goes (issue 25), by phase, in this
// process: the parameters' draws alone (model::init_unit_range over every unit into one
// buffer already faulted in: the arithmetic, nothing else), then the whole of a rank's
// training objects (engine::RankTraining: allocations and their page faults, the draws,
// the copies, the Program), and the difference of the two (memory and everything besides
// the draws). Each figure is wall and CPU seconds (the process's, every thread), the median
// of --reps, with the load average before and after: on a shared machine the CPU seconds
// are what other work moves least. --plan takes a one-rank plan file (an offload plan: its
// state placed on the host or on NVMe under --nvme-dir), and the bytes placed on each tier
// are printed with the rate, GB of model state placed a second of set-up (issue 38).
// `strata run` says the same from the command line ("strata run: set up in ..."); this
// bench leaves out the command's own start (flags, configs, the fit check, the re-exec for
// the thread settings).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <exception>
#include <fstream>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cost_model/specs/partition.h"
#include "executor/comm/mpi_communicator.h"
#include "executor/data/corpus.h"
#include "executor/run/rank_training.h"
#include "executor/model/param_init.h"

namespace {

using namespace strata;

struct Seconds {
  double wall = 0, cpu = 0;
};

double process_cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

template <class F>
Seconds timed(F&& f) {
  const auto wall0 = std::chrono::steady_clock::now();
  const double cpu0 = process_cpu_s();
  f();
  return {std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count(),
          process_cpu_s() - cpu0};
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return in ? one + " " + five + " " + fifteen : std::string("unknown");
}

Seconds median(std::vector<Seconds> v) {
  Seconds m;
  std::sort(v.begin(), v.end(), [](const Seconds& a, const Seconds& b) { return a.wall < b.wall; });
  m.wall = v[v.size() / 2].wall;
  std::sort(v.begin(), v.end(), [](const Seconds& a, const Seconds& b) { return a.cpu < b.cpu; });
  m.cpu = v[v.size() / 2].cpu;
  return m;
}

ModelSpec load_model(const std::string& name) {
  const std::string bundled = std::string(STRATA_SOURCE_DIR) + "/configs/models/" + name + ".json";
  return ModelSpec::load(std::ifstream(bundled) ? bundled : name);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times a one-rank CPU run's set-up by phase (issue 25)"};
  std::string model_name = "gpt2-350m";
  std::string plan_path;
  std::string nvme_dir = "/tmp/strata-nvme";
  int threads = 0;
  int reps = 3;
  app.add_option("--model", model_name, "bundled model name or JSON file (default gpt2-350m)");
  app.add_option("--threads", threads, "OpenMP threads (default: the environment's)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--reps", reps, "repetitions; the median is printed (default 3)")
      ->check(CLI::Range(1, 100));
  app.add_option("--plan", plan_path, "a one-rank plan file (default: t1 p1 d1, no offload)")
      ->check(CLI::ExistingFile);
  app.add_option("--nvme-dir", nvme_dir, "the NVMe tier's directory (default /tmp/strata-nvme)");
  CLI11_PARSE(app, argc, argv);
  try {
    if (threads > 0) omp_set_num_threads(threads);
    const MpiSession session(nullptr, nullptr);
    const ModelSpec model = load_model(model_name);
    const TrainSpec train =
        TrainSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/train/tiny.json");
    Plan plan;  // t1 p1 d1: one rank holds every unit
    plan.micro_batch = 1;
    if (!plan_path.empty()) plan = Plan::load(plan_path);
    if (plan.world_size() != 1) {
      throw std::invalid_argument(fmt::format("--plan {}: {} ranks; this bench runs one",
                                              plan_path, plan.world_size()));
    }
    const std::vector<UnitLayout> units = rank_unit_layouts(model, plan, 0, 0, 1);
    std::int64_t largest = 0;
    for (const UnitLayout& u : units) largest = std::max(largest, u.count);
    std::vector<float> buffer(static_cast<std::size_t>(largest), 0.0f);  // faulted in here
    const auto corpus = data::generated_corpus(train.seed, 1 << 20);
    const std::string load_before = load_average();
    std::vector<Seconds> draws, state;
    engine::OffloadOptions offload;
    offload.nvme_dir = nvme_dir;
    TierBytes placed;
    offload.on_placed = [&placed](const TierBytes& bytes) { placed = bytes; };
    for (int r = 0; r < reps; ++r) {
      draws.push_back(timed([&] {
        for (const UnitLayout& u : units) model::init_unit_range(u, train.seed, buffer.data(), 0, u.count);
      }));
      std::unique_ptr<MpiCommunicator> world = MpiCommunicator::duplicate(MPI_COMM_SELF);
      std::unique_ptr<engine::RankTraining> rank;
      state.push_back(timed([&] {
        rank = std::make_unique<engine::RankTraining>(
            model, train, plan, *world, TierBudgets{}, data::TokenView::of_bytes(corpus),
            offload, engine::cpu_backend_maker());
      }));
    }
    const Seconds d = median(draws), s = median(state);
    const double placed_bytes = placed.device + placed.host + placed.nvme;
    std::cout << fmt::format("model {} ({:.0f}M parameters), plan {}, {} threads, median of {} "
                             "(load average before {}, after {})\n",
                             model.name, static_cast<double>(model.total_params()) / 1e6,
                             plan.label(), omp_get_max_threads(), reps, load_before, load_average())
              << fmt::format("placed: device {:.2f} GiB, host {:.2f} GiB, nvme {:.2f} GiB; "
                             "{:.2f} GB/s of set-up (wall)\n",
                             placed.device / (1 << 30), placed.host / (1 << 30),
                             placed.nvme / (1 << 30), placed_bytes / s.wall / 1e9)
              << fmt::format("{:<44} {:>8} {:>8}\n", "phase", "wall s", "cpu s")
              << fmt::format("{:<44} {:>8.2f} {:>8.2f}\n", "parameter draws alone", d.wall, d.cpu)
              << fmt::format("{:<44} {:>8.2f} {:>8.2f}\n",
                             "rank's training objects (all of set-up)", s.wall, s.cpu)
              << fmt::format("{:<44} {:>8.2f} {:>8.2f}\n",
                             "  of which besides the draws (memory, copies)", s.wall - d.wall,
                             s.cpu - d.cpu);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "strata_setup_bench: " << e.what() << "\n";
    return 2;
  }
}
