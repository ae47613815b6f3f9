// The Program simulator (rules, exactness and attribution in program_simulator.h): prices a
// rank's bodies into max-plus responses, orders the pipeline's step ops once, replays them
// pass by pass, then the tails, and cuts the critical rank's timeline into StepTimeParts.
// Does not decide any duration (OpCosts does) nor any op order (the Program does).
#include "cost_model/program/program_simulator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <stdexcept>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"
#include "cost_model/program/rank_pipeline_ops.h"
#include "cost_model/program/schedule.h"

namespace strata {
namespace {

using Kind = ProgramOpKind;
constexpr double kNever = -std::numeric_limits<double>::infinity();

// A body op's lane among a pass's three inputs: compute (the pass start), comm, copy.
int body_lane(const ProgramOp& op) {
  switch (body_stream(op)) {
    case Stream::kCompute: return 0;
    case Stream::kComm: return 1;
    case Stream::kCopy: return 2;
    case Stream::kP2p:
    case Stream::kHost: break;
  }
  throw std::logic_error(fmt::format("simulator: a {} body op on the {} stream", to_string(op.kind),
                                     to_string(op.stream)));
}

double checked(double seconds, const char* what, Kind kind) {
  if (!std::isfinite(seconds) || seconds < 0) {
    throw ConfigError(fmt::format("simulator: the {} of {} costs {} s, expected a finite value >= 0",
                                  what, to_string(kind), seconds));
  }
  return seconds;
}

using Gains = std::array<double, 3>;
Gains max_of(const Gains& a, const Gains& b) {
  return {std::max(a[0], b[0]), std::max(a[1], b[1]), std::max(a[2], b[2])};
}
Gains plus(const Gains& a, double d) { return {a[0] + d, a[1] + d, a[2] + d}; }  // -inf stays

BodyResponse body_response(const PassBody& body, const std::vector<double>& op_s) {
  const Gains start{0.0, kNever, kNever};
  std::array<Gains, 3> lanes{start, Gains{kNever, 0.0, kNever}, Gains{kNever, kNever, 0.0}};
  Gains all = start;
  std::vector<Gains> end(body.ops.size());
  for (std::size_t i = 0; i < body.ops.size(); ++i) {
    const ProgramOp& op = body.ops[i];
    const int l = body_lane(op);
    Gains& lane = lanes[static_cast<std::size_t>(l)];
    Gains at = max_of(start, lane);
    // Rule 1: an op off the compute stream also waits for the compute issued before it.
    if (l != 0) at = max_of(at, lanes[0]);
    for (std::int32_t a : op.after) {
      if (a >= 0) at = max_of(at, end[static_cast<std::size_t>(a)]);
    }
    end[i] = plus(at, op_s[i]);
    lane = end[i];
    all = max_of(all, end[i]);
  }
  BodyResponse r;
  r.gain[BodyResponse::kComputeEnd] = lanes[0];
  r.gain[BodyResponse::kCommFree] = lanes[1];
  r.gain[BodyResponse::kCopyFree] = lanes[2];
  r.gain[BodyResponse::kAllEnd] = all;
  return r;
}

double respond(const std::array<double, 3>& gain, double start, double comm, double copy) {
  return std::max({start + gain[0], comm + gain[1], copy + gain[2]});
}

// Which body of a chunk a pass runs, from the bodies themselves (program.h: per chunk one
// forward body, one backward body, and the last micro-batch's reducing one when it differs).
std::vector<std::array<std::int32_t, 3>> bodies_by_chunk(const RankProgram& rank) {
  std::int32_t chunks = 0;
  for (const PassBody& b : rank.bodies) chunks = std::max(chunks, b.chunk + 1);
  std::vector<std::array<std::int32_t, 3>> of(static_cast<std::size_t>(chunks), {-1, -1, -1});
  for (std::size_t i = 0; i < rank.bodies.size(); ++i) {
    const PassBody& b = rank.bodies[i];
    const int variant = b.forward ? 0 : (b.reduces ? 2 : 1);
    auto& slot = of[static_cast<std::size_t>(b.chunk)][static_cast<std::size_t>(variant)];
    if (slot >= 0) {
      throw std::logic_error(fmt::format("simulator: pipeline rank {} has two {} bodies of chunk {}",
                                         rank.pp_rank, variant == 0 ? "forward" : "backward", b.chunk));
    }
    slot = static_cast<std::int32_t>(i);
  }
  for (auto& c : of) {
    if (c[2] < 0) c[2] = c[1];  // the reducing backward is the plain one (nothing to reduce)
    if (c[0] < 0 || c[1] < 0) {
      throw std::logic_error(fmt::format("simulator: pipeline rank {} lacks a forward or a "
                                         "backward body for one of its chunks", rank.pp_rank));
    }
  }
  return of;
}

bool is_recv(Kind k) { return k == Kind::kRecvForward || k == Kind::kRecvBackward; }
bool is_send(Kind k) { return k == Kind::kSendForward || k == Kind::kSendBackward; }
bool is_pass(Kind k) { return k == Kind::kForward || k == Kind::kBackward; }

// A message's slot: (direction, micro-batch, receiving virtual stage); -1 when outside.
std::int32_t message_slot(const PipelineSkeleton& s, std::int64_t rank, const PipelineStep& op) {
  const std::int64_t stages = s.pp * s.virtual_stages;
  const std::int64_t vs = op.chunk * s.pp + rank;
  std::int64_t to = vs;
  if (op.kind == Kind::kSendForward) to = vs + 1;
  if (op.kind == Kind::kSendBackward) to = vs - 1;
  const bool forward = op.kind == Kind::kSendForward || op.kind == Kind::kRecvForward;
  if (op.micro_batch < 0 || op.micro_batch >= s.micro_batches || op.chunk < 0 ||
      op.chunk >= s.virtual_stages || to < 0 || to >= stages) {
    return -1;
  }
  return static_cast<std::int32_t>(((forward ? 1 : 0) * s.micro_batches + op.micro_batch) * stages + to);
}

// Message slots, their pairing, and the replay order (see PipelineSkeleton::order).
void finish_skeleton(PipelineSkeleton& s) {
  s.messages = static_cast<std::int32_t>(2 * s.micro_batches * s.pp * s.virtual_stages);
  std::vector<std::uint8_t> seen(static_cast<std::size_t>(s.messages), 0);
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    for (PipelineStep& op : s.ranks[r]) {
      if (!is_recv(op.kind) && !is_send(op.kind)) continue;
      op.message = message_slot(s, static_cast<std::int64_t>(r), op);
      const std::uint8_t bit = is_send(op.kind) ? 1 : 2;
      if (op.message < 0 || (seen[static_cast<std::size_t>(op.message)] & bit) != 0) {
        throw InfeasiblePlan(fmt::format("simulator: {} of micro-batch {} chunk {} on pipeline "
                                         "rank {} is outside the pipeline or repeated",
                                         to_string(op.kind), op.micro_batch, op.chunk, r));
      }
      seen[static_cast<std::size_t>(op.message)] |= bit;
    }
  }
  for (std::size_t i = 0; i < seen.size(); ++i) {
    if (seen[i] == 1 || seen[i] == 2) {
      throw InfeasiblePlan(fmt::format("simulator: message slot {} has a {} but no {}", i,
                                       seen[i] == 1 ? "send" : "receive",
                                       seen[i] == 1 ? "receive" : "send"));
    }
  }
  // Sweep the ranks, each as far as its next receive whose send is already placed.
  std::vector<std::size_t> next(s.ranks.size(), 0);
  std::vector<std::uint8_t> sent(static_cast<std::size_t>(s.messages), 0);
  std::size_t placed = 0, total = 0;
  for (const auto& r : s.ranks) total += r.size();
  s.order.clear();
  s.order.reserve(total);
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t r = 0; r < s.ranks.size(); ++r) {
      const auto& ops = s.ranks[r];
      for (std::size_t& i = next[r]; i < ops.size(); ++i) {
        const PipelineStep& op = ops[i];
        if (is_recv(op.kind) && sent[static_cast<std::size_t>(op.message)] == 0) break;
        if (is_send(op.kind)) sent[static_cast<std::size_t>(op.message)] = 1;
        s.order.push_back({static_cast<std::int32_t>(r), static_cast<std::int32_t>(i)});
        ++placed;
        progress = true;
      }
    }
  }
  if (placed != total) {
    throw InfeasiblePlan(
        "simulator: the pipeline deadlocks (a receive waits on a send that comes after it)");
  }
  std::vector<std::vector<std::int32_t>> global(s.ranks.size());
  for (std::size_t r = 0; r < s.ranks.size(); ++r) global[r].resize(s.ranks[r].size());
  for (std::size_t g = 0; g < s.order.size(); ++g) {
    global[static_cast<std::size_t>(s.order[g][0])][static_cast<std::size_t>(s.order[g][1])] =
        static_cast<std::int32_t>(g);
  }
  // Pass counts, and whether every rank fills with (0, chunk 0) and drains with (m-1, chunk 0).
  s.passes.assign(s.ranks.size(), std::vector<std::array<std::int64_t, 3>>(
                                      static_cast<std::size_t>(s.virtual_stages), {0, 0, 0}));
  s.fills_and_drains = true;
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    const PipelineStep* first = nullptr;
    const PipelineStep* last = nullptr;
    for (const PipelineStep& op : s.ranks[r]) {
      if (!is_pass(op.kind)) continue;
      ++s.passes[r][static_cast<std::size_t>(op.chunk)][static_cast<std::size_t>(op.variant)];
      if (first == nullptr) first = &op;
      last = &op;
    }
    s.fills_and_drains = s.fills_and_drains && first != nullptr &&
                         first->kind == Kind::kForward && first->micro_batch == 0 &&
                         first->chunk == 0 && last->kind == Kind::kBackward &&
                         last->micro_batch == s.micro_batches - 1 && last->chunk == 0;
  }
  s.replayed.clear();
  s.replayed.reserve(s.order.size());
  for (const auto& [rank, index] : s.order) {
    const PipelineStep& op = s.ranks[static_cast<std::size_t>(rank)][static_cast<std::size_t>(index)];
    PipelineSkeleton::Replayed e;
    e.rank = rank;
    e.kind = op.kind;
    e.variant = op.variant;
    e.chunk = op.chunk;
    e.message = op.message;
    for (std::size_t k = 0; k < op.after.size(); ++k) {
      e.after[k] = op.after[k] < 0 ? -1 : global[static_cast<std::size_t>(rank)][static_cast<std::size_t>(op.after[k])];
    }
    s.replayed.push_back(e);
  }
}

