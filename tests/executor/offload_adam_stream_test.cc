// CpuAdamStream (executor/offload/cpu_adam_stream.h): AdamW over state on NVMe, streamed
// through a staging area smaller than the state, must equal kernels::cpu::adamw_update on
// the whole arrays in memory bit for bit, step after step; and it must move exactly the
// bytes the tiling implies.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cost_model/specs/errors.h"
#include "executor/memory/accounting_allocator.h"
#include "executor/offload/cpu_adam_stream.h"
#include "kernels/bf16.h"
#include "kernels/cpu/adamw.h"
#include "tests/executor/offload_test_util.h"

namespace strata::offload {
namespace {

using testing::ScratchDir;

// 10037 floats (odd: the last tile is partial and ends mid-page) in tiles of 2048 floats:
// 5 tiles, 4 full and one of 10037 - 4 * 2048 = 1845 floats.
constexpr std::int64_t kN = 10037;
constexpr std::int64_t kTile = 2048;

struct Arrays {
  std::vector<float> p, m, v;
};

Arrays initial_state() {
  Arrays a{std::vector<float>(kN), std::vector<float>(kN), std::vector<float>(kN)};
  for (std::int64_t i = 0; i < kN; ++i) {
    a.p[i] = 0.5f - 0.001f * static_cast<float>(i % 1000);
    a.m[i] = 0.01f * static_cast<float>(i % 7) - 0.03f;
    a.v[i] = 0.002f * static_cast<float>(i % 5);
  }
  return a;
}

std::vector<float> grad_for_step(int step) {
  std::vector<float> g(kN);
  for (std::int64_t i = 0; i < kN; ++i) {
    g[i] = 0.1f * static_cast<float>((i * (step + 3)) % 19) - 0.9f;
  }
  return g;
}

kernels::cpu::AdamWParams hyper() {
  kernels::cpu::AdamWParams hp;
  hp.lr = 1e-3f;
  hp.beta1 = 0.9f;
  hp.beta2 = 0.95f;
  hp.eps = 1e-8f;
  hp.weight_decay = 0.1f;
  return hp;
}

void expect_bitwise_equal(const std::vector<float>& got, const std::vector<float>& want,
                          const char* what, int step) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      FAIL() << what << " differs at step " << step << ", element " << i << ": " << got[i]
             << " vs " << want[i];
    }
  }
}

NvmeStoreOptions options(const std::filesystem::path& dir) {
  NvmeStoreOptions o;
  o.dir = dir;
  o.io = IoOptions{4096, 4};  // 2 blocks per tile per array: the queue overflows often
  return o;
}

TEST(OffloadAdamStream, AllStateOnNvmeIsBitIdenticalToInMemoryOverThreeSteps) {
  ScratchDir scratch;
  AccountingAllocator allocator;
  NvmeStore store(options(scratch.path()), &allocator);
  Arrays ref = initial_state();
  store.create_from("p", ref.p.data(), kN);
  store.create_from("m", ref.m.data(), kN);
  store.create_from("v", ref.v.data(), kN);
  CpuAdamStream stream(AdamState{kN, StateArray::in_nvme("p"), StateArray::in_nvme("m"),
                                 StateArray::in_nvme("v")},
                       kTile, &store, &allocator);
  // Staging = 3 slots * 3 arrays * 2048 floats * 4 bytes = 73728 bytes, below the state's
  // 3 * 10037 * 4 = 120444 bytes: the state cannot be held at once.
  EXPECT_EQ(stream.staging_bytes(), 3 * 3 * kTile * 4);
  EXPECT_LT(stream.staging_bytes(), 3 * kN * 4);
  EXPECT_EQ(stream.tiles(), 5);
  EXPECT_EQ(allocator.usage(MemoryTier::kHost).current_bytes, stream.staging_bytes());

  // Per step each NVMe array's tiles are read and written once, each tile rounded up to
  // pages: 4 * 8192 + round_up(1845 * 4 = 7380, 4096) = 32768 + 8192 = 40960 bytes per
  // array, 3 arrays = 122880 bytes each way.
  constexpr std::int64_t kBytesPerStep = 3 * (4 * 8192 + 8192);
  for (int step = 1; step <= 3; ++step) {
    const auto g = grad_for_step(step);
    kernels::cpu::adamw_update(ref.p.data(), g.data(), ref.m.data(), ref.v.data(), kN, hyper(),
                               step);
    const StreamIo io = stream.step(g.data(), hyper(), step);
    EXPECT_EQ(io.read_bytes, kBytesPerStep);
    EXPECT_EQ(io.written_bytes, kBytesPerStep);
    Arrays got{std::vector<float>(kN), std::vector<float>(kN), std::vector<float>(kN)};
    store.read("p", got.p.data(), kN);
    store.read("m", got.m.data(), kN);
    store.read("v", got.v.data(), kN);
    expect_bitwise_equal(got.p, ref.p, "param", step);
    expect_bitwise_equal(got.m, ref.m, "m", step);
    expect_bitwise_equal(got.v, ref.v, "v", step);
  }
}

