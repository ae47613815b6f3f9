// NcclCommunicator's typed operations and NcclCommunicatorFactory under mpirun, one GPU per
// rank (part of cuda_runtime_nccl_mpi_test; main in cuda_runtime_nccl_mpi_test.cc). Every
// reduction is compared bit for bit with MpiCommunicator's answer on the same inputs and with
// the contract's sum computed on the host (cuda_comm_mpi_support.h): the two backends must
// agree exactly, bf16 included (fp32 rank-ordered sum, one rounding).
#include <gtest/gtest.h>
#include <mpi.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "executor/comm/communicator_factory.h"
#include "executor/comm/mpi_communicator.h"
#include "executor/comm/process_groups.h"
#include "executor/cuda/communicator_factories.h"
#include "executor/cuda/nccl_communicator.h"
#include "executor/cuda/streams.h"
#include "tests/executor/cuda_comm_mpi_support.h"

namespace strata::cuda {
namespace {

using namespace test;  // NOLINT: the support helpers

class NcclTypedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    world_ = MpiCommunicator::duplicate(MPI_COMM_WORLD);
    streams_ = RankStreams::create();
    nccl_ = NcclCommunicator::create(*world_, streams_.comm());
    rank_ = world_->rank();
    size_ = world_->size();
  }
  std::unique_ptr<MpiCommunicator> world_;
  RankStreams streams_;
  std::unique_ptr<NcclCommunicator> nccl_;
  int rank_ = 0;
  int size_ = 1;
};

TEST_F(NcclTypedTest, Bf16AllReduceIsTheContractSumAndMatchesMpi) {
  for (std::int64_t n : {1, 3, 1001, 1024, 1 << 16}) {  // divisible by 2/4 or not
    std::vector<Bf16Bits> mine(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) mine[static_cast<std::size_t>(i)] = bf16_value(rank_, i);
    DeviceBuffer d = to_device(mine);
    nccl_->all_reduce_sum(d.get(), n, DType::kBF16);
    const std::vector<Bf16Bits> got = from_device<Bf16Bits>(*nccl_, d, static_cast<std::size_t>(n));
    EXPECT_EQ(bits_of(got), bits_of(bf16_contract_sum(size_, n))) << n;
    world_->all_reduce_sum(mine.data(), n);  // the CPU backend's answer
    EXPECT_EQ(bits_of(got), bits_of(mine)) << n;
  }
}

TEST_F(NcclTypedTest, ReduceScatterOfBf16F64AndI64MatchesMpi) {
  const std::int64_t n = 5;
  const auto rows = static_cast<std::size_t>(size_ * n);
  std::vector<Bf16Bits> b(rows);
  std::vector<double> d(rows);
  std::vector<std::int64_t> i64(rows);
  for (std::size_t k = 0; k < rows; ++k) {
    b[k] = bf16_value(rank_, static_cast<std::int64_t>(k));
    // Odd ranks add 1e16 (double spacing 2 there): another order rounds the small terms away.
    d[k] = 1e16 * (rank_ % 2) + static_cast<double>(k) + 0.25 * rank_;
    i64[k] = (std::int64_t{1} << 40) * rank_ + static_cast<std::int64_t>(k);
  }
  DeviceBuffer db = to_device(b), dd = to_device(d), di = to_device(i64);
  DeviceBuffer ob(n * sizeof(Bf16Bits)), od(n * sizeof(double)), oi(n * sizeof(std::int64_t));
  nccl_->reduce_scatter_sum(db.as<Bf16Bits>(), ob.as<Bf16Bits>(), n);
  nccl_->reduce_scatter_sum(dd.as<double>(), od.as<double>(), n);
  nccl_->reduce_scatter_sum(di.get(), oi.get(), n, DType::kI64);
  std::vector<Bf16Bits> want_b(n);
  std::vector<double> want_d(n);
  std::vector<std::int64_t> want_i(n);
  world_->reduce_scatter_sum(b.data(), want_b.data(), n);
  world_->reduce_scatter_sum(d.data(), want_d.data(), n);
  world_->reduce_scatter_sum(i64.data(), want_i.data(), n);
  EXPECT_EQ(bits_of(from_device<Bf16Bits>(*nccl_, ob, n)), bits_of(want_b));
  const std::vector<double> got_d = from_device<double>(*nccl_, od, n);
  EXPECT_EQ(std::memcmp(got_d.data(), want_d.data(), n * sizeof(double)), 0);
  EXPECT_EQ(from_device<std::int64_t>(*nccl_, oi, n), want_i);
}

