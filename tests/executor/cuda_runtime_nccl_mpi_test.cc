// NcclCommunicator across ranks, run under mpirun (one GPU per rank): every float/double sum
// must equal the rank-ordered sum computed on the host (and MpiCommunicator's result) bit for
// bit, on sizes that do and do not divide by the rank count; gather, broadcast, max, int64 sums
// and point-to-point move exactly the bytes expected.
// The typed cases (bf16, f64/i64 reduce-scatter, i32, the NCCL factory) are in
// cuda_runtime_nccl_typed_mpi_test.cc, linked into the same binary. Its own main
// (cuda_comm_mpi_support.h): exit 77 (ctest's SKIP) on every rank when some rank has no GPU of
// its own, naming the reason.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "executor/comm/mpi_check.h"
#include "executor/comm/mpi_communicator.h"
#include "executor/cuda/nccl_communicator.h"
#include "executor/cuda/streams.h"
#include "tests/executor/cuda_comm_mpi_support.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_resources.h"

namespace strata::cuda {
namespace {

using kernels::cuda::DeviceBuffer;

// Order-sensitive values: even ranks contribute ~1e7, odd ranks ~1, so float sums in another
// order than 0, 1, 2, ... round differently.
float value(int rank, std::int64_t i) {
  return (rank % 2 == 0 ? 1e7f : 1.0f) * (0.1f + 0.37f * static_cast<float>(i)) /
         static_cast<float>(rank + 1);
}

class NcclMpiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    world_ = MpiCommunicator::duplicate(MPI_COMM_WORLD);
    streams_ = RankStreams::create();
    nccl_ = NcclCommunicator::create(*world_, streams_.comm());
    rank_ = world_->rank();
    size_ = world_->size();
  }
  template <class T>
  DeviceBuffer to_device(const std::vector<T>& x) {
    DeviceBuffer d(x.size() * sizeof(T));
    d.copy_from_host(x.data(), x.size() * sizeof(T));
    CUDA_CHECK(cudaDeviceSynchronize());  // the comm stream does not wait for the legacy one
    return d;
  }
  template <class T>
  std::vector<T> from_device(const DeviceBuffer& d, std::size_t n) {
    nccl_->synchronize();
    std::vector<T> x(n);
    d.copy_to_host(x.data(), n * sizeof(T));
    return x;
  }
  std::unique_ptr<MpiCommunicator> world_;
  RankStreams streams_;
  std::unique_ptr<NcclCommunicator> nccl_;
  int rank_ = 0;
  int size_ = 1;
};

TEST_F(NcclMpiTest, FloatAllReduceIsTheRankOrderedSumAndMatchesMpi) {
  for (std::int64_t n : {1, 3, 1001, 1024, 1 << 16}) {  // divisible by 2/4/8 or not
    std::vector<float> mine(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) mine[static_cast<std::size_t>(i)] = value(rank_, i);
    DeviceBuffer d = to_device(mine);
    nccl_->all_reduce_sum(d.as<float>(), n);
    const std::vector<float> got = from_device<float>(d, static_cast<std::size_t>(n));
    std::vector<float> expected(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      float sum = value(0, i);
      for (int r = 1; r < size_; ++r) sum += value(r, i);  // ((x0 + x1) + x2) + ...
      expected[static_cast<std::size_t>(i)] = sum;
    }
    EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)), 0) << n;
    world_->all_reduce_sum(mine.data(), n);  // the CPU backend's answer
    EXPECT_EQ(std::memcmp(got.data(), mine.data(), got.size() * sizeof(float)), 0) << n;
  }
}

TEST_F(NcclMpiTest, DoubleAllReduceIsTheRankOrderedSum) {
  const std::int64_t n = 7;
  std::vector<double> mine(n);
  // Odd ranks add 1e16, where double spacing is 2: the small terms round differently in
  // another order.
  for (std::int64_t i = 0; i < n; ++i) {
    mine[static_cast<std::size_t>(i)] = 1e16 * (rank_ % 2) + static_cast<double>(i) + 0.25 * rank_;
  }
  DeviceBuffer d = to_device(mine);
  nccl_->all_reduce_sum(d.as<double>(), n);
  const std::vector<double> got = from_device<double>(d, n);
  world_->all_reduce_sum(mine.data(), n);  // rank-ordered on the host
  EXPECT_EQ(std::memcmp(got.data(), mine.data(), n * sizeof(double)), 0);
}

