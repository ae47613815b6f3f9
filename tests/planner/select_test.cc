// The multi-model scheduler (planner/select.h) on cases worked by hand: two devices, three
// jobs whose ways are given (no cost model involved), where the optimum is known; the lower
// bound never above any policy's makespan; LRTF's step-by-step interleaving; the workload's
// grid expansion and its errors.
#include "planner/select.h"

#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/errors.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/train_spec.h"
#include "tests/cost_model/spec_test_util.h"
#include "tests/planner/select_jobs.h"

namespace strata {
namespace {

using testing_support::job;
using testing_support::way;

TEST(SelectSchedule, TwoDevicesThreeJobsByHand) {
  // A and B take 4 s on one device or 2.5 s on two; C 2 s or 1.2 s. The schedules:
  //   all on one device: A | B in parallel (4), then C (2): 6;
  //   A, B, C each on both devices, one after another: 2.5 + 2.5 + 1.2 = 6.2;
  //   C on both devices and A | B on one each (C first, or A | B first): 5.2 -- the optimum;
  //   A on both (2.5), then B | C (4): 6.5.
  // Lower bound: least device-time 4 + 4 + 2 = 10 over 2 devices = 5; longest least
  // duration 2.5: 5.
  const std::vector<Job> jobs{job("A", 10), job("B", 10), job("C", 10)};
  const std::vector<JobWays> ways{
      {{way(2, 2.5, 10), way(1, 4.0, 10, true)}},
      {{way(2, 2.5, 10), way(1, 4.0, 10, true)}},
      {{way(2, 1.2, 10), way(1, 2.0, 10, true)}}};
  const SelectSchedule s = schedule_jobs(jobs, ways, {2}, SelectPolicy::kStrata);
  EXPECT_NEAR(s.makespan_s, 5.2, 1e-12);
  EXPECT_DOUBLE_EQ(s.lower_bound_s, 5.0);
  EXPECT_EQ(s.way_of_job[0], 1u);  // A on one device
  EXPECT_EQ(s.way_of_job[1], 1u);  // B on one device
  EXPECT_EQ(s.way_of_job[2], 0u);  // C on both devices
  ASSERT_EQ(s.slices.size(), 3u);
  // Two slices overlap in time on different devices; the third takes both.
  EXPECT_EQ(s.slices[0].devices.size() + s.slices[1].devices.size() + s.slices[2].devices.size(), 4u);
  // Sequential: every job on both devices: 6.2.
  EXPECT_NEAR(schedule_jobs(jobs, ways, {2}, SelectPolicy::kSequential).makespan_s, 6.2, 1e-12);
  // LRTF, spilled single-device ways stepped one at a time (0.4, 0.4, 0.2 s a step): the
  // longest remaining first keeps both devices busy until 4.8, when only C is left with two
  // steps, which cannot run on two devices at once: 4.8 + 2 x 0.2 = 5.2.
  const SelectSchedule lrtf = schedule_jobs(jobs, ways, {2}, SelectPolicy::kLrtf);
  EXPECT_NEAR(lrtf.makespan_s, 5.2, 1e-9);
  for (const SelectSchedule& any : {s, lrtf}) EXPECT_LE(any.lower_bound_s, any.makespan_s + 1e-12);
}

TEST(SelectSchedule, OneLongJobBoundsTheMakespan) {
  // A: 10 s on one device (no faster way); B and C: 1 s each. Two devices: A on one, B then C
  // on the other: 10, which is the bound's longest-job term.
  const std::vector<Job> jobs{job("A", 5), job("B", 5), job("C", 5)};
  const std::vector<JobWays> ways{{{way(1, 10.0, 5, true)}},
                                  {{way(1, 1.0, 5, true)}},
                                  {{way(1, 1.0, 5, true)}}};
  for (SelectPolicy p : {SelectPolicy::kStrata, SelectPolicy::kLrtf}) {
    const SelectSchedule s = schedule_jobs(jobs, ways, {2}, p);
    EXPECT_DOUBLE_EQ(s.makespan_s, 10.0) << to_string(p);
    EXPECT_DOUBLE_EQ(s.lower_bound_s, 10.0);
  }
  // Sequential needs a way on both devices.
  EXPECT_THROW(schedule_jobs(jobs, ways, {2}, SelectPolicy::kSequential), InfeasiblePlan);
}

TEST(SelectSchedule, LrtfInterleavesStepByStep) {
  // Two jobs of 3 steps (1 s each) on one device: the longest remaining first, ties to the
  // lower index: A, then B (A has 2 left, B 3), then A (2 vs 2: A), then B, A, B.
  const std::vector<Job> jobs{job("A", 3), job("B", 3)};
  const std::vector<JobWays> ways{{{way(1, 3.0, 3, true)}}, {{way(1, 3.0, 3, true)}}};
  const SelectSchedule s = schedule_jobs(jobs, ways, {1}, SelectPolicy::kLrtf);
  ASSERT_EQ(s.slices.size(), 6u);
  const std::size_t want[] = {0, 1, 0, 1, 0, 1};
  for (std::size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(s.slices[i].job, want[i]) << i;
    EXPECT_EQ(s.slices[i].steps, 1);
    EXPECT_DOUBLE_EQ(s.slices[i].start_s, static_cast<double>(i));
  }
  EXPECT_EQ(s.slices[2].first_step, 1);
  EXPECT_DOUBLE_EQ(s.makespan_s, 6.0);
}

TEST(SelectSchedule, PolicyNamesAreChecked) {
  EXPECT_EQ(select_policy_from_string("lrtf"), SelectPolicy::kLrtf);
  testing::expect_error<ConfigError>([] { select_policy_from_string("fifo"); },
                                     {"--policy", "fifo", "strata, lrtf or sequential"});
}

// Jobs that differ only in what the cost model does not read (learning rate, seed, weight
// decay, steps) share one pricing: each gets the ways it gets when priced alone, its
// durations from its own steps. A job with another global batch is priced on its own.
TEST(SelectWays, JobsPricedAlikeShareTheirWaysAndKeepTheirSteps) {
  const std::string configs = std::string(STRATA_SOURCE_DIR) + "/configs";
  const ClusterSpec cluster = ClusterSpec::load(configs + "/clusters/local-cpu.json");
  Job a;
  a.name = "a";
  a.model = ModelSpec::load(configs + "/models/tiny.json");
  a.train = TrainSpec::load(configs + "/train/tiny.json");
  a.train.steps = 10;
  Job b = a;
  b.name = "b";
  b.train.optimizer.lr *= 0.3;
  b.train.optimizer.weight_decay = 0.05;
  b.train.seed += 7;
  b.train.steps = 25;
  Job c = a;
  c.name = "c";
  c.train.global_batch *= 2;
  SelectOptions options;
  options.devices = 2;
  const std::vector<JobWays> together = job_ways({a, b, c}, cluster, options);
  ASSERT_EQ(together.size(), 3u);
  for (std::size_t j = 0; j < 3; ++j) {
    const Job& alone_job = j == 0 ? a : (j == 1 ? b : c);
    const std::vector<JobWays> alone = job_ways({alone_job}, cluster, options);
    ASSERT_EQ(together[j].ways.size(), alone[0].ways.size()) << alone_job.name;
    for (std::size_t i = 0; i < alone[0].ways.size(); ++i) {
      const JobWay& x = together[j].ways[i];
      const JobWay& y = alone[0].ways[i];
      EXPECT_EQ(x.plan, y.plan) << alone_job.name;
      EXPECT_EQ(x.devices, y.devices) << alone_job.name;
      EXPECT_EQ(x.spilled, y.spilled) << alone_job.name;
      EXPECT_EQ(x.step_s, y.step_s) << alone_job.name;
      // duration = the job's own steps x the step: 10 for a, 25 for b.
      EXPECT_EQ(x.duration_s, static_cast<double>(alone_job.train.steps) * y.step_s);
    }
  }
  // b's steps are 2.5x a's: so are its durations; c's global batch is twice a's, its steps
  // slower (twice the tokens on the same plans, or more micro-batches).
  EXPECT_DOUBLE_EQ(together[1].ways.front().duration_s, 2.5 * together[0].ways.front().duration_s);
  EXPECT_GT(together[2].ways.front().step_s, together[0].ways.front().step_s);
}

TEST(Workload, GridExpandsEveryPointInOrder) {
  const Json json = Json::parse(R"({"name": "w", "jobs": [
      {"name": "a", "model": "m", "train": "t", "steps": 3,
       "grid": {"lr": [0.001, 0.0003], "global_batch": [8, 16]}},
      {"name": "b", "model": "m", "train": "t", "steps": 2}]})");
  const WorkloadSpec w = WorkloadSpec::from_json(json, "w.json");
  WorkloadResolver resolve;
  resolve.model = [](const std::string&, const std::string&) { return ModelSpec{}; };
  resolve.train = [](const std::string&, const std::string&) {
    TrainSpec t;
    t.global_batch = 4;
    return t;
  };
  const std::vector<Job> jobs = expand(w, resolve, "w.json");
  ASSERT_EQ(jobs.size(), 5u);  // 2 x 2 grid points + b
  EXPECT_EQ(jobs[0].name, "a lr=0.001 gb=8");
  EXPECT_EQ(jobs[1].name, "a lr=0.001 gb=16");
  EXPECT_EQ(jobs[2].name, "a lr=0.0003 gb=8");
  EXPECT_DOUBLE_EQ(jobs[2].train.optimizer.lr, 0.0003);
  EXPECT_EQ(jobs[3].train.global_batch, 16);
  EXPECT_EQ(jobs[3].train.steps, 3);
  EXPECT_EQ(jobs[4].name, "b");
  EXPECT_EQ(jobs[4].train.global_batch, 4);
}

