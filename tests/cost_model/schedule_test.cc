// Tests of make_schedule: exact op orders for small cases written out by hand, op counts,
// send/receive matching, dependency order, deadlock freedom under blocking receives and
// non-blocking sends, and max_in_flight against its closed forms.
#include "cost_model/program/schedule.h"

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cost_model/specs/errors.h"
#include "cost_model/memory/memory_model.h"

namespace strata {
namespace {

// Compact text of one op: F/B for compute, RF/SF/RB/SB for p2p, then micro_batch.chunk,
// then @peer for p2p ops. "SF0.1@1" = send the forward output of micro-batch 0, chunk 1, to
// rank 1.
std::string brief(const PipelineOp& op) {
  const char* k = "";
  switch (op.kind) {
    case OpKind::kForward: k = "F"; break;
    case OpKind::kBackward: k = "B"; break;
    case OpKind::kRecvForward: k = "RF"; break;
    case OpKind::kSendForward: k = "SF"; break;
    case OpKind::kRecvBackward: k = "RB"; break;
    case OpKind::kSendBackward: k = "SB"; break;
  }
  std::string s = fmt::format("{}{}.{}", k, op.micro_batch, op.chunk);
  if (op.peer >= 0) s += fmt::format("@{}", op.peer);
  return s;
}

std::vector<std::string> brief(const std::vector<PipelineOp>& ops) {
  std::vector<std::string> out;
  for (const auto& op : ops) out.push_back(brief(op));
  return out;
}

struct Case {
  ScheduleKind kind;
  std::int64_t p, v, m;
};

// Many legal (kind, p, v, m) combinations, including m < p and m == p corner cases.
std::vector<Case> many_cases() {
  std::vector<Case> cases;
  for (std::int64_t p : {1, 2, 3, 4, 8}) {
    for (std::int64_t m : {1, 2, 3, 4, 5, 8, 16}) {
      cases.push_back({ScheduleKind::kGpipe, p, 1, m});
      cases.push_back({ScheduleKind::kOneFOneB, p, 1, m});
      for (std::int64_t v : {1, 2, 3, 4}) {
        if (m % p == 0) cases.push_back({ScheduleKind::kInterleaved, p, v, m});
      }
    }
  }
  return cases;
}

std::string label(const Case& c) {
  const char* kind = c.kind == ScheduleKind::kGpipe      ? "gpipe"
                     : c.kind == ScheduleKind::kOneFOneB ? "1f1b"
                                                         : "interleaved";
  return fmt::format("{} p={} v={} m={}", kind, c.p, c.v, c.m);
}

TEST(Schedule, OneFOneBTwoRanksFourMicroBatchesByHand) {
  // p=2, m=4. Rank 0 warms up with p - r - 1 = 1 forward, then F/B pairs (F1 B0, F2 B1,
  // F3 B2), then drains B3. Rank 0 is virtual stage 0: no receive before its forwards, a
  // send to rank 1 after; a receive from rank 1 before its backwards, no send after.
  // Rank 1 (last stage) warms up with 0 forwards: F0 B0 F1 B1 ...
  const Schedule s = make_schedule(ScheduleKind::kOneFOneB, 2, 1, 4);
  const std::vector<std::string> rank0 = {
      "F0.0", "SF0.0@1",                        // warm-up
      "F1.0", "SF1.0@1", "RB0.0@1", "B0.0",     // steady
      "F2.0", "SF2.0@1", "RB1.0@1", "B1.0",
      "F3.0", "SF3.0@1", "RB2.0@1", "B2.0",
      "RB3.0@1", "B3.0"};                       // cool-down
  const std::vector<std::string> rank1 = {
      "RF0.0@0", "F0.0", "B0.0", "SB0.0@0", "RF1.0@0", "F1.0", "B1.0", "SB1.0@0",
      "RF2.0@0", "F2.0", "B2.0", "SB2.0@0", "RF3.0@0", "F3.0", "B3.0", "SB3.0@0"};
  ASSERT_EQ(s.ops.size(), 2u);
  EXPECT_EQ(brief(s.ops[0]), rank0);
  EXPECT_EQ(brief(s.ops[1]), rank1);
}

TEST(Schedule, GpipeTwoRanksTwoMicroBatchesByHand) {
  // All forwards in micro-batch order, then all backwards in the same order.
  const Schedule s = make_schedule(ScheduleKind::kGpipe, 2, 1, 2);
  const std::vector<std::string> rank0 = {"F0.0",    "SF0.0@1", "F1.0",    "SF1.0@1",
                                          "RB0.0@1", "B0.0",    "RB1.0@1", "B1.0"};
  const std::vector<std::string> rank1 = {"RF0.0@0", "F0.0", "RF1.0@0", "F1.0",
                                          "B0.0",    "SB0.0@0", "B1.0", "SB1.0@0"};
  EXPECT_EQ(brief(s.ops[0]), rank0);
  EXPECT_EQ(brief(s.ops[1]), rank1);
}

TEST(Schedule, InterleavedTwoRanksTwoChunksFourMicroBatchesByHand) {
  // p=2, v=2, m=4: virtual stages s = chunk*2 + rank, so rank 0 holds s0 (chunk 0) and s2
  // (chunk 1), rank 1 holds s1 and s3; every peer is the other rank.
  // k-th forward: g = k % 4, chunk g / 2, micro-batch (k / 4) * 2 + k % 2:
  //   k = 0..7 -> (0,c0) (1,c0) (0,c1) (1,c1) (2,c0) (3,c0) (2,c1) (3,c1).
  // k-th backward: chunk 1 - g / 2:
  //   k = 0..7 -> (0,c1) (1,c1) (0,c0) (1,c0) (2,c1) (3,c1) (2,c0) (3,c0).
  // Warm-up: rank 0 (2-0-1)*2 + (2-1)*2 = 4 forwards, rank 1 (2-1-1)*2 + 2 = 2.
  // Rank 0: s0 sends forward and receives backward only; s2 receives and sends both ways.
  const Schedule s = make_schedule(ScheduleKind::kInterleaved, 2, 2, 4);
  const std::vector<std::string> rank0 = {
      // warm-up F0..F3
      "F0.0", "SF0.0@1", "F1.0", "SF1.0@1",
      "RF0.1@1", "F0.1", "SF0.1@1", "RF1.1@1", "F1.1", "SF1.1@1",
      // steady: F4 B0, F5 B1, F6 B2, F7 B3
      "F2.0", "SF2.0@1", "RB0.1@1", "B0.1", "SB0.1@1",
      "F3.0", "SF3.0@1", "RB1.1@1", "B1.1", "SB1.1@1",
      "RF2.1@1", "F2.1", "SF2.1@1", "RB0.0@1", "B0.0",
      "RF3.1@1", "F3.1", "SF3.1@1", "RB1.0@1", "B1.0",
      // cool-down B4..B7
      "RB2.1@1", "B2.1", "SB2.1@1", "RB3.1@1", "B3.1", "SB3.1@1",
      "RB2.0@1", "B2.0", "RB3.0@1", "B3.0"};
  // Rank 1: s1 (chunk 0) receives and sends both ways; s3 (chunk 1, last) receives its
  // forward input and sends its input gradient only.
  const std::vector<std::string> rank1 = {
      // warm-up F0, F1
      "RF0.0@0", "F0.0", "SF0.0@0", "RF1.0@0", "F1.0", "SF1.0@0",
      // steady: F2 B0, F3 B1, F4 B2, F5 B3, F6 B4, F7 B5
      "RF0.1@0", "F0.1", "B0.1", "SB0.1@0",
      "RF1.1@0", "F1.1", "B1.1", "SB1.1@0",
      "RF2.0@0", "F2.0", "SF2.0@0", "RB0.0@0", "B0.0", "SB0.0@0",
      "RF3.0@0", "F3.0", "SF3.0@0", "RB1.0@0", "B1.0", "SB1.0@0",
      "RF2.1@0", "F2.1", "B2.1", "SB2.1@0",
      "RF3.1@0", "F3.1", "B3.1", "SB3.1@0",
      // cool-down B6, B7
      "RB2.0@0", "B2.0", "SB2.0@0", "RB3.0@0", "B3.0", "SB3.0@0"};
  EXPECT_EQ(brief(s.ops[0]), rank0);
  EXPECT_EQ(brief(s.ops[1]), rank1);
}

TEST(Schedule, InterleavedWithOneChunkIsOneFOneB) {
  // schedule.h: "For interleaved with v == 1 the result is the 1F1B schedule".
  const Schedule a = make_schedule(ScheduleKind::kInterleaved, 4, 1, 8);
  const Schedule b = make_schedule(ScheduleKind::kOneFOneB, 4, 1, 8);
  EXPECT_EQ(a.ops, b.ops);
}

// One rank's list alone is that rank's list of the whole schedule, for every kind, and a
// rank outside the pipeline is an error.
TEST(Schedule, OneRanksListIsThatRanksListOfTheWholeSchedule) {
  for (ScheduleKind kind : {ScheduleKind::kGpipe, ScheduleKind::kOneFOneB, ScheduleKind::kInterleaved}) {
    for (std::int64_t p : {1, 2, 4}) {
      const std::int64_t v = kind == ScheduleKind::kInterleaved ? 2 : 1;
      const Schedule whole = make_schedule(kind, p, v, 8);
      for (std::int64_t r = 0; r < p; ++r) {
        EXPECT_EQ(make_rank_schedule(kind, p, v, 8, r), whole.ops[static_cast<std::size_t>(r)])
            << to_string(kind) << " p " << p << " rank " << r;
      }
      EXPECT_THROW(make_rank_schedule(kind, p, v, 8, p), InfeasiblePlan);
      EXPECT_THROW(make_rank_schedule(kind, p, v, 8, -1), InfeasiblePlan);
    }
  }
}

TEST(Schedule, OpCountsPerRank) {
  for (const Case& c : many_cases()) {
    SCOPED_TRACE(label(c));
    const Schedule s = make_schedule(c.kind, c.p, c.v, c.m);
    ASSERT_EQ(static_cast<std::int64_t>(s.ops.size()), c.p);
    for (std::int64_t r = 0; r < c.p; ++r) {
      std::map<OpKind, std::int64_t> n;
      for (const auto& op : s.ops[static_cast<std::size_t>(r)]) ++n[op.kind];
      // Every rank runs m forwards and m backwards per chunk.
      EXPECT_EQ(n[OpKind::kForward], c.m * c.v);
      EXPECT_EQ(n[OpKind::kBackward], c.m * c.v);
      // Each of the rank's v virtual stages receives a forward input unless it is stage 0,
      // and sends a forward output unless it is the last stage p*v - 1; backwards mirror.
      const std::int64_t not_first = c.v - (r == 0 ? 1 : 0);
      const std::int64_t not_last = c.v - (r == c.p - 1 ? 1 : 0);
      EXPECT_EQ(n[OpKind::kRecvForward], c.m * not_first);
      EXPECT_EQ(n[OpKind::kSendBackward], c.m * not_first);
      EXPECT_EQ(n[OpKind::kSendForward], c.m * not_last);
      EXPECT_EQ(n[OpKind::kRecvBackward], c.m * not_last);
    }
  }
}

TEST(Schedule, EveryChunkMicroBatchOnceAndBackwardAfterForward) {
  for (const Case& c : many_cases()) {
    SCOPED_TRACE(label(c));
    const Schedule s = make_schedule(c.kind, c.p, c.v, c.m);
    for (const auto& ops : s.ops) {
      std::map<std::pair<std::int64_t, std::int64_t>, std::size_t> forward_at;
      std::set<std::pair<std::int64_t, std::int64_t>> backward_seen;
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const auto& op = ops[i];
        const auto key = std::make_pair(op.micro_batch, op.chunk);
        ASSERT_GE(op.micro_batch, 0);
        ASSERT_LT(op.micro_batch, c.m);
        ASSERT_GE(op.chunk, 0);
        ASSERT_LT(op.chunk, c.v);
        if (op.kind == OpKind::kForward) {
          EXPECT_TRUE(forward_at.emplace(key, i).second) << "forward twice: " << brief(op);
        }
        if (op.kind == OpKind::kBackward) {
          EXPECT_TRUE(forward_at.count(key)) << "backward before forward: " << brief(op);
          EXPECT_TRUE(backward_seen.insert(key).second) << "backward twice: " << brief(op);
        }
      }
      EXPECT_EQ(static_cast<std::int64_t>(forward_at.size()), c.m * c.v);
      EXPECT_EQ(static_cast<std::int64_t>(backward_seen.size()), c.m * c.v);
    }
  }
}

// A message: (forward?, micro_batch, sending virtual stage, receiving virtual stage).
using Message = std::tuple<bool, std::int64_t, std::int64_t, std::int64_t>;

// The message a p2p op carries, from the stage layout s = chunk * p + rank and the op's peer.
Message message_of(const Schedule& s, std::int64_t rank, const PipelineOp& op) {
  const std::int64_t here = s.virtual_stage(rank, op.chunk);
  switch (op.kind) {
    case OpKind::kSendForward: return {true, op.micro_batch, here, here + 1};
    case OpKind::kRecvForward: return {true, op.micro_batch, here - 1, here};
    case OpKind::kSendBackward: return {false, op.micro_batch, here, here - 1};
    case OpKind::kRecvBackward: return {false, op.micro_batch, here + 1, here};
    default: return {false, -1, -1, -1};
  }
}

bool is_send(OpKind k) { return k == OpKind::kSendForward || k == OpKind::kSendBackward; }
bool is_recv(OpKind k) { return k == OpKind::kRecvForward || k == OpKind::kRecvBackward; }

TEST(Schedule, EverySendHasExactlyOneMatchingReceive) {
  for (const Case& c : many_cases()) {
    SCOPED_TRACE(label(c));
    const Schedule s = make_schedule(c.kind, c.p, c.v, c.m);
    std::map<Message, int> sends, recvs;
    for (std::int64_t r = 0; r < c.p; ++r) {
      for (const auto& op : s.ops[static_cast<std::size_t>(r)]) {
        if (!is_send(op.kind) && !is_recv(op.kind)) {
          EXPECT_EQ(op.peer, -1);
          continue;
        }
        const Message msg = message_of(s, r, op);
        const std::int64_t from = std::get<2>(msg), to = std::get<3>(msg);
        ASSERT_GE(std::min(from, to), 0) << brief(op);
        ASSERT_LT(std::max(from, to), c.p * c.v) << brief(op);
        // The peer is the rank of the other stage: stage s lives on rank s % p.
        EXPECT_EQ(op.peer, (is_send(op.kind) ? to : from) % c.p) << brief(op);
        ++(is_send(op.kind) ? sends : recvs)[msg];
      }
    }
    EXPECT_EQ(sends, recvs);
    for (const auto& [msg, n] : sends) EXPECT_EQ(n, 1);
  }
}

// Replays a schedule with blocking receives and non-blocking sends; returns true when every
// rank reaches the end of its list.
bool replay_terminates(const Schedule& s) {
  std::set<Message> posted;
  std::vector<std::size_t> next(s.ops.size(), 0);
  bool progress = true;
  while (progress) {
    progress = false;
    for (std::size_t r = 0; r < s.ops.size(); ++r) {
      const auto& ops = s.ops[r];
      while (next[r] < ops.size()) {
        const auto& op = ops[next[r]];
        const auto rank = static_cast<std::int64_t>(r);
        if (is_recv(op.kind)) {
          if (posted.erase(message_of(s, rank, op)) == 0) break;  // blocks
        } else if (is_send(op.kind)) {
          posted.insert(message_of(s, rank, op));
        }
        ++next[r];
        progress = true;
      }
    }
  }
  for (std::size_t r = 0; r < s.ops.size(); ++r) {
    if (next[r] != s.ops[r].size()) return false;
  }
  return true;
}

TEST(Schedule, ReplayWithBlockingReceivesDoesNotDeadlock) {
  for (const Case& c : many_cases()) {
    EXPECT_TRUE(replay_terminates(make_schedule(c.kind, c.p, c.v, c.m))) << label(c);
  }
  // Larger pipelines, as the planner generates them.
  EXPECT_TRUE(replay_terminates(make_schedule(ScheduleKind::kInterleaved, 16, 4, 64)));
  EXPECT_TRUE(replay_terminates(make_schedule(ScheduleKind::kOneFOneB, 32, 1, 7)));
}

TEST(Schedule, ReplayDetectsADeadlockedOrder) {
  // The replay itself must be able to fail: swap rank 1's first receive behind its first
  // send of a backward in 1F1B p=2 m=1 (rank 1: RF0 F0 B0 SB0), and make rank 0 receive the
  // backward before sending its forward: both ranks block on a receive.
  Schedule s = make_schedule(ScheduleKind::kOneFOneB, 2, 1, 1);
  ASSERT_EQ(brief(s.ops[0]), (std::vector<std::string>{"F0.0", "SF0.0@1", "RB0.0@1", "B0.0"}));
  std::swap(s.ops[0][1], s.ops[0][2]);  // F0 RB0 SF0 B0
  EXPECT_FALSE(replay_terminates(s));
}

TEST(Schedule, MaxInFlightMatchesClosedForms) {
  for (const Case& c : many_cases()) {
    SCOPED_TRACE(label(c));
    const Schedule s = make_schedule(c.kind, c.p, c.v, c.m);
    for (std::int64_t r = 0; r < c.p; ++r) {
      std::int64_t expected = 0;
      if (c.kind == ScheduleKind::kGpipe) {
        expected = c.m;  // every forward before any backward
      } else if (c.kind == ScheduleKind::kOneFOneB || c.v == 1) {
        expected = std::min(c.p - r, c.m);  // p - r - 1 warm-up forwards + 1 steady forward
      } else {
        // The closed form of in_flight_chunks (cost_model/memory/memory_model.h): Megatron's
        // warm-up count + the steady state's one forward, capped at all m*v forwards.
        expected = std::min((c.p - r - 1) * 2 + (c.v - 1) * c.p + 1, c.m * c.v);
      }
      EXPECT_EQ(max_in_flight(s, r), expected) << "rank " << r;
      // The memory model uses the closed form without building a schedule; both must agree.
      EXPECT_EQ(in_flight_chunks(c.kind, c.p, c.v, c.m, r), max_in_flight(s, r)) << "rank " << r;
    }
  }
  // Interleaved rank 0 holds the most (schedule.h).
  const Schedule s = make_schedule(ScheduleKind::kInterleaved, 8, 2, 16);
  for (std::int64_t r = 1; r < 8; ++r) EXPECT_GE(max_in_flight(s, 0), max_in_flight(s, r));
  EXPECT_THROW(max_in_flight(s, 8), InfeasiblePlan);
}

TEST(Schedule, RejectsBadShapesWithTheNumbers) {
  EXPECT_THROW(make_schedule(ScheduleKind::kOneFOneB, 0, 1, 4), InfeasiblePlan);
  EXPECT_THROW(make_schedule(ScheduleKind::kOneFOneB, 2, 0, 4), InfeasiblePlan);
  EXPECT_THROW(make_schedule(ScheduleKind::kOneFOneB, 2, 1, 0), InfeasiblePlan);
  EXPECT_THROW(make_schedule(ScheduleKind::kOneFOneB, 2, 2, 4), InfeasiblePlan);
  EXPECT_THROW(make_schedule(ScheduleKind::kGpipe, 2, 2, 4), InfeasiblePlan);
  try {
    make_schedule(ScheduleKind::kInterleaved, 4, 2, 6);
    FAIL() << "m % pp != 0 accepted";
  } catch (const InfeasiblePlan& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("6 % 4 = 2"), std::string::npos) << what;
  }
}

TEST(Schedule, OpNames) {
  EXPECT_EQ(to_string(OpKind::kForward), "forward");
  EXPECT_EQ(to_string(OpKind::kBackward), "backward");
  EXPECT_EQ(to_string(OpKind::kRecvForward), "recv_forward");
  EXPECT_EQ(to_string(OpKind::kSendForward), "send_forward");
  EXPECT_EQ(to_string(OpKind::kRecvBackward), "recv_backward");
  EXPECT_EQ(to_string(OpKind::kSendBackward), "send_backward");
}

}  // namespace
}  // namespace strata
