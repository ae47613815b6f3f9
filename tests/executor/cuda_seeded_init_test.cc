// Seeded initial values drawn on the GPU (executor/cuda/seeded_init.h) against the CPU's
// (model::init_unit_range, itself held to the formula written plainly by param_init_test),
// bit for bit: every unit of a t2 p2 plan (TP shards: the GPU kernel's global index mapping
// against ParamSegment's; wte shards with padding rows at the CUDA backend's row alignment),
// slices that start and end mid-row with ZeRO padding (at either half of a pair of the
// pair draw: the GPU draws each element's pair whole, the CPU a row's pairs), and a GPT-2
// 124M layer (7M elements: thousands handed back to the exact formula). GTEST_SKIPs
// without a device.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cost_model/specs/partition.h"
#include "executor/cuda/seeded_init.h"
#include "executor/model/param_init.h"
#include "tests/kernels/cuda_test_util.h"

namespace strata {
namespace {

using kernels::cuda::DeviceBuffer;
using kernels::cuda::testing::CudaTest;

ModelSpec model(const std::string& name) {
  return ModelSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/models/" + name + ".json");
}

class SeededInitOnDevice : public CudaTest {
 protected:
  // The bits the GPU drew for [begin, end) of `unit`, against the host's.
  void expect_same_bits(const UnitLayout& unit, std::int64_t begin, std::int64_t end) {
    const auto n = static_cast<std::size_t>(end - begin);
    std::vector<float> want(n);
    model::init_unit_range(unit, 99, want.data(), begin, end);
    DeviceBuffer dst(n * sizeof(float));
    // NaN bytes first: an element the GPU path forgot shows up.
    ASSERT_EQ(cudaMemset(dst.get(), 0xFF, n * sizeof(float)), cudaSuccess);
    cuda::draw_seeded_on_device(dst.as<float>(), unit, 99, begin, end, stream());
    std::vector<std::uint32_t> got(n), host(n);
    dst.copy_to_host(got.data(), n * sizeof(float));
    std::memcpy(host.data(), want.data(), n * sizeof(float));
    std::size_t differing = 0;
    for (std::size_t i = 0; i < n; ++i) differing += got[i] != host[i] ? 1 : 0;
    EXPECT_EQ(differing, 0u) << unit.name << " [" << begin << ", " << end << ")";
  }
};

TEST_F(SeededInitOnDevice, EveryUnitOfATensorParallelPlan) {
  Plan plan;
  plan.tp = 2;
  plan.pp = 2;
  for (std::int64_t pp = 0; pp < 2; ++pp) {
    for (std::int64_t tp = 0; tp < 2; ++tp) {
      for (const UnitLayout& unit : rank_unit_layouts(model("tiny-wide"), plan, pp, tp,
                                                      vocab_row_alignment(Backend::kCuda))) {
        const std::int64_t padded = unit.count + 5;
        expect_same_bits(unit, 0, padded);
        expect_same_bits(unit, padded / 3 + 1, padded);
      }
    }
  }
}

TEST_F(SeededInitOnDevice, AGpt2LayerWithManyElementsForTheExactFormula) {
  const UnitLayout layer = layer_layout(model("gpt2-124m"), {2, 1}, 5);
  expect_same_bits(layer, 0, layer.count);
  expect_same_bits(layer, 12345, layer.count / 2);
}

}  // namespace
}  // namespace strata
