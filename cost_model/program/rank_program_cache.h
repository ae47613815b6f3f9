// Rank Programs made once for the planner's candidates and reused: the memory variants of
// one plan (ZeRO stage, offload, recomputation) mostly make the same Program (program.h:
// program_plan), and the memory walk of the three ranks that can be the worst
// (memory_model.h) was most of the planner's time when each built its own.
// Holds at most kEntries Programs: the planner enumerates a plan's variants together, so the
// ones it reuses are recent, and a search of thousands of plans keeps the memory of a few.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "cost_model/specs/model_spec.h"
#include "cost_model/program/rank_pipeline_ops.h"
#include "cost_model/program/program.h"

namespace strata {

class RankProgramCache {
 public:
  static constexpr std::size_t kEntries = 64;

  // make_rank_program(model, train, plan, pp_rank, options), made or reused; the same
  // checks and throws. The reference lives until the next call.
  const RankProgram& get(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
                         std::int64_t pp_rank, const ProgramOptions& options);

  std::int64_t made() const { return made_; }
  std::int64_t reused() const { return reused_; }

 private:
  std::optional<ModelSpec> model_;  // the model every cached Program is of
  std::map<std::vector<std::int64_t>, RankProgram> programs_;
  RankPipelineOpsCache pipelines_;  // the schedules' parts of the Programs made
  std::int64_t made_ = 0, reused_ = 0;
};

}  // namespace strata