void check_ranks(const PipelineSkeleton& skeleton, const std::vector<PricedRank>& ranks,
                 const std::vector<std::int32_t>& class_of, SimulationMode mode) {
  if (class_of.size() != skeleton.ranks.size()) {
    throw std::logic_error(fmt::format("simulator: {} rank classes for {} pipeline ranks",
                                       class_of.size(), skeleton.ranks.size()));
  }
  for (std::int32_t c : class_of) {
    if (c < 0 || static_cast<std::size_t>(c) >= ranks.size() ||
        ranks[static_cast<std::size_t>(c)].mode != mode ||
        ranks[static_cast<std::size_t>(c)].body_of.size() !=
            static_cast<std::size_t>(skeleton.virtual_stages)) {
      throw std::logic_error(fmt::format(
          "simulator: rank class {} is not a rank of {} chunks priced for the {} mode", c,
          skeleton.virtual_stages, to_string(mode)));
    }
  }
}

// The replay of the pipeline (program_simulator.h's rules), calling record(g, start, end,
// comm_in, copy_in) for each op g of skeleton.order when kRecord. Returns the pipeline's end.
template <bool kSerial, bool kRecord, typename Record>
double replay(const PipelineSkeleton& skeleton, const std::vector<PricedRank>& ranks,
              const std::vector<std::int32_t>& class_of, ReplayScratch& scratch,
              const Record& record) {
  const std::size_t ops = skeleton.replayed.size();
  scratch.done.resize(ops);
  scratch.send_start.resize(static_cast<std::size_t>(skeleton.messages));
  scratch.send_end.resize(static_cast<std::size_t>(skeleton.messages));
  scratch.clocks.assign(skeleton.ranks.size(), {0.0, 0.0, 0.0, 0.0});  // compute comm copy p2p
  double* done = scratch.done.data();
  double barrier = 0;
  for (std::size_t g = 0; g < ops; ++g) {
    const PipelineSkeleton::Replayed& op = skeleton.replayed[g];
    const PricedRank& pr = ranks[static_cast<std::size_t>(class_of[static_cast<std::size_t>(op.rank)])];
    std::array<double, 4>& c = scratch.clocks[static_cast<std::size_t>(op.rank)];
    double ready = 0;
    for (std::int32_t a : op.after) {
      if (a >= 0) ready = std::max(ready, done[a]);
    }
    if (is_pass(op.kind)) {
      const PricedBody& body = pr.bodies[static_cast<std::size_t>(
          pr.body_of[static_cast<std::size_t>(op.chunk)][static_cast<std::size_t>(op.variant)])];
      const double start = std::max(c[0], ready);
      if constexpr (kSerial) {
        c[0] = start + body.serial_s;
        done[g] = c[0];
        barrier = std::max(barrier, c[0]);
        if constexpr (kRecord) record(g, start, c[0], 0.0, 0.0);
      } else {
        const auto& gain = body.response.gain;
        const double comm = c[1], copy = c[2];
        c[0] = respond(gain[BodyResponse::kComputeEnd], start, comm, copy);
        c[1] = respond(gain[BodyResponse::kCommFree], start, comm, copy);
        c[2] = respond(gain[BodyResponse::kCopyFree], start, comm, copy);
        done[g] = c[0];  // rule 2: what waits for a pass waits for its compute
        barrier = std::max(barrier, respond(gain[BodyResponse::kAllEnd], start, comm, copy));
        if constexpr (kRecord) record(g, start, c[0], comm, copy);
      }
    } else {
      double& stream = kSerial ? c[0] : c[3];
      // Rule 1: off the compute stream, after the compute issued before.
      const double start = std::max({stream, ready, kSerial ? 0.0 : c[0]});
      const auto slot = static_cast<std::size_t>(op.message);
      if (is_send(op.kind)) {
        stream = start + pr.transfer_s[static_cast<std::size_t>(op.chunk)]
                                      [op.kind == Kind::kSendForward ? 0 : 1];
        scratch.send_start[slot] = start;
        scratch.send_end[slot] = stream;
      } else {
        stream = std::max(start, scratch.send_end[slot]);
      }
      done[g] = stream;
      if constexpr (kRecord) record(g, start, stream, 0.0, 0.0);
    }
  }
  return barrier;
}

