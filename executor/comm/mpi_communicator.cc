// MpiCommunicator and MpiSession (see mpi_communicator.h for the determinism argument).
//
// A deterministic sum of n elements over s ranks, as used by all_reduce_sum:
//   1. split the n elements into s contiguous blocks (block r: [r*n/s, (r+1)*n/s) rounded by
//      block_begin below); block r is "owned" by rank r;
//   2. MPI_Alltoallv: rank r receives every rank's copy of block r, rank-major;
//   3. rank r adds the s copies in rank order 0..s-1 (a pure function of the inputs; bf16 in
//      an fp32 accumulator, rounded once);
//   4. MPI_Allgatherv: every rank receives every owner's summed block.
// reduce_scatter_sum is steps 2-3 with blocks of exactly n. Steps 2 and 4 only copy bytes,
// so no reduction order is left to the MPI library.
#include "executor/comm/mpi_communicator.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "cost_model/specs/errors.h"
#include "executor/comm/mpi_check.h"
#include "kernels/bf16.h"

namespace strata {
namespace {

constexpr const char* kWho = "MpiCommunicator";

// The MPI type that moves one element of t: bf16 travels as its 16 raw bits.
MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kBF16: return MPI_UINT16_T;
    case DType::kF64: return MPI_DOUBLE;
    case DType::kI64: return MPI_INT64_T;
    case DType::kI32: return MPI_INT32_T;
  }
  throw std::invalid_argument(fmt::format("{}: unknown dtype value {}", kWho,
                                          static_cast<int>(t)));
}

// How step 3 adds one element type: load into the accumulator, add, store once.
template <class T>
struct RankOrderedAdd {
  using Acc = T;
  static Acc load(T x) { return x; }
  static T store(Acc a) { return a; }
};
template <>
struct RankOrderedAdd<Bf16Bits> {
  using Acc = float;  // the contract: fp32 accumulation, one rounding at the end
  static float load(Bf16Bits x) { return bf16_to_float(x); }
  static Bf16Bits store(float a) { return float_to_bf16(a); }
};

// out[i] = ((copies[0][i] + copies[1][i]) + ...) over `size` rows; copies: (size, m).
template <class T>
void add_in_rank_order(const T* copies, T* out, std::int64_t m, int size) {
  using Add = RankOrderedAdd<T>;
  const auto rows = static_cast<std::size_t>(m);
  for (std::size_t i = 0; i < rows; ++i) {
    typename Add::Acc sum = Add::load(copies[i]);
    for (int r = 1; r < size; ++r) sum += Add::load(copies[static_cast<std::size_t>(r) * rows + i]);
    out[i] = Add::store(sum);
  }
}

// MPI counts are int; the executor's tensors stay far below 2^31 elements per message.
int checked_count(std::int64_t n, const char* what) {
  if (n < 0 || n > INT_MAX) {
    throw SystemError(fmt::format("{}: element count {} is outside MPI's int range 0..{}", what,
                                  n, INT_MAX));
  }
  return static_cast<int>(n);
}

// First element of block r when n elements are split over s ranks (the first n % s blocks
// get one extra element).
std::int64_t block_begin(std::int64_t n, int s, int r) {
  const std::int64_t base = n / s;
  const std::int64_t extra = n % s;
  return base * r + std::min<std::int64_t>(r, extra);
}

// In place: data (n) := rank-ordered sum over the group (steps 1-4 above).
template <typename T>
void deterministic_all_reduce_sum(const MpiCommunicator& self, T* data, std::int64_t n) {
  const MPI_Comm comm = self.handle();
  const int rank = self.rank();
  const int size = self.size();
  checked_count(n, "all_reduce_sum");
  if (size == 1 || n == 0) {
    return;
  }
  const MPI_Datatype type = mpi_type(detail::pointer_dtype<T>());
  std::vector<int> counts(static_cast<size_t>(size));
  std::vector<int> displs(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    displs[static_cast<size_t>(r)] = static_cast<int>(block_begin(n, size, r));
    counts[static_cast<size_t>(r)] = static_cast<int>(block_begin(n, size, r + 1) -
                                                      block_begin(n, size, r));
  }
  const int mine = counts[static_cast<size_t>(rank)];
  // Rank-major: copies[r * mine + i] = rank r's element i of my block.
  std::vector<T> copies(static_cast<size_t>(mine) * static_cast<size_t>(size));
  std::vector<int> recv_counts(static_cast<size_t>(size), mine);
  std::vector<int> recv_displs(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    recv_displs[static_cast<size_t>(r)] = r * mine;
  }
  {
    const CommWatch::Scope watched = self.blocking(CommCall::kAlltoallv);
    MPI_CHECK(MPI_Alltoallv(data, counts.data(), displs.data(), type, copies.data(),
                            recv_counts.data(), recv_displs.data(), type, comm));
  }
  add_in_rank_order(copies.data(), data + displs[static_cast<size_t>(rank)], mine, size);
  const CommWatch::Scope watched = self.blocking(CommCall::kAllgatherv);
  MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, type, data, counts.data(), displs.data(), type,
                           comm));
}