TEST_F(NcclMpiTest, ReduceScatterSumsMyRowInRankOrder) {
  const std::int64_t n = 5;
  // in_r: (size, n), in_r[q*n + i] = value(r, q*n + i).
  std::vector<float> in(static_cast<std::size_t>(size_ * n));
  for (std::int64_t k = 0; k < size_ * n; ++k) in[static_cast<std::size_t>(k)] = value(rank_, k);
  DeviceBuffer d_in = to_device(in);
  DeviceBuffer d_out(n * sizeof(float));
  nccl_->reduce_scatter_sum(d_in.as<float>(), d_out.as<float>(), n);
  const std::vector<float> got = from_device<float>(d_out, n);
  for (std::int64_t i = 0; i < n; ++i) {
    float sum = value(0, rank_ * n + i);
    for (int r = 1; r < size_; ++r) sum += value(r, rank_ * n + i);
    EXPECT_EQ(got[static_cast<std::size_t>(i)], sum) << i;
  }
}

TEST_F(NcclMpiTest, AllGatherBroadcastMaxAndIntegerSum) {
  const std::int64_t n = 3;
  DeviceBuffer d_in = to_device(std::vector<float>{100.0f * rank_, 100.0f * rank_ + 1, -1.0f});
  DeviceBuffer d_out(static_cast<std::size_t>(size_ * n) * sizeof(float));
  nccl_->all_gather(d_in.as<float>(), d_out.as<float>(), n);
  const std::vector<float> rows = from_device<float>(d_out, static_cast<std::size_t>(size_ * n));
  for (int r = 0; r < size_; ++r) {
    EXPECT_EQ(rows[static_cast<std::size_t>(r * n)], 100.0f * r);  // row r = rank r's input
    EXPECT_EQ(rows[static_cast<std::size_t>(r * n + 1)], 100.0f * r + 1);
  }
  DeviceBuffer d_b = to_device(std::vector<float>{static_cast<float>(rank_), 2.5f});
  nccl_->broadcast(d_b.as<float>(), 2, size_ - 1);
  EXPECT_EQ(from_device<float>(d_b, 2), (std::vector<float>{static_cast<float>(size_ - 1), 2.5f}));
  const auto r = static_cast<float>(rank_);
  DeviceBuffer d_m = to_device(std::vector<float>{r, -r});
  nccl_->all_reduce_max(d_m.as<float>(), 2);
  EXPECT_EQ(from_device<float>(d_m, 2), (std::vector<float>{static_cast<float>(size_ - 1), 0.0f}));
  DeviceBuffer d_i = to_device(std::vector<std::int64_t>{rank_ + 1, std::int64_t{1} << 40});
  nccl_->all_reduce_sum(d_i.as<std::int64_t>(), 2);
  // 1 + 2 + ... + size = size(size+1)/2; 2^40 from each rank.
  EXPECT_EQ(from_device<std::int64_t>(d_i, 2),
            (std::vector<std::int64_t>{size_ * (size_ + 1) / 2, size_ * (std::int64_t{1} << 40)}));
}

TEST_F(NcclMpiTest, PointToPointKeepsOrderAndPairsExchange) {
  // Even rank r sends two messages to r+1, which receives them in order.
  const std::int64_t n = 4;
  if (rank_ % 2 == 0 && rank_ + 1 < size_) {
    DeviceBuffer first = to_device(std::vector<float>(n, 1.0f));
    DeviceBuffer second = to_device(std::vector<float>(n, 2.0f));
    Request a = nccl_->send(first.as<float>(), n, rank_ + 1, 7);
    Request b = nccl_->send(second.as<float>(), n, rank_ + 1, 7);
    a.wait();
    b.wait();
  } else if (rank_ % 2 == 1) {
    DeviceBuffer got(n * sizeof(float));
    nccl_->recv(got.as<float>(), n, rank_ - 1, 7);
    EXPECT_EQ(from_device<float>(got, n), std::vector<float>(n, 1.0f));
    Request r = nccl_->irecv(got.as<float>(), n, rank_ - 1, 7);
    r.wait();
    EXPECT_EQ(from_device<float>(got, n), std::vector<float>(n, 2.0f));
  }
  // Pairs (0,1), (2,3), ...: both directions at once through one NCCL group.
  const int peer = rank_ ^ 1;
  if (peer < size_) {
    DeviceBuffer out = to_device(std::vector<float>(n, static_cast<float>(rank_)));
    DeviceBuffer in(n * sizeof(float));
    nccl_->send_recv(out.as<float>(), in.as<float>(), n, peer);
    EXPECT_EQ(from_device<float>(in, n), std::vector<float>(n, static_cast<float>(peer)));
  }
  nccl_->barrier();
}

}  // namespace
}  // namespace strata::cuda

int main(int argc, char** argv) {
  // NCCL rejects two ranks of a group on one device: one GPU per rank.
  return strata::cuda::test::mpi_gpu_test_main(argc, argv, "cuda_runtime_nccl_mpi_test",
                                               /*one_device_per_rank=*/true);
}