std::int8_t pass_variant(Kind kind, std::int64_t micro_batch, std::int64_t m) {
  if (kind == Kind::kForward) return 0;
  if (kind == Kind::kBackward) return micro_batch == m - 1 ? 2 : 1;
  return -1;
}

// ---- attribution (program_simulator.h, "Where the step time went") ----

// One op on the critical rank's timeline.
struct Span {
  double start = 0, end = 0;
  const StepTimeParts* parts = nullptr;  // nullptr: a receive
  double total = 0;
  double transfer_start = 0, transfer_end = 0;  // receives: their message's transfer
};
// In the order a piece of time goes to them.
enum Lane { kComputeLane, kCommLane, kHostLane, kCopyLane, kSendLane, kRecvLane, kLanes };

Lane lane_of(Stream stream) {
  switch (stream) {
    case Stream::kCompute: return kComputeLane;
    case Stream::kComm: return kCommLane;
    case Stream::kCopy: return kCopyLane;
    case Stream::kHost: return kHostLane;
    case Stream::kP2p: return kSendLane;
  }
  return kComputeLane;
}

void add_scaled(StepTimeParts& to, const StepTimeParts& from, double k) {
  to.forward_s += k * from.forward_s;
  to.backward_s += k * from.backward_s;
  to.recompute_s += k * from.recompute_s;
  to.tp_comm_s += k * from.tp_comm_s;
  to.pp_comm_s += k * from.pp_comm_s;
  to.dp_comm_s += k * from.dp_comm_s;
  to.offload_s += k * from.offload_s;
  to.optimizer_s += k * from.optimizer_s;
  to.bubble_s += k * from.bubble_s;
  to.other_s += k * from.other_s;
}

