// When a pipeline send is certainly complete (see program_sends.h for the argument).
#include "cost_model/program/program_sends.h"

#include <algorithm>
#include <array>
#include <map>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "cost_model/program/schedule.h"

namespace strata {
namespace {

using Kind = ProgramOpKind;

int slot(OpKind kind) {
  switch (kind) {
    case OpKind::kRecvForward: return 0;
    case OpKind::kSendForward: return 1;
    case OpKind::kRecvBackward: return 2;
    case OpKind::kSendBackward: return 3;
    default: return -1;
  }
}

// Where each message op of one rank's schedule stands in its list.
class MessageIndex {
 public:
  MessageIndex(const std::vector<PipelineOp>& ops, std::int64_t v, std::int64_t m) : v_(v) {
    for (auto& a : at_) a.assign(static_cast<std::size_t>(m * v), -1);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const int s = slot(ops[i].kind);
      if (s >= 0) at_[static_cast<std::size_t>(s)][key(ops[i].micro_batch, ops[i].chunk)] = static_cast<std::int32_t>(i);
    }
  }
  // The list index of `kind` of (micro-batch, chunk); std::logic_error when it has none.
  std::int32_t find(OpKind kind, std::int64_t mb, std::int64_t chunk) const {
    const std::int32_t i = at_[static_cast<std::size_t>(slot(kind))][key(mb, chunk)];
    if (i < 0) {
      throw std::logic_error(fmt::format("program: the peer has no {} of ({}, {})",
                                         to_string(kind), mb, chunk));
    }
    return i;
  }

 private:
  std::size_t key(std::int64_t mb, std::int64_t chunk) const {
    return static_cast<std::size_t>(mb * v_ + chunk);
  }
  std::int64_t v_;
  std::array<std::vector<std::int32_t>, 4> at_;
};

// One direction of this rank's sends: the rank they go to and, for the first i + 1 of them
// in list order, the latest place in that rank's list where one of them is received.
struct Link {
  std::int64_t dest = 0;
  std::vector<std::int32_t> received_by;
  std::int32_t posted = 0;  // sends of this direction before the op being marked
  std::int32_t known = 0;   // of them, known complete
};

}  // namespace

void mark_complete_sends(RankProgram& rank, ScheduleKind kind, std::int64_t p, std::int64_t v,
                         std::int64_t m) {
  if (p == 1) return;  // messages to this rank itself are handed over, not sent
  const std::int64_t r = rank.pp_rank;
  const std::int64_t next = (r + 1) % p, prev = (r - 1 + p) % p;
  std::map<std::int64_t, MessageIndex> peers;
  for (std::int64_t q : {next, prev}) {
    if (peers.count(q) == 0) peers.emplace(q, MessageIndex(make_rank_schedule(kind, p, v, m, q), v, m));
  }
  // [0] forward sends (to virtual stage s + 1 on `next`), [1] backward (s - 1 on `prev`).
  std::array<Link, 2> links{Link{next, {}, 0, 0}, Link{prev, {}, 0, 0}};
  const auto pipeline = rank.ops.begin() + rank.tail_begin;
  for (auto it = rank.ops.begin(); it != pipeline; ++it) {
    const bool forward = it->kind == Kind::kSendForward;
    if (!forward && it->kind != Kind::kSendBackward) continue;
    const std::int64_t receiver = it->chunk * p + r + (forward ? 1 : -1);
    Link& link = links[forward ? 0 : 1];
    const std::int32_t at = peers.at(link.dest).find(
        forward ? OpKind::kRecvForward : OpKind::kRecvBackward, it->micro_batch, receiver / p);
    link.received_by.push_back(link.received_by.empty() ? at : std::max(at, link.received_by.back()));
  }
  for (auto it = rank.ops.begin(); it != pipeline; ++it) {
    if (it->kind == Kind::kSendForward) ++links[0].posted;
    if (it->kind == Kind::kSendBackward) ++links[1].posted;
    const bool forward = it->kind == Kind::kRecvForward;
    if (!forward && it->kind != Kind::kRecvBackward) continue;
    // The peer's send of this message: virtual stage s - 1 sent it forward, s + 1 backward.
    const std::int64_t sender = it->chunk * p + r + (forward ? -1 : 1);
    const std::int32_t sent_at = peers.at(it->peer).find(
        forward ? OpKind::kSendForward : OpKind::kSendBackward, it->micro_batch, sender / p);
    for (Link& link : links) {
      if (link.dest != it->peer) continue;
      // Sends whose receive (and every earlier send's) the peer's list puts before sent_at.
      const auto proved = static_cast<std::int32_t>(
          std::lower_bound(link.received_by.begin(), link.received_by.end(), sent_at) -
          link.received_by.begin());
      if (proved > link.posted) {
        throw std::logic_error(fmt::format(
            "program: pipeline rank {}'s {} of ({}, {}) proves {} sends complete but {} are "
            "posted (the schedule can deadlock)",
            r, to_string(it->kind), it->micro_batch, it->chunk, proved, link.posted));
      }
      link.known = std::max(link.known, proved);
    }
    it->forward_sends_complete = links[0].known;
    it->backward_sends_complete = links[1].known;
  }
}

}  // namespace strata