TEST_F(NcclTypedTest, GatherBroadcastMaxAndPointToPointMoveExactBits) {
  // all_gather bf16: row q = rank q's 16-bit words.
  const std::vector<Bf16Bits> in = {bf16_value(rank_, 0), bf16_value(rank_, 1)};
  DeviceBuffer din = to_device(in);
  DeviceBuffer dout(static_cast<std::size_t>(2 * size_) * sizeof(Bf16Bits));
  nccl_->all_gather(din.as<Bf16Bits>(), dout.as<Bf16Bits>(), 2);
  const std::vector<Bf16Bits> rows = from_device<Bf16Bits>(*nccl_, dout, 2 * size_);
  for (int q = 0; q < size_; ++q) {
    EXPECT_EQ(rows[static_cast<std::size_t>(2 * q)].bits, bf16_value(q, 0).bits);
    EXPECT_EQ(rows[static_cast<std::size_t>(2 * q + 1)].bits, bf16_value(q, 1).bits);
  }
  // broadcast i32 from the last rank, extremes included.
  const int root = size_ - 1;
  DeviceBuffer ids = to_device(std::vector<std::int32_t>{rank_, INT32_MIN + rank_, INT32_MAX});
  nccl_->broadcast(ids.as<std::int32_t>(), 3, root);
  EXPECT_EQ(from_device<std::int32_t>(*nccl_, ids, 3),
            (std::vector<std::int32_t>{root, INT32_MIN + root, INT32_MAX}));
  // max bf16 and i64: rank r contributes r - 1.5 and -r (exact in bf16), 2^40 r.
  const auto r = static_cast<float>(rank_);
  DeviceBuffer m = to_device(std::vector<Bf16Bits>{float_to_bf16(r - 1.5f), float_to_bf16(-r)});
  nccl_->all_reduce_max(m.get(), 2, DType::kBF16);
  const std::vector<Bf16Bits> mx = from_device<Bf16Bits>(*nccl_, m, 2);
  EXPECT_EQ(bf16_to_float(mx[0]), static_cast<float>(size_ - 1) - 1.5f);
  EXPECT_EQ(bf16_to_float(mx[1]), 0.0f);
  DeviceBuffer big = to_device(std::vector<std::int64_t>{(std::int64_t{1} << 40) * rank_});
  nccl_->all_reduce_max(big.as<std::int64_t>(), 1);
  EXPECT_EQ(from_device<std::int64_t>(*nccl_, big, 1)[0], (std::int64_t{1} << 40) * (size_ - 1));
  // bf16 pairs (0,1), (2,3): both directions in one NCCL group, then send/irecv one way.
  const int peer = rank_ ^ 1;
  if (peer < size_) {
    DeviceBuffer out = to_device(std::vector<Bf16Bits>{bf16_value(rank_, 7), bf16_value(rank_, 8)});
    DeviceBuffer back(2 * sizeof(Bf16Bits));
    nccl_->send_recv(out.as<Bf16Bits>(), back.as<Bf16Bits>(), 2, peer);
    EXPECT_EQ(bits_of(from_device<Bf16Bits>(*nccl_, back, 2)),
              bits_of({bf16_value(peer, 7), bf16_value(peer, 8)}));
    if (rank_ % 2 == 0) {
      nccl_->send(out.get(), 2, DType::kBF16, peer, 3).wait();
    } else {
      Request got = nccl_->irecv(back.get(), 2, DType::kBF16, peer, 3);
      got.wait();
      EXPECT_EQ(bits_of(from_device<Bf16Bits>(*nccl_, back, 2)),
                bits_of({bf16_value(peer, 7), bf16_value(peer, 8)}));
    }
  }
  nccl_->barrier();
}

