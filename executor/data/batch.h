// Batches: step k's global batch is B windows of seq_len + 1 tokens of a token stream
// (token_view.h: raw bytes, a Megatron .bin, an llm.c file) at offsets drawn from
// (seed, stream, k) alone, so every rank derives the same global batch and every plan
// trains on the same data; a rank then takes its data-parallel share and its micro-batches.
// Inputs are a window's first seq_len tokens, targets the window shifted by one. The
// training and the validation streams draw from different keys; validation batch j is the
// same at every evaluation, so evaluations compare.
// Deliberately not here: epochs, document boundaries, prefetching.
#pragma once

#include <cstdint>
#include <vector>

#include "executor/data/token_view.h"

namespace strata::data {

// Which key the window offsets are drawn from.
enum class SampleStream { kTraining, kValidation };

class BatchSampler {
 public:
  // The tokens must outlive the sampler and hold at least seq_len + 1 tokens.
  BatchSampler(TokenView tokens, std::uint64_t seed, std::int64_t seq_len,
               SampleStream stream = SampleStream::kTraining);
  BatchSampler(const std::vector<std::uint8_t>& corpus, std::uint64_t seed, std::int64_t seq_len)
      : BatchSampler(TokenView::of_bytes(corpus), seed, seq_len) {}

  // Sequence `index` (0..B-1) of step `step`'s global batch: inputs and targets, (seq_len)
  // each, written to the given arrays.
  void sequence(std::int64_t step, std::int64_t index, std::int32_t* inputs,
                std::int32_t* targets) const;

  // Micro-batch `micro_batch` of data-parallel rank `dp_rank`: sequences
  // dp_rank * (B/d) + micro_batch * b + [0, b) of the global batch. inputs, targets: (b, seq_len).
  void micro_batch(std::int64_t step, std::int64_t global_batch, std::int64_t dp,
                   std::int64_t dp_rank, std::int64_t micro_batch, std::int64_t b,
                   std::int32_t* inputs, std::int32_t* targets) const;

  std::int64_t seq_len() const { return seq_len_; }

 private:
  TokenView tokens_;
  std::uint64_t key_;
  std::int64_t seq_len_;
};

}  // namespace strata::data
