// Which of a rank's device streams each process group's communicator runs on, on the CUDA
// backend (and on the CPU backend's CUDA-semantics mode, which simulates it): the TP group and
// its KV-copies subgroups on the compute stream (their collectives sit between dependent
// kernels, as the TP group's do); the world, DP, model
// and embedding groups on the comm stream; the pipeline group on the p2p stream; each
// one-way pipeline link on a stream of its own (a rendezvous send blocks its stream until the
// peer receives), the i-th link this rank sends on on send stream i, receives on on receive
// stream i. Deliberately not here: the streams themselves.
#pragma once

#include "executor/comm/communicator_factory.h"

namespace strata {

enum class GroupStream { kCompute, kComm, kP2p, kLinkSend, kLinkRecv };

inline GroupStream group_stream(GroupKind kind) {
  switch (kind) {
    case GroupKind::kTp:
    case GroupKind::kKvCopies: return GroupStream::kCompute;
    case GroupKind::kPp: return GroupStream::kP2p;
    case GroupKind::kPpSend: return GroupStream::kLinkSend;
    case GroupKind::kPpRecv: return GroupStream::kLinkRecv;
    case GroupKind::kWorld:
    case GroupKind::kDp:
    case GroupKind::kModel:
    case GroupKind::kEmbedding: return GroupStream::kComm;
  }
  return GroupStream::kComm;
}

// A rank has two streams for the links it sends on and two for those it receives on.
inline constexpr int kLinkStreamsPerDirection = 2;

// Which link stream a factory gives the pipeline link it splits next: the i-th link this rank
// sends on within one set of process groups gets send stream i, receives likewise (a set has
// one forward and one backward link each way: process_groups.cc). The count is per set, not
// per factory: a set starts with its world group (ProcessGroups splits kWorld first), which
// starts the count again, so a factory that serves several sets (one per plan, as the
// communicator tests build them) gives each set's links streams 0 and 1. Counting per
// factory asked for stream 2 at the second set with pipeline links and threw.
class LinkStreamIndex {
 public:
  // The index for a link kind (kPpSend, kPpRecv), counted; -1 for any other kind.
  int next(GroupKind kind) {
    if (kind == GroupKind::kWorld) sends_ = recvs_ = 0;
    if (kind == GroupKind::kPpSend) return sends_++;
    if (kind == GroupKind::kPpRecv) return recvs_++;
    return -1;
  }

 private:
  int sends_ = 0, recvs_ = 0;
};

}  // namespace strata