// The cut of [0, step_s] (program_simulator.h). An op that is the first running op for all
// of its time adds its own split exactly, one that is only partly adds the covered share of
// it. Gaps shorter than kRounding of the step are not idle time but the rounding between the
// pass-level replay and its op-by-op expansion (tested equal to 1e-12): the next op covers
// them.
StepTimeParts attribute(const std::array<std::vector<Span>, kLanes>& lanes, double step_s) {
  constexpr double kRounding = 1e-12;
  const double tolerance = kRounding * step_s;
  StepTimeParts parts;
  std::array<std::size_t, kLanes> at{};
  std::array<double, kLanes> covered{};  // of the lane's current span, while it was the first
  const auto finish = [&](int l, const Span& s) {
    const double c = covered[static_cast<std::size_t>(l)];
    covered[static_cast<std::size_t>(l)] = 0;
    if (s.parts == nullptr || !(s.total > 0) || c <= 0) return;
    if (c >= (s.end - s.start) - tolerance) {
      add_scaled(parts, *s.parts, 1.0);
    } else {
      add_scaled(parts, *s.parts, c / s.total);
    }
  };
  double t = 0;
  while (t < step_s - tolerance) {
    double next = step_s;
    const Span* active = nullptr;
    int active_lane = kLanes;
    for (int l = 0; l < kLanes; ++l) {
      const auto& spans = lanes[static_cast<std::size_t>(l)];
      std::size_t& i = at[static_cast<std::size_t>(l)];
      while (i < spans.size() && spans[i].end <= t) finish(l, spans[i++]);
      if (i == spans.size()) continue;
      const Span& s = spans[i];
      if (s.start <= t + tolerance) {
        next = std::min(next, s.end);
        if (active == nullptr) {
          active = &s;
          active_lane = l;
        }
      } else {
        next = std::min(next, s.start);
      }
    }
    const double piece = next - t;
    if (active == nullptr) {
      parts.bubble_s += piece;
    } else if (active_lane == kRecvLane) {
      const double in_transfer = std::max(
          0.0, std::min(next, active->transfer_end) - std::max(t, active->transfer_start));
      parts.pp_comm_s += in_transfer;
      parts.bubble_s += piece - in_transfer;
    } else {
      covered[static_cast<std::size_t>(active_lane)] += piece;
    }
    t = next;
  }
  for (int l = 0; l < kLanes; ++l) {
    const auto& spans = lanes[static_cast<std::size_t>(l)];
    for (std::size_t& i = at[static_cast<std::size_t>(l)]; i < spans.size(); ++i) finish(l, spans[i]);
  }
  return parts;
}

}  // namespace

Stream body_stream(const ProgramOp& op) {
  return op.stream == Stream::kHost ? Stream::kCompute : op.stream;
}

