// NcclCommunicator (see nccl_communicator.h for bootstrap, determinism and p2p semantics).
//
// A deterministic all-reduce of n elements over s ranks, on rank r (collective_layout.h):
//   1. copy my own block r into row r of scratch (s, len_r);
//   2. one NCCL group: send block q of data to each rank q != r, receive rank q's copy of
//      block r into row q of scratch;
//   3. rank_ordered_sum: data[block r] = scratch row 0 + row 1 + ... + row s-1, in that order
//      (bf16: in fp32, rounded once);
//   4. spread the owners' blocks: ncclAllGather in place when s divides n (equal blocks),
//      else one NCCL group of sends of block r and receives of every other block.
#include "executor/cuda/nccl_communicator.h"

#include <fmt/format.h>

#include <array>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "cost_model/specs/errors.h"
#include "executor/cuda/collective_layout.h"
#include "executor/cuda/rank_ordered_sum.h"
#include "executor/cuda/system_error.h"
#include "kernels/cuda/cuda_check.h"

namespace strata::cuda {
namespace {

constexpr const char* kWho = "NcclCommunicator";

// Every DType moves with its own NCCL type (bf16 included: max needs it to compare).
ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF64: return ncclFloat64;
    case DType::kI64: return ncclInt64;
    case DType::kI32: return ncclInt32;
  }
  throw std::invalid_argument(fmt::format("{}: unknown dtype value {}", kWho,
                                          static_cast<int>(t)));
}

// Byte address of element i of a buffer of dtype t.
std::byte* at(void* p, std::int64_t i, DType t) {
  return static_cast<std::byte*>(p) + i * dtype_bytes(t);
}
const std::byte* at(const void* p, std::int64_t i, DType t) {
  return static_cast<const std::byte*>(p) + i * dtype_bytes(t);
}

// out (m) := rank-ordered sum of copies (ranks, m), for the floating-point dtypes.
void sum_rows(DType t, const void* copies, void* out, std::int64_t m, int ranks,
              cudaStream_t stream) {
  switch (t) {
    case DType::kF32:
      rank_ordered_sum(static_cast<const float*>(copies), static_cast<float*>(out), m, ranks,
                       stream);
      return;
    case DType::kF64:
      rank_ordered_sum(static_cast<const double*>(copies), static_cast<double*>(out), m, ranks,
                       stream);
      return;
    case DType::kBF16:
      rank_ordered_sum(static_cast<const Bf16Bits*>(copies), static_cast<Bf16Bits*>(out), m,
                       ranks, stream);
      return;
    case DType::kI64:
    case DType::kI32:
      break;
  }
  throw std::logic_error(fmt::format("{}: no rank-ordered sum for dtype {}", kWho, to_string(t)));
}

std::size_t checked_count(std::int64_t n, const char* what) {
  if (n < 0) {
    throw std::invalid_argument(fmt::format("NcclCommunicator::{}: element count {} is negative",
                                            what, n));
  }
  return static_cast<std::size_t>(n);
}

void check_rank(int r, int size, const char* what, const char* role) {
  if (r < 0 || r >= size) {
    throw std::invalid_argument(fmt::format(
        "NcclCommunicator::{}: {} {} is outside the group's ranks 0..{}", what, role, r, size - 1));
  }
}

// A Request that completes when an event recorded after the operation has fired.
class EventRequest final : public Request::Impl {
 public:
  explicit EventRequest(kernels::cuda::Event event) : event_(std::move(event)) {}
  void wait() override {
    as_system_error([&] { event_.synchronize(); });
  }
  void wait_noexcept() noexcept override {
    CUDA_CHECK_NOEXCEPT(cudaEventSynchronize(event_.get()));
  }

 private:
  kernels::cuda::Event event_;
};

// Stream-ordered scratch: cudaMallocAsync now, cudaFreeAsync when the scope ends (the free
// is ordered after the work enqueued in between, so no host wait is needed).
class StreamScratch {
 public:
  StreamScratch(std::size_t bytes, cudaStream_t stream) : stream_(stream) {
    if (bytes > 0) CUDA_CHECK(cudaMallocAsync(&ptr_, bytes, stream_));
  }
  ~StreamScratch() {
    if (ptr_ != nullptr) CUDA_CHECK_NOEXCEPT(cudaFreeAsync(ptr_, stream_));
  }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
};

