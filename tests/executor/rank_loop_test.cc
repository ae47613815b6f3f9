// RankLoop, the one training loop of `strata run` and `strata select`: it runs the steps it is
// given, evaluates after exactly the steps the evaluation schedule names (every eval_every and
// after the run's last, wherever the range ends), computes the loss the engine computes
// alone, and stops where the caller's stop says so.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "executor/comm/mpi_communicator.h"
#include "executor/data/corpus.h"
#include "executor/engine/validation_loss.h"
#include "executor/run/rank_loop.h"
#include "executor/run/rank_training.h"
#include "tests/executor/engine_test_support.h"

namespace strata::testing_support {
namespace {

struct Seen {
  std::vector<std::int64_t> steps;
  std::vector<double> losses;
  std::vector<std::optional<double>> evals;
};

TEST(RankLoop, EvaluatesOnTheScheduleAndStopsWhereAsked) {
  const ModelSpec model = tiny_model();
  TrainSpec train = tiny_train();
  train.steps = 5;
  const Plan plan = make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 0, 4);
  plan.check_against_model(model, train, "loop plan");
  const auto corpus = data::generated_corpus(train.seed, 1 << 16);
  const auto tokens = data::TokenView::of_bytes(corpus);
  EvalSpec eval;
  eval.valid_fraction = 0.1;  // has_validation(); the loop is given the tokens directly
  eval.eval_every = 2;
  eval.eval_batches = 1;

  auto world = MpiCommunicator::duplicate(MPI_COMM_SELF);
  engine::RankTraining rank(model, train, plan, *world, TierBudgets{}, tokens);
  engine::RankLoop loop(rank, eval, tokens);
  ASSERT_TRUE(loop.validates());
  Seen seen;
  const auto record = [&](engine::LoopStep& s) {
    seen.steps.push_back(s.step);
    seen.losses.push_back(s.result.loss);
    seen.evals.push_back(s.eval_loss);
  };
  // Steps 0..2 (a slice of select's, say), then 3..4 with a stop asked before the second.
  EXPECT_EQ(loop.run(0, 3, record), 3);
  int asked = 0;
  EXPECT_EQ(loop.run(3, 5, record, [&] { return ++asked == 2; }), 1);
  EXPECT_EQ(asked, 2);
  ASSERT_EQ(seen.steps, (std::vector<std::int64_t>{0, 1, 2, 3}));
  // eval_every 2 of 5 steps: after steps 2 and 4 (1-based), i.e. 0-based steps 1 and 3; the
  // run's last (5) was stopped before.
  for (std::size_t i = 0; i < seen.evals.size(); ++i) {
    EXPECT_EQ(seen.evals[i].has_value(), i == 1 || i == 3) << "step " << i;
  }

  // The same steps without the loop: the same losses bit for bit, and the same validation loss
  // after step 4 (the evaluation leaves training unchanged).
  auto world2 = MpiCommunicator::duplicate(MPI_COMM_SELF);
  engine::RankTraining alone(model, train, plan, *world2, TierBudgets{}, tokens);
  const data::BatchSampler valid(tokens, train.seed, model.seq_len, data::SampleStream::kValidation);
  for (std::int64_t s = 0; s < 4; ++s) {
    EXPECT_EQ(alone.engine().step(s).loss, seen.losses[static_cast<std::size_t>(s)]) << s;
  }
  EXPECT_EQ(engine::validation_loss(alone.engine(), valid, 1), *seen.evals[3]);
}

TEST(RankLoop, WithoutValidationTokensItNeverEvaluates) {
  const ModelSpec model = tiny_model();
  TrainSpec train = tiny_train();
  train.steps = 2;
  const Plan plan = make_plan(1, 1, 1, 1, ScheduleKind::kOneFOneB, 0, 4);
  const auto corpus = data::generated_corpus(train.seed, 1 << 16);
  EvalSpec eval;
  eval.valid_fraction = 0.1;
  auto world = MpiCommunicator::duplicate(MPI_COMM_SELF);
  engine::RankTraining rank(model, train, plan, *world, TierBudgets{},
                            data::TokenView::of_bytes(corpus));
  engine::RankLoop loop(rank, eval, data::TokenView{});
  EXPECT_FALSE(loop.validates());
  int evaluated = 0;
  EXPECT_EQ(loop.run(0, 2, [&](engine::LoopStep& s) { evaluated += s.eval_loss.has_value(); }), 2);
  EXPECT_EQ(evaluated, 0);
}

}  // namespace
}  // namespace strata::testing_support
