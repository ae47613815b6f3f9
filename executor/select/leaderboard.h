// The leaderboard of a select run: which job did best. Validation loss says it when the jobs
// can be compared on it: every job has one, every job trained on the same number of tokens,
// and every job validated on the same batches (the validation windows are drawn from the
// job's seed and its global batch of seq_len-token sequences, as `strata run` draws them, so
// jobs that differ in those saw different validation tokens). Otherwise the final training
// loss ranks them, as before validation existed, and the reason says why.
// Deliberately not here: running the jobs (select_runner.h), printing (tools/strata/select.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace strata::select {

struct LeaderboardEntry {
  std::int64_t train_tokens = 0;     // steps x global batch x seq_len
  double final_train_loss = 0;
  std::optional<double> valid_loss;  // after the last step; unset: not validated
  std::string valid_batches;         // what its validation batches were drawn from
};

struct Leaderboard {
  std::vector<std::size_t> order;  // entry indices, best (lowest loss) first; ties keep job order
  bool by_validation = false;
  std::string reason;  // when !by_validation: "no validation data", ...
};

// Entries in job order. The rule above decides the metric.
Leaderboard rank_jobs(const std::vector<LeaderboardEntry>& entries);

}  // namespace strata::select
