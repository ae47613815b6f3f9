// The CPU backend's host stream (executor/cpu/host_stream.h): work runs in queue order on a
// thread of its own while the caller goes on, a ticket waits for its work and all before,
// a failure skips what was queued after it and is thrown once by the next wait, and the
// destructor waits for the queue; the CPU backend runs it apart only on a free core.
#include "executor/cpu/host_stream.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

#include "executor/cpu/cpu_backend.h"

namespace strata::cpu_backend {
namespace {

TEST(HostStream, RunsWorkInQueueOrderBesideTheCaller) {
  HostStream stream;
  EXPECT_EQ(stream.last_ticket(), 0);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::vector<int> order;
  // The first work blocks until the caller releases it: had submit() run it on the calling
  // thread, the caller would never get to the release (the test would hang, not pass).
  const int first = stream.submit([&] {
    released.wait();
    order.push_back(1);
  });
  const int second = stream.submit([&] { order.push_back(2); });
  EXPECT_EQ(first, 1);
  EXPECT_EQ(second, 2);
  EXPECT_EQ(stream.last_ticket(), 2);
  release.set_value();
  stream.wait_for(second);
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  stream.wait_for(0);  // nothing to wait for
}

TEST(HostStream, ATicketWaitsForItsWorkAndNothingAfter) {
  HostStream stream;
  std::atomic<bool> first_done{false};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  const int first = stream.submit([&] { first_done = true; });
  stream.submit([&] { released.wait(); });  // still blocked when the first is waited for
  stream.wait_for(first);
  EXPECT_TRUE(first_done);
  release.set_value();
  stream.drain();
}

TEST(HostStream, AFailureSkipsTheWorkAfterItAndIsThrownOnce) {
  HostStream stream;
  bool ran_after = false;
  stream.submit([] { throw std::runtime_error("host work failed on purpose"); });
  const int after = stream.submit([&] { ran_after = true; });
  try {
    stream.wait_for(after);
    FAIL() << "expected the work's exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "host work failed on purpose");
  }
  EXPECT_FALSE(ran_after);
  stream.wait_for(after);  // reported once: the stream goes on
  bool ran_later = false;
  stream.submit([&] { ran_later = true; });
  stream.drain();
  EXPECT_TRUE(ran_later);
}

TEST(HostStream, TheDestructorWaitsForTheQueue) {
  std::atomic<int> done{0};
  {
    HostStream stream;
    for (int i = 0; i < 8; ++i) {
      stream.submit([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        ++done;
      });
    }
  }
  EXPECT_EQ(done.load(), 8);
}

}  // namespace
}  // namespace strata::cpu_backend

namespace strata::cpu_backend {
namespace {

// A host thread beside the compute only on a core the compute leaves free.
TEST(HostStream, RunsApartOnlyOnACoreTheComputeLeavesFree) {
  EXPECT_TRUE(host_thread_has_a_core(2, 1, 1));    // one rank, one thread, two cores
  EXPECT_FALSE(host_thread_has_a_core(2, 1, 2));   // one rank on both cores
  EXPECT_FALSE(host_thread_has_a_core(2, 2, 1));   // two ranks, a core each
  EXPECT_TRUE(host_thread_has_a_core(64, 8, 4));   // 8 cores a rank, 4 computing
  EXPECT_FALSE(host_thread_has_a_core(64, 8, 8));
  EXPECT_TRUE(host_thread_has_a_core(4, 0, 1));    // no launcher: one rank
}

}  // namespace
}  // namespace strata::cpu_backend