// What rank 0 broadcasts at bootstrap as kI32 words: word 0 says whether it got an id, the
// rest are the id's bytes.
static_assert(sizeof(ncclUniqueId) % sizeof(std::int32_t) == 0, "the id travels as i32 words");
using BootstrapWords = std::array<std::int32_t, 1 + sizeof(ncclUniqueId) / sizeof(std::int32_t)>;

}  // namespace

NcclCommunicator::NcclCommunicator(ncclComm_t comm, cudaStream_t stream)
    : comm_(comm), stream_(stream) {
  // comm_ is owned from here, but the destructor does not run for a constructor that throws:
  // release it by hand on failure.
  try {
    as_system_error([&] {
      NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
      NCCL_CHECK(ncclCommCount(comm_, &size_));
      barrier_word_ = kernels::cuda::DeviceBuffer(sizeof(std::int64_t));
      CUDA_CHECK(cudaMemset(barrier_word_.get(), 0, sizeof(std::int64_t)));  // sums stay 0
    });
  } catch (...) {
    (void)ncclCommDestroy(comm_);  // best effort: construction is already failing
    throw;
  }
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::create(Communicator& group,
                                                           cudaStream_t stream) {
  BootstrapWords words{};
  ncclUniqueId id{};
  std::string rank0_error;
  if (group.rank() == 0) {
    try {
      as_system_error([&] { NCCL_CHECK(ncclGetUniqueId(&id)); });
      words[0] = 1;
      std::memcpy(words.data() + 1, &id, sizeof(id));
    } catch (const SystemError& e) {
      rank0_error = e.what();  // broadcast ok = 0 first, so no rank waits forever
    }
  }
  group.broadcast(words.data(), static_cast<std::int64_t>(words.size()), 0);
  if (words[0] != 1) {
    throw SystemError(group.rank() == 0
                          ? rank0_error
                          : std::string("NcclCommunicator::create: rank 0 of the group could "
                                        "not create an NCCL unique id (see rank 0's error)"));
  }
  std::memcpy(&id, words.data() + 1, sizeof(id));
  ncclComm_t comm = nullptr;
  as_system_error([&] {
    NCCL_CHECK(ncclCommInitRank(&comm, group.size(), id, group.rank()));
  });
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(comm, stream));
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::create_single(cudaStream_t stream) {
  ncclComm_t comm = nullptr;
  as_system_error([&] {
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    NCCL_CHECK(ncclCommInitAll(&comm, 1, &device));
  });
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(comm, stream));
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr) return;
  // Finalize flushes what is still enqueued, then Destroy frees; a failure of either means the
  // device state is already broken (and a destructor cannot throw).
  const ncclResult_t finalized = ncclCommFinalize(comm_);
  if (finalized != ncclSuccess) {
    kernels::cuda::detail::abort_on_error("NCCL", static_cast<int>(finalized),
                                          ncclGetErrorString(finalized),
                                          "ncclCommFinalize(comm_)", __FILE__, __LINE__);
  }
  const ncclResult_t destroyed = ncclCommDestroy(comm_);
  if (destroyed != ncclSuccess) {
    kernels::cuda::detail::abort_on_error("NCCL", static_cast<int>(destroyed),
                                          ncclGetErrorString(destroyed), "ncclCommDestroy(comm_)",
                                          __FILE__, __LINE__);
  }
}

