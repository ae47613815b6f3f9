// Process groups of a t x p x d plan in Megatron's rank order (cost_model/specs/partition.h:
// rank_coords): tensor-parallel rank fastest, then data-parallel, then pipeline.
// The coordinate functions are pure (testable without MPI); ProcessGroups builds one
// communicator per group through a CommunicatorFactory (MPI, NCCL or host-staged).
//
// Groups of one rank (world rank w, coordinates (tp, dp, pp)):
//   tp:        same (dp, pp), tp = 0..t-1        (size t)  tensor-parallel collectives
//   dp:        same (tp, pp), dp = 0..d-1        (size d)  gradient all-reduce / ZeRO
//   pp:        same (tp, dp), pp = 0..p-1        (size p)  pipeline sends and receives
//   model:     same dp, all (tp, pp)             (size t*p) grad-norm sum over model shards
//   embedding: same (tp, dp), pp in {0, p-1}     (size 2, or 1 when p == 1): tied word
//              embedding gradients; ranks of middle stages belong to none.
//   kv copies: same (dp, pp), tp / c equal, c = dims.kv_copies  (size c; only when c > 1):
//              the TP ranks holding the same replicated KV head sum its gradients.
// Every list is in ascending world-rank order, which is also the group-rank order.
// Deliberately not here: virtual pipeline chunks (they live on the same pp rank) and
// the mapping of ranks onto nodes.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cost_model/specs/partition.h"
#include "executor/comm/communicator.h"
#include "executor/comm/communicator_factory.h"

namespace strata {

std::vector<int> tp_group_ranks(int world_rank, const ParallelDims& dims);
std::vector<int> dp_group_ranks(int world_rank, const ParallelDims& dims);
std::vector<int> pp_group_ranks(int world_rank, const ParallelDims& dims);
std::vector<int> model_group_ranks(int world_rank, const ParallelDims& dims);
// Empty for a rank on a middle pipeline stage.
std::vector<int> embedding_group_ranks(int world_rank, const ParallelDims& dims);
std::vector<int> kv_copies_group_ranks(int world_rank, const ParallelDims& dims);

// The four one-way pipeline links of a rank (pp > 1): forward activations travel from pp
// rank r to (r + 1) mod p, gradients from r to (r - 1) mod p, each over a two-rank group of
// its own in which the sender is group rank 0 and only sends, the receiver rank 1 and only
// receives, in the Program's order. A rendezvous send (NCCL's) then blocks nothing but its
// own link, so the Program's order stays deadlock-free as with MPI's buffered sends.
enum class PipeLink { kForwardOut, kForwardIn, kBackwardOut, kBackwardIn };

class ProcessGroups {
 public:
  // Collective over the factory's world: every world rank calls it, and it makes the groups
  // in one fixed order (world, tp, dp, pp, model, embedding, kv copies, the pipeline links). factory.world_size() must
  // equal dims.world_size() (InfeasiblePlan otherwise). The factory is used only here.
  ProcessGroups(CommunicatorFactory& factory, const ParallelDims& dims);

  const ParallelDims& dims() const { return dims_; }
  const RankCoords& coords() const { return coords_; }
  int world_rank() const { return world_rank_; }
  bool is_first_stage() const { return coords_.pp == 0; }
  bool is_last_stage() const { return coords_.pp == dims_.pp - 1; }

  // Every rank, in world-rank order (a private group of the factory's kind kWorld).
  Communicator& world() const { return *world_; }
  Communicator& tp() const { return *tp_; }
  Communicator& dp() const { return *dp_; }
  Communicator& pp() const { return *pp_; }
  Communicator& model() const { return *model_; }
  // nullptr on middle pipeline stages.
  Communicator* embedding() const { return embedding_.get(); }
  // nullptr unless dims.kv_copies > 1.
  Communicator* kv_copies() const { return kv_copies_.get(); }
  // pp > 1 only (std::logic_error otherwise): the link's sender is group rank 0.
  Communicator& link(PipeLink which) const;

 private:
  ParallelDims dims_;
  RankCoords coords_;
  int world_rank_ = 0;
  std::unique_ptr<Communicator> world_, tp_, dp_, pp_, model_, embedding_, kv_copies_;
  std::unique_ptr<Communicator> links_[4];  // by PipeLink
};

}  // namespace strata
