// The schedule's part of a rank's Program (see rank_pipeline_ops.h).
#include "cost_model/program/rank_pipeline_ops.h"

#include <utility>

#include "cost_model/program/program_sends.h"
#include "cost_model/program/schedule.h"

namespace strata {

std::vector<ProgramOp> make_rank_pipeline_ops(const RankPipelineKey& key) {
  const std::vector<PipelineOp> pipeline = make_rank_schedule(
      key.schedule, key.pp, key.virtual_stages, key.micro_batches, key.pp_rank);
  RankProgram rank;  // only what mark_complete_sends reads: the rank and its pipeline ops
  rank.pp_rank = key.pp_rank;
  rank.ops.reserve(pipeline.size());
  std::int32_t last_recv = -1, last_pass = -1;
  for (const PipelineOp& p : pipeline) {
    ProgramOp op;
    op.kind = program_kind(p.kind);
    op.micro_batch = static_cast<std::int32_t>(p.micro_batch);
    op.chunk = static_cast<std::int32_t>(p.chunk);
    op.peer = static_cast<std::int32_t>(p.peer);
    op.stream = op.is_message() ? Stream::kP2p : Stream::kCompute;
    if (op.kind == ProgramOpKind::kForward) op.body = kForwardBody;
    if (op.kind == ProgramOpKind::kBackward) {
      op.body = p.micro_batch == key.micro_batches - 1 ? kLastBackwardBody : kBackwardBody;
    }
    if (op.is_pass() && last_recv >= 0) op.add_after(last_recv);
    if (op.kind == ProgramOpKind::kSendForward || op.kind == ProgramOpKind::kSendBackward) {
      op.add_after(last_pass);
    }
    rank.ops.push_back(op);
    const auto index = static_cast<std::int32_t>(rank.ops.size() - 1);
    // with_communication puts a pass's receive right before it and its send right after.
    last_recv = op.kind == ProgramOpKind::kRecvForward || op.kind == ProgramOpKind::kRecvBackward
                    ? index
                    : -1;
    if (op.is_pass()) last_pass = index;
  }
  rank.tail_begin = static_cast<std::int32_t>(rank.ops.size());
  mark_complete_sends(rank, key.schedule, key.pp, key.virtual_stages, key.micro_batches);
  return std::move(rank.ops);
}

const std::vector<ProgramOp>& RankPipelineOpsCache::get(const RankPipelineKey& key) {
  if (const auto it = pipelines_.find(key); it != pipelines_.end()) return it->second;
  if (pipelines_.size() >= kEntries) pipelines_.clear();
  return pipelines_.emplace(key, make_rank_pipeline_ops(key)).first->second;
}

}  // namespace strata
