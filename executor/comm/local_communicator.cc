// Communicators among the threads of one process (see local_communicator.h).
#include "executor/comm/local_communicator.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "kernels/bf16.h"

namespace strata {
namespace {

// Element i of rank r's buffer, as the type the sum runs in (bf16 sums run in fp32).
template <class T>
const T* as(const void* p) {
  return static_cast<const T*>(p);
}

// out[i] = rank-ordered sum over ranks r of in_r[offset + i], i < n.
template <class T>
void ordered_sum(const LocalGroup& g, std::int64_t offset, std::int64_t n, T* out) {
  for (std::int64_t i = 0; i < n; ++i) {
    T sum = as<T>(g.in(0))[offset + i];
    for (int r = 1; r < g.size(); ++r) sum += as<T>(g.in(r))[offset + i];
    out[i] = sum;
  }
}

void ordered_sum_bf16(const LocalGroup& g, std::int64_t offset, std::int64_t n, Bf16Bits* out) {
  for (std::int64_t i = 0; i < n; ++i) {
    float sum = bf16_to_float(as<Bf16Bits>(g.in(0))[offset + i]);
    for (int r = 1; r < g.size(); ++r) sum += bf16_to_float(as<Bf16Bits>(g.in(r))[offset + i]);
    out[i] = float_to_bf16(sum);  // rounded once
  }
}

template <class T, class Less>
void ordered_max(const LocalGroup& g, std::int64_t n, T* out, Less less) {
  for (std::int64_t i = 0; i < n; ++i) {
    T best = as<T>(g.in(0))[i];
    for (int r = 1; r < g.size(); ++r) {
      const T x = as<T>(g.in(r))[i];
      if (less(best, x)) best = x;
    }
    out[i] = best;
  }
}

// The reduction of [offset, offset + n) of every rank's input into out, in the dtype.
void reduce_into(const LocalGroup& g, DType dtype, std::int64_t offset, std::int64_t n, void* out) {
  switch (dtype) {
    case DType::kF32: ordered_sum(g, offset, n, static_cast<float*>(out)); return;
    case DType::kF64: ordered_sum(g, offset, n, static_cast<double*>(out)); return;
    case DType::kI64: ordered_sum(g, offset, n, static_cast<std::int64_t*>(out)); return;
    case DType::kBF16: ordered_sum_bf16(g, offset, n, static_cast<Bf16Bits*>(out)); return;
    case DType::kI32: break;
  }
  throw std::invalid_argument("local communicator: no sum for " + std::string(to_string(dtype)));
}

}  // namespace

LocalGroup::LocalGroup(int size)
    : size_(size), slots_(static_cast<std::size_t>(size)), barrier_(size) {}

void LocalGroup::post(int from, int to, int tag, const void* data, std::int64_t bytes) {
  std::vector<unsigned char> message(static_cast<std::size_t>(bytes));
  if (bytes > 0) std::memcpy(message.data(), data, static_cast<std::size_t>(bytes));
  {
    const std::lock_guard<std::mutex> lock(mail_mutex_);
    mail_[{from, to, tag}].push_back(std::move(message));
  }
  mail_ready_.notify_all();
}

void LocalGroup::take(int from, int to, int tag, void* data, std::int64_t bytes) {
  std::unique_lock<std::mutex> lock(mail_mutex_);
  auto& queue = mail_[{from, to, tag}];
  mail_ready_.wait(lock, [&] { return !queue.empty(); });
  std::vector<unsigned char> message = std::move(queue.front());
  queue.pop_front();
  lock.unlock();
  if (static_cast<std::int64_t>(message.size()) != bytes) {
    throw std::invalid_argument(fmt::format("local communicator: a message of {} bytes from "
                                            "rank {} tag {} where {} were expected",
                                            message.size(), from, tag, bytes));
  }
  if (bytes > 0) std::memcpy(data, message.data(), static_cast<std::size_t>(bytes));
}

void LocalCommunicator::do_all_reduce_sum(void* data, std::int64_t n, DType dtype) {
  require_reducible(dtype, "LocalCommunicator", "all_reduce_sum");
  if (size() == 1 || n == 0) return;
  // Each rank sums into a private copy, then (after everyone has read) writes it back.
  std::vector<unsigned char> sum(static_cast<std::size_t>(n * dtype_bytes(dtype)));
  group_->rendezvous(rank_, data, data, [&] { reduce_into(*group_, dtype, 0, n, sum.data()); });
  std::memcpy(data, sum.data(), sum.size());
}

void LocalCommunicator::do_all_reduce_max(void* data, std::int64_t n, DType dtype) {
  require_reducible(dtype, "LocalCommunicator", "all_reduce_max");
  if (size() == 1 || n == 0) return;
  std::vector<unsigned char> best(static_cast<std::size_t>(n * dtype_bytes(dtype)));
  group_->rendezvous(rank_, data, data, [&] {
    switch (dtype) {
      case DType::kF32: ordered_max(*group_, n, reinterpret_cast<float*>(best.data()), std::less<float>()); return;
      case DType::kF64: ordered_max(*group_, n, reinterpret_cast<double*>(best.data()), std::less<double>()); return;
      case DType::kI64:
        ordered_max(*group_, n, reinterpret_cast<std::int64_t*>(best.data()), std::less<std::int64_t>());
        return;
      case DType::kBF16:
        ordered_max(*group_, n, reinterpret_cast<Bf16Bits*>(best.data()), [](Bf16Bits a, Bf16Bits b) {
          return bf16_to_float(a) < bf16_to_float(b);
        });
        return;
      case DType::kI32: return;
    }
  });
  std::memcpy(data, best.data(), best.size());
}

void LocalCommunicator::do_reduce_scatter_sum(const void* in, void* out, std::int64_t n,
                                              DType dtype) {
  require_reducible(dtype, "LocalCommunicator", "reduce_scatter_sum");
  group_->rendezvous(rank_, in, out, [&] { reduce_into(*group_, dtype, rank_ * n, n, out); });
}

void LocalCommunicator::do_all_gather(const void* in, void* out, std::int64_t n, DType dtype) {
  require_movable(dtype, "LocalCommunicator", "all_gather");
  const std::int64_t bytes = n * dtype_bytes(dtype);
  group_->rendezvous(rank_, in, out, [&] {
    for (int r = 0; r < size(); ++r) {
      std::memcpy(static_cast<char*>(out) + r * bytes, group_->in(r), static_cast<std::size_t>(bytes));
    }
  });
}

void LocalCommunicator::do_broadcast(void* data, std::int64_t n, DType dtype, int root) {
  require_movable(dtype, "LocalCommunicator", "broadcast");
  check_peer(root, "broadcast");
  const std::int64_t bytes = n * dtype_bytes(dtype);
  // Ranks other than the root copy from the root's buffer; the root's stays as it is.
  std::vector<unsigned char> copy(static_cast<std::size_t>(bytes));
  group_->rendezvous(rank_, data, data, [&] {
    if (rank_ != root) std::memcpy(copy.data(), group_->in(root), copy.size());
  });
  if (rank_ != root) std::memcpy(data, copy.data(), copy.size());
}

Request LocalCommunicator::do_send(const void* data, std::int64_t n, DType dtype, int peer,
                                   int tag) {
  require_movable(dtype, "LocalCommunicator", "send");
  check_peer(peer, "send");
  group_->post(rank_, peer, tag, data, n * dtype_bytes(dtype));
  return Request{};  // buffered: complete at once
}

void LocalCommunicator::do_recv(void* data, std::int64_t n, DType dtype, int peer, int tag) {
  require_movable(dtype, "LocalCommunicator", "recv");
  check_peer(peer, "recv");
  group_->take(peer, rank_, tag, data, n * dtype_bytes(dtype));
}

Request LocalCommunicator::do_irecv(void* data, std::int64_t n, DType dtype, int peer, int tag) {
  require_movable(dtype, "LocalCommunicator", "irecv");
  check_peer(peer, "irecv");
  // Completed by wait(): the message is taken then.
  class Deferred final : public Request::Impl {
   public:
    Deferred(std::shared_ptr<LocalGroup> g, int from, int to, int tag, void* data, std::int64_t bytes)
        : g_(std::move(g)), from_(from), to_(to), tag_(tag), data_(data), bytes_(bytes) {}
    void wait() override { g_->take(from_, to_, tag_, data_, bytes_); }
    void wait_noexcept() noexcept override {
      try {
        wait();
      } catch (...) {
        std::terminate();
      }
    }

   private:
    std::shared_ptr<LocalGroup> g_;
    int from_, to_, tag_;
    void* data_;
    std::int64_t bytes_;
  };
  return Request(std::make_unique<Deferred>(group_, peer, rank_, tag, data, n * dtype_bytes(dtype)));
}

void LocalCommunicator::check_peer(int peer, const char* op) const {
  if (peer < 0 || peer >= size()) {
    throw std::invalid_argument(fmt::format("LocalCommunicator::{}: peer {} is outside 0..{}", op,
                                            peer, size() - 1));
  }
}

// ---- worlds and their factories -----------------------------------------------------------

class LocalFactory final : public CommunicatorFactory {
 public:
  LocalFactory(LocalWorld& world, int rank) : world_(&world), rank_(rank) {}
  int world_rank() const override { return rank_; }
  int world_size() const override { return world_->size(); }
  std::unique_ptr<Communicator> split(GroupKind, int color, int key) override {
    if (color < 0 && color != kNoGroup) {
      throw std::invalid_argument(fmt::format("local split: color {} is negative", color));
    }
    int group_rank = -1;
    std::shared_ptr<LocalGroup> group = world_->split(calls_++, rank_, color, key, group_rank);
    if (!group) return nullptr;
    return std::make_unique<LocalCommunicator>(std::move(group), group_rank);
  }

