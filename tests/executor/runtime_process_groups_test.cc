// Process-group coordinates in Megatron's rank order, checked against tables written by
// hand (no MPI needed; the MPI communicators built from them are checked in
// runtime_comm_mpi_test.cc).
#include <gtest/gtest.h>

#include <vector>

#include "cost_model/specs/errors.h"
#include "executor/comm/process_groups.h"

namespace strata {
namespace {

// t=2, p=2, d=2 (8 ranks), rank = pp*(t*d) + dp*t + tp = pp*4 + dp*2 + tp:
//   rank | tp dp pp
//     0  |  0  0  0
//     1  |  1  0  0
//     2  |  0  1  0
//     3  |  1  1  0
//     4  |  0  0  1
//     5  |  1  0  1
//     6  |  0  1  1
//     7  |  1  1  1
// tp groups {0,1} {2,3} {4,5} {6,7}; dp groups {0,2} {1,3} {4,6} {5,7};
// pp groups {0,4} {1,5} {2,6} {3,7}; model groups (same dp) {0,1,4,5} {2,3,6,7};
// embedding groups (first and last stage, p=2 so every rank) = the pp groups.
const ParallelDims kDims222{2, 2, 2};

TEST(ProcessGroupCoords, TableForT2P2D2) {
  const std::vector<RankCoords> table = {{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {1, 1, 0},
                                         {0, 0, 1}, {1, 0, 1}, {0, 1, 1}, {1, 1, 1}};
  for (int rank = 0; rank < 8; ++rank) {
    EXPECT_EQ(rank_coords(rank, kDims222), table[static_cast<size_t>(rank)]) << "rank " << rank;
    EXPECT_EQ(world_rank_of(table[static_cast<size_t>(rank)], kDims222), rank);
  }
}

TEST(ProcessGroupCoords, GroupsForT2P2D2) {
  using V = std::vector<int>;
  EXPECT_EQ(tp_group_ranks(0, kDims222), (V{0, 1}));
  EXPECT_EQ(tp_group_ranks(7, kDims222), (V{6, 7}));
  EXPECT_EQ(dp_group_ranks(1, kDims222), (V{1, 3}));
  EXPECT_EQ(dp_group_ranks(6, kDims222), (V{4, 6}));
  EXPECT_EQ(pp_group_ranks(2, kDims222), (V{2, 6}));
  EXPECT_EQ(pp_group_ranks(5, kDims222), (V{1, 5}));
  EXPECT_EQ(model_group_ranks(5, kDims222), (V{0, 1, 4, 5}));
  EXPECT_EQ(model_group_ranks(3, kDims222), (V{2, 3, 6, 7}));
  EXPECT_EQ(embedding_group_ranks(3, kDims222), (V{3, 7}));
  EXPECT_EQ(embedding_group_ranks(4, kDims222), (V{0, 4}));
}

// Megatron-LM's initialize_model_parallel docstring: 16 GPUs, t=2, p=4 (so d=2) give tensor
// groups [g0,g1] [g2,g3] ..., pipeline groups [g0,g4,g8,g12] ... and data groups [g0,g2]
// [g1,g3] [g4,g6] ...; their embedding groups are the first and last pipeline stage
// [g0,g12] ....
TEST(ProcessGroupCoords, MatchesMegatronDocstringExample) {
  using V = std::vector<int>;
  const ParallelDims dims{2, 4, 2};
  EXPECT_EQ(tp_group_ranks(3, dims), (V{2, 3}));
  EXPECT_EQ(pp_group_ranks(0, dims), (V{0, 4, 8, 12}));
  EXPECT_EQ(pp_group_ranks(13, dims), (V{1, 5, 9, 13}));
  EXPECT_EQ(dp_group_ranks(4, dims), (V{4, 6}));
  EXPECT_EQ(embedding_group_ranks(12, dims), (V{0, 12}));
  // Ranks 4..11 hold the middle stages (pp = 1, 2): in no embedding group.
  for (int rank = 4; rank < 12; ++rank) {
    EXPECT_TRUE(embedding_group_ranks(rank, dims).empty()) << "rank " << rank;
  }
}

TEST(ProcessGroupCoords, SingleStageEmbeddingGroupIsTheRankItself) {
  // p = 1: first and last stage coincide, so the tied embedding needs no communication.
  const ParallelDims dims{2, 1, 3};
  EXPECT_EQ(embedding_group_ranks(5, dims), (std::vector<int>{5}));
}

TEST(ProcessGroupCoords, EveryRankRoundTripsAndGroupsPartitionTheWorld) {
  const ParallelDims dims{4, 3, 2};  // 24 ranks
  std::vector<int> tp_owner(24, -1);
  for (int rank = 0; rank < dims.world_size(); ++rank) {
    EXPECT_EQ(world_rank_of(rank_coords(rank, dims), dims), rank);
    // Each rank is in exactly one tp group: the group's first member names it.
    for (int member : tp_group_ranks(rank, dims)) {
      const int owner = tp_group_ranks(rank, dims).front();
      if (tp_owner[static_cast<size_t>(member)] == -1) tp_owner[static_cast<size_t>(member)] = owner;
      EXPECT_EQ(tp_owner[static_cast<size_t>(member)], owner);
    }
    EXPECT_EQ(tp_group_ranks(rank, dims).size(), 4u);
    EXPECT_EQ(dp_group_ranks(rank, dims).size(), 2u);
    EXPECT_EQ(pp_group_ranks(rank, dims).size(), 3u);
    EXPECT_EQ(model_group_ranks(rank, dims).size(), 12u);  // t*p
  }
}

TEST(ProcessGroupCoords, RejectsBadRanksAndDegrees) {
  EXPECT_THROW(rank_coords(8, kDims222), InfeasiblePlan);
  EXPECT_THROW(rank_coords(-1, kDims222), InfeasiblePlan);
  EXPECT_THROW(rank_coords(0, ParallelDims{0, 1, 1}), InfeasiblePlan);
  EXPECT_THROW(world_rank_of(RankCoords{2, 0, 0}, kDims222), InfeasiblePlan);
  try {
    rank_coords(9, kDims222);
    FAIL() << "expected InfeasiblePlan";
  } catch (const InfeasiblePlan& e) {
    EXPECT_NE(std::string(e.what()).find("world rank 9 is outside 0..7"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace strata
