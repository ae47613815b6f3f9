// LocalCommunicator: the Communicator among threads of one process, over host memory. It is
// how `strata select` runs a job's plan on several devices from one process (one worker
// thread per device): the job's ranks are threads, their groups LocalCommunicators, made by
// a LocalWorld's factories exactly as MPI's factory makes MPI groups.
//
// Every collective is a rendezvous: each rank publishes its buffers, all wait at the group's
// barrier, each rank computes its own result reading the others' buffers, all wait again
// (so no buffer is reused while another rank still reads it). Sums are the rank-ordered sums
// of communicator.h's contract, computed the same way as MpiCommunicator's, so a plan's
// losses are bit-identical whichever of the two carries it. Point-to-point messages are
// copied into a mailbox per (sender, receiver, tag): send() returns at once, recv() waits.
// Deliberately not here: device memory, timeouts, more than one process.
#pragma once

#include <barrier>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "executor/comm/communicator.h"
#include "executor/comm/communicator_factory.h"
#include "executor/comm/spin_barrier.h"

namespace strata {

// The shared state of one group of threads.
class LocalGroup {
 public:
  explicit LocalGroup(int size);
  int size() const { return size_; }

  // Publishes rank's two buffers, waits for every rank, runs `work` (which may read every
  // rank's published buffers), waits again.
  template <class Work>
  void rendezvous(int rank, const void* in, void* out, Work&& work) {
    slots_[static_cast<std::size_t>(rank)] = {in, out};
    barrier_.arrive_and_wait();
    work();
    barrier_.arrive_and_wait();
  }
  const void* in(int rank) const { return slots_[static_cast<std::size_t>(rank)].in; }
  void* out(int rank) const { return slots_[static_cast<std::size_t>(rank)].out; }
  void barrier() { barrier_.arrive_and_wait(); }

  void post(int from, int to, int tag, const void* data, std::int64_t bytes);
  void take(int from, int to, int tag, void* data, std::int64_t bytes);

 private:
  struct Slot {
    const void* in = nullptr;
    void* out = nullptr;
  };
  int size_;
  std::vector<Slot> slots_;
  SpinBarrier barrier_;
  std::mutex mail_mutex_;
  std::condition_variable mail_ready_;
  std::map<std::tuple<int, int, int>, std::deque<std::vector<unsigned char>>> mail_;
};

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank) : group_(std::move(group)), rank_(rank) {}


  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  STRATA_COMMUNICATOR_TRANSPORT
  void barrier() override { group_->barrier(); }

 private:
  void check_peer(int peer, const char* op) const;
  std::shared_ptr<LocalGroup> group_;
  int rank_;
};

// A world of `size` threads. factory(r) is thread r's CommunicatorFactory; every thread
// makes the same sequence of split() calls, as with MPI.
class LocalWorld {
 public:
  explicit LocalWorld(int size);
  int size() const { return size_; }
  std::unique_ptr<CommunicatorFactory> factory(int rank);

 private:
  friend class LocalFactory;
  // The group of `rank` in split number `call` (nullptr for kNoGroup), once every rank of
  // the world has given its (color, key) for that call.
  std::shared_ptr<LocalGroup> split(std::int64_t call, int rank, int color, int key, int& group_rank);

  int size_;
  std::barrier<> barrier_;
  std::mutex mutex_;
  std::map<std::int64_t, std::vector<std::pair<int, int>>> asks_;  // call -> (color, key) per rank
  std::map<std::pair<std::int64_t, int>, std::shared_ptr<LocalGroup>> groups_;  // (call, color)
};

}  // namespace strata