// out (n) := sum over ranks of their row rank() of in (size, n), in rank order (steps 2-3).
template <typename T>
void deterministic_reduce_scatter_sum(const MpiCommunicator& self, const T* in, T* out,
                                      std::int64_t n) {
  const MPI_Comm comm = self.handle();
  const int size = self.size();
  const int count = checked_count(n, "reduce_scatter_sum");
  if (count == 0) {
    return;
  }
  if (size == 1) {
    std::memcpy(out, in, static_cast<std::size_t>(count) * sizeof(T));  // unchanged, bit for bit
    return;
  }
  const MPI_Datatype type = mpi_type(detail::pointer_dtype<T>());
  // copies: (size, n), row r = rank r's block for me.
  std::vector<T> copies(static_cast<size_t>(count) * static_cast<size_t>(size));
  {
    const CommWatch::Scope watched = self.blocking(CommCall::kAlltoall);
    MPI_CHECK(MPI_Alltoall(in, count, type, copies.data(), count, type, comm));
  }
  add_in_rank_order(copies.data(), out, count, size);
}

void exact_all_reduce(const MpiCommunicator& self, void* data, std::int64_t n,
                      MPI_Datatype type, MPI_Op op, const char* what) {
  const int count = checked_count(n, what);
  if (count == 0) {
    return;
  }
  const CommWatch::Scope watched = self.blocking(CommCall::kAllreduce);
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, count, type, op, self.handle()));
}

// A pending send or receive; its wait is watched like a blocking call, naming the peer.
class MpiRequest final : public Request::Impl {
 public:
  MpiRequest(MPI_Request request, const MpiCommunicator& comm, CommCall call, int peer)
      : request_(request), watch_(comm.watch()), call_(call),
        peer_world_(comm.watch() != nullptr ? comm.world_rank_of(peer) : peer) {}
  void wait() override {
    const CommWatch::Scope watched(watch_, call_, peer_world_, nullptr);
    MPI_CHECK(MPI_Wait(&request_, MPI_STATUS_IGNORE));
  }
  void wait_noexcept() noexcept override {
    const CommWatch::Scope watched(watch_, call_, peer_world_, nullptr);
    MPI_CHECK_NOEXCEPT(MPI_Wait(&request_, MPI_STATUS_IGNORE));
  }

 private:
  MPI_Request request_;
  CommWatch* watch_;  // outlives every communicator, hence every request
  CommCall call_;
  int peer_world_;
};