TEST_F(NcclTypedTest, UnsupportedDtypeIsRejectedBeforeEnqueuing) {
  DeviceBuffer ids = to_device(std::vector<std::int32_t>(4, rank_));
  DeviceBuffer shard(sizeof(std::int32_t));
  EXPECT_THROW(nccl_->all_reduce_sum(ids.get(), 4, DType::kI32), std::invalid_argument);
  EXPECT_THROW(nccl_->all_reduce_max(ids.get(), 4, DType::kI32), std::invalid_argument);
  EXPECT_THROW(nccl_->reduce_scatter_sum(ids.get(), shard.get(), 1, DType::kI32),
               std::invalid_argument);
  const auto bogus = static_cast<DType>(42);
  EXPECT_THROW(nccl_->all_gather(ids.get(), ids.get(), 1, bogus), std::invalid_argument);
  EXPECT_THROW((void)nccl_->send(ids.get(), 4, bogus, (rank_ + 1) % size_, 0),
               std::invalid_argument);
  // Nothing reached NCCL: the group is still in step.
  DeviceBuffer one = to_device(std::vector<std::int64_t>{1});
  nccl_->all_reduce_sum(one.as<std::int64_t>(), 1);
  EXPECT_EQ(from_device<std::int64_t>(*nccl_, one, 1)[0], size_);
}

// Members of a device group, listed by all-gathering world ranks (as i32) over it.
std::vector<int> members(Communicator& group, int world_rank) {
  DeviceBuffer mine = to_device(std::vector<std::int32_t>{world_rank});
  DeviceBuffer all(static_cast<std::size_t>(group.size()) * sizeof(std::int32_t));
  group.all_gather(mine.as<std::int32_t>(), all.as<std::int32_t>(), 1);
  const std::vector<std::int32_t> got =
      from_device<std::int32_t>(group, all, static_cast<std::size_t>(group.size()));
  return {got.begin(), got.end()};
}

TEST_F(NcclTypedTest, FactoryGroupsMatchTheRankListsAndSumLikeMpi) {
  MpiCommunicatorFactory host(*world_);
  NcclCommunicatorFactory factory(host, GroupStreams::all(streams_.comm()));
  EXPECT_EQ(factory.world_rank(), rank_);
  EXPECT_EQ(factory.world_size(), size_);
  for (int t = 1; t <= size_; t *= 2) {
    for (int p = 1; t * p <= size_; p *= 2) {
      if (size_ % (t * p) != 0) continue;
      const ParallelDims dims{t, p, size_ / (t * p)};
      SCOPED_TRACE("t=" + std::to_string(t) + " p=" + std::to_string(p));
      const ProcessGroups groups(factory, dims);
      const ProcessGroups host_groups(host, dims);
      const int w = rank_;
      EXPECT_EQ(members(groups.tp(), w), tp_group_ranks(w, dims));
      EXPECT_EQ(members(groups.dp(), w), dp_group_ranks(w, dims));
      EXPECT_EQ(members(groups.pp(), w), pp_group_ranks(w, dims));
      EXPECT_EQ(members(groups.model(), w), model_group_ranks(w, dims));
      EXPECT_EQ(groups.embedding() != nullptr, !embedding_group_ranks(w, dims).empty());
      if (groups.embedding() != nullptr) {
        EXPECT_EQ(members(*groups.embedding(), w), embedding_group_ranks(w, dims));
      }
      // A bf16 gradient sum over the dp group: NCCL's bits are MPI's.
      const std::int64_t n = 333;
      std::vector<Bf16Bits> g(n);
      for (std::int64_t i = 0; i < n; ++i) g[static_cast<std::size_t>(i)] = bf16_value(w, i);
      DeviceBuffer dg = to_device(g);
      groups.dp().all_reduce_sum(dg.as<Bf16Bits>(), n);
      host_groups.dp().all_reduce_sum(g.data(), n);
      EXPECT_EQ(bits_of(from_device<Bf16Bits>(groups.dp(), dg, n)), bits_of(g));
    }
  }
}

}  // namespace
}  // namespace strata::cuda
