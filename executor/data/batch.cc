// Deterministic windows of the corpus per (seed, step, sequence) (see batch.h).
#include "executor/data/batch.h"

#include <stdexcept>

#include "executor/model/param_init.h"

namespace strata::data {

BatchSampler::BatchSampler(TokenView tokens, std::uint64_t seed, std::int64_t seq_len,
                           SampleStream stream)
    // Training keeps the key it always had (code 2000), so byte corpora sample as before.
    : tokens_(tokens),
      key_(model::tensor_key(seed, stream == SampleStream::kTraining ? 2000 : 2001, 0)),
      seq_len_(seq_len) {
  if (tokens.count < seq_len + 1) {
    throw std::invalid_argument("BatchSampler: tokens shorter than seq_len + 1");
  }
}

void BatchSampler::sequence(std::int64_t step, std::int64_t index, std::int32_t* inputs,
                            std::int32_t* targets) const {
  const auto windows = tokens_.count - seq_len_;  // start offsets
  const std::uint64_t key = model::splitmix64(key_ ^ model::splitmix64(static_cast<std::uint64_t>(step)));
  const auto start = static_cast<std::int64_t>(model::uniform_at(key, index) *
                                               static_cast<double>(windows));
  tokens_.read(start, seq_len_, inputs);
  tokens_.read(start + 1, seq_len_, targets);
}

void BatchSampler::micro_batch(std::int64_t step, std::int64_t global_batch, std::int64_t dp,
                               std::int64_t dp_rank, std::int64_t micro_batch, std::int64_t b,
                               std::int32_t* inputs, std::int32_t* targets) const {
  const std::int64_t first = dp_rank * (global_batch / dp) + micro_batch * b;
  for (std::int64_t i = 0; i < b; ++i) {
    sequence(step, first + i, inputs + i * seq_len_, targets + i * seq_len_);
  }
}

}  // namespace strata::data
