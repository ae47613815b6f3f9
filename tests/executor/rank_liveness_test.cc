// The launcher's record of ranks that ended unfinished (executor/comm/rank_liveness.h), with
// beacons in this process standing for the ranks.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include "executor/comm/rank_liveness.h"

namespace strata {
namespace {

// unfinished() once it lists `n` ranks (the listener's thread reads the closes), or after
// 10 s whatever it lists: a bound for a stuck thread, not a timing assertion.
std::vector<LivenessListener::Ended> wait_for_unfinished(const LivenessListener& l, size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (l.unfinished().size() < n && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return l.unfinished();
}

TEST(RankLiveness, NamesTheRanksThatEndedUnfinishedInOrder) {
  LivenessListener listener;
  std::optional<LivenessBeacon> done(std::in_place, listener.address(), 0, "node-a");
  std::optional<LivenessBeacon> lost(std::in_place, listener.address(), 1, "node-b");
  std::optional<LivenessBeacon> later(std::in_place, listener.address(), 2, "node-c");
  done->finished();
  done.reset();  // rank 0 finished: not listed
  lost.reset();  // rank 1 ends unfinished first
  ASSERT_EQ(wait_for_unfinished(listener, 1).size(), 1u);
  later.reset();  // then rank 2
  const std::vector<LivenessListener::Ended> ended = wait_for_unfinished(listener, 2);
  ASSERT_EQ(ended.size(), 2u);
  EXPECT_EQ(ended[0].rank, 1);
  EXPECT_EQ(ended[0].host, "node-b");
  EXPECT_EQ(ended[1].rank, 2);
  EXPECT_EQ(ended[1].host, "node-c");
  EXPECT_LE(ended[0].at_s, ended[1].at_s);
}

TEST(RankLiveness, ABeaconThatCannotConnectIsSilent) {
  // Nothing listens on port 1 of an unresolvable host: the rank runs on without.
  // (and an address without a port): no exception, no SIGPIPE on finished().
  EXPECT_NO_THROW({
    LivenessBeacon beacon("no-such-host.invalid:1", 0, "here");
    beacon.finished();
  });
  EXPECT_NO_THROW({
    LivenessBeacon no_port("garbage", 0, "here");
    no_port.finished();
  });
}

}  // namespace
}  // namespace strata
