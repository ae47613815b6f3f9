// Planner benchmark: the full plan search for Megatron's 1T-parameter model (128 layers,
// hidden 25600, 160 heads) on 3072 A100s of Selene with global batch 3072 (Narayanan et al.
// 2021, Table 1), the largest search the planner is asked to finish in under 2 s. The
// configs come from the source tree's configs/ (STRATA_SOURCE_DIR). Reports candidates,
// scored plans and the best plan's predicted TFLOP/s per GPU as counters.
#include <string>

#include <benchmark/benchmark.h>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/train_spec.h"
#include "planner/planner.h"

namespace {

const std::string kConfigs = std::string(STRATA_SOURCE_DIR) + "/configs";

void search(benchmark::State& state, const std::string& model_name, const std::string& train_name,
            std::int64_t gpus) {
  const strata::ModelSpec model = strata::ModelSpec::load(kConfigs + "/models/" + model_name + ".json");
  const strata::ClusterSpec cluster = strata::ClusterSpec::load(kConfigs + "/clusters/selene-a100.json");
  const strata::TrainSpec train = strata::TrainSpec::load(kConfigs + "/train/" + train_name + ".json");
  strata::PlannerOptions options;
  options.gpus = gpus;
  strata::PlanSearchResult result;
  for (auto _ : state) {
    result = strata::search_plans(model, cluster, train, options);
    benchmark::DoNotOptimize(result);
  }
  state.counters["candidates"] = static_cast<double>(result.candidates);
  state.counters["scored"] = static_cast<double>(result.scored);
  state.counters["best_tflops_per_gpu"] =
      result.top.empty() ? 0.0 : result.top.front().prediction.tflops_per_gpu;
}

void BM_PlanMegatron1T_3072(benchmark::State& state) {
  search(state, "megatron-1t", "megatron-1t", 3072);
}
BENCHMARK(BM_PlanMegatron1T_3072)->Unit(benchmark::kMillisecond)->Repetitions(5)
    ->ReportAggregatesOnly(true);

void BM_PlanMegatron145B_1536(benchmark::State& state) {
  search(state, "megatron-145.6b", "megatron-145.6b", 1536);
}
BENCHMARK(BM_PlanMegatron145B_1536)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
