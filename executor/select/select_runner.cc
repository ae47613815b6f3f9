// Runs a multi-model schedule on D device workers of one process (see select_runner.h).
#include "executor/select/select_runner.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/partition.h"
#include "executor/comm/local_communicator.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/engine/engine.h"
#include "executor/run/rank_loop.h"
#include "executor/run/rank_training.h"
#include "kernels/cpu/gemm.h"

namespace strata::select {
namespace {

using Clock = std::chrono::steady_clock;

// One rank of a job: built and trained as `strata run` builds and trains a rank, over a
// LocalWorld.
struct RankState {
  std::unique_ptr<engine::RankTraining> training;
  std::unique_ptr<engine::RankLoop> loop;

  // The loop refers to the rank.
  void release() {
    loop.reset();
    training.reset();
  }
};

struct JobState {
  std::unique_ptr<LocalWorld> world;
  std::vector<RankState> ranks;
  std::int64_t next_step = 0;  // steps done; a slice starts when it equals its first step
  std::mutex mutex;
  std::condition_variable advanced;
};

class Runner {
 public:
  Runner(const std::vector<Job>& jobs, const std::vector<Plan>& plans,
         const SelectSchedule& schedule, std::int64_t devices, const ClusterSpec& cluster,
         const RunOptions& options)
      : jobs_(jobs), plans_(plans), schedule_(schedule), devices_(devices), options_(options),
        make_backend_(options.make_backend ? options.make_backend
                                           : cpu_backend::cpu_backend_maker()),
        states_(jobs.size()) {
    budgets_ = TierBudgets::per_rank(cluster, devices);
    if (options.device_budget_bytes > 0) {
      budgets_.device_bytes = static_cast<std::int64_t>(options.device_budget_bytes);
    }
    run_.jobs.resize(jobs.size());
    run_.device_busy_s.assign(static_cast<std::size_t>(devices), 0.0);
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      states_[j] = std::make_unique<JobState>();
      run_.jobs[j].losses.resize(static_cast<std::size_t>(jobs[j].train.steps));
      run_.jobs[j].step_s.resize(static_cast<std::size_t>(jobs[j].train.steps));
    }
  }

  SelectRun run() {
    // Each worker runs one thread of kernels: D workers share the node's cores.
    kernels::cpu::set_blas_threads(1);
    origin_ = Clock::now();
    std::vector<std::thread> workers;
    for (std::int64_t d = 0; d < devices_; ++d) workers.emplace_back([this, d] { work(d); });
    for (auto& w : workers) w.join();
    if (error_) std::rethrow_exception(error_);
    for (const JobRun& j : run_.jobs) run_.makespan_s = std::max(run_.makespan_s, j.end_s);
    return std::move(run_);
  }

 private:
  double now_s() const { return std::chrono::duration<double>(Clock::now() - origin_).count(); }

  void work(std::int64_t device) {
    omp_set_num_threads(1);
    try {
      for (const ScheduleSlice& slice : schedule_.slices) {
        const auto at = std::find(slice.devices.begin(), slice.devices.end(), device);
        if (at == slice.devices.end()) continue;
        run_slice(slice, static_cast<int>(at - slice.devices.begin()), device);
      }
    } catch (...) {
      const std::lock_guard<std::mutex> lock(run_mutex_);
      if (!error_) error_ = std::current_exception();
      // The job's other ranks wait in a collective that will never complete: nothing can
      // unwind them, so the process must end (the tool prints the error and exits).
      if (options_.fatal) options_.fatal(error_);
      std::terminate();  // see RunOptions::fatal
    }
  }

  void build_rank(std::size_t j, int rank, std::int64_t device) {
    JobState& s = *states_[j];
    RankState& r = s.ranks[static_cast<std::size_t>(rank)];
    const JobTokens& tokens = options_.tokens[j];
    r.training = std::make_unique<engine::RankTraining>(
        jobs_[j].model, jobs_[j].train, plans_[j], s.world->factory(rank),
        static_cast<int>(device), budgets_, tokens.train, make_backend_);
    r.loop = std::make_unique<engine::RankLoop>(*r.training, options_.eval, tokens.valid);
  }

