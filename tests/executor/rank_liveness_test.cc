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

// all_finished_cleanly once it holds, or after 10 s (a bound for a stuck thread).
bool wait_for_clean(const LivenessListener& l, int ranks) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!l.all_finished_cleanly(ranks) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return l.all_finished_cleanly(ranks);
}

TEST(RankLiveness, AJobIsCompleteOnlyWhenEveryRankSaidDoneWithCodeZeroAndClosed) {
  LivenessListener listener;
  std::optional<LivenessBeacon> r0(std::in_place, listener.address(), 0, "node-a");
  std::optional<LivenessBeacon> r1(std::in_place, listener.address(), 1, "node-a");
  r0->finished(0);
  r0.reset();
  // Rank 1 has said nothing yet and is still connected: not complete (whether or not the
  // listener has read rank 0's close yet).
  EXPECT_FALSE(listener.all_finished_cleanly(2));
  r1->finished(0);
  r1.reset();
  EXPECT_TRUE(wait_for_clean(listener, 2));
  const std::vector<LivenessListener::Ended> done = listener.finished();
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].rank, 0);
  EXPECT_EQ(done[0].exit_code, 0);
  EXPECT_TRUE(listener.unfinished().empty());
  // A world of three: rank 2 never connected.
  EXPECT_FALSE(listener.all_finished_cleanly(3));
}

TEST(RankLiveness, ARankThatFinishedWithAStopCodeOrEndedUnfinishedLeavesTheJobIncomplete) {
  LivenessListener stopped;
  {
    LivenessBeacon r0(stopped.address(), 0, "node-a");
    LivenessBeacon r1(stopped.address(), 1, "node-a");
    r0.finished(0);
    r1.finished(143);  // stopped by SIGTERM: a finished run, but not the whole one
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (stopped.finished().size() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(stopped.finished().size(), 2u);
  EXPECT_FALSE(stopped.all_finished_cleanly(2));

  LivenessListener lost;
  {
    LivenessBeacon r0(lost.address(), 0, "node-a");
    LivenessBeacon r1(lost.address(), 1, "node-b");
    r0.finished(0);  // rank 1 ends without a word
  }
  ASSERT_EQ(wait_for_unfinished(lost, 1).size(), 1u);
  EXPECT_FALSE(lost.all_finished_cleanly(2));
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