SimulationMode simulation_mode(Backend backend) {
  return backend == Backend::kCpu ? SimulationMode::kSerial : SimulationMode::kStreams;
}

std::string to_string(SimulationMode mode) {
  return mode == SimulationMode::kSerial ? "serial" : "streams";
}

PricedRank price_rank(const RankProgram& rank, const OpCosts& costs, SimulationMode mode) {
  PricedRank priced;
  priced.program = &rank;
  priced.mode = mode;
  priced.body_of = bodies_by_chunk(rank);
  priced.bodies.reserve(rank.bodies.size());
  for (const PassBody& body : rank.bodies) {
    PricedBody pb;
    pb.body = &body;
    pb.op_times.reserve(body.ops.size());
    pb.op_s.reserve(body.ops.size());
    for (const ProgramOp& op : body.ops) {
      const StepTimeParts t = op.kind == Kind::kCompute
                                  ? costs.compute(rank, op.part, op.unit, body.forward)
                                  : costs.state_move(rank, op.kind, op.unit);
      const double s = checked(t.sum(), "body op", op.kind);
      pb.op_times.push_back(t);
      pb.op_s.push_back(s);
      pb.serial_s += s;
      if (body_lane(op) == 0) pb.compute_stream_s += s;
    }
    if (mode == SimulationMode::kStreams) pb.response = body_response(body, pb.op_s);
    priced.bodies.push_back(std::move(pb));
  }
  for (std::size_t c = 0; c < priced.body_of.size(); ++c) {
    const auto chunk = static_cast<std::int32_t>(c);
    std::array<StepTimeParts, 2> t{costs.transfer(rank, Kind::kSendForward, chunk),
                                   costs.transfer(rank, Kind::kSendBackward, chunk)};
    priced.transfer_s.push_back({checked(t[0].sum(), "transfer", Kind::kSendForward),
                                 checked(t[1].sum(), "transfer", Kind::kSendBackward)});
    priced.transfer.push_back(t);
  }
  // The tail alone, from 0 on free streams.
  std::array<double, kStreamCount> free{};
  double clock = 0;  // serial
  const auto tail_ops = static_cast<std::size_t>(rank.ops.size()) - static_cast<std::size_t>(rank.tail_begin);
  priced.tail_times.reserve(tail_ops);
  priced.tail_start_s.reserve(tail_ops);
  priced.tail_end_s.reserve(tail_ops);
  const std::size_t carried_from = rank.first_carried_in_tail();
  double host_clock = 0;  // carried ops: on the host thread from the next step's start
  for (std::size_t k = 0; k < tail_ops; ++k) {
    const ProgramOp& op = rank.ops[static_cast<std::size_t>(rank.tail_begin) + k];
    const StepTimeParts t = costs.tail(rank, op);
    const double s = checked(t.sum(), "tail op", op.kind);
    if (k >= carried_from) {
      priced.tail_times.push_back(t);
      priced.tail_start_s.push_back(host_clock);
      host_clock += s;
      priced.tail_end_s.push_back(host_clock);
      continue;
    }
    double start = 0;
    if (mode == SimulationMode::kSerial) {
      start = clock;
    } else {
      start = free[static_cast<std::size_t>(op.stream)];
      // Rule 1: off the compute stream, after the compute issued before.
      if (op.stream != Stream::kCompute) {
        start = std::max(start, free[static_cast<std::size_t>(Stream::kCompute)]);
      }
      for (std::int32_t a : op.after) {
        if (a < rank.tail_begin) continue;  // -1, or the pipeline: ended before the tail
        start = std::max(start, priced.tail_end_s[static_cast<std::size_t>(a - rank.tail_begin)]);
      }
    }
    const double end = start + s;
    free[static_cast<std::size_t>(op.stream)] = end;
    clock = end;
    priced.tail_times.push_back(t);
    priced.tail_start_s.push_back(start);
    priced.tail_end_s.push_back(end);
    priced.tail_s = std::max(priced.tail_s, end);
  }
  std::vector<std::array<double, 2>> body_times;
  for (std::size_t w = 0; w < rank.carried_waits.size(); ++w) {
    const RankProgram::CarriedWait& wait = rank.carried_waits[w];
    const ProgramOp& pass = rank.ops[static_cast<std::size_t>(wait.op)];
    expand_body(priced.bodies[static_cast<std::size_t>(pass.body)], mode, 0, 0, 0, body_times);
    const double used = body_times[static_cast<std::size_t>(wait.body_op)][0];
    priced.carry_wait_s =
        std::max(priced.carry_wait_s, priced.tail_end_s[carried_from + w] - used);
  }
  priced.tail_s += priced.carry_wait_s;
  return priced;
}

