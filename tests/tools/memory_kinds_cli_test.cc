// Issue 28: `strata predict` tells each stage's peak memory by kind (params, gradients,
// optimizer, activations, buffers, headroom: cost_model/specs/memory_kinds.h), and a `strata run`
// of the same plan on the CPU backend writes the same kinds, from its allocation tags at each
// tier's peak, into memory_tags.json and report.json. On these plans the predicted device
// total is the measured one to the byte (the executor walk, memory_model.h), so each kind
// must be too: a tag counted under another kind than the walk counts it, or a term the walk
// puts in the wrong place, fails here even when the totals agree.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include "cost_model/specs/json_reader.h"
#include "cost_model/specs/memory_kinds.h"
#include "tests/tools/strata_command.h"

namespace strata {
namespace {
namespace fs = std::filesystem;
using testing::run_strata;

class MemoryKindsCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("strata_memory_kinds_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path write_plan(const std::string& name, const Json& plan) const {
    const fs::path path = dir_ / (name + ".json");
    write_json_file(path.string(), plan);
    return path;
  }
  fs::path dir_;
};

Json tiny_plan(int tp, int pp, int dp, int zero, int micro_batch, const std::string& recompute) {
  return Json{{"tp", tp}, {"pp", pp}, {"dp", dp}, {"virtual_stages", 1},
              {"micro_batch", micro_batch}, {"schedule", "1f1b"}, {"zero_stage", zero},
              {"offload", {{"optimizer", "none"}, {"gradients", "none"}, {"params", "none"}}},
              {"recompute", recompute}, {"sequence_parallel", false}};
}

// A rank's kinds, "kind/tier" -> bytes, from a "by_kind" object.
std::map<std::string, double> kinds_of(const Json& by_kind) {
  std::map<std::string, double> out;
  for (const MemoryKind k : kMemoryKinds) {
    for (const char* tier : {"device", "host", "nvme"}) {
      out[std::string(to_string(k)) + "/" + tier] =
          by_kind.at(std::string(to_string(k))).at(tier).get<double>();
    }
  }
  return out;
}

double device_sum(const std::map<std::string, double>& kinds) {
  double sum = 0;
  for (const auto& [key, bytes] : kinds) {
    if (key.ends_with("/device")) sum += bytes;
  }
  return sum;
}

void expect_run_matches_prediction(const fs::path& dir, const fs::path& plan,
                                   const std::string& label) {
  const std::string specs = "--plan " + plan.string() + " --model tiny --train tiny --cluster local-cpu";
  const auto predicted = run_strata(dir, "predict " + specs + " --json", "", "2>/dev/null");
  ASSERT_EQ(predicted.exit_code, 0) << predicted.output;
  const Json prediction = Json::parse(predicted.output);
  const fs::path out = dir / ("run_" + label);
  const auto ran = run_strata(dir, "run " + specs + " --steps 2 --out " + out.string(),
                              "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1");
  ASSERT_EQ(ran.exit_code, 0) << ran.output;
  const Json tags = read_json_file((out / "memory_tags.json").string());
  const Json report = read_json_file((out / "report.json").string());

  std::map<std::int64_t, Json> stage;  // pp_rank -> the prediction's entry
  for (const Json& r : prediction.at("per_rank")) stage[r.at("pp_rank").get<std::int64_t>()] = r;
  ASSERT_EQ(tags.at("ranks").size(), report.at("per_rank").size()) << label;
  for (std::size_t i = 0; i < tags.at("ranks").size(); ++i) {
    const Json& measured = tags.at("ranks")[i];
    const std::int64_t pp_rank = measured.at("pp_rank");
    const std::string what = label + " rank " + std::to_string(measured.at("rank").get<int>());
    ASSERT_TRUE(stage.count(pp_rank)) << what;
    const Json& want = stage.at(pp_rank);
    const double measured_peak = report.at("per_rank")[i].at("peak_bytes").at("device");
    // The premise: the totals agree to the byte on these plans.
    ASSERT_EQ(want.at("peak_bytes").at("device").get<double>(), measured_peak) << what;
    const auto got = kinds_of(measured.at("by_kind"));
    // The run's kinds add up to its peak (each tag's bytes at that moment), and report.json
    // carries the same kinds as memory_tags.json.
    EXPECT_EQ(device_sum(got), measured_peak) << what;
    EXPECT_EQ(kinds_of(report.at("per_rank")[i].at("by_kind")), got) << what;
    // Every kind on every tier, to the byte (no headroom without a profile's: 0 both sides).
    EXPECT_EQ(kinds_of(want.at("by_kind")), got) << what;
    EXPECT_GT(want.at("in_flight").get<std::int64_t>(), 0) << what;
  }
}

// The brief's plan: ZeRO-1 over d2 (the optimizer state halved) and a 1F1B pipeline of two
// stages (two micro-batches in flight on the first, one on the last, which holds the head).
TEST_F(MemoryKindsCli, ZeroOnePipelinePlanMatchesTheRunByKind) {
  expect_run_matches_prediction(dir_, write_plan("z1_p2_d2", tiny_plan(1, 2, 2, 1, 2, "none")),
                                "z1_p2_d2");
}

// ZeRO-3 over d2: the gathered units are activations at the peak, the full gradients live
// until their reduce-scatter are gradients.
TEST_F(MemoryKindsCli, ZeroThreePlanMatchesTheRunByKind) {
  expect_run_matches_prediction(dir_, write_plan("z3_d2", tiny_plan(1, 1, 2, 3, 2, "none")),
                                "z3_d2");
}

// Tensor parallel with full recomputation: a layer's saved tensors are its input alone and
// the recomputed ones live during its backward.
TEST_F(MemoryKindsCli, TensorParallelRecomputedPlanMatchesTheRunByKind) {
  expect_run_matches_prediction(dir_, write_plan("t2_full", tiny_plan(2, 1, 1, 0, 2, "full")),
                                "t2_full");
}

}  // namespace
}  // namespace strata