void NcclCommunicator::deterministic_all_reduce_sum(void* data, std::int64_t n, DType t) {
  if (size_ == 1 || n == 0) return;  // one rank: the sum of one copy is the copy
  const ncclDataType_t type = nccl_type(t);
  const auto elem = static_cast<std::size_t>(dtype_bytes(t));
  as_system_error([&] {
    const std::int64_t mine = block_length(n, size_, rank_);
    std::byte* my_block = at(data, block_begin(n, size_, rank_), t);
    const StreamScratch scratch(static_cast<std::size_t>(mine * size_) * elem, stream_);
    std::byte* copies = scratch.as<std::byte>();  // (size, mine) rank-major
    if (mine > 0) {
      CUDA_CHECK(cudaMemcpyAsync(at(copies, rank_ * mine, t), my_block,
                                 static_cast<std::size_t>(mine) * elem, cudaMemcpyDeviceToDevice,
                                 stream_));
    }
    NCCL_CHECK(ncclGroupStart());
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      const std::int64_t theirs = block_length(n, size_, q);
      if (theirs > 0) {
        NCCL_CHECK(ncclSend(at(data, block_begin(n, size_, q), t),
                            static_cast<std::size_t>(theirs), type, q, comm_, stream_));
      }
      if (mine > 0) {
        NCCL_CHECK(ncclRecv(at(copies, q * mine, t), static_cast<std::size_t>(mine), type, q,
                            comm_, stream_));
      }
    }
    NCCL_CHECK(ncclGroupEnd());
    sum_rows(t, copies, my_block, mine, size_, stream_);
    if (n % size_ == 0) {
      // Equal blocks: in-place all-gather (sendbuff == recvbuff + rank * count).
      NCCL_CHECK(ncclAllGather(my_block, data, static_cast<std::size_t>(mine), type, comm_,
                               stream_));
    } else {
      NCCL_CHECK(ncclGroupStart());
      for (int q = 0; q < size_; ++q) {
        if (q == rank_) continue;
        const std::int64_t theirs = block_length(n, size_, q);
        if (mine > 0) {
          NCCL_CHECK(ncclSend(my_block, static_cast<std::size_t>(mine), type, q, comm_,
                              stream_));
        }
        if (theirs > 0) {
          NCCL_CHECK(ncclRecv(at(data, block_begin(n, size_, q), t),
                              static_cast<std::size_t>(theirs), type, q, comm_, stream_));
        }
      }
      NCCL_CHECK(ncclGroupEnd());
    }
  });
}

void NcclCommunicator::do_all_reduce_sum(void* data, std::int64_t n, DType dtype) {
  require_reducible(dtype, kWho, "all_reduce_sum");
  const std::size_t count = checked_count(n, "all_reduce_sum");
  if (dtype != DType::kI64) {
    deterministic_all_reduce_sum(data, n, dtype);
    return;
  }
  if (count == 0) return;
  as_system_error([&] {  // integer addition is exact in any order
    NCCL_CHECK(ncclAllReduce(data, data, count, ncclInt64, ncclSum, comm_, stream_));
  });
}

void NcclCommunicator::do_all_reduce_max(void* data, std::int64_t n, DType dtype) {
  require_reducible(dtype, kWho, "all_reduce_max");
  const std::size_t count = checked_count(n, "all_reduce_max");
  if (count == 0) return;
  as_system_error([&] {  // max is exact in any order
    NCCL_CHECK(ncclAllReduce(data, data, count, nccl_type(dtype), ncclMax, comm_, stream_));
  });
}

void NcclCommunicator::do_reduce_scatter_sum(const void* in, void* out, std::int64_t n,
                                          DType dtype) {
  require_reducible(dtype, kWho, "reduce_scatter_sum");
  const std::size_t count = checked_count(n, "reduce_scatter_sum");
  if (count == 0) return;
  const ncclDataType_t type = nccl_type(dtype);
  const std::size_t bytes = count * static_cast<std::size_t>(dtype_bytes(dtype));
  as_system_error([&] {
    if (size_ == 1) {  // the sum of one copy is the copy, bit for bit
      CUDA_CHECK(cudaMemcpyAsync(out, in, bytes, cudaMemcpyDeviceToDevice, stream_));
      return;
    }
    if (dtype == DType::kI64) {  // exact in any order
      NCCL_CHECK(ncclReduceScatter(in, out, count, type, ncclSum, comm_, stream_));
      return;
    }
    const StreamScratch scratch(bytes * static_cast<std::size_t>(size_), stream_);
    std::byte* copies = scratch.as<std::byte>();  // (size, n): row q = rank q's block for me
    CUDA_CHECK(cudaMemcpyAsync(at(copies, rank_ * n, dtype), at(in, rank_ * n, dtype), bytes,
                               cudaMemcpyDeviceToDevice, stream_));
    NCCL_CHECK(ncclGroupStart());
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      NCCL_CHECK(ncclSend(at(in, q * n, dtype), count, type, q, comm_, stream_));
      NCCL_CHECK(ncclRecv(at(copies, q * n, dtype), count, type, q, comm_, stream_));
    }
    NCCL_CHECK(ncclGroupEnd());
    sum_rows(dtype, copies, out, n, size_, stream_);
  });
}