void expand_body(const PricedBody& body, SimulationMode mode, double start, double comm_free,
                 double copy_free, std::vector<std::array<double, 2>>& times) {
  const auto& ops = body.body->ops;
  times.resize(ops.size());
  std::array<double, 3> lanes{start, comm_free, copy_free};
  double clock = start;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    double at = clock;
    if (mode == SimulationMode::kStreams) {
      const int l = body_lane(ops[i]);
      double& lane = lanes[static_cast<std::size_t>(l)];
      at = std::max(start, lane);
      if (l != 0) at = std::max(at, lanes[0]);  // rule 1: after the compute issued before
      for (std::int32_t a : ops[i].after) {
        if (a >= 0) at = std::max(at, times[static_cast<std::size_t>(a)][1]);
      }
      lane = at + body.op_s[i];
    }
    times[i] = {at, at + body.op_s[i]};
    clock = times[i][1];
  }
}

PipelineSkeleton pipeline_skeleton(const Program& program) {
  PipelineSkeleton s;
  s.kind = program.plan.schedule;
  s.pp = program.plan.pp;
  s.virtual_stages = program.plan.virtual_stages;
  s.micro_batches = program.micro_batches;
  for (const RankProgram& rank : program.ranks) {
    const auto body_of = bodies_by_chunk(rank);
    std::vector<PipelineStep> steps;
    steps.reserve(static_cast<std::size_t>(rank.tail_begin));
    for (std::int32_t i = 0; i < rank.tail_begin; ++i) {
      const ProgramOp& op = rank.ops[static_cast<std::size_t>(i)];
      PipelineStep step;
      step.kind = op.kind;
      step.micro_batch = op.micro_batch;
      step.chunk = op.chunk;
      step.after = op.after;
      step.variant = pass_variant(op.kind, op.micro_batch, program.micro_batches);
      if (op.is_pass() &&
          (op.chunk < 0 || static_cast<std::size_t>(op.chunk) >= body_of.size() ||
           body_of[static_cast<std::size_t>(op.chunk)][static_cast<std::size_t>(step.variant)] !=
               op.body)) {
        throw std::logic_error(fmt::format(
            "simulator: pipeline rank {} op {} ({} of micro-batch {} chunk {}) runs body {}, not "
            "the one its chunk and micro-batch select",
            rank.pp_rank, i, to_string(op.kind), op.micro_batch, op.chunk, op.body));
      }
      if (!op.is_pass() && !op.is_message()) {
        throw std::logic_error(fmt::format("simulator: a {} among the pipeline ops of rank {}",
                                           to_string(op.kind), rank.pp_rank));
      }
      steps.push_back(step);
    }
    s.ranks.push_back(std::move(steps));
  }
  finish_skeleton(s);
  return s;
}

PipelineSkeleton pipeline_skeleton(ScheduleKind kind, std::int64_t pp, std::int64_t v,
                                   std::int64_t m) {
  PipelineSkeleton s;
  s.kind = kind;
  s.pp = pp;
  s.virtual_stages = v;
  s.micro_batches = m;
  // The Programs' own pipeline ops (rank_pipeline_ops.h: each pass after its receive, each
  // send after its pass, a pass's body its variant), not a second reading of the schedule.
  for (std::int64_t r = 0; r < pp; ++r) {
    const std::vector<ProgramOp> ops = make_rank_pipeline_ops({kind, pp, v, m, r});
    std::vector<PipelineStep> steps;
    steps.reserve(ops.size());
    for (const ProgramOp& op : ops) {
      PipelineStep step;
      step.kind = op.kind;
      step.micro_batch = op.micro_batch;
      step.chunk = op.chunk;
      step.variant = static_cast<std::int8_t>(op.is_pass() ? op.body : -1);
      step.after = op.after;
      steps.push_back(step);
    }
    s.ranks.push_back(std::move(steps));
  }
  finish_skeleton(s);
  return s;
}

