// The leaderboard of a select run (executor/select/leaderboard.h): the metric it ranks by and
// the reason when it cannot use validation loss. The entries are built so that the training
// and the validation losses order the jobs differently, so each test sees which one ranked.
#include "executor/select/leaderboard.h"

#include <gtest/gtest.h>

namespace strata::select {
namespace {

// Job 0 has the lower training loss and job 1 the lower validation loss: ranked by training
// loss the order is {0, 1}, by validation loss {1, 0}.
std::vector<LeaderboardEntry> crossing_entries() {
  return {{3 * 8 * 64, 2.0, 3.5, "seed 1, 8 x 64 tokens"},
          {3 * 8 * 64, 2.5, 3.0, "seed 1, 8 x 64 tokens"}};
}

TEST(SelectLeaderboard, EqualTokensAndBatchesRankByValidationLoss) {
  const Leaderboard board = rank_jobs(crossing_entries());
  EXPECT_TRUE(board.by_validation);
  EXPECT_EQ(board.reason, "");
  EXPECT_EQ(board.order, (std::vector<std::size_t>{1, 0}));
}

TEST(SelectLeaderboard, NoValidationRanksByTrainLossAndSaysSo) {
  std::vector<LeaderboardEntry> entries = crossing_entries();
  for (LeaderboardEntry& e : entries) e.valid_loss.reset();
  const Leaderboard board = rank_jobs(entries);
  EXPECT_FALSE(board.by_validation);
  EXPECT_EQ(board.reason, "no validation data");
  EXPECT_EQ(board.order, (std::vector<std::size_t>{0, 1}));
}

TEST(SelectLeaderboard, DifferentTokenCountsRankByTrainLoss) {
  std::vector<LeaderboardEntry> entries = crossing_entries();
  entries[1].train_tokens = 3 * 16 * 64;  // a global batch of 16: twice the tokens
  const Leaderboard board = rank_jobs(entries);
  EXPECT_FALSE(board.by_validation);
  EXPECT_EQ(board.reason, "jobs trained different token counts");
  EXPECT_EQ(board.order, (std::vector<std::size_t>{0, 1}));
}

TEST(SelectLeaderboard, DifferentValidationBatchesRankByTrainLoss) {
  // Equal tokens (6 steps of 8 against 3 of 16), but validation batches of 8 and of 16
  // sequences: the two losses are means over different tokens.
  std::vector<LeaderboardEntry> entries = crossing_entries();
  entries[1].valid_batches = "seed 1, 16 x 64 tokens";
  const Leaderboard board = rank_jobs(entries);
  EXPECT_FALSE(board.by_validation);
  EXPECT_NE(board.reason.find("validated on different batches"), std::string::npos) << board.reason;
  EXPECT_EQ(board.order, (std::vector<std::size_t>{0, 1}));
}

TEST(SelectLeaderboard, ATieKeepsJobOrder) {
  std::vector<LeaderboardEntry> entries = crossing_entries();
  entries[0].valid_loss = entries[1].valid_loss;
  EXPECT_EQ(rank_jobs(entries).order, (std::vector<std::size_t>{0, 1}));
}

}  // namespace
}  // namespace strata::select
