// HostStagedCommunicator under mpirun with 2 and 4 ranks SHARING ONE GPU (device 0), the case
// NCCL refuses. Its sums are MpiCommunicator's by construction, so every result is compared
// bit for bit with MPI's on the same host inputs (f32 and bf16) and with the contract's sum
// computed here; data movement (gather, broadcast, point-to-point) must return the exact bits;
// the factory's groups must match process_groups.h's lists. Main in cuda_comm_mpi_support.h:
// exit 77 (ctest's SKIP) when the node has no CUDA device.
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
#include "executor/cuda/host_staged_communicator.h"
#include "executor/cuda/streams.h"
#include "tests/executor/cuda_comm_mpi_support.h"

namespace strata::cuda {
namespace {

using namespace test;  // NOLINT: the support helpers

class HostStagedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    world_ = MpiCommunicator::duplicate(MPI_COMM_WORLD);
    streams_ = RankStreams::create();
    staged_ = std::make_unique<HostStagedCommunicator>(MpiCommunicator::duplicate(MPI_COMM_WORLD),
                                                       streams_.comm());
    rank_ = world_->rank();
    size_ = world_->size();
  }
  std::unique_ptr<MpiCommunicator> world_;  // the reference: MPI on host buffers
  RankStreams streams_;
  std::unique_ptr<HostStagedCommunicator> staged_;
  int rank_ = 0;
  int size_ = 1;
};

TEST_F(HostStagedTest, F32AndBf16SumsAreBitIdenticalToMpi) {
  // Sizes that do and do not divide by 2 and 4; 2^20 elements also grow the staging pool.
  for (std::int64_t n : {1, 3, 1001, 1024, 1 << 20}) {
    const auto count = static_cast<std::size_t>(n);
    std::vector<float> f(count);
    std::vector<Bf16Bits> b(count);
    for (std::int64_t i = 0; i < n; ++i) {
      f[static_cast<std::size_t>(i)] = f32_value(rank_, i);
      b[static_cast<std::size_t>(i)] = bf16_value(rank_, i);
    }
    DeviceBuffer df = to_device(f), db = to_device(b);
    staged_->all_reduce_sum(df.as<float>(), n);
    staged_->all_reduce_sum(db.get(), n, DType::kBF16);
    const std::vector<float> got_f = from_device<float>(*staged_, df, count);
    const std::vector<Bf16Bits> got_b = from_device<Bf16Bits>(*staged_, db, count);
    world_->all_reduce_sum(f.data(), n);
    world_->all_reduce_sum(b.data(), n);
    EXPECT_EQ(std::memcmp(got_f.data(), f.data(), count * sizeof(float)), 0) << n;
    EXPECT_EQ(bits_of(got_b), bits_of(b)) << n;
    const std::vector<float> contract_f = f32_contract_sum(size_, n);
    EXPECT_EQ(std::memcmp(got_f.data(), contract_f.data(), count * sizeof(float)), 0) << n;
    EXPECT_EQ(bits_of(got_b), bits_of(bf16_contract_sum(size_, n))) << n;
  }
}

