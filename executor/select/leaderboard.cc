// Ranks a select run's jobs (see leaderboard.h).
#include "executor/select/leaderboard.h"

#include <algorithm>
#include <numeric>

namespace strata::select {
namespace {

// Why the entries cannot be ranked by validation loss; "" when they can.
std::string not_comparable(const std::vector<LeaderboardEntry>& entries) {
  const bool any = std::any_of(entries.begin(), entries.end(),
                               [](const LeaderboardEntry& e) { return e.valid_loss.has_value(); });
  if (!any) return "no validation data";
  for (const LeaderboardEntry& e : entries) {
    if (!e.valid_loss) return "not every job has a validation loss";
  }
  for (const LeaderboardEntry& e : entries) {
    if (e.train_tokens != entries.front().train_tokens) return "jobs trained different token counts";
  }
  for (const LeaderboardEntry& e : entries) {
    if (e.valid_batches != entries.front().valid_batches) {
      return "jobs validated on different batches (seed, global batch or sequence length differ)";
    }
  }
  return "";
}

}  // namespace

Leaderboard rank_jobs(const std::vector<LeaderboardEntry>& entries) {
  Leaderboard board;
  board.reason = entries.empty() ? "no jobs" : not_comparable(entries);
  board.by_validation = board.reason.empty();
  board.order.resize(entries.size());
  std::iota(board.order.begin(), board.order.end(), 0);
  const auto loss = [&](std::size_t i) {
    return board.by_validation ? *entries[i].valid_loss : entries[i].final_train_loss;
  };
  std::stable_sort(board.order.begin(), board.order.end(),
                   [&](std::size_t a, std::size_t b) { return loss(a) < loss(b); });
  return board;
}

}  // namespace strata::select