void NcclCommunicator::do_all_gather(const void* in, void* out, std::int64_t n, DType dtype) {
  require_movable(dtype, kWho, "all_gather");
  const std::size_t count = checked_count(n, "all_gather");
  if (count == 0) return;
  as_system_error([&] {
    NCCL_CHECK(ncclAllGather(in, out, count, nccl_type(dtype), comm_, stream_));
  });
}

void NcclCommunicator::do_broadcast(void* data, std::int64_t n, DType dtype, int root) {
  require_movable(dtype, kWho, "broadcast");
  const std::size_t count = checked_count(n, "broadcast");
  check_rank(root, size_, "broadcast", "root");
  if (count == 0) return;
  as_system_error([&] {
    NCCL_CHECK(ncclBroadcast(data, data, count, nccl_type(dtype), root, comm_, stream_));
  });
}

Request NcclCommunicator::event_request() {
  return as_system_error([&] {
    kernels::cuda::Event event = kernels::cuda::Event::create(/*timing=*/false);
    event.record(stream_);
    return Request(std::make_unique<EventRequest>(std::move(event)));
  });
}

Request NcclCommunicator::do_send(const void* data, std::int64_t n, DType dtype, int peer,
                               int /*tag*/) {
  require_movable(dtype, kWho, "send");
  const std::size_t count = checked_count(n, "send");
  check_rank(peer, size_, "send", "peer");
  if (peer == rank_) {
    throw std::invalid_argument("NcclCommunicator::send: peer is this rank (NCCL self-sends "
                                "only work inside a group; use send_recv)");
  }
  if (count == 0) return Request();
  as_system_error([&] {
    NCCL_CHECK(ncclSend(data, count, nccl_type(dtype), peer, comm_, stream_));
  });
  return event_request();
}

void NcclCommunicator::do_recv(void* data, std::int64_t n, DType dtype, int peer, int tag) {
  irecv(data, n, dtype, peer, tag).wait();
}

Request NcclCommunicator::do_irecv(void* data, std::int64_t n, DType dtype, int peer,
                                int /*tag*/) {
  require_movable(dtype, kWho, "recv");
  const std::size_t count = checked_count(n, "recv");
  check_rank(peer, size_, "recv", "peer");
  if (peer == rank_) {
    throw std::invalid_argument("NcclCommunicator::recv: peer is this rank (NCCL self-receives "
                                "only work inside a group; use send_recv)");
  }
  if (count == 0) return Request();
  as_system_error([&] {
    NCCL_CHECK(ncclRecv(data, count, nccl_type(dtype), peer, comm_, stream_));
  });
  return event_request();
}

void NcclCommunicator::send_recv(const void* send_data, void* recv_data, std::int64_t n,
                                 DType dtype, int peer) {
  require_movable(dtype, kWho, "send_recv");
  const std::size_t count = checked_count(n, "send_recv");
  check_rank(peer, size_, "send_recv", "peer");
  if (count == 0) return;
  const ncclDataType_t type = nccl_type(dtype);
  as_system_error([&] {
    NCCL_CHECK(ncclGroupStart());
    NCCL_CHECK(ncclSend(send_data, count, type, peer, comm_, stream_));
    NCCL_CHECK(ncclRecv(recv_data, count, type, peer, comm_, stream_));
    NCCL_CHECK(ncclGroupEnd());
  });
}

void NcclCommunicator::barrier() {
  // A 1-element all-reduce every rank must join, then a drained stream.
  all_reduce_sum(barrier_word_.as<std::int64_t>(), 1);
  synchronize();
}

void NcclCommunicator::synchronize() {
  as_system_error([&] {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    ncclResult_t async_error = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(comm_, &async_error));
    NCCL_CHECK(async_error);
  });
}

}  // namespace strata::cuda
