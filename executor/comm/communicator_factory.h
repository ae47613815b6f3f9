// CommunicatorFactory: makes the communicators of a run's process groups out of one world of
// ranks, so ProcessGroups does not care which backend (MPI on host buffers, NCCL or
// host-staged on device buffers) carries the messages; and MpiCommunicatorFactory, the MPI
// one. The GPU factories live in executor/cuda/communicator_factories.h.
//
// split(kind, color, key) is collective over the world: every world rank calls it, in the
// same order. Ranks passing the same color form one group, ordered by key (ties by world
// rank); a rank passing kNoGroup joins none and gets nullptr. `kind` names the group's role;
// a factory may use it to pick resources (the GPU factories bind each kind to a stream),
// never to change the membership.
// Deliberately not here: which ranks form which group (process_groups.h), streams.
#pragma once

#include <memory>

#include "executor/comm/communicator.h"

namespace strata {

class MpiCommunicator;

// kPpSend / kPpRecv: one side of a one-way pipeline link (process_groups.h), so that a
// factory can give each link a stream of its own. kKvCopies: the TP ranks holding the same
// replicated KV head.
enum class GroupKind { kWorld, kTp, kDp, kPp, kModel, kEmbedding, kPpSend, kPpRecv, kKvCopies };

// The color of a rank that joins no group in split().
inline constexpr int kNoGroup = -1;

class CommunicatorFactory {
 public:
  virtual ~CommunicatorFactory();
  virtual int world_rank() const = 0;
  virtual int world_size() const = 0;
  // Collective over the world (see above). color >= 0 or kNoGroup (std::invalid_argument
  // otherwise, before anything is sent). Failures of the library throw SystemError.
  virtual std::unique_ptr<Communicator> split(GroupKind kind, int color, int key) = 0;
};

// Groups are MPI_Comm_split's of `world` (host buffers); `kind` is not needed. world must
// outlive the factory; the communicators it makes are independent of both.
class MpiCommunicatorFactory final : public CommunicatorFactory {
 public:
  explicit MpiCommunicatorFactory(const MpiCommunicator& world) : world_(&world) {}
  int world_rank() const override;
  int world_size() const override;
  std::unique_ptr<Communicator> split(GroupKind kind, int color, int key) override;

 private:
  const MpiCommunicator* world_;
};

}  // namespace strata