  void run_slice(const ScheduleSlice& slice, int rank, std::int64_t device) {
    JobState& s = *states_[slice.job];
    const auto world = static_cast<int>(plans_[slice.job].world_size());
    if (static_cast<int>(slice.devices.size()) != world) {
      throw std::logic_error(fmt::format("select: job '{}' has a slice on {} devices for a plan "
                                         "of {} ranks", jobs_[slice.job].name,
                                         slice.devices.size(), world));
    }
    {
      // The job's earlier steps run first (they start earlier, on whatever devices).
      std::unique_lock<std::mutex> lock(s.mutex);
      s.advanced.wait(lock, [&] { return s.next_step == slice.first_step; });
      if (!s.world) {
        s.world = std::make_unique<LocalWorld>(world);
        s.ranks.resize(static_cast<std::size_t>(world));
      }
    }
    // Its ranks are built by their threads together, at the job's first slice.
    RankState& mine = s.ranks[static_cast<std::size_t>(rank)];
    if (!mine.training) build_rank(slice.job, rank, device);
    mine.training->backend().bind_to_calling_thread();
    JobRun& out = run_.jobs[slice.job];
    const double start = now_s();
    mine.loop->run(slice.first_step, slice.first_step + slice.steps, [&](engine::LoopStep& done) {
      if (rank != 0) return;
      const double t0 = std::chrono::duration<double>(done.start - origin_).count();
      const double t1 = now_s();  // the evaluation counts in the slice, not the step
      const std::int64_t step = done.step;
      const engine::StepResult& r = done.result;
      out.losses[static_cast<std::size_t>(step)] = r.loss;
      if (done.eval_loss) out.evals.push_back({step + 1, *done.eval_loss});
      out.step_s[static_cast<std::size_t>(step)] = r.step_s;
      if (out.start_s < 0) out.start_s = t0;
      out.end_s = t1;
      if (options_.progress) {
        const std::int64_t left = jobs_[slice.job].train.steps - step - 1;
        options_.progress({slice.job, step + 1, r.loss, done.eval_loss, r.step_s,
                           static_cast<double>(left) * r.step_s, t1});
      }
    });
    const double end = now_s();
    {
      const std::lock_guard<std::mutex> lock(run_mutex_);
      run_.slices.push_back({slice.job, device, slice.first_step, slice.steps, start, end});
      run_.device_busy_s[static_cast<std::size_t>(device)] += end - start;
      out.peak_device_bytes = std::max(
          out.peak_device_bytes,
          static_cast<double>(mine.training->allocator().peak_bytes().device));
    }
    if (slice.first_step + slice.steps == jobs_[slice.job].train.steps) {
      // The job's last slice: its rank lets go of everything it holds (model state, the
      // backend's memory, its communicators) so that the jobs after it on this device find
      // the memory free. Every rank of the job is here, past its last collective.
      mine.release();
    }
    if (rank == 0) {
      {
        const std::lock_guard<std::mutex> lock(s.mutex);
        s.next_step = slice.first_step + slice.steps;
      }
      s.advanced.notify_all();
    }
  }

  const std::vector<Job>& jobs_;
  const std::vector<Plan>& plans_;
  const SelectSchedule& schedule_;
  std::int64_t devices_;
  RunOptions options_;
  engine::BackendMaker make_backend_;
  TierBudgets budgets_;
  std::vector<std::unique_ptr<JobState>> states_;
  Clock::time_point origin_;
  std::mutex run_mutex_;
  SelectRun run_;
  std::exception_ptr error_;
};

}  // namespace

SelectRun run_schedule(const std::vector<Job>& jobs, const std::vector<Plan>& plans,
                       const SelectSchedule& schedule, std::int64_t devices,
                       const ClusterSpec& cluster, const RunOptions& options) {
  if (plans.size() != jobs.size()) throw std::logic_error("run_schedule: one plan per job");
  if (options.tokens.size() != jobs.size()) throw std::logic_error("run_schedule: tokens per job");
  for (std::size_t j = 0; j < jobs.size(); ++j) plans[j].check_against_model(jobs[j].model, jobs[j].train);
  return Runner(jobs, plans, schedule, devices, cluster, options).run();
}

}  // namespace strata::select
