// When a pipeline send is known complete (cost_model/program/program_sends.h): checked against a
// brute-force reading of the peer's list on every schedule, p in 1..8, v in 1..4, m from
// below p to 4 p, and the 1F1B bound it gives (a rank holds its warm-up's sends).
#include "cost_model/program/program_sends.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "cost_model/program/program.h"
#include "cost_model/program/schedule.h"
#include "tests/cost_model/program_test_util.h"

namespace strata {
namespace {

using Kind = ProgramOpKind;

struct SendsCase {
  ScheduleKind kind;
  std::int64_t p, v, m;
};

std::vector<SendsCase> cases() {
  std::vector<SendsCase> out;
  for (std::int64_t p : {1, 2, 3, 4, 8}) {
    for (std::int64_t m : {std::int64_t{1}, p - 1, p, p + 1, 2 * p, 4 * p}) {
      if (m < 1) continue;
      out.push_back({ScheduleKind::kGpipe, p, 1, m});
      out.push_back({ScheduleKind::kOneFOneB, p, 1, m});
      if (m % p != 0) continue;
      for (std::int64_t v : {2, 4}) out.push_back({ScheduleKind::kInterleaved, p, v, m});
    }
  }
  return out;
}

std::string label(const SendsCase& c) {
  return fmt::format("{} p{} v{} m{}", to_string(c.kind), c.p, c.v, c.m);
}

Program program_of(const SendsCase& c) {
  Plan plan;
  plan.pp = c.p;
  plan.virtual_stages = c.v;
  plan.schedule = c.kind;
  return make_program(testing::small_gpt(c.p * c.v), testing::train_of(c.m), plan);
}

// A message: (micro-batch, receiving virtual stage, direction). Both ends name it alike.
using SendMessage = std::tuple<std::int64_t, std::int64_t, bool>;
SendMessage message_of(const ProgramOp& op, std::int64_t p, std::int64_t r) {
  const std::int64_t s = op.chunk * p + r;
  switch (op.kind) {
    case Kind::kSendForward: return {op.micro_batch, s + 1, true};
    case Kind::kSendBackward: return {op.micro_batch, s - 1, false};
    case Kind::kRecvForward: return {op.micro_batch, s, true};
    default: return {op.micro_batch, s, false};
  }
}
bool is_send(const ProgramOp& op) {
  return op.kind == Kind::kSendForward || op.kind == Kind::kSendBackward;
}
bool is_recv(const ProgramOp& op) {
  return op.kind == Kind::kRecvForward || op.kind == Kind::kRecvBackward;
}

TEST(ProgramSends, EachLinkReceivesItsSendsInTheOrderTheyWereSent) {
  // What makes a prefix of the sends the whole set a receive proves (program_sends.h).
  for (const SendsCase& c : cases()) {
    if (c.p == 1) continue;
    const Program program = program_of(c);
    for (std::int64_t r = 0; r < c.p; ++r) {
      for (bool forward : {true, false}) {
        const std::int64_t dest = forward ? (r + 1) % c.p : (r - 1 + c.p) % c.p;
        std::vector<SendMessage> sent, received;
        for (const ProgramOp& op : program.ranks[static_cast<std::size_t>(r)].ops) {
          if (is_send(op) && (op.kind == Kind::kSendForward) == forward) sent.push_back(message_of(op, c.p, r));
        }
        for (const ProgramOp& op : program.ranks[static_cast<std::size_t>(dest)].ops) {
          if (is_recv(op) && (op.kind == Kind::kRecvForward) == forward && op.peer == r) {
            received.push_back(message_of(op, c.p, dest));
          }
        }
        EXPECT_EQ(sent, received) << label(c) << " rank " << r << (forward ? " forward" : " backward");
      }
    }
  }
}

TEST(ProgramSends, AReceiveProvesTheSendsThePeerReceivedBeforeSendingIt) {
  // Brute force: for each receive of rank r from q, every send of r whose receive q's list
  // puts before q's send of the received message, unioned over r's receives so far, must be
  // exactly r's first forward_sends_complete forward and backward_sends_complete backward
  // sends. With p = 1 nothing is sent and nothing is marked.
  for (const SendsCase& c : cases()) {
    const Program program = program_of(c);
    for (std::int64_t r = 0; r < c.p; ++r) {
      const RankProgram& rank = program.ranks[static_cast<std::size_t>(r)];
      std::vector<SendMessage> sends[2];  // [0] forward, [1] backward, in list order
      for (const ProgramOp& op : rank.ops) {
        if (is_send(op)) sends[op.kind == Kind::kSendForward ? 0 : 1].push_back(message_of(op, c.p, r));
      }
      std::set<SendMessage> proved[2];
      for (const ProgramOp& op : rank.ops) {
        if (!is_recv(op)) {
          EXPECT_EQ(op.forward_sends_complete, 0);
          EXPECT_EQ(op.backward_sends_complete, 0);
          continue;
        }
        if (c.p == 1) {
          EXPECT_EQ(op.forward_sends_complete + op.backward_sends_complete, 0) << label(c);
          continue;
        }
        const RankProgram& peer = program.ranks[static_cast<std::size_t>(op.peer)];
        const SendMessage got = message_of(op, c.p, r);
        std::size_t sent_at = 0;
        while (!(is_send(peer.ops[sent_at]) && message_of(peer.ops[sent_at], c.p, op.peer) == got)) ++sent_at;
        for (std::size_t i = 0; i < sent_at; ++i) {
          const ProgramOp& before = peer.ops[i];
          if (!is_recv(before) || before.peer != r) continue;
          const SendMessage m = message_of(before, c.p, op.peer);
          proved[std::get<2>(m) ? 0 : 1].insert(m);
        }
        const std::int32_t marked[2] = {op.forward_sends_complete, op.backward_sends_complete};
        for (int d = 0; d < 2; ++d) {
          const std::set<SendMessage> prefix(sends[d].begin(), sends[d].begin() + marked[d]);
          EXPECT_EQ(proved[d], prefix) << label(c) << " rank " << r << " " << to_string(op.kind)
                                       << " mb " << op.micro_batch << " chunk " << op.chunk
                                       << (d == 0 ? " forward" : " backward");
        }
      }
    }
  }
}

// The most sends of each direction rank r holds at once (posted, not proved complete).
std::pair<std::int64_t, std::int64_t> most_pending(const RankProgram& rank) {
  std::int64_t posted[2] = {0, 0}, proved[2] = {0, 0}, most[2] = {0, 0};
  // Pending after each op: the proved counts are the last receive's (they are cumulative).
  for (const ProgramOp& op : rank.ops) {
    if (is_recv(op)) {
      proved[0] = op.forward_sends_complete;
      proved[1] = op.backward_sends_complete;
    }
    if (is_send(op)) ++posted[op.kind == Kind::kSendForward ? 0 : 1];
    for (int d = 0; d < 2; ++d) most[d] = std::max(most[d], posted[d] - proved[d]);
  }
  return {most[0], most[1]};
}

TEST(ProgramSends, AOneFOneBRankHoldsItsWarmUpsSends) {
  // 1F1B on rank r (m >= 2 p): a warm-up of w = p - r - 1 forwards, then pairs F(w + k),
  // B(k), then w backwards. Forward sends go to r + 1, whose warm-up is w - 1 and whose
  // B(k) follows its F(w - 1 + k): r's receive of B(k) proves its forwards 0..w - 1 + k,
  // w + k of the w + k + 1 it has posted. Before the first, r posted w + 1 = p - r: the most
  // (r < p - 1; the last stage sends no forward).
  // Backward sends go to r - 1 (warm-up w + 1), whose F(w + 1 + k) follows its B(k - 1):
  // r's receive of F(w + j) proves backwards 0..j - 2 of the j posted, one pending, two
  // after B(j)'s send; the cool-down receives no forward, so its w sends join them: the
  // most is w + 2 = p - r + 1 at the pipeline's end (r > 0; the first stage sends none).
  for (std::int64_t p : {2, 3, 4, 8}) {
    for (std::int64_t m : {2 * p, 4 * p}) {
      const SendsCase c{ScheduleKind::kOneFOneB, p, 1, m};
      const Program program = program_of(c);
      for (std::int64_t r = 0; r < p; ++r) {
        const auto [forward, backward] = most_pending(program.ranks[static_cast<std::size_t>(r)]);
        EXPECT_EQ(forward, r < p - 1 ? p - r : 0) << label(c) << " rank " << r;
        EXPECT_EQ(backward, r > 0 ? p - r + 1 : 0) << label(c) << " rank " << r;
      }
    }
  }
}

}  // namespace
}  // namespace strata
