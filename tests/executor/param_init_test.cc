// Parameter initialisation on the OpenMP team: the same bits at 1 and 2 threads, the same
// bits as a plain element-by-element loop over the formula (reference_param_init.h), and
// set-up progress.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <numbers>
#include <string>
#include <vector>

#include "cost_model/specs/partition.h"
#include "executor/model/param_init.h"
#include "tests/executor/reference_param_init.h"
#include "tests/executor/omp_threads.h"

namespace strata {
namespace {

ModelSpec model(const std::string& name) {
  return ModelSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/models/" + name + ".json");
}

using testing_support::reference_init_unit_range;

std::vector<std::uint32_t> bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
  return out;
}

std::vector<float> init(const UnitLayout& unit, std::int64_t begin, std::int64_t end) {
  std::vector<float> out(static_cast<std::size_t>(end - begin), -7.0f);  // every one written
  model::init_unit_range(unit, 1234, out.data(), begin, end);
  return out;
}

using Threads = testing_support::ScopedThreads;

// Every unit of every rank of a t2 p2 plan of tiny-wide (wte shards with padding rows at
// alignment 128), whole and as ZeRO-3-like slices of a padded buffer that start and end
// mid-row.
std::vector<UnitLayout> units() {
  Plan plan;
  plan.tp = 2;
  plan.pp = 2;
  std::vector<UnitLayout> all;
  for (std::int64_t pp = 0; pp < 2; ++pp) {
    for (std::int64_t tp = 0; tp < 2; ++tp) {
      for (auto& u : rank_unit_layouts(model("tiny-wide"), plan, pp, tp, 128)) all.push_back(u);
    }
  }
  return all;
}

TEST(ParamInit, SameBitsAtOneAndTwoThreads) {
  for (const UnitLayout& unit : units()) {
    const std::int64_t padded = unit.count + 5;  // ZeRO padding past the last segment
    for (const auto& [begin, end] : {std::pair<std::int64_t, std::int64_t>{0, padded},
                                     {padded / 3 + 1, padded}, {7, padded / 2 + 3}}) {
      std::vector<float> one, two;
      {
        const Threads t(1);
        one = init(unit, begin, end);
      }
      {
        const Threads t(2);
        two = init(unit, begin, end);
      }
      EXPECT_EQ(bits(one), bits(two)) << unit.name << " [" << begin << ", " << end << ")";
    }
  }
}

TEST(ParamInit, SameBitsAsAPlainLoopOverTheFormula) {
  const Threads t(2);
  for (const UnitLayout& unit : units()) {
    const std::int64_t padded = unit.count + 5;
    for (const auto& [begin, end] : {std::pair<std::int64_t, std::int64_t>{0, padded},
                                     {padded / 3 + 1, padded - 2}}) {
      std::vector<float> want(static_cast<std::size_t>(end - begin));
      reference_init_unit_range(unit, 1234, want.data(), begin, end);
      EXPECT_EQ(bits(init(unit, begin, end)), bits(want))
          << unit.name << " [" << begin << ", " << end << ")";
    }
  }
  // A GPT-2 124M layer: 7M elements, so a slice of a million of them (qkv_w and beyond).
  const UnitLayout layer = layer_layout(model("gpt2-124m"), {1, 0}, 11);
  const std::int64_t begin = 1'000'003, end = 2'000'000;
  std::vector<float> want(static_cast<std::size_t>(end - begin));
  reference_init_unit_range(layer, 1234, want.data(), begin, end);
  EXPECT_EQ(bits(init(layer, begin, end)), bits(want));
}

TEST(ParamInit, ProgressCountsEveryElementAndKeepsTheSeededInitFindable) {
  const UnitLayout unit = layer_layout(model("tiny"), {1, 0}, 0);
  std::int64_t told = 0;
  const model::UnitInit seeded = model::with_progress(
      model::SeededInit{1234, {}}, [&told](std::int64_t n) { told += n; });
  // The model state finds a SeededInit inside (to draw on the device); its values are
  // init_unit_range's.
  ASSERT_NE(seeded.target<model::SeededInit>(), nullptr);
  EXPECT_EQ(seeded.target<model::SeededInit>()->seed, 1234u);
  std::vector<float> got(static_cast<std::size_t>(unit.count));
  seeded(unit, got.data(), 0, unit.count);
  EXPECT_EQ(bits(got), bits(init(unit, 0, unit.count)));
  EXPECT_EQ(told, unit.count);
  // Any other init is wrapped: called once per call, then the count.
  int calls = 0;
  const model::UnitInit other = model::with_progress(
      [&calls](const UnitLayout&, float*, std::int64_t, std::int64_t) { ++calls; },
      [&told](std::int64_t n) { told += n; });
  other(unit, got.data(), 10, 25);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(told, unit.count + 15);
  EXPECT_THROW(model::with_progress({}, [](std::int64_t) {}), std::invalid_argument);
}

}  // namespace
}  // namespace strata
