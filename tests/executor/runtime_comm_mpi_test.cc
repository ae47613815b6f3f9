// MpiCommunicator, MpiCommunicatorFactory and ProcessGroups under mpirun (registered in
// runtime.cmake as `mpirun -np 4` and `-np 8`; the typed cases are in
// runtime_comm_typed_mpi_test.cc, linked into the same binary). Every rank runs every test;
// rank 0 prints gtest's usual output, other ranks print only their failures, prefixed with
// their rank, and the process exit code is the OR over ranks, so a failure on any rank fails
// the ctest test; a fatal failure on any rank ends the job (mpi_test_main.h).
// Tests use EXPECT (not ASSERT) before collectives so every rank still joins them.
//
// Inputs are small integers, so sums are exact and each expected value is a closed form
// (sum over r = 0..s-1 of r = s(s-1)/2); the determinism tests use non-integer inputs and
// compare bit-for-bit with the rank-ordered sum computed locally.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cost_model/specs/errors.h"
#include "executor/comm/communicator_factory.h"
#include "executor/comm/mpi_check.h"
#include "executor/comm/mpi_communicator.h"
#include "executor/comm/process_groups.h"
#include "tests/executor/mpi_test_main.h"

namespace strata {
namespace {

class Comm : public ::testing::Test {
 protected:
  void SetUp() override { world = MpiCommunicator::duplicate(MPI_COMM_WORLD); }
  std::unique_ptr<MpiCommunicator> world;
};

TEST_F(Comm, AllReduceSumUnevenBlocks) {
  const int s = world->size();
  const int r = world->rank();
  // n = 10 does not divide by 4 or 8: blocks of unequal size (3,3,2,2 for s = 4).
  std::vector<float> data(10);
  for (int i = 0; i < 10; ++i) data[static_cast<size_t>(i)] = static_cast<float>(1000 * r + i);
  world->all_reduce_sum(data.data(), 10);
  for (int i = 0; i < 10; ++i) {
    // sum_r (1000 r + i) = 1000 s(s-1)/2 + s i
    EXPECT_EQ(data[static_cast<size_t>(i)], static_cast<float>(1000 * s * (s - 1) / 2 + s * i))
        << "element " << i;
  }
}

TEST_F(Comm, AllReduceSumFewerElementsThanRanks) {
  const int s = world->size();
  float one = static_cast<float>(world->rank() + 1);
  world->all_reduce_sum(&one, 1);  // blocks of 1, 0, 0, ...
  EXPECT_EQ(one, static_cast<float>(s * (s + 1) / 2));  // 1 + 2 + ... + s
  world->all_reduce_sum(static_cast<float*>(nullptr), 0);  // a no-op, not an error
}

TEST_F(Comm, AllReduceSumIsRankOrderedAndRepeatable) {
  const int s = world->size();
  const int n = 257;
  // Non-integer values of very different magnitudes, so the addition order changes the
  // rounding: only the rank-ordered sum ((x0 + x1) + x2) + ... matches bit for bit.
  auto value = [](int rank, int i) {
    return (rank % 2 == 0 ? 1e7f : 1.0f) * (0.1f + 0.37f * static_cast<float>(i)) /
           static_cast<float>(rank + 3);
  };
  std::vector<float> first(n), second(n), expected(n);
  for (int i = 0; i < n; ++i) {
    first[static_cast<size_t>(i)] = value(world->rank(), i);
    float sum = value(0, i);
    for (int r = 1; r < s; ++r) sum += value(r, i);
    expected[static_cast<size_t>(i)] = sum;
  }
  second = first;
  world->all_reduce_sum(first.data(), n);
  world->all_reduce_sum(second.data(), n);
  EXPECT_EQ(std::memcmp(first.data(), second.data(), sizeof(float) * n), 0);
  EXPECT_EQ(std::memcmp(first.data(), expected.data(), sizeof(float) * n), 0);
}

TEST_F(Comm, DoubleAndInt64Sums) {
  const int s = world->size();
  std::vector<double> losses = {0.5 * world->rank(), 1.0};
  world->all_reduce_sum(losses.data(), 2);
  EXPECT_EQ(losses[0], 0.5 * s * (s - 1) / 2);  // 0.5 * sum of ranks
  EXPECT_EQ(losses[1], static_cast<double>(s));
  // 2^40 r + 1: beyond float and double-exact-for-float range, exact in int64.
  std::int64_t tokens = (std::int64_t{1} << 40) * world->rank() + 1;
  world->all_reduce_sum(&tokens, 1);
  EXPECT_EQ(tokens, (std::int64_t{1} << 40) * (s * (s - 1) / 2) + s);
}

TEST_F(Comm, AllReduceMax) {
  const int s = world->size();
  std::vector<float> f = {static_cast<float>(world->rank()), -static_cast<float>(world->rank())};
  world->all_reduce_max(f.data(), 2);
  EXPECT_EQ(f[0], static_cast<float>(s - 1));
  EXPECT_EQ(f[1], 0.0f);
  double norm = 3.0 * world->rank();
  world->all_reduce_max(&norm, 1);
  EXPECT_EQ(norm, 3.0 * (s - 1));
}

TEST_F(Comm, ReduceScatterSum) {
  const int s = world->size();
  const int r = world->rank();
  const int n = 3;
  // in: (s, n), in[q][i] = 100 r + 10 q + i; rank r gets row q = r summed over ranks.
  std::vector<float> in(static_cast<size_t>(s * n));
  for (int q = 0; q < s; ++q) {
    for (int i = 0; i < n; ++i) in[static_cast<size_t>(q * n + i)] = static_cast<float>(100 * r + 10 * q + i);
  }
  std::vector<float> out(n, -1.0f);
  world->reduce_scatter_sum(in.data(), out.data(), n);
  for (int i = 0; i < n; ++i) {
    // sum over ranks r' of (100 r' + 10 r + i) = 100 s(s-1)/2 + s (10 r + i)
    EXPECT_EQ(out[static_cast<size_t>(i)], static_cast<float>(100 * s * (s - 1) / 2 + s * (10 * r + i)));
  }
}

TEST_F(Comm, AllGather) {
  const int s = world->size();
  const int n = 2;
  std::vector<float> in = {static_cast<float>(10 * world->rank()), static_cast<float>(10 * world->rank() + 1)};
  std::vector<float> out(static_cast<size_t>(s * n), -1.0f);
  world->all_gather(in.data(), out.data(), n);
  for (int q = 0; q < s; ++q) {
    EXPECT_EQ(out[static_cast<size_t>(q * n)], static_cast<float>(10 * q));
    EXPECT_EQ(out[static_cast<size_t>(q * n + 1)], static_cast<float>(10 * q + 1));
  }
}

TEST_F(Comm, Broadcast) {
  const int root = world->size() - 1;
  std::vector<float> data(4, static_cast<float>(world->rank()));
  world->broadcast(data.data(), 4, root);
  for (float x : data) EXPECT_EQ(x, static_cast<float>(root));
}

TEST_F(Comm, SendRecvRing) {
  const int s = world->size();
  const int r = world->rank();
  const int next = (r + 1) % s;
  const int prev = (r + s - 1) % s;
  std::vector<float> out = {static_cast<float>(r), static_cast<float>(r * 100)};
  std::vector<float> in(2, -1.0f);
  // Every rank sends first (non-blocking) and then receives: no deadlock in a ring.
  Request sent = world->send(out.data(), 2, next, 7);
  world->recv(in.data(), 2, prev, 7);
  sent.wait();
  EXPECT_FALSE(sent.pending());
  EXPECT_EQ(in[0], static_cast<float>(prev));
  EXPECT_EQ(in[1], static_cast<float>(prev * 100));

  // The reverse direction with irecv posted first; two messages on one tag keep their order.
  std::vector<float> a(1), b(1);
  Request ra = world->irecv(a.data(), 1, next, 8);
  Request rb = world->irecv(b.data(), 1, next, 8);
  const float first = static_cast<float>(r), second = static_cast<float>(r + 1000);
  Request s1 = world->send(&first, 1, prev, 8);
  Request s2 = world->send(&second, 1, prev, 8);
  ra.wait();
  rb.wait();
  // s1 and s2 complete in their destructors.
  EXPECT_EQ(a[0], static_cast<float>(next));
  EXPECT_EQ(b[0], static_cast<float>(next + 1000));
}

TEST_F(Comm, ErrorsNameTheCallAndMpisText) {
  float x = 0.0f;
  try {
    world->recv(&x, 1, world->size() + 3, 0);  // no such rank
    ADD_FAILURE() << "expected SystemError";
  } catch (const SystemError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("MPI_Recv("), std::string::npos) << message;
    EXPECT_NE(message.find("mpi_communicator.cc:"), std::string::npos) << message;
    EXPECT_NE(message.find("MPI_ERR_RANK"), std::string::npos) << message;
  }
  // Every rank passes the same bad root, so every rank fails before communicating.
  EXPECT_THROW(world->broadcast(&x, 1, -5), SystemError);
  EXPECT_THROW(world->all_reduce_sum(&x, -1), SystemError);  // negative count
  world->barrier();  // the communicator still works after the errors
}

TEST_F(Comm, SplitWithUndefinedColourGivesNoGroup) {
  // Even ranks form a group; odd ranks pass MPI_UNDEFINED and get none.
  const bool even = world->rank() % 2 == 0;
  std::unique_ptr<MpiCommunicator> evens = world->split(even ? 0 : MPI_UNDEFINED, world->rank());
  EXPECT_EQ(evens != nullptr, even);
  if (evens) {
    EXPECT_EQ(evens->size(), (world->size() + 1) / 2);
    EXPECT_EQ(evens->rank(), world->rank() / 2);
  }
}

// Every group the factory builds has exactly the members the pure functions list, in the
// same order: all-gathering world ranks (as i32) over the group reproduces the list.
void expect_group(Communicator& group, int world_rank, const std::vector<int>& expected,
                  const char* name) {
  EXPECT_EQ(group.size(), static_cast<int>(expected.size())) << name;
  std::vector<std::int32_t> members(static_cast<size_t>(group.size()), -1);
  const std::int32_t mine = world_rank;
  group.all_gather(&mine, members.data(), 1);
  std::vector<int> got(members.begin(), members.end());
  EXPECT_EQ(got, expected) << name << " group of world rank " << world_rank;
}

void check_process_groups(const MpiCommunicator& world, const ParallelDims& dims) {
  MpiCommunicatorFactory factory(world);
  const ProcessGroups groups(factory, dims);
  const int w = world.rank();
  const RankCoords c = rank_coords(w, dims);
  EXPECT_EQ(groups.coords(), c);
  EXPECT_EQ(groups.world_rank(), w);
  EXPECT_EQ(groups.world().rank(), w);
  EXPECT_EQ(groups.tp().rank(), c.tp);
  EXPECT_EQ(groups.dp().rank(), c.dp);
  EXPECT_EQ(groups.pp().rank(), c.pp);
  std::vector<int> everyone(static_cast<size_t>(world.size()));
  for (int q = 0; q < world.size(); ++q) everyone[static_cast<size_t>(q)] = q;
  expect_group(groups.world(), w, everyone, "world");
  expect_group(groups.tp(), w, tp_group_ranks(w, dims), "tp");
  expect_group(groups.dp(), w, dp_group_ranks(w, dims), "dp");
  expect_group(groups.pp(), w, pp_group_ranks(w, dims), "pp");
  expect_group(groups.model(), w, model_group_ranks(w, dims), "model");
  const std::vector<int> embedding = embedding_group_ranks(w, dims);
  EXPECT_EQ(groups.embedding() != nullptr, !embedding.empty());
  if (groups.embedding() != nullptr) expect_group(*groups.embedding(), w, embedding, "embedding");
}

TEST_F(Comm, FactorySplitsByColourOrdersByKeyAndSkipsNoGroup) {
  MpiCommunicatorFactory factory(*world);
  const int s = world->size();
  const int w = world->rank();
  EXPECT_EQ(factory.world_rank(), w);
  EXPECT_EQ(factory.world_size(), s);
  // Halves [0, s/2) and [s/2, s), each ordered by descending world rank (key = -w).
  std::unique_ptr<Communicator> half = factory.split(GroupKind::kDp, w < s / 2 ? 0 : 1, -w);
  ASSERT_NE(half, nullptr);
  const int first = w < s / 2 ? 0 : s / 2;
  std::vector<int> descending;
  for (int q = first + s / 2 - 1; q >= first; --q) descending.push_back(q);
  expect_group(*half, w, descending, "descending half");
  // Rank 0 alone joins no group; the others form one.
  std::unique_ptr<Communicator> rest =
      factory.split(GroupKind::kEmbedding, w == 0 ? kNoGroup : 7, w);
  EXPECT_EQ(rest == nullptr, w == 0);
  if (rest) {
    std::vector<int> others;
    for (int q = 1; q < s; ++q) others.push_back(q);
    expect_group(*rest, w, others, "all but rank 0");
  }
  // Negative colours other than kNoGroup are rejected on every rank before MPI sees them.
  EXPECT_THROW((void)factory.split(GroupKind::kTp, -5, w), std::invalid_argument);
  world->barrier();
}

TEST_F(Comm, ProcessGroupsMatchTheCoordinateFunctions) {
  const int s = world->size();
  // Every factorisation t * p * d = s with each degree in {1, 2, 4, 8}.
  for (int t = 1; t <= s; t *= 2) {
    for (int p = 1; t * p <= s; p *= 2) {
      if (s % (t * p) != 0) continue;
      const ParallelDims dims{t, p, s / (t * p)};
      SCOPED_TRACE("t=" + std::to_string(t) + " p=" + std::to_string(p) +
                   " d=" + std::to_string(dims.dp));
      check_process_groups(*world, dims);
    }
  }
  MpiCommunicatorFactory factory(*world);
  EXPECT_THROW(ProcessGroups(factory, ParallelDims{s + 1, 1, 1}), InfeasiblePlan);
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  return strata::testing_support::mpi_test_main(argc, argv, "runtime_comm_mpi_test");
}
