// The CUDA memory prediction against the allocations the CUDA backend asks its device pool
// for, without a GPU (issue 25, item 5). The engine replays a rank's Program on the
// PoolRecorder (executor/cuda/pool_recorder.h): the same Engine, model code, ModelState and
// CUDA LayerOps allocation code (CudaShapedLayerOps, which the real CudaLayerOps derives
// from) as a GPU run, with no arithmetic and no memory behind the requests, so its
// accounting allocator's device peak is the pool's accounted peak on a GPU. The memory
// model's prediction (estimate_memory on a CUDA cluster: the Program walk with the CUDA
// backend's widths) must equal it to the byte, less the workspace outside the pool, and so
// must each kind of it (issue 28: what `predict` shows by kind is what the engine holds).
//
// The recorder is anchored to a GPU by the measurement beside the H200 profile
// (../shared/reference/profiles/README.md, built from main at e7b0168): GPT-2 124M, b16,
// global 64, no recompute, one GPU: the device pool's accounted peak was 8,809,698,304 B.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/memory/memory_model.h"
#include "cost_model/specs/partition.h"
#include "cost_model/memory/stage_memory_kinds.h"
#include "executor/comm/process_groups.h"
#include "executor/cuda/pool_recorder.h"
#include "executor/data/batch.h"
#include "executor/data/corpus.h"
#include "executor/engine/engine.h"
#include "executor/report/run_report.h"
#include "tests/executor/engine_test_support.h"
#include "tests/executor/recorder_replay.h"

