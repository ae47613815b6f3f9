// When a pipeline send is certainly complete, decided from the peer's Program (program.h,
// "Send completion"): the rule the engine frees its send buffers by and the memory walk
// follows, so that a rank holds the messages its schedule keeps in flight, not every message
// of the step.
//
// The argument, for a forward send of message M from pipeline rank r to q = r + 1 (mod p):
// q's list receives M (a blocking receive: it returns once M has arrived) before it posts
// any op that comes after that receive in its list. When r's blocking receive of a backward
// message B returns, B was posted, so if q's list puts its receive of M before its send of
// B, M had arrived at q before B was sent, and r's send request of M is complete (MPI: its
// matching receive has completed, so MPI_Wait needs no further action of q; NCCL and the
// host-staged communicators: the transfer has finished, so its event has fired or is about
// to without q). Symmetrically for backward sends and forward receives. With p = 2 the
// neighbour on both sides is the same rank, and a message of either direction from it
// proves both directions' earlier receives. With p = 1 messages are handed over in place
// and nothing is sent.
// The count is a prefix of the rank's sends in list order (the first N of a direction): the
// schedules' sends of one link are received in the order they are sent (tested), so the
// prefix is every send the receive proves complete.
#pragma once

#include <cstdint>

#include "cost_model/program/program.h"

namespace strata {

// Sets forward_sends_complete and backward_sends_complete on every receive of `rank`'s
// pipeline ops (rank.ops[0, tail_begin)), which must be make_rank_schedule's ops for this
// (kind, p, v, m). Throws std::logic_error when a receive would prove a send the rank has not
// posted yet (a schedule that can deadlock).
void mark_complete_sends(RankProgram& rank, ScheduleKind kind, std::int64_t pp,
                         std::int64_t virtual_stages, std::int64_t micro_batches);

}  // namespace strata
