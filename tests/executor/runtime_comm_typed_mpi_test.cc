// MpiCommunicator's typed operations (communicator.h's dtype contract) under mpirun: part of
// the executor_runtime_comm_mpi_test binary (its main is in runtime_comm_mpi_test.cc), run
// with 4 and 8 ranks. Tests use EXPECT (not ASSERT) before collectives so every rank still
// joins them.
//
// bf16 expectations are computed on the host from the contract: the rank-ordered sum
// ((x_0 + x_1) + x_2) + ... in fp32, rounded to bf16 once (kernels/bf16.h), compared bit for
// bit. Integer-valued inputs give closed forms, derived in the comments.
#include <gtest/gtest.h>
#include <mpi.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "executor/comm/mpi_check.h"
#include "executor/comm/mpi_communicator.h"
#include "kernels/bf16.h"

namespace strata {
namespace {

class TypedComm : public ::testing::Test {
 protected:
  void SetUp() override {
    world = MpiCommunicator::duplicate(MPI_COMM_WORLD);
    s = world->size();
    r = world->rank();
  }
  std::unique_ptr<MpiCommunicator> world;
  int s = 1;
  int r = 0;
};

Bf16Bits bf16(float f) { return float_to_bf16(f); }

std::vector<std::uint16_t> bits_of(const std::vector<Bf16Bits>& v) {
  std::vector<std::uint16_t> out;
  for (Bf16Bits b : v) out.push_back(b.bits);
  return out;
}

// A bf16 value per (rank, i) from a fixed hash: both signs, magnitudes 2^-6 .. 2^9, so the
// fp32 partial sums carry bits that bf16 cannot and the rounding point matters.
Bf16Bits mixed_value(int rank, std::int64_t i) {
  std::uint32_t h = static_cast<std::uint32_t>(rank) * 2654435761u ^
                    static_cast<std::uint32_t>(i) * 40503u;
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  const float mantissa = 1.0f + static_cast<float>(h & 0x7fu) / 128.0f;  // 8 significant bits
  const int exponent = static_cast<int>((h >> 7) % 16u) - 6;
  const float sign = (h >> 11) & 1u ? -1.0f : 1.0f;
  return bf16(sign * std::ldexp(mantissa, exponent));
}

// The contract's bf16 sum: fp32 accumulation in rank order, one rounding.
template <class Value>
Bf16Bits contract_bf16_sum(int size, Value value) {
  float sum = bf16_to_float(value(0));
  for (int q = 1; q < size; ++q) sum += bf16_to_float(value(q));
  return float_to_bf16(sum);
}

TEST_F(TypedComm, Bf16SumRoundsOnceAfterAnFp32RankOrderedSum) {
  // Element 0: rank 0 has 1.0, every other rank 2^-8 (both exact in bf16). bf16 keeps 8
  // significant bits, so its spacing at 1.0 is 2^-7 and 1 + 2^-8 is a tie that rounds to
  // even, back to 1.0: a sum rounded to bf16 after every addition stays 1.0 for any rank
  // count. The contract's fp32 sum is 1 + (s-1) 2^-8 = 1 + 1.5 * 2^-7 (s = 4), a tie that
  // rounds to even 1 + 2 * 2^-7 = 1.015625; for s = 8, 1 + 3.5 * 2^-7 -> 1 + 4 * 2^-7 =
  // 1.03125. Element 1 is the same with signs flipped. Element 2: 0.1 r, exact only via
  // rounding; element 3: 256 on rank 0 plus 1 per other rank (spacing 2 at 256).
  const std::int64_t n = 4;
  auto value = [](int rank, std::int64_t i) -> Bf16Bits {
    switch (i) {
      case 0: return bf16(rank == 0 ? 1.0f : 0.00390625f);
      case 1: return bf16(rank == 0 ? -1.0f : -0.00390625f);
      case 2: return bf16(0.1f * static_cast<float>(rank));
      default: return bf16(rank == 0 ? 256.0f : 1.0f);
    }
  };
  std::vector<Bf16Bits> data(n);
  for (std::int64_t i = 0; i < n; ++i) data[static_cast<std::size_t>(i)] = value(r, i);
  world->all_reduce_sum(data.data(), n);  // the Bf16Bits* overload

  const float want0 = s == 4 ? 1.015625f : s == 8 ? 1.03125f : 0.0f;
  if (s == 4 || s == 8) {
    EXPECT_EQ(bf16_to_float(data[0]), want0);
    EXPECT_EQ(bf16_to_float(data[1]), -want0);
  }
  // What per-step bf16 rounding would give: 1.0, so the check above tells the two apart.
  Bf16Bits per_step = value(0, 0);
  for (int q = 1; q < s; ++q) per_step = bf16(bf16_to_float(per_step) + bf16_to_float(value(q, 0)));
  EXPECT_EQ(bf16_to_float(per_step), 1.0f);
  if (s >= 3) {  // s = 2: 1 + 2^-8 is the same tie either way
    EXPECT_NE(data[0].bits, per_step.bits);
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const Bf16Bits want = contract_bf16_sum(s, [&](int q) { return value(q, i); });
    EXPECT_EQ(data[static_cast<std::size_t>(i)].bits, want.bits) << "element " << i;
  }
}

TEST_F(TypedComm, Bf16SumIsDeterministicOnUnevenBlocks) {
  // 257 elements: blocks of unequal size over 4 and 8 ranks. Two calls, bit-identical, and
  // each element equal to the contract's sum computed here.
  const std::int64_t n = 257;
  std::vector<Bf16Bits> first(n), expected(n);
  for (std::int64_t i = 0; i < n; ++i) {
    first[static_cast<std::size_t>(i)] = mixed_value(r, i);
    expected[static_cast<std::size_t>(i)] =
        contract_bf16_sum(s, [&](int q) { return mixed_value(q, i); });
  }
  std::vector<Bf16Bits> second = first;
  world->all_reduce_sum(first.data(), n, DType::kBF16);  // the typed call itself
  world->all_reduce_sum(second.data(), n);
  EXPECT_EQ(bits_of(first), bits_of(second));
  EXPECT_EQ(bits_of(first), bits_of(expected));
}

TEST_F(TypedComm, TypedF32SumEqualsThePointerOverload) {
  // The same rank-ordered sum whichever way it is called: 1e7-scaled values on even ranks
  // make any other order round differently.
  const std::int64_t n = 33;
  std::vector<float> a(n);
  for (std::int64_t i = 0; i < n; ++i) {
    a[static_cast<std::size_t>(i)] =
        (r % 2 == 0 ? 1e7f : 1.0f) * (0.3f + static_cast<float>(i)) / static_cast<float>(r + 7);
  }
  std::vector<float> b = a;
  world->all_reduce_sum(static_cast<void*>(a.data()), n, DType::kF32);
  world->all_reduce_sum(b.data(), n);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), sizeof(float) * n), 0);
}