StepSimulation simulate_step(const PipelineSkeleton& skeleton, const std::vector<PricedRank>& ranks,
                             const std::vector<std::int32_t>& class_of, SimulationMode mode,
                             std::vector<std::vector<TimedOp>>* timeline, bool with_parts) {
  const std::size_t p = skeleton.ranks.size();
  check_ranks(skeleton, ranks, class_of, mode);
  const auto priced = [&](std::size_t r) -> const PricedRank& {
    return ranks.at(static_cast<std::size_t>(class_of[r]));
  };
  if (timeline != nullptr) timeline->resize(p);
  StepSimulation sim;
  sim.busy_s.assign(p, 0.0);
  sim.tail_s.resize(p);
  // The critical rank is known before the replay: the tails start together (rule 3), so the
  // rank with the longest tail ends last.
  for (std::size_t r = 0; r < p; ++r) {
    sim.tail_s[r] = priced(r).tail_s;
    if (sim.tail_s[r] > sim.tail_s[static_cast<std::size_t>(sim.critical_rank)]) {
      sim.critical_rank = static_cast<std::int64_t>(r);
    }
  }
  const auto critical = static_cast<std::size_t>(sim.critical_rank);

  // For the ranks whose timeline is kept: each step op's start, end and its pass's inputs.
  struct Record {
    double start = 0, end = 0, comm_in = 0, copy_in = 0;
  };
  std::vector<std::vector<Record>> records(p);
  for (std::size_t r = 0; r < p; ++r) {
    if (timeline != nullptr || (with_parts && r == critical)) {
      records[r].resize(skeleton.ranks[r].size());
    }
  }
  const bool serial = mode == SimulationMode::kSerial;
  const auto keep = [&](std::size_t g, double start, double end, double comm, double copy) {
    const auto& [rank, index] = skeleton.order[g];
    auto& kept = records[static_cast<std::size_t>(rank)];
    if (!kept.empty()) kept[static_cast<std::size_t>(index)] = {start, end, comm, copy};
  };
  ReplayScratch scratch;
  const double barrier =
      serial ? replay<true, true>(skeleton, ranks, class_of, scratch, keep)
             : replay<false, true>(skeleton, ranks, class_of, scratch, keep);
  const std::vector<double>& send_start = scratch.send_start;
  const std::vector<double>& send_end = scratch.send_end;
  for (std::size_t r = 0; r < p; ++r) {
    const PricedRank& pr = priced(r);
    for (const PipelineStep& op : skeleton.ranks[r]) {
      if (!is_pass(op.kind)) continue;
      sim.busy_s[r] += pr.bodies[static_cast<std::size_t>(
          pr.body_of[static_cast<std::size_t>(op.chunk)][static_cast<std::size_t>(op.variant)])]
                           .compute_stream_s;
    }
  }
  sim.pipeline_s = barrier;
  sim.step_s = barrier + sim.tail_s[critical];

  // Timelines: step ops, each pass followed by its body ops, then the tail from the barrier.
  std::array<std::vector<Span>, kLanes> lanes;
  std::vector<Span> carried_spans;  // the host thread's, apart in both modes
  std::vector<std::array<double, 2>> body_times;
  for (std::size_t r = 0; r < p; ++r) {
    if (records[r].empty()) continue;
    const bool is_critical = with_parts && r == critical;
    const PricedRank& pr = priced(r);
    std::vector<TimedOp>* out = timeline != nullptr ? &(*timeline)[r] : nullptr;
    if (out != nullptr) out->clear();
    // The wait for the last step's carried host steps holds up this rank's whole pipeline.
    const double shift = pr.carry_wait_s;
    const auto& steps = skeleton.ranks[r];
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const PipelineStep& op = steps[i];
      Record rec = records[r][i];
      rec.start += shift;
      rec.end += shift;
      const auto index = static_cast<std::int32_t>(i);
      if (out != nullptr) out->push_back({index, -1, rec.start, rec.end});
      if (is_pass(op.kind)) {
        const PricedBody& body = pr.bodies[static_cast<std::size_t>(
            pr.body_of[static_cast<std::size_t>(op.chunk)][static_cast<std::size_t>(op.variant)])];
        expand_body(body, mode, rec.start, rec.comm_in + shift, rec.copy_in + shift, body_times);
        for (std::size_t k = 0; k < body_times.size(); ++k) {
          if (out != nullptr) {
            out->push_back({index, static_cast<std::int32_t>(k), body_times[k][0], body_times[k][1]});
          }
          if (is_critical && body.op_s[k] > 0) {
            lanes[lane_of(body.body->ops[k].stream)].push_back(
                {body_times[k][0], body_times[k][1], &body.op_times[k], body.op_s[k]});
          }
        }
      } else if (is_critical && rec.end > rec.start) {
        if (is_send(op.kind)) {
          const std::size_t dir = op.kind == Kind::kSendForward ? 0 : 1;
          const auto chunk = static_cast<std::size_t>(op.chunk);
          lanes[kSendLane].push_back(
              {rec.start, rec.end, &pr.transfer[chunk][dir], pr.transfer_s[chunk][dir]});
        } else {
          const auto slot = static_cast<std::size_t>(op.message);
          lanes[kRecvLane].push_back(
              {rec.start, rec.end, nullptr, 0, send_start[slot] + shift, send_end[slot] + shift});
        }
      }
    }
    const RankProgram& program = *pr.program;
    for (std::size_t k = 0; k < pr.tail_times.size(); ++k) {
      const auto op_index = static_cast<std::int32_t>(program.tail_begin + static_cast<std::int32_t>(k));
      // A carried op: the last step's, on the host thread from this step's start.
      const bool carried = program.carries() && op_index >= program.carried_begin;
      const double from = carried ? 0.0 : barrier + shift;
      const double start = from + pr.tail_start_s[k];
      const double end = from + pr.tail_end_s[k];
      if (out != nullptr) out->push_back({op_index, -1, start, end});
      if (is_critical && end > start) {
        const Stream stream = program.ops[static_cast<std::size_t>(op_index)].stream;
        const Span span{start, end, &pr.tail_times[k], pr.tail_times[k].sum()};
        if (carried) {
          carried_spans.push_back(span);
        } else {
          lanes[serial ? kComputeLane : lane_of(stream)].push_back(span);
        }
      }
    }
  }
  if (serial) {
    // One clock: every body op of the critical rank runs in its pass, in the compute lane.
    for (int l = kCommLane; l <= kCopyLane; ++l) {
      auto& from = lanes[static_cast<std::size_t>(l)];
      lanes[kComputeLane].insert(lanes[kComputeLane].end(), from.begin(), from.end());
      from.clear();
    }
    std::stable_sort(lanes[kComputeLane].begin(), lanes[kComputeLane].end(),
                     [](const Span& a, const Span& b) { return a.start < b.start; });
  }
  auto& host = lanes[kHostLane];
  host.insert(host.end(), carried_spans.begin(), carried_spans.end());
  std::stable_sort(host.begin(), host.end(), [](const Span& a, const Span& b) { return a.start < b.start; });
  if (with_parts) sim.parts = attribute(lanes, sim.step_s);
  return sim;
}