bool is_predefined(MPI_Comm comm) {
  return comm == MPI_COMM_WORLD || comm == MPI_COMM_SELF || comm == MPI_COMM_NULL;
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, CommWatch* watch) : comm_(comm), watch_(watch) {
  if (comm == MPI_COMM_NULL) {
    throw SystemError("MpiCommunicator: MPI_COMM_NULL is not a communicator");
  }
  try {
    MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    MPI_CHECK(MPI_Comm_size(comm_, &size_));
    if (watch_ != nullptr) {
      // The world rank of each member, so a watchdog's message names ranks everyone knows.
      MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
      MPI_CHECK(MPI_Comm_group(comm_, &group));
      MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
      std::vector<int> mine(static_cast<std::size_t>(size_));
      for (int r = 0; r < size_; ++r) mine[static_cast<std::size_t>(r)] = r;
      world_ranks_.assign(static_cast<std::size_t>(size_), MPI_UNDEFINED);
      const int rc = MPI_Group_translate_ranks(group, size_, mine.data(), world, world_ranks_.data());
      MPI_Group_free(&group);
      MPI_Group_free(&world);
      MPI_CHECK(rc);
    }
  } catch (...) {
    if (!is_predefined(comm_)) {
      MPI_Comm_free(&comm_);  // best effort: the constructor is already failing
    }
    throw;
  }
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::duplicate(MPI_Comm comm, CommWatch* watch) {
  MPI_Comm copy = MPI_COMM_NULL;
  {
    const CommWatch::Scope watched(watch, CommCall::kCommDup, -1, nullptr);
    MPI_CHECK(MPI_Comm_dup(comm, &copy));
  }
  return std::make_unique<MpiCommunicator>(copy, watch);
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::split(int color, int key) const {
  MPI_Comm part = MPI_COMM_NULL;
  {
    const CommWatch::Scope watched = blocking(CommCall::kCommSplit);
    MPI_CHECK(MPI_Comm_split(comm_, color, key, &part));
  }
  if (part == MPI_COMM_NULL) {
    return nullptr;
  }
  return std::make_unique<MpiCommunicator>(part, watch_);
}

CommWatch::Scope MpiCommunicator::blocking(CommCall call, int peer) const {
  return CommWatch::Scope(watch_, call, peer >= 0 ? world_rank_of(peer) : -1,
                          peer >= 0 ? nullptr : &world_ranks_);
}

int MpiCommunicator::world_rank_of(int rank) const {
  if (rank >= 0 && static_cast<std::size_t>(rank) < world_ranks_.size()) {
    return world_ranks_[static_cast<std::size_t>(rank)];
  }
  return rank;
}

MpiCommunicator::~MpiCommunicator() {
  if (!is_predefined(comm_)) {
    MPI_CHECK_NOEXCEPT(MPI_Comm_free(&comm_));
  }
}

void MpiCommunicator::do_all_reduce_sum(void* data, std::int64_t n, DType dtype) {
  require_reducible(dtype, kWho, "all_reduce_sum");
  switch (dtype) {
    case DType::kF32:
      deterministic_all_reduce_sum(*this, static_cast<float*>(data), n);
      return;
    case DType::kF64:
      deterministic_all_reduce_sum(*this, static_cast<double*>(data), n);
      return;
    case DType::kBF16:
      deterministic_all_reduce_sum(*this, static_cast<Bf16Bits*>(data), n);
      return;
    case DType::kI64:  // integer addition is exact in any order
      exact_all_reduce(*this, data, n, MPI_INT64_T, MPI_SUM, "all_reduce_sum");
      return;
    case DType::kI32:
      break;  // rejected by require_reducible
  }
}

void MpiCommunicator::do_all_reduce_max(void* data, std::int64_t n, DType dtype) {
  require_reducible(dtype, kWho, "all_reduce_max");
  if (dtype != DType::kBF16) {
    exact_all_reduce(*this, data, n, mpi_type(dtype), MPI_MAX, "all_reduce_max");
    return;
  }
  // MPI has no bf16 type; fp32 holds every bf16 value exactly, so the max goes through it.
  const int count = checked_count(n, "all_reduce_max");
  auto* bits = static_cast<Bf16Bits*>(data);
  std::vector<float> wide(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) wide[static_cast<std::size_t>(i)] = bf16_to_float(bits[i]);
  exact_all_reduce(*this, wide.data(), count, MPI_FLOAT, MPI_MAX, "all_reduce_max");
  for (int i = 0; i < count; ++i) bits[i] = float_to_bf16(wide[static_cast<std::size_t>(i)]);
}

void MpiCommunicator::do_reduce_scatter_sum(const void* in, void* out, std::int64_t n,
                                         DType dtype) {
  require_reducible(dtype, kWho, "reduce_scatter_sum");
  switch (dtype) {
    case DType::kF32:
      deterministic_reduce_scatter_sum(*this, static_cast<const float*>(in),
                                       static_cast<float*>(out), n);
      return;
    case DType::kF64:
      deterministic_reduce_scatter_sum(*this, static_cast<const double*>(in),
                                       static_cast<double*>(out), n);
      return;
    case DType::kBF16:
      deterministic_reduce_scatter_sum(*this, static_cast<const Bf16Bits*>(in),
                                       static_cast<Bf16Bits*>(out), n);
      return;
    case DType::kI64:  // exact either way; the one code path keeps it simple
      deterministic_reduce_scatter_sum(*this, static_cast<const std::int64_t*>(in),
                                       static_cast<std::int64_t*>(out), n);
      return;
    case DType::kI32:
      break;  // rejected by require_reducible
  }
}

void MpiCommunicator::do_all_gather(const void* in, void* out, std::int64_t n, DType dtype) {
  require_movable(dtype, kWho, "all_gather");
  const int count = checked_count(n, "all_gather");
  if (count == 0) {
    return;
  }
  const MPI_Datatype type = mpi_type(dtype);
  const CommWatch::Scope watched = blocking(CommCall::kAllgather);
  MPI_CHECK(MPI_Allgather(in, count, type, out, count, type, comm_));
}

void MpiCommunicator::do_broadcast(void* data, std::int64_t n, DType dtype, int root) {
  require_movable(dtype, kWho, "broadcast");
  const int count = checked_count(n, "broadcast");
  const CommWatch::Scope watched = blocking(CommCall::kBcast);
  MPI_CHECK(MPI_Bcast(data, count, mpi_type(dtype), root, comm_));
}

Request MpiCommunicator::do_send(const void* data, std::int64_t n, DType dtype, int peer, int tag) {
  require_movable(dtype, kWho, "send");
  const int count = checked_count(n, "send");
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Isend(data, count, mpi_type(dtype), peer, tag, comm_, &request));
  return Request(std::make_unique<MpiRequest>(request, *this, CommCall::kWaitSend, peer));
}

void MpiCommunicator::do_recv(void* data, std::int64_t n, DType dtype, int peer, int tag) {
  require_movable(dtype, kWho, "recv");
  const int count = checked_count(n, "recv");
  const MPI_Datatype type = mpi_type(dtype);
  MPI_Status status;
  {
    const CommWatch::Scope watched = blocking(CommCall::kRecv, peer);
    MPI_CHECK(MPI_Recv(data, count, type, peer, tag, comm_, &status));
  }
  int received = 0;
  MPI_CHECK(MPI_Get_count(&status, type, &received));
  if (received != count) {  // a shorter message than expected means the two sides disagree
    throw SystemError(fmt::format("recv from rank {} tag {}: expected {} {} elements, got {}",
                                  peer, tag, count, to_string(dtype), received));
  }
}

Request MpiCommunicator::do_irecv(void* data, std::int64_t n, DType dtype, int peer, int tag) {
  require_movable(dtype, kWho, "irecv");
  const int count = checked_count(n, "irecv");
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Irecv(data, count, mpi_type(dtype), peer, tag, comm_, &request));
  return Request(std::make_unique<MpiRequest>(request, *this, CommCall::kWaitRecv, peer));
}