namespace strata {
namespace {

ModelSpec model_named(const std::string& name) {
  return ModelSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/models/" + name + ".json");
}
ClusterSpec cuda_cluster() {
  return ClusterSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/clusters/h100-x1.json");
}

using Recorded = testing_support::ReplayedRank;

// One rank of `plan` replayed on the recorder: set-up and `steps` steps. Without the kernels'
// shape checks: the tiny models' head size of 16 is no GPU's, their memory is what is checked.
Recorded record(const ModelSpec& model, const TrainSpec& train, const Plan& plan, int world_rank,
                int steps) {
  return testing_support::replay_on_recorder(model, train, plan, world_rank, steps, {},
                                             cuda::KernelShapeChecks::kOff);
}

std::string device_tags(const Recorded& r) {
  std::string out;
  for (const TagUsage& t : r.tags) {
    if (t.tier == MemoryTier::kDevice) out += "  " + t.tag + " peak " + std::to_string(t.peak_bytes) + "\n";
  }
  return out;
}

// The prediction's device bytes by kind against the recorder's tags at the pool's peak,
// mapped to kinds as `strata run` maps them (memory_kinds.h): the walk holds what the engine
// holds at its peak, so each kind is equal to the byte, besides the workspace outside the pool
// (the prediction's buffers, no tag) and the headroom (none without a profile).
void expect_kinds_match(const StageMemory& stage, const Recorded& got, const std::string& what) {
  const MemoryByKind predicted = memory_by_kind(stage);
  const MemoryByKind recorded = report::memory_by_kind(got.tags);
  for (const MemoryKind k : {MemoryKind::kParams, MemoryKind::kGradients, MemoryKind::kOptimizer,
                             MemoryKind::kActivations}) {
    EXPECT_EQ(predicted[k].device, recorded[k].device)
        << what << ": " << to_string(k) << ", peak at " << stage.peak_moment << "\n" << device_tags(got);
  }
  EXPECT_EQ(predicted[MemoryKind::kBuffers].device, stage.workspace_bytes) << what;
  EXPECT_EQ(recorded[MemoryKind::kBuffers].device, 0) << what;
  EXPECT_EQ(predicted[MemoryKind::kHeadroom].device, 0) << what;
}

// The walk's pool peak of the stage (the prediction less the workspace outside the pool).
double predicted_pool_peak(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
                           std::int64_t pp_rank, std::string* moment = nullptr) {
  const MemoryEstimate estimate = estimate_memory(model, cuda_cluster(), train, plan);
  const StageMemory& stage = estimate.stages.at(static_cast<std::size_t>(pp_rank));
  if (moment != nullptr) *moment = stage.peak_moment;
  return stage.total.device - stage.workspace_bytes;
}

TEST(CudaPoolPrediction, Gpt2At16MatchesTheRecordedPoolAndTheH200) {
  const ModelSpec model = model_named("gpt2-124m");
  TrainSpec train = TrainSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/train/gpt2.json");
  train.global_batch = 64;  // as measured: 4 micro-batches of 16
  const Plan plan = testing_support::make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 0, 16);
  const Recorded got = record(model, train, plan, 0, 2);
  // The H200 run's accounted pool peak (README beside the profile): the recorder asks for
  // what the GPU run asked for.
  EXPECT_EQ(got.peak_device_bytes, 8'809'698'304) << device_tags(got);
  std::string moment;
  const double predicted = predicted_pool_peak(model, train, plan, 0, &moment);
  EXPECT_EQ(predicted, static_cast<double>(got.peak_device_bytes)) << "peak at " << moment << "\n" << device_tags(got);
  // The workspace rides on top, outside the pool: 32 MiB cuBLASLt + 4 MiB reduction scratch.
  const MemoryEstimate estimate = estimate_memory(model, cuda_cluster(), train, plan);
  EXPECT_EQ(estimate.stages[0].total.device - predicted, 36.0 * 1024 * 1024);
  expect_kinds_match(estimate.stages[0], got, "gpt2-124m b16");
}

// Every rank of t2 p2 plans (d 1 and 2) of the small CUDA model, and of the tiny Llama: each
// stage's prediction is every one of its ranks' recorded peak. The plans vary what the walk's terms depend on: the TP shards
// and the aligned vocabulary shard, pipeline messages, sequence parallelism's gathers,
// recomputation's transients, ZeRO's transient gradients, interleaving.
struct Variant {
  const char* name;
  ScheduleKind schedule;
  std::int64_t v;
  int zero;
  std::int64_t d;
  bool sp;
  Recompute recompute;
  const char* model = "tiny-gpu";  // tiny-llama: RMSNorm's scratch, SwiGLU, GQA, lm_head
};

class CudaPoolPredictionTp2Pp2 : public ::testing::TestWithParam<Variant> {};

TEST_P(CudaPoolPredictionTp2Pp2, EveryRankMatchesItsStage) {
  const Variant& v = GetParam();
  const ModelSpec model = model_named(v.model);
  TrainSpec train = testing_support::tiny_train();
  train.precision = Precision::kBf16;
  Plan plan = testing_support::make_plan(2, 2, v.d, v.v, v.schedule, v.zero, 2);
  plan.sequence_parallel = v.sp;
  plan.recompute = v.recompute;
  plan.check_against_model(model, train, "t2 p2 test plan");
  for (int rank = 0; rank < parallel_dims(plan).world_size(); ++rank) {
    const RankCoords c = rank_coords(rank, parallel_dims(plan));
    const Recorded got = record(model, train, plan, rank, 2);
    std::string moment;
    const double predicted = predicted_pool_peak(model, train, plan, c.pp, &moment);
    EXPECT_EQ(predicted, static_cast<double>(got.peak_device_bytes))
        << v.name << " rank " << rank << " (tp " << c.tp << ", pp " << c.pp << "), predicted peak at "
        << moment << "\n" << device_tags(got);
    const MemoryEstimate estimate = estimate_memory(model, cuda_cluster(), train, plan);
    expect_kinds_match(estimate.stages.at(static_cast<std::size_t>(c.pp)), got,
                       std::string(v.name) + " rank " + std::to_string(rank));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Plans, CudaPoolPredictionTp2Pp2,
    ::testing::Values(
        Variant{"1f1b", ScheduleKind::kOneFOneB, 1, 0, 1, false, Recompute::kNone},
        Variant{"1f1b_sp_full", ScheduleKind::kOneFOneB, 1, 0, 1, true, Recompute::kFull},
        Variant{"gpipe_selective", ScheduleKind::kGpipe, 1, 0, 1, false, Recompute::kSelective},
        Variant{"interleaved_sp", ScheduleKind::kInterleaved, 2, 0, 1, true, Recompute::kNone},
        Variant{"d2_zero1", ScheduleKind::kOneFOneB, 1, 1, 2, false, Recompute::kNone},
        Variant{"d2_zero2_sp", ScheduleKind::kOneFOneB, 1, 2, 2, true, Recompute::kSelective},
        Variant{"d2_zero3_interleaved", ScheduleKind::kInterleaved, 2, 3, 2, false, Recompute::kNone},
        Variant{"llama_1f1b", ScheduleKind::kOneFOneB, 1, 0, 1, false, Recompute::kNone, "tiny-llama"},
        Variant{"llama_1f1b_sp_full", ScheduleKind::kOneFOneB, 1, 0, 1, true, Recompute::kFull, "tiny-llama"},
        Variant{"llama_d2_zero2_sp_selective", ScheduleKind::kOneFOneB, 1, 2, 2, true,
                Recompute::kSelective, "tiny-llama"}),
    [](const ::testing::TestParamInfo<Variant>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace strata
