// The link streams of the CUDA backend's communicator factories, with the CUDA-semantics
// factory (executor/cpu/cuda_semantics/streamed_communicator.h, which gives each group the
// stream the GPU factories give it) on 4 and 8 MPI ranks (runtime.cmake). A GPU run builds
// one set of process groups per factory; the communicator tests build one set per plan over
// one factory, and with 4 ranks the second set with pipeline links ({1, 4, 1} after
// {1, 2, 2}) asked for link stream 2 of 2 ("no stream for pipeline link 2") on the ranks of
// its first link, while the others went on to the next split: the H200's 4-rank host-staged
// test threw, then hung. Each set's links must get streams 0 and 1 again, in the order
// group_streams.h gives them: the forward link a rank sends on send stream 0, the backward
// one send stream 1, receives likewise.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "executor/comm/communicator_factory.h"
#include "executor/comm/mpi_communicator.h"
#include "executor/comm/process_groups.h"
#include "executor/cpu/cuda_semantics/stream_scheduler.h"
#include "executor/cpu/cuda_semantics/streamed_communicator.h"

namespace strata::cuda_semantics {
namespace {

SimStream stream_of(const ProcessGroups& groups, PipeLink which) {
  return dynamic_cast<const StreamedCommunicator&>(groups.link(which)).stream();
}

TEST(StreamedLinks, OneFactoryGivesEverySetOfProcessGroupsItsOwnLinkStreams) {
  auto world = MpiCommunicator::duplicate(MPI_COMM_WORLD);
  const int s = world->size();
  MpiCommunicatorFactory host(*world);
  StreamScheduler scheduler;
  StreamedCommunicatorFactory factory(host, scheduler);
  int sets_with_links = 0;
  // Every t x p x d = s with degrees in {1, 2, 4, 8}, in the host-staged test's order: with
  // 4 ranks {1,2,2} then {1,4,1} have links, so the second set is where a per-factory count
  // ran out.
  for (int t = 1; t <= s; t *= 2) {
    for (int p = 1; t * p <= s; p *= 2) {
      if (s % (t * p) != 0) continue;
      const ParallelDims dims{t, p, s / (t * p)};
      SCOPED_TRACE("t=" + std::to_string(t) + " p=" + std::to_string(p));
      // A throw here comes from the ranks of one link only (the others got no group from that
      // split and went on to the next): the fatal failure ends the job (mpi_test_main.h)
      // instead of leaving them in the split.
      std::unique_ptr<ProcessGroups> groups;
      ASSERT_NO_THROW(groups = std::make_unique<ProcessGroups>(factory, dims));
      if (p == 1) continue;
      ++sets_with_links;
      EXPECT_EQ(stream_of(*groups, PipeLink::kForwardOut), SimStream::kLinkSend0);
      EXPECT_EQ(stream_of(*groups, PipeLink::kBackwardOut), SimStream::kLinkSend1);
      EXPECT_EQ(stream_of(*groups, PipeLink::kForwardIn), SimStream::kLinkRecv0);
      EXPECT_EQ(stream_of(*groups, PipeLink::kBackwardIn), SimStream::kLinkRecv1);
      // The set's links carry a message each way around the pipeline: stage i sends i + 1000 *
      // (its world rank) forward and receives its predecessor's.
      const int stage = groups->coords().pp;
      const std::int64_t sent = stage + 1000 * world->rank();
      std::int64_t got = -1;
      // A link's sender is its rank 0, the receiver its rank 1 (process_groups.cc's keys).
      Request out = groups->link(PipeLink::kForwardOut).send(&sent, 1, /*peer=*/1, /*tag=*/0);
      groups->link(PipeLink::kForwardIn).recv(&got, 1, /*peer=*/0, /*tag=*/0);
      out.wait();
      const int from = world_rank_of(RankCoords{groups->coords().tp, groups->coords().dp,
                                                (stage - 1 + p) % p},
                                     dims);
      EXPECT_EQ(got, (stage - 1 + p) % p + 1000 * from);
      scheduler.synchronize();
    }
  }
  EXPECT_GE(sets_with_links, 2) << "the case needs two sets with pipeline links";
  world->barrier();
}

}  // namespace
}  // namespace strata::cuda_semantics