void MpiCommunicator::barrier() {
  const CommWatch::Scope watched = blocking(CommCall::kBarrier);
  MPI_CHECK(MPI_Barrier(comm_));
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int finalized = 0;
  MPI_CHECK(MPI_Finalized(&finalized));
  if (finalized != 0) {
    throw SystemError("MpiSession: MPI was already finalized and cannot be initialized again");
  }
  int initialized = 0;
  MPI_CHECK(MPI_Initialized(&initialized));
  if (initialized == 0) {
    int provided = 0;
    MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    if (provided < MPI_THREAD_FUNNELED) {
      MPI_Finalize();  // best effort: the session is not constructed, nobody else will
      throw SystemError(fmt::format(
          "MPI_Init_thread: asked for MPI_THREAD_FUNNELED ({}), the library provides {}",
          MPI_THREAD_FUNNELED, provided));
    }
    owns_ = true;
  }
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
}

MpiSession::~MpiSession() {
  if (owns_) {
    MPI_CHECK_NOEXCEPT(MPI_Finalize());
  }
}

std::unique_ptr<MpiCommunicator> MpiSession::world(CommWatch* watch) const {
  return MpiCommunicator::duplicate(MPI_COMM_WORLD, watch);
}

int MpiSession::world_rank() const {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  return rank;
}

int MpiSession::world_size() const {
  int size = 0;
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  return size;
}

}  // namespace strata