TEST(OffloadAdamStream, MixedPlacementAndTileCallbackCoverTheState) {
  ScratchDir scratch;
  NvmeStore store(options(scratch.path()));
  Arrays ref = initial_state();
  Arrays host = initial_state();  // master params stay in host memory (ZeRO-Offload-style)
  store.create_from("m", ref.m.data(), kN);
  store.create_from("v", ref.v.data(), kN);
  CpuAdamStream stream(AdamState{kN, StateArray::in_host(host.p.data()),
                                 StateArray::in_nvme("m"), StateArray::in_nvme("v")},
                       kTile, &store);
  EXPECT_EQ(stream.staging_bytes(), 3 * 2 * kTile * 4);  // 2 NVMe arrays
  std::vector<float> copied(kN, -7.0f);  // what a device copy of the params would receive
  for (int step = 1; step <= 3; ++step) {
    const auto g = grad_for_step(step);
    kernels::cpu::adamw_update(ref.p.data(), g.data(), ref.m.data(), ref.v.data(), kN, hyper(),
                               step);
    std::int64_t next = 0;
    stream.step(g.data(), hyper(), step,
                [&](std::int64_t b, std::int64_t e, const float* p) {
                  EXPECT_EQ(b, next);  // tiles in order, no gap, no overlap
                  next = e;
                  std::memcpy(copied.data() + b, p, static_cast<std::size_t>(e - b) * 4);
                });
    EXPECT_EQ(next, kN);
    expect_bitwise_equal(host.p, ref.p, "param", step);
    expect_bitwise_equal(copied, ref.p, "copied param", step);
  }
  std::vector<float> m(kN), v(kN);
  store.read("m", m.data(), kN);
  store.read("v", v.data(), kN);
  expect_bitwise_equal(m, ref.m, "m", 3);
  expect_bitwise_equal(v, ref.v, "v", 3);
}

// The bf16 copy written in the same pass: every element, on every tile, in host memory and
// streamed from NVMe, with weight decay off over a range that crosses a tile, equals
// kernels/bf16.h's cast of the reference's updated parameters; and the fp32 state is the
// reference's as without a copy.
TEST(OffloadAdamStream, Bf16CopyIsTheCastOfTheUpdatedParameters) {
  const CpuAdamStream::Ranges no_decay = {{1000, 3000}};  // crosses the tile at 2048
  for (bool on_nvme : {false, true}) {
    SCOPED_TRACE(on_nvme ? "state on NVMe" : "state in host memory");
    ScratchDir scratch;
    NvmeStore store(options(scratch.path()));
    Arrays ref = initial_state();
    Arrays host = initial_state();
    AdamState state{kN, StateArray::in_host(host.p.data()), StateArray::in_host(host.m.data()),
                    StateArray::in_host(host.v.data())};
    if (on_nvme) {
      store.create_from("p", ref.p.data(), kN);
      store.create_from("m", ref.m.data(), kN);
      store.create_from("v", ref.v.data(), kN);
      state = AdamState{kN, StateArray::in_nvme("p"), StateArray::in_nvme("m"),
                        StateArray::in_nvme("v")};
    }
    CpuAdamStream stream(state, kTile, on_nvme ? &store : nullptr);
    std::vector<Bf16Bits> copy(kN, Bf16Bits{0x1234});
    for (int step = 1; step <= 2; ++step) {
      const auto g = grad_for_step(step);
      kernels::cpu::AdamWParams off = hyper();
      off.weight_decay = 0.0f;
      const auto ref_range = [&](std::int64_t b, std::int64_t e,
                                 const kernels::cpu::AdamWParams& h) {
        kernels::cpu::adamw_update_range(ref.p.data(), g.data(), ref.m.data(), ref.v.data(), b,
                                         e, h, step);
      };
      ref_range(0, 1000, hyper());
      ref_range(1000, 3000, off);
      ref_range(3000, kN, hyper());
      stream.step(g.data(), hyper(), step, {}, no_decay, copy.data());
      std::vector<float> p = host.p;
      if (on_nvme) store.read("p", p.data(), kN);
      expect_bitwise_equal(p, ref.p, "param", step);
      for (std::int64_t i = 0; i < kN; ++i) {
        ASSERT_EQ(copy[i].bits, float_to_bf16(ref.p[i]).bits) << "element " << i;
      }
    }
  }
}

TEST(OffloadAdamStream, AllInHostMovesNoBytes) {
  Arrays ref = initial_state();
  Arrays host = initial_state();
  CpuAdamStream stream(AdamState{kN, StateArray::in_host(host.p.data()),
                                 StateArray::in_host(host.m.data()),
                                 StateArray::in_host(host.v.data())},
                       kTile, nullptr);
  EXPECT_EQ(stream.staging_bytes(), 0);
  const auto g = grad_for_step(1);
  kernels::cpu::adamw_update(ref.p.data(), g.data(), ref.m.data(), ref.v.data(), kN, hyper(), 1);
  const StreamIo io = stream.step(g.data(), hyper(), 1);
  EXPECT_EQ(io.read_bytes, 0);
  EXPECT_EQ(io.written_bytes, 0);
  expect_bitwise_equal(host.p, ref.p, "param", 1);
}

TEST(OffloadAdamStream, BadConfigurationIsRejected) {
  ScratchDir scratch;
  NvmeStore store(options(scratch.path()));
  store.create("m", kN);
  std::vector<float> p(kN), v(kN);
  const AdamState state{kN, StateArray::in_host(p.data()), StateArray::in_nvme("m"),
                        StateArray::in_host(v.data())};
  EXPECT_THROW(CpuAdamStream(state, 1000, &store), ConfigError);  // not a multiple of 1024
  EXPECT_THROW(CpuAdamStream(state, kTile, nullptr), std::invalid_argument);  // no store
  AdamState wrong = state;
  wrong.n = kN + 1;  // the NVMe tensor has kN floats
  EXPECT_THROW(CpuAdamStream(wrong, kTile, &store), std::invalid_argument);
}

}  // namespace
}  // namespace strata::offload