TEST_F(TypedComm, AllGatherBf16AndF32) {
  // Row q of the output is rank q's input.
  const std::vector<Bf16Bits> in = {bf16(static_cast<float>(r)),
                                    bf16(-0.5f * static_cast<float>(r)), bf16(3.0f)};
  std::vector<Bf16Bits> out(static_cast<std::size_t>(3 * s));
  world->all_gather(in.data(), out.data(), 3);
  const std::vector<float> fin = {10.0f * static_cast<float>(r), 0.25f};
  std::vector<float> fout(static_cast<std::size_t>(2 * s), -1.0f);
  world->all_gather(fin.data(), fout.data(), 2, DType::kF32);
  for (int q = 0; q < s; ++q) {
    const auto row = static_cast<std::size_t>(q);
    EXPECT_EQ(bf16_to_float(out[3 * row]), static_cast<float>(q));  // small integers: exact
    EXPECT_EQ(bf16_to_float(out[3 * row + 1]), -0.5f * static_cast<float>(q));
    EXPECT_EQ(bf16_to_float(out[3 * row + 2]), 3.0f);
    EXPECT_EQ(fout[2 * row], 10.0f * static_cast<float>(q));
    EXPECT_EQ(fout[2 * row + 1], 0.25f);
  }
}

TEST_F(TypedComm, ReduceScatterBf16F64AndI64) {
  // in: (s, n) on every rank; rank r receives the sum over ranks of row r.
  const std::int64_t n = 5;
  std::vector<Bf16Bits> in(static_cast<std::size_t>(s * n));
  std::vector<double> din(static_cast<std::size_t>(s * n));
  std::vector<std::int64_t> iin(static_cast<std::size_t>(s * n));
  for (std::int64_t k = 0; k < s * n; ++k) {
    in[static_cast<std::size_t>(k)] = mixed_value(r, k);
    din[static_cast<std::size_t>(k)] = 0.5 * r + static_cast<double>(k);
    iin[static_cast<std::size_t>(k)] = (std::int64_t{1} << 40) * r + k;
  }
  std::vector<Bf16Bits> out(n);
  std::vector<double> dout(n);
  std::vector<std::int64_t> iout(n);
  world->reduce_scatter_sum(in.data(), out.data(), n);
  world->reduce_scatter_sum(din.data(), dout.data(), n, DType::kF64);
  world->reduce_scatter_sum(iin.data(), iout.data(), n);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t k = r * n + i;  // my row's element i
    const Bf16Bits want = contract_bf16_sum(s, [&](int q) { return mixed_value(q, k); });
    EXPECT_EQ(out[static_cast<std::size_t>(i)].bits, want.bits) << i;
    // sum over q of (0.5 q + k) = 0.25 s(s-1) + s k: multiples of 0.25, exact in double.
    EXPECT_EQ(dout[static_cast<std::size_t>(i)], 0.25 * s * (s - 1) + static_cast<double>(s * k));
    // sum over q of (2^40 q + k) = 2^40 s(s-1)/2 + s k: exact in int64, not in double.
    EXPECT_EQ(iout[static_cast<std::size_t>(i)],
              (std::int64_t{1} << 40) * (s * (s - 1) / 2) + s * k);
  }
}

