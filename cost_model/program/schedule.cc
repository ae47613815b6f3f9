// Pipeline schedule generation: the per-rank op lists of GPipe, 1F1B (PipeDream-flush) and
// Megatron's interleaved 1F1B, with the sends and receives between virtual stages inserted
// around the compute ops. Does not time anything (simulator.cc) or check the model's layer
// count (Plan::check).
#include "cost_model/program/schedule.h"

#include <algorithm>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/partition.h"

namespace strata {
namespace {

// One compute op before the sends/receives are added: (micro_batch, local chunk).
struct ComputeOp {
  bool forward = true;
  std::int64_t micro_batch = 0;
  std::int64_t chunk = 0;
};

// Compute order of rank r for GPipe: all forwards in micro-batch order, then all backwards
// in the same order.
std::vector<ComputeOp> gpipe_order(std::int64_t m) {
  std::vector<ComputeOp> order;
  order.reserve(static_cast<std::size_t>(2 * m));
  for (std::int64_t i = 0; i < m; ++i) order.push_back({true, i, 0});
  for (std::int64_t i = 0; i < m; ++i) order.push_back({false, i, 0});
  return order;
}

// 1F1B (PipeDream-flush, Narayanan et al. 2021 fig. 4 top): rank r runs p - r - 1 warm-up
// forwards, then alternates one forward and one backward, then drains the backwards.
std::vector<ComputeOp> one_f_one_b_order(std::int64_t p, std::int64_t r, std::int64_t m) {
  const std::int64_t warmup = warmup_forwards(ScheduleKind::kOneFOneB, p, 1, m, r);
  std::vector<ComputeOp> order;
  order.reserve(static_cast<std::size_t>(2 * m));
  for (std::int64_t i = 0; i < warmup; ++i) order.push_back({true, i, 0});
  for (std::int64_t i = 0; i < m - warmup; ++i) {
    order.push_back({true, warmup + i, 0});
    order.push_back({false, i, 0});
  }
  for (std::int64_t i = m - warmup; i < m; ++i) order.push_back({false, i, 0});
  return order;
}

// Megatron's interleaved 1F1B (megatron/core/pipeline_parallel/schedules.py,
// forward_backward_pipelining_with_interleaving). The k-th forward (k in 0..m*v-1) of a
// rank works on micro-batches in groups of p per chunk: with g = k % (p*v),
// chunk = g / p and micro_batch = (k / (p*v)) * p + k % p. The k-th backward uses the same
// micro-batch and chunk v - 1 - g / p. Warm-up: (p - r - 1) * 2 + (v - 1) * p forwards
// (capped at m*v), then 1F1B, then the remaining backwards. (Megatron runs every forward
// first when m == p; we keep the same warm-up formula there, which holds fewer activations
// and is still deadlock-free: schedule_test replays it.)
std::vector<ComputeOp> interleaved_order(std::int64_t p, std::int64_t v, std::int64_t r,
                                         std::int64_t m) {
  const std::int64_t total = m * v;
  const auto op_at = [&](std::int64_t k, bool forward) {
    const std::int64_t group_pos = k % (p * v);
    const std::int64_t chunk_in_order = group_pos / p;
    const std::int64_t chunk = forward ? chunk_in_order : v - 1 - chunk_in_order;
    const std::int64_t micro_batch = (k / (p * v)) * p + k % p;
    return ComputeOp{forward, micro_batch, chunk};
  };
  const std::int64_t warmup = warmup_forwards(ScheduleKind::kInterleaved, p, v, m, r);
  std::vector<ComputeOp> order;
  order.reserve(static_cast<std::size_t>(2 * total));
  for (std::int64_t k = 0; k < warmup; ++k) order.push_back(op_at(k, true));
  for (std::int64_t k = 0; k < total - warmup; ++k) {
    order.push_back(op_at(warmup + k, true));
    order.push_back(op_at(k, false));
  }
  for (std::int64_t k = total - warmup; k < total; ++k) order.push_back(op_at(k, false));
  return order;
}

// Adds the receives before and sends after each compute op of rank r. Virtual stage
// s = chunk * p + r; its neighbours s - 1 and s + 1 live on ranks (s -/+ 1) mod p.
std::vector<PipelineOp> with_communication(const std::vector<ComputeOp>& order, std::int64_t p,
                                           std::int64_t v, std::int64_t r) {
  const std::int64_t stages = p * v;
  std::vector<PipelineOp> ops;
  ops.reserve(order.size() * 3);
  for (const ComputeOp& c : order) {
    const std::int64_t s = c.chunk * p + r;
    const std::int64_t prev_rank = (s - 1 + p) % p;
    const std::int64_t next_rank = (s + 1) % p;
    const bool first = s == 0;
    const bool last = s == stages - 1;
    if (c.forward) {
      if (!first) ops.push_back({OpKind::kRecvForward, c.micro_batch, c.chunk, prev_rank});
      ops.push_back({OpKind::kForward, c.micro_batch, c.chunk, -1});
      if (!last) ops.push_back({OpKind::kSendForward, c.micro_batch, c.chunk, next_rank});
    } else {
      if (!last) ops.push_back({OpKind::kRecvBackward, c.micro_batch, c.chunk, next_rank});
      ops.push_back({OpKind::kBackward, c.micro_batch, c.chunk, -1});
      if (!first) ops.push_back({OpKind::kSendBackward, c.micro_batch, c.chunk, prev_rank});
    }
  }
  return ops;
}

}  // namespace

namespace {

void check_schedule(ScheduleKind kind, std::int64_t pp, std::int64_t virtual_stages,
                    std::int64_t micro_batches) {
  // Built only on an error: the planner makes hundreds of thousands of schedules.
  const auto what = [&] {
    return fmt::format("schedule {} with pp={} v={} m={}", to_string(kind), pp, virtual_stages,
                       micro_batches);
  };
  if (pp < 1) throw InfeasiblePlan(fmt::format("{}: pp must be >= 1", what()));
  if (virtual_stages < 1) throw InfeasiblePlan(fmt::format("{}: v must be >= 1", what()));
  if (micro_batches < 1) throw InfeasiblePlan(fmt::format("{}: m must be >= 1", what()));
  if (virtual_stages > 1 && kind != ScheduleKind::kInterleaved) {
    throw InfeasiblePlan(
        fmt::format("{}: v = {} > 1 needs the interleaved schedule", what(), virtual_stages));
  }
  if (kind == ScheduleKind::kInterleaved) {
    if (const std::string why = interleaved_violation(pp, micro_batches); !why.empty()) {
      throw InfeasiblePlan(fmt::format("{}: {}", what(), why));
    }
  }
}

std::vector<PipelineOp> unchecked_rank_ops(ScheduleKind kind, std::int64_t pp,
                                           std::int64_t virtual_stages,
                                           std::int64_t micro_batches, std::int64_t r) {
  std::vector<ComputeOp> order;
  if (kind == ScheduleKind::kGpipe) {
    order = gpipe_order(micro_batches);
  } else if (kind == ScheduleKind::kOneFOneB || virtual_stages == 1) {
    order = one_f_one_b_order(pp, r, micro_batches);
  } else {
    order = interleaved_order(pp, virtual_stages, r, micro_batches);
  }
  return with_communication(order, pp, virtual_stages, r);
}

}  // namespace

Schedule make_schedule(ScheduleKind kind, std::int64_t pp, std::int64_t virtual_stages,
                       std::int64_t micro_batches) {
  check_schedule(kind, pp, virtual_stages, micro_batches);
  Schedule schedule;
  schedule.kind = kind;
  schedule.pp = pp;
  schedule.virtual_stages = virtual_stages;
  schedule.micro_batches = micro_batches;
  schedule.ops.resize(static_cast<std::size_t>(pp));
  for (std::int64_t r = 0; r < pp; ++r) {
    schedule.ops[static_cast<std::size_t>(r)] =
        unchecked_rank_ops(kind, pp, virtual_stages, micro_batches, r);
  }
  return schedule;
}

std::int64_t warmup_forwards(ScheduleKind kind, std::int64_t p, std::int64_t v, std::int64_t m,
                             std::int64_t r) {
  if (kind == ScheduleKind::kGpipe) return m * v;
  if (kind == ScheduleKind::kInterleaved && v > 1) {
    return std::min(2 * (p - r - 1) + (v - 1) * p, m * v);
  }
  return std::min(p - r - 1, m);
}

std::vector<PipelineOp> make_rank_schedule(ScheduleKind kind, std::int64_t pp,
                                           std::int64_t virtual_stages,
                                           std::int64_t micro_batches, std::int64_t pp_rank) {
  check_schedule(kind, pp, virtual_stages, micro_batches);
  if (pp_rank < 0 || pp_rank >= pp) {
    throw InfeasiblePlan(fmt::format("schedule: pipeline rank {} is outside 0..{}", pp_rank, pp - 1));
  }
  return unchecked_rank_ops(kind, pp, virtual_stages, micro_batches, pp_rank);
}

std::string to_string(OpKind kind) {
  switch (kind) {
    case OpKind::kForward: return "forward";
    case OpKind::kBackward: return "backward";
    case OpKind::kRecvForward: return "recv_forward";
    case OpKind::kSendForward: return "send_forward";
    case OpKind::kRecvBackward: return "recv_backward";
    case OpKind::kSendBackward: return "send_backward";
  }
  return "unknown";
}

std::int64_t max_in_flight(const Schedule& schedule, std::int64_t pp_rank) {
  if (pp_rank < 0 || pp_rank >= static_cast<std::int64_t>(schedule.ops.size())) {
    throw InfeasiblePlan(fmt::format("max_in_flight: pp_rank {} is outside 0..{}", pp_rank,
                                     static_cast<std::int64_t>(schedule.ops.size()) - 1));
  }
  std::int64_t held = 0;
  std::int64_t peak = 0;
  for (const PipelineOp& op : schedule.ops[static_cast<std::size_t>(pp_rank)]) {
    if (op.kind == OpKind::kForward) peak = std::max(peak, ++held);
    if (op.kind == OpKind::kBackward) --held;
  }
  return peak;
}

}  // namespace strata