TEST_F(HostStagedTest, ReduceScatterAndAllGatherMatchMpi) {
  const std::int64_t n = 7;
  const auto rows = static_cast<std::size_t>(size_ * n);
  std::vector<float> f(rows);
  std::vector<Bf16Bits> b(rows);
  for (std::size_t k = 0; k < rows; ++k) {
    f[k] = f32_value(rank_, static_cast<std::int64_t>(k));
    b[k] = bf16_value(rank_, static_cast<std::int64_t>(k));
  }
  DeviceBuffer df = to_device(f), db = to_device(b);
  DeviceBuffer of(n * sizeof(float)), ob(n * sizeof(Bf16Bits));
  staged_->reduce_scatter_sum(df.as<float>(), of.as<float>(), n);
  staged_->reduce_scatter_sum(db.as<Bf16Bits>(), ob.as<Bf16Bits>(), n);
  std::vector<float> want_f(n);
  std::vector<Bf16Bits> want_b(n);
  world_->reduce_scatter_sum(f.data(), want_f.data(), n);
  world_->reduce_scatter_sum(b.data(), want_b.data(), n);
  const std::vector<float> got_f = from_device<float>(*staged_, of, n);
  EXPECT_EQ(std::memcmp(got_f.data(), want_f.data(), n * sizeof(float)), 0);
  EXPECT_EQ(bits_of(from_device<Bf16Bits>(*staged_, ob, n)), bits_of(want_b));

  // Gather my reduced shard back into the full (size, n) rows, as ZeRO does.
  DeviceBuffer full(rows * sizeof(Bf16Bits));
  staged_->all_gather(ob.as<Bf16Bits>(), full.as<Bf16Bits>(), n);
  std::vector<Bf16Bits> want_full(rows);
  world_->all_gather(want_b.data(), want_full.data(), n);
  EXPECT_EQ(bits_of(from_device<Bf16Bits>(*staged_, full, rows)), bits_of(want_full));
}

TEST_F(HostStagedTest, MaxBroadcastAndPointToPointMoveExactBits) {
  const auto r = static_cast<float>(rank_);
  DeviceBuffer m = to_device(std::vector<Bf16Bits>{float_to_bf16(r - 1.5f), float_to_bf16(-r)});
  staged_->all_reduce_max(m.as<Bf16Bits>(), 2);
  const std::vector<Bf16Bits> mx = from_device<Bf16Bits>(*staged_, m, 2);
  EXPECT_EQ(bf16_to_float(mx[0]), static_cast<float>(size_ - 1) - 1.5f);  // rank s-1's
  EXPECT_EQ(bf16_to_float(mx[1]), 0.0f);                                 // rank 0's

  const int root = size_ - 1;
  DeviceBuffer ids = to_device(std::vector<std::int32_t>{rank_, INT32_MIN + rank_, INT32_MAX});
  staged_->broadcast(ids.get(), 3, DType::kI32, root);
  EXPECT_EQ(from_device<std::int32_t>(*staged_, ids, 3),
            (std::vector<std::int32_t>{root, INT32_MIN + root, INT32_MAX}));

  // A ring where every rank sends before it receives: send() must not wait for the peer.
  // The device buffer is overwritten right after send() returns; the message keeps the
  // values it had (send stages them before returning).
  const int next = (rank_ + 1) % size_;
  const int prev = (rank_ + size_ - 1) % size_;
  DeviceBuffer out = to_device(std::vector<Bf16Bits>{bf16_value(rank_, 1), bf16_value(rank_, 2)});
  DeviceBuffer in(2 * sizeof(Bf16Bits));
  Request sent = staged_->send(out.as<Bf16Bits>(), 2, next, 5);
  CUDA_CHECK(cudaMemset(out.get(), 0xff, 2 * sizeof(Bf16Bits)));
  CUDA_CHECK(cudaDeviceSynchronize());
  staged_->recv(in.as<Bf16Bits>(), 2, prev, 5);
  sent.wait();
  EXPECT_EQ(bits_of(from_device<Bf16Bits>(*staged_, in, 2)),
            bits_of({bf16_value(prev, 1), bf16_value(prev, 2)}));
  // The other way with the receive posted first; it lands on the device when waited for.
  Request got = staged_->irecv(in.get(), 2, DType::kBF16, next, 6);
  DeviceBuffer mine = to_device(std::vector<Bf16Bits>{bf16_value(rank_, 3), bf16_value(rank_, 4)});
  Request sent_back = staged_->send(mine.get(), 2, DType::kBF16, prev, 6);
  got.wait();
  sent_back.wait();
  EXPECT_EQ(bits_of(from_device<Bf16Bits>(*staged_, in, 2)),
            bits_of({bf16_value(next, 3), bf16_value(next, 4)}));
  staged_->barrier();
}