double replay_pipeline(const PipelineSkeleton& skeleton, const std::vector<PricedRank>& ranks,
                       const std::vector<std::int32_t>& class_of, SimulationMode mode,
                       ReplayScratch& scratch) {
  check_ranks(skeleton, ranks, class_of, mode);
  const auto none = [](std::size_t, double, double, double, double) {};
  return mode == SimulationMode::kSerial
             ? replay<true, false>(skeleton, ranks, class_of, scratch, none)
             : replay<false, false>(skeleton, ranks, class_of, scratch, none);
}

double pipeline_lower_bound(std::int64_t micro_batches, const std::vector<PricedRank>& ranks,
                            const std::vector<std::int32_t>& class_of, SimulationMode mode) {
  const bool serial = mode == SimulationMode::kSerial;
  const auto compute_s = [&](const PricedRank& pr, std::size_t chunk, std::size_t variant) {
    const PricedBody& b = pr.bodies[static_cast<std::size_t>(pr.body_of[chunk][variant])];
    return serial ? b.serial_s : b.compute_stream_s;
  };
  const auto m = static_cast<double>(micro_batches);
  double bound = 0, fill = 0, drain = 0;
  for (const std::int32_t c : class_of) {
    const PricedRank& pr = ranks.at(static_cast<std::size_t>(c));
    double busy = 0;
    for (std::size_t chunk = 0; chunk < pr.body_of.size(); ++chunk) {
      busy += m * compute_s(pr, chunk, 0) + (m - 1) * compute_s(pr, chunk, 1) +
              compute_s(pr, chunk, 2);
    }
    bound = std::max(bound, fill + busy + drain);
    fill += compute_s(pr, 0, 0);
    drain += compute_s(pr, 0, 2);
  }
  // The replay adds the same durations in another order (op by op, pass by pass): where the
  // bound is tight (one stage, every op on the critical path) rounding can put these sums a
  // few ulps above the replay's, and the planner would then skip a plan that ties. A relative
  // 1e-12 is far above the rounding of sums of ~10^5 terms and far below any real gap.
  return bound * (1.0 - 1e-12);
}

std::string replay_key(const std::vector<PricedRank>& ranks, SimulationMode mode) {
  std::string key;
  const auto put = [&key](const void* data, std::size_t bytes) {
    key.append(static_cast<const char*>(data), bytes);
  };
  put(&mode, sizeof(mode));
  for (const PricedRank& pr : ranks) {
    const std::size_t counts[2] = {pr.body_of.size(), pr.bodies.size()};
    put(counts, sizeof(counts));
    for (const auto& of : pr.body_of) put(of.data(), sizeof(of));
    for (const auto& t : pr.transfer_s) put(t.data(), sizeof(t));
    for (const PricedBody& b : pr.bodies) {
      if (mode == SimulationMode::kSerial) {
        put(&b.serial_s, sizeof(b.serial_s));
      } else {
        put(&b.response.gain, sizeof(b.response.gain));
      }
    }
  }
  return key;
}

ProgramTimeline simulate_program(const Program& program, const OpCosts& costs,
                                 SimulationMode mode) {
  const PipelineSkeleton skeleton = pipeline_skeleton(program);
  std::vector<PricedRank> ranks;
  std::vector<std::int32_t> class_of;
  ranks.reserve(program.ranks.size());
  for (const RankProgram& rank : program.ranks) {
    class_of.push_back(static_cast<std::int32_t>(ranks.size()));
    ranks.push_back(price_rank(rank, costs, mode));
  }
  ProgramTimeline timeline;
  timeline.ranks.resize(program.ranks.size());
  timeline.step = simulate_step(skeleton, ranks, class_of, mode, &timeline.ranks);
  return timeline;
}

}  // namespace strata