 private:
  LocalWorld* world_;
  int rank_;
  std::int64_t calls_ = 0;
};

LocalWorld::LocalWorld(int size) : size_(size), barrier_(size) {
  if (size < 1) throw std::invalid_argument("local world: size must be >= 1");
}

std::unique_ptr<CommunicatorFactory> LocalWorld::factory(int rank) {
  if (rank < 0 || rank >= size_) {
    throw std::invalid_argument(fmt::format("local world: rank {} is outside 0..{}", rank, size_ - 1));
  }
  return std::make_unique<LocalFactory>(*this, rank);
}

std::shared_ptr<LocalGroup> LocalWorld::split(std::int64_t call, int rank, int color, int key,
                                              int& group_rank) {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    auto& asks = asks_[call];
    if (asks.empty()) asks.assign(static_cast<std::size_t>(size_), {kNoGroup, 0});
    asks[static_cast<std::size_t>(rank)] = {color, key};
  }
  barrier_.arrive_and_wait();  // every rank's (color, key) is in
  std::shared_ptr<LocalGroup> group;
  if (color != kNoGroup) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto& asks = asks_.at(call);
    // Members: ordered by key, then world rank (MPI_Comm_split's order).
    std::vector<std::pair<int, int>> members;
    for (int r = 0; r < size_; ++r) {
      if (asks[static_cast<std::size_t>(r)].first == color) members.push_back({asks[static_cast<std::size_t>(r)].second, r});
    }
    std::sort(members.begin(), members.end());
    for (std::size_t i = 0; i < members.size(); ++i) {
      if (members[i].second == rank) group_rank = static_cast<int>(i);
    }
    auto& slot = groups_[{call, color}];
    if (!slot) slot = std::make_shared<LocalGroup>(static_cast<int>(members.size()));
    group = slot;
  }
  barrier_.arrive_and_wait();  // every rank has its group: this call's records can go
  if (rank == 0) {
    const std::lock_guard<std::mutex> lock(mutex_);
    asks_.erase(call);
    for (auto it = groups_.begin(); it != groups_.end();) {
      it = it->first.first == call ? groups_.erase(it) : std::next(it);
    }
  }
  return group;
}

}  // namespace strata
