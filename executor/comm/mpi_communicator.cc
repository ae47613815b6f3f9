// MpiCommunicator and MpiSession (see mpi_communicator.h for the determinism argument).
//
// A deterministic sum of n elements over s ranks, as used by all_reduce_sum:
//   1. split the n elements into s contiguous blocks (block r: [r*n/s, (r+1)*n/s) rounded by
//      block_begin below); block r is "owned" by rank r;
//   2. MPI_Alltoallv: rank r receives every rank's copy of block r, rank-major;
//   3. rank r adds the s copies in rank order 0..s-1 (a pure function of the inputs);
//   4. MPI_Allgatherv: every rank receives every owner's summed block.
// reduce_scatter_sum is steps 2-3 with blocks of exactly n. Steps 2 and 4 only copy bytes,
// so no reduction order is left to the MPI library.
#include "executor/comm/mpi_communicator.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "cost_model/errors.h"
#include "executor/comm/mpi_check.h"

namespace strata {
namespace {

template <typename T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() { return MPI_FLOAT; }
template <>
MPI_Datatype mpi_type<double>() { return MPI_DOUBLE; }
template <>
MPI_Datatype mpi_type<std::int64_t>() { return MPI_INT64_T; }

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
void deterministic_all_reduce_sum(MPI_Comm comm, int rank, int size, T* data, std::int64_t n) {
  checked_count(n, "all_reduce_sum");
  if (size == 1 || n == 0) {
    return;
  }
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
  MPI_CHECK(MPI_Alltoallv(data, counts.data(), displs.data(), mpi_type<T>(), copies.data(),
                          recv_counts.data(), recv_displs.data(), mpi_type<T>(), comm));
  T* my_block = data + displs[static_cast<size_t>(rank)];
  for (int i = 0; i < mine; ++i) {
    T sum = copies[static_cast<size_t>(i)];
    for (int r = 1; r < size; ++r) {
      sum += copies[static_cast<size_t>(r) * static_cast<size_t>(mine) + static_cast<size_t>(i)];
    }
    my_block[i] = sum;
  }
  MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, mpi_type<T>(), data, counts.data(), displs.data(),
                           mpi_type<T>(), comm));
}

template <typename T>
void exact_all_reduce(MPI_Comm comm, T* data, std::int64_t n, MPI_Op op, const char* what) {
  const int count = checked_count(n, what);
  if (count == 0) {
    return;
  }
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, count, mpi_type<T>(), op, comm));
}

class MpiRequest final : public Request::Impl {
 public:
  explicit MpiRequest(MPI_Request request) : request_(request) {}
  void wait() override { MPI_CHECK(MPI_Wait(&request_, MPI_STATUS_IGNORE)); }
  void wait_noexcept() noexcept override {
    MPI_CHECK_NOEXCEPT(MPI_Wait(&request_, MPI_STATUS_IGNORE));
  }

 private:
  MPI_Request request_;
};

bool is_predefined(MPI_Comm comm) {
  return comm == MPI_COMM_WORLD || comm == MPI_COMM_SELF || comm == MPI_COMM_NULL;
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm) : comm_(comm) {
  if (comm == MPI_COMM_NULL) {
    throw SystemError("MpiCommunicator: MPI_COMM_NULL is not a communicator");
  }
  try {
    MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    MPI_CHECK(MPI_Comm_size(comm_, &size_));
  } catch (...) {
    if (!is_predefined(comm_)) {
      MPI_Comm_free(&comm_);  // best effort: the constructor is already failing
    }
    throw;
  }
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::duplicate(MPI_Comm comm) {
  MPI_Comm copy = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_dup(comm, &copy));
  return std::make_unique<MpiCommunicator>(copy);
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::split(int color, int key) const {
  MPI_Comm part = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(comm_, color, key, &part));
  if (part == MPI_COMM_NULL) {
    return nullptr;
  }
  return std::make_unique<MpiCommunicator>(part);
}

