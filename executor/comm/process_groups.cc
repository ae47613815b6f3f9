// The member lists and the communicators of each parallel group, made by a
// CommunicatorFactory (see process_groups.h for the group definitions).
#include "executor/comm/process_groups.h"

#include <fmt/format.h>

#include <stdexcept>

#include "cost_model/specs/errors.h"

namespace strata {
std::vector<int> tp_group_ranks(int world_rank, const ParallelDims& dims) {
  RankCoords c = rank_coords(world_rank, dims);
  std::vector<int> ranks;
  for (c.tp = 0; c.tp < dims.tp; ++c.tp) ranks.push_back(world_rank_of(c, dims));
  return ranks;
}

std::vector<int> dp_group_ranks(int world_rank, const ParallelDims& dims) {
  RankCoords c = rank_coords(world_rank, dims);
  std::vector<int> ranks;
  for (c.dp = 0; c.dp < dims.dp; ++c.dp) ranks.push_back(world_rank_of(c, dims));
  return ranks;
}

std::vector<int> pp_group_ranks(int world_rank, const ParallelDims& dims) {
  RankCoords c = rank_coords(world_rank, dims);
  std::vector<int> ranks;
  for (c.pp = 0; c.pp < dims.pp; ++c.pp) ranks.push_back(world_rank_of(c, dims));
  return ranks;
}

std::vector<int> model_group_ranks(int world_rank, const ParallelDims& dims) {
  RankCoords c = rank_coords(world_rank, dims);
  std::vector<int> ranks;
  // pp outer, tp inner: ascending world-rank order for a fixed dp.
  for (c.pp = 0; c.pp < dims.pp; ++c.pp) {
    for (c.tp = 0; c.tp < dims.tp; ++c.tp) ranks.push_back(world_rank_of(c, dims));
  }
  return ranks;
}

std::vector<int> embedding_group_ranks(int world_rank, const ParallelDims& dims) {
  RankCoords c = rank_coords(world_rank, dims);
  if (c.pp != 0 && c.pp != dims.pp - 1) {
    return {};
  }
  c.pp = 0;
  std::vector<int> ranks{world_rank_of(c, dims)};
  if (dims.pp > 1) {
    c.pp = dims.pp - 1;
    ranks.push_back(world_rank_of(c, dims));
  }
  return ranks;
}

std::vector<int> kv_copies_group_ranks(int world_rank, const ParallelDims& dims) {
  RankCoords c = rank_coords(world_rank, dims);
  const int first = c.tp / dims.kv_copies * dims.kv_copies;
  std::vector<int> ranks;
  for (c.tp = first; c.tp < first + dims.kv_copies; ++c.tp) ranks.push_back(world_rank_of(c, dims));
  return ranks;
}

ProcessGroups::ProcessGroups(CommunicatorFactory& factory, const ParallelDims& dims)
    : dims_(dims) {
  (void)rank_coords(0, dims);  // checks the degrees
  if (factory.world_size() != dims.world_size()) {
    throw InfeasiblePlan(fmt::format(
        "process groups: the plan needs tp*pp*dp = {}*{}*{} = {} ranks but the world has {}",
        dims.tp, dims.pp, dims.dp, dims.world_size(), factory.world_size()));
  }
  if (dims.kv_copies < 1 || dims.tp % dims.kv_copies != 0) {
    throw InfeasiblePlan(fmt::format("process groups: {} KV-head copies do not divide tp = {}",
                                     dims.kv_copies, dims.tp));
  }
  world_rank_ = factory.world_rank();
  coords_ = rank_coords(world_rank_, dims);
  const RankCoords& c = coords_;
  // Colour = an index of the group among its kind; key = world rank, so the group rank
  // order is the ascending world-rank order the *_group_ranks functions list.
  world_ = factory.split(GroupKind::kWorld, 0, world_rank_);
  tp_ = factory.split(GroupKind::kTp, c.pp * dims.dp + c.dp, world_rank_);
  dp_ = factory.split(GroupKind::kDp, c.pp * dims.tp + c.tp, world_rank_);
  pp_ = factory.split(GroupKind::kPp, c.dp * dims.tp + c.tp, world_rank_);
  model_ = factory.split(GroupKind::kModel, c.dp, world_rank_);
  const bool in_embedding = c.pp == 0 || c.pp == dims.pp - 1;
  embedding_ = factory.split(GroupKind::kEmbedding,
                             in_embedding ? c.dp * dims.tp + c.tp : kNoGroup, world_rank_);
  if (dims.kv_copies > 1) {  // every rank agrees on kv_copies: all split, or none
    const int tp_groups = dims.tp / dims.kv_copies;
    kv_copies_ = factory.split(GroupKind::kKvCopies,
                               (c.pp * dims.dp + c.dp) * tp_groups + c.tp / dims.kv_copies,
                               world_rank_);
  }
  if (dims.pp == 1) return;
  // One split per link: pipeline `line` (a (tp, dp) pair), link from sender a to receiver
  // (a +- 1) mod p. Every rank takes part in every split (MPI_Comm_split is collective).
  const int line = c.dp * dims.tp + c.tp;
  const int p = dims.pp;
  for (const bool forward : {true, false}) {
    for (int a = 0; a < p; ++a) {
      const int receiver = forward ? (a + 1) % p : (a - 1 + p) % p;
      const bool sends = c.pp == a;
      const bool receives = c.pp == receiver;
      const int color = sends || receives ? line * p + a : kNoGroup;
      const GroupKind kind = sends ? GroupKind::kPpSend : GroupKind::kPpRecv;
      std::unique_ptr<Communicator> link = factory.split(kind, color, sends ? 0 : 1);
      if (sends) links_[static_cast<int>(forward ? PipeLink::kForwardOut : PipeLink::kBackwardOut)] = std::move(link);
      if (receives) links_[static_cast<int>(forward ? PipeLink::kForwardIn : PipeLink::kBackwardIn)] = std::move(link);
    }
  }
}

Communicator& ProcessGroups::link(PipeLink which) const {
  const auto& l = links_[static_cast<int>(which)];
  if (!l) throw std::logic_error("process groups: no pipeline link (pp = 1)");
  return *l;
}

}  // namespace strata
