// The pipeline part of a rank's Program, which depends on the schedule alone: make_schedule's
// ops of one pipeline rank as ProgramOps, each pass after its receive and each send after its
// pass, each receive marked with the sends it proves complete (program_sends.h). A pass's
// `body` holds its variant (kForwardBody, kBackwardBody, kLastBackwardBody) until
// make_rank_program maps it to the rank's own bodies.
//
// Why a module of its own: the planner makes tens of thousands of rank Programs whose plans
// differ in what the bodies hold (ZeRO stage, offload, recomputation, TP) but share a few
// hundred schedules; making the schedule and its two neighbours' (for the send completion)
// again for each was a third of a plan search.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <vector>

#include "cost_model/program/program.h"

namespace strata {

struct RankPipelineKey {
  ScheduleKind schedule = ScheduleKind::kOneFOneB;
  std::int64_t pp = 1;
  std::int64_t virtual_stages = 1;
  std::int64_t micro_batches = 1;
  std::int64_t pp_rank = 0;
  auto operator<=>(const RankPipelineKey&) const = default;
};

// A pass's variant in these ops: the forward, the backward, and the backward of the step's
// last micro-batch (which reduces the gradients where the plan reduces them once).
inline constexpr std::int32_t kForwardBody = 0;
inline constexpr std::int32_t kBackwardBody = 1;
inline constexpr std::int32_t kLastBackwardBody = 2;

// Throws InfeasiblePlan for a schedule make_rank_schedule refuses.
std::vector<ProgramOp> make_rank_pipeline_ops(const RankPipelineKey& key);

// Skeletons made once and reused; at most kEntries (then all are dropped: the planner
// enumerates one schedule's plans together).
class RankPipelineOpsCache {
 public:
  static constexpr std::size_t kEntries = 64;
  // The reference lives until the next call.
  const std::vector<ProgramOp>& get(const RankPipelineKey& key);

 private:
  std::map<RankPipelineKey, std::vector<ProgramOp>> pipelines_;
};

}  // namespace strata