MpiCommunicator::~MpiCommunicator() {
  if (!is_predefined(comm_)) {
    MPI_CHECK_NOEXCEPT(MPI_Comm_free(&comm_));
  }
}

void MpiCommunicator::all_reduce_sum(float* data, std::int64_t n) {
  deterministic_all_reduce_sum(comm_, rank_, size_, data, n);
}

void MpiCommunicator::all_reduce_sum(double* data, std::int64_t n) {
  deterministic_all_reduce_sum(comm_, rank_, size_, data, n);
}

void MpiCommunicator::all_reduce_max(float* data, std::int64_t n) {
  exact_all_reduce(comm_, data, n, MPI_MAX, "all_reduce_max");
}

void MpiCommunicator::all_reduce_max(double* data, std::int64_t n) {
  exact_all_reduce(comm_, data, n, MPI_MAX, "all_reduce_max");
}

void MpiCommunicator::all_reduce_sum(std::int64_t* data, std::int64_t n) {
  exact_all_reduce(comm_, data, n, MPI_SUM, "all_reduce_sum");  // integer addition is exact
}

void MpiCommunicator::reduce_scatter_sum(const float* in, float* out, std::int64_t n) {
  const int count = checked_count(n, "reduce_scatter_sum");
  // copies: (size, n), row r = rank r's block for me.
  std::vector<float> copies(static_cast<size_t>(count) * static_cast<size_t>(size_));
  if (count > 0) {
    MPI_CHECK(MPI_Alltoall(in, count, MPI_FLOAT, copies.data(), count, MPI_FLOAT, comm_));
  }
  for (int i = 0; i < count; ++i) {
    float sum = copies[static_cast<size_t>(i)];
    for (int r = 1; r < size_; ++r) {
      sum += copies[static_cast<size_t>(r) * static_cast<size_t>(count) + static_cast<size_t>(i)];
    }
    out[i] = sum;
  }
}

void MpiCommunicator::all_gather(const float* in, float* out, std::int64_t n) {
  const int count = checked_count(n, "all_gather");
  if (count == 0) {
    return;
  }
  MPI_CHECK(MPI_Allgather(in, count, MPI_FLOAT, out, count, MPI_FLOAT, comm_));
}

void MpiCommunicator::broadcast(float* data, std::int64_t n, int root) {
  const int count = checked_count(n, "broadcast");
  MPI_CHECK(MPI_Bcast(data, count, MPI_FLOAT, root, comm_));
}

Request MpiCommunicator::send(const float* data, std::int64_t n, int peer, int tag) {
  const int count = checked_count(n, "send");
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Isend(data, count, MPI_FLOAT, peer, tag, comm_, &request));
  return Request(std::make_unique<MpiRequest>(request));
}

void MpiCommunicator::recv(float* data, std::int64_t n, int peer, int tag) {
  const int count = checked_count(n, "recv");
  MPI_Status status;
  MPI_CHECK(MPI_Recv(data, count, MPI_FLOAT, peer, tag, comm_, &status));
  int received = 0;
  MPI_CHECK(MPI_Get_count(&status, MPI_FLOAT, &received));
  if (received != count) {  // a shorter message than expected means the two sides disagree
    throw SystemError(fmt::format("recv from rank {} tag {}: expected {} floats, got {}", peer,
                                  tag, count, received));
  }
}

Request MpiCommunicator::irecv(float* data, std::int64_t n, int peer, int tag) {
  const int count = checked_count(n, "irecv");
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Irecv(data, count, MPI_FLOAT, peer, tag, comm_, &request));
  return Request(std::make_unique<MpiRequest>(request));
}

void MpiCommunicator::barrier() { MPI_CHECK(MPI_Barrier(comm_)); }

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

std::unique_ptr<MpiCommunicator> MpiSession::world() const {
  return MpiCommunicator::duplicate(MPI_COMM_WORLD);
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
