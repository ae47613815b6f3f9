// KV heads replicated over TP (issue 26) under mpirun, linked into
// executor_runtime_comm_mpi_test (4 and 8 ranks): tiny-llama (2 KV heads, 4 query heads) at
// t = 4, d = world / 4, so each KV head is held by 2 consecutive TP ranks. Checked here: the
// KV-copies process groups, that a layer's K|V gradient becomes the sum over the ranks holding
// its head (and nothing else changes), and that the gradient norm counts each replicated head
// once. The training itself is held against one rank by the Llama equivalence matrix.
// EXPECT (not ASSERT) before collectives, so every rank still joins them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cost_model/specs/layer_tensors.h"
#include "executor/comm/process_groups.h"
#include "executor/data/corpus.h"
#include "executor/run/rank_training.h"
#include "tests/executor/engine_test_support.h"

namespace strata {
namespace {

class KvCopies : public ::testing::Test {
 protected:
  void SetUp() override {
    world = MpiCommunicator::duplicate(MPI_COMM_WORLD);
    model = testing_support::tiny_llama_model();
    train = testing_support::tiny_train();
    plan = testing_support::make_plan(4, 1, world->size() / 4, 1, ScheduleKind::kOneFOneB, 0, 1);
    plan.check_against_model(model, train, "kv copies test plan");
    corpus = data::generated_corpus(train.seed, 1 << 16);
    rank = std::make_unique<engine::RankTraining>(model, train, plan, *world, TierBudgets{},
                                                  data::TokenView::of_bytes(corpus));
  }
  std::unique_ptr<MpiCommunicator> world;
  ModelSpec model;
  TrainSpec train;
  Plan plan;
  std::vector<std::uint8_t> corpus;
  std::unique_ptr<engine::RankTraining> rank;
};

TEST_F(KvCopies, GroupsAreTheConsecutiveTpRanksOfOneHead) {
  // t / kv_heads = 4 / 2 = 2 copies of each head.
  EXPECT_EQ(kv_head_copies(model, 4), 2);
  const ProcessGroups& groups = rank->groups();
  const int w = world->rank();
  const std::vector<int> expected = kv_copies_group_ranks(w, groups.dims());
  // World rank w = dp * 4 + tp (Megatron's order, p = 1): the head of TP rank tp is tp / 2,
  // held by TP ranks 2 (tp / 2) and 2 (tp / 2) + 1 of the same DP replica.
  const int first = w / 2 * 2;
  EXPECT_EQ(expected, (std::vector<int>{first, first + 1}));
  Communicator* copies = groups.kv_copies();
  ASSERT_NE(copies, nullptr);
  EXPECT_EQ(copies->size(), 2);
  std::int32_t mine = w;
  std::vector<std::int32_t> members(2, -1);
  copies->all_gather(&mine, members.data(), 1);
  EXPECT_EQ(std::vector<int>(members.begin(), members.end()), expected);
  // No group where nothing is replicated: t = 2 splits the 2 KV heads.
  EXPECT_EQ(kv_head_copies(model, 2), 1);
}

TEST_F(KvCopies, KvGradientIsTheSumOverTheRanksHoldingTheHead) {
  engine::ModelState& state = rank->engine().state();
  const std::int32_t u = state.index("layer0");
  ASSERT_GE(u, 0);
  const auto unit = static_cast<std::size_t>(u);
  const int tp = rank->groups().coords().tp;
  float* g = state.grads(unit);
  const UnitLayout& layout = state.unit(unit).layout;
  std::fill(g, g + layout.count, static_cast<float>(tp + 1));
  state.sum_kv_grads(unit);
  // TP ranks 2k and 2k + 1 hold head k and put in (2k + 1) and (2k + 2): both get 4k + 3
  // in every K|V element; every other tensor keeps this rank's own tp + 1.
  const int k = tp / 2;
  for (const ParamSegment& s : layout.segments) {
    const float want = s.name == std::string("kv_w") ? static_cast<float>(4 * k + 3)
                                                     : static_cast<float>(tp + 1);
    std::int64_t wrong = 0;
    for (std::int64_t i = s.offset; i < s.offset + s.count(); ++i) wrong += g[i] != want;
    EXPECT_EQ(wrong, 0) << s.name << " on TP rank " << tp << ": expected " << want;
  }
}

TEST_F(KvCopies, GradientNormCountsEachReplicatedHeadOnce) {
  engine::ModelState& state = rank->engine().state();
  for (std::size_t u = 0; u < state.size(); ++u) {
    float* g = state.grads(u);
    std::fill(g, g + state.unit(u).layout.count, 1.0f);
  }
  // Every gradient element 1: a norm that counts each parameter of the single-rank model
  // once is sqrt(N), N = total_params(). Counting both copies of the K|V heads would add
  // layers * 2 (K and V) * kv_heads * head_dim * hidden = 4 * 2 * 2 * 16 * 64 = 16384 to N.
  const double n = static_cast<double>(model.total_params());
  const double norm = state.grad_norm(train.optimizer);
  EXPECT_NEAR(norm * norm, n, 1e-6 * n) << "N = " << n;
}

}  // namespace
}  // namespace strata