TEST_F(HostStagedTest, UnsupportedDtypeIsRejectedBeforeAnythingIsCopiedOrSent) {
  DeviceBuffer ids = to_device(std::vector<std::int32_t>(4, rank_));
  EXPECT_THROW(staged_->all_reduce_sum(ids.get(), 4, DType::kI32), std::invalid_argument);
  EXPECT_THROW(staged_->all_reduce_max(ids.get(), 4, DType::kI32), std::invalid_argument);
  EXPECT_THROW(staged_->reduce_scatter_sum(ids.get(), ids.get(), 1, DType::kI32),
               std::invalid_argument);
  EXPECT_THROW((void)staged_->send(ids.get(), 4, static_cast<DType>(42), (rank_ + 1) % size_, 0),
               std::invalid_argument);
  EXPECT_THROW(staged_->all_reduce_sum(ids.get(), -1, DType::kF32), std::invalid_argument);
  // The group is still in step.
  DeviceBuffer one = to_device(std::vector<std::int64_t>{1});
  staged_->all_reduce_sum(one.as<std::int64_t>(), 1);
  EXPECT_EQ(from_device<std::int64_t>(*staged_, one, 1)[0], size_);
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

TEST_F(HostStagedTest, FactoryGroupsMatchTheRankListsAndSumLikeMpi) {
  MpiCommunicatorFactory host(*world_);
  // Different kinds on different streams: each group binds the stream of its kind.
  GroupStreams streams = GroupStreams::all(streams_.comm());
  streams.pp = streams_.copy();
  HostStagedCommunicatorFactory factory(host, streams);
  for (int t = 1; t <= size_; t *= 2) {
    for (int p = 1; t * p <= size_; p *= 2) {
      if (size_ % (t * p) != 0) continue;
      const ParallelDims dims{t, p, size_ / (t * p)};
      SCOPED_TRACE("t=" + std::to_string(t) + " p=" + std::to_string(p));
      const ProcessGroups groups(factory, dims);
      const ProcessGroups host_groups(host, dims);
      const int w = rank_;
      std::vector<int> everyone;
      for (int q = 0; q < size_; ++q) everyone.push_back(q);
      EXPECT_EQ(members(groups.world(), w), everyone);
      EXPECT_EQ(members(groups.tp(), w), tp_group_ranks(w, dims));
      EXPECT_EQ(members(groups.dp(), w), dp_group_ranks(w, dims));
      EXPECT_EQ(members(groups.pp(), w), pp_group_ranks(w, dims));
      EXPECT_EQ(members(groups.model(), w), model_group_ranks(w, dims));
      EXPECT_EQ(groups.embedding() != nullptr, !embedding_group_ranks(w, dims).empty());
      if (groups.embedding() != nullptr) {
        EXPECT_EQ(members(*groups.embedding(), w), embedding_group_ranks(w, dims));
      }
      EXPECT_EQ(dynamic_cast<HostStagedCommunicator&>(groups.pp()).stream(), streams_.copy());
      EXPECT_EQ(dynamic_cast<HostStagedCommunicator&>(groups.tp()).stream(), streams_.comm());
      // A bf16 gradient sum over the model group: the staged bits are MPI's.
      const std::int64_t n = 333;
      std::vector<Bf16Bits> g(n);
      for (std::int64_t i = 0; i < n; ++i) g[static_cast<std::size_t>(i)] = bf16_value(w, i);
      DeviceBuffer dg = to_device(g);
      groups.model().all_reduce_sum(dg.as<Bf16Bits>(), n);
      host_groups.model().all_reduce_sum(g.data(), n);
      EXPECT_EQ(bits_of(from_device<Bf16Bits>(groups.model(), dg, n)), bits_of(g));
    }
  }
}

}  // namespace
}  // namespace strata::cuda

int main(int argc, char** argv) {
  // Every rank of the node on device 0: the sharing NCCL cannot do.
  return strata::cuda::test::mpi_gpu_test_main(argc, argv, "cuda_runtime_host_staged_mpi_test",
                                               /*one_device_per_rank=*/false);
}