TEST_F(TypedComm, MaxOfBf16I64AndF32) {
  // Rank r contributes r - 1.5 (exact in bf16), -r and 2^40 r + 3; the max is rank s-1's,
  // rank 0's, and rank s-1's.
  std::vector<Bf16Bits> b = {bf16(static_cast<float>(r) - 1.5f), bf16(-static_cast<float>(r))};
  world->all_reduce_max(b.data(), 2);
  EXPECT_EQ(bf16_to_float(b[0]), static_cast<float>(s - 1) - 1.5f);
  EXPECT_EQ(bf16_to_float(b[1]), 0.0f);
  std::int64_t big = (std::int64_t{1} << 40) * r + 3;
  world->all_reduce_max(&big, 1);
  EXPECT_EQ(big, (std::int64_t{1} << 40) * (s - 1) + 3);
  float f = -static_cast<float>(r) * 0.75f;
  world->all_reduce_max(&f, 1, DType::kF32);
  EXPECT_EQ(f, 0.0f);
}

TEST_F(TypedComm, BroadcastI32) {
  // Token ids: the extremes of int32 survive the trip unchanged.
  const int root = s - 1;
  std::vector<std::int32_t> ids = {r, -r, INT32_MAX - r, INT32_MIN + r};
  world->broadcast(ids.data(), 4, root);
  EXPECT_EQ(ids, (std::vector<std::int32_t>{root, -root, INT32_MAX - root, INT32_MIN + root}));
}

TEST_F(TypedComm, PointToPointBf16Ring) {
  const int next = (r + 1) % s;
  const int prev = (r + s - 1) % s;
  const std::vector<Bf16Bits> out = {bf16(static_cast<float>(r)), bf16(0.1f), mixed_value(r, 9)};
  std::vector<Bf16Bits> in(3);
  Request sent = world->send(out.data(), 3, next, 11);
  world->recv(in.data(), 3, prev, 11);
  sent.wait();
  const std::vector<Bf16Bits> want = {bf16(static_cast<float>(prev)), bf16(0.1f),
                                      mixed_value(prev, 9)};
  EXPECT_EQ(bits_of(in), bits_of(want));  // the 16 bits as sent, not rounded again

  // The other direction through irecv and the typed calls.
  std::vector<Bf16Bits> back(3);
  Request got = world->irecv(back.data(), 3, DType::kBF16, next, 12);
  Request sent_back = world->send(out.data(), 3, DType::kBF16, prev, 12);
  got.wait();
  sent_back.wait();
  const std::vector<Bf16Bits> want_back = {bf16(static_cast<float>(next)), bf16(0.1f),
                                           mixed_value(next, 9)};
  EXPECT_EQ(bits_of(back), bits_of(want_back));
}

TEST_F(TypedComm, UnsupportedDtypeThrowsBeforeAnythingIsSent) {
  // i32 is moved, never reduced (the pointer-typed overloads do not even compile for it:
  // all_reduce_sum(std::int32_t*, n) has no candidate). Every rank makes the same bad call,
  // so every rank throws and none waits in a collective.
  std::vector<std::int32_t> ids(4, r);
  std::vector<std::int32_t> shard(1);
  try {
    world->all_reduce_sum(ids.data(), 4, DType::kI32);
    ADD_FAILURE() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("all_reduce_sum"), std::string::npos) << message;
    EXPECT_NE(message.find("i32"), std::string::npos) << message;
  }
  EXPECT_THROW(world->all_reduce_max(ids.data(), 4, DType::kI32), std::invalid_argument);
  EXPECT_THROW(world->reduce_scatter_sum(ids.data(), shard.data(), 1, DType::kI32),
               std::invalid_argument);
  const auto bogus = static_cast<DType>(42);
  EXPECT_THROW(world->all_gather(ids.data(), ids.data(), 1, bogus), std::invalid_argument);
  EXPECT_THROW(world->broadcast(ids.data(), 4, bogus, 0), std::invalid_argument);
  // A rejected send must not reach the peer: after a barrier nothing is waiting with its tag.
  // (Best effort: MPI does not promise when a sent message becomes probe-able, but with one
  // eager 16-byte message on shared memory it is there well before the barrier completes.)
  const int next = (r + 1) % s;
  EXPECT_THROW((void)world->send(ids.data(), 4, bogus, next, 21), std::invalid_argument);
  EXPECT_THROW(world->recv(ids.data(), 4, bogus, next, 21), std::invalid_argument);
  world->barrier();
  int pending = 0;
  MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, 21, world->handle(), &pending, MPI_STATUS_IGNORE));
  EXPECT_EQ(pending, 0);
  // The group is still in step: one rank each.
  std::int64_t one = 1;
  world->all_reduce_sum(&one, 1);
  EXPECT_EQ(one, s);
}

}  // namespace
}  // namespace strata