TEST(Workload, BadWorkloadsNameFileAndKey) {
  const auto load = [](const char* text) {
    return [text] { WorkloadSpec::from_json(Json::parse(text), "w.json"); };
  };
  testing::expect_error<ConfigError>(load(R"({"name": "w", "jobs": []})"), {"w.json", "jobs"});
  testing::expect_error<ConfigError>(
      load(R"({"name": "w", "jobs": [{"name": "a", "model": "m", "train": "t", "steps": 1, "colour": 1}]})"),
      {"w.json", "jobs[0]", "colour"});
  testing::expect_error<ConfigError>(
      load(R"({"name": "w", "jobs": [{"name": "a", "model": "m", "train": "t", "steps": 1, "grid": {"lr": []}}]})"),
      {"w.json", "grid.lr", "non-empty"});
  testing::expect_error<ConfigError>(
      load(R"({"name": "w", "jobs": [{"name": "a", "model": "m", "train": "t", "steps": 1, "grid": {"global_batch": [2.5]}}]})"),
      {"w.json", "global_batch[0]", "integer"});
  testing::expect_error<ConfigError>(
      load(R"({"name": "w", "jobs": [{"name": "a", "model": "m", "train": "t", "steps": 0}]})"),
      {"w.json", "jobs[0].steps"});
  testing::expect_error<ConfigError>(
      load(R"({"name": "w", "jobs": [{"name": "a", "model": "m", "train": "t", "steps": 1},
                                    {"name": "a", "model": "m", "train": "t", "steps": 1}]})"),
      {"w.json", "jobs[1].name", "no other job"});
}

}  // namespace
}  // namespace strata
