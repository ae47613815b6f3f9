// Test helper for the Program's tests (generator, simulator, op costs): a tiny GPT of a
// given depth (the Program only cares which units exist) and a training setup of one
// global batch.
#pragma once

#include <cstdint>

#include "cost_model/model_spec.h"
#include "cost_model/train_spec.h"

namespace strata::testing {

// hidden 64, 4 heads, ffn 256, sequence 64, byte vocabulary.
inline ModelSpec small_gpt(std::int64_t layers) {
  ModelSpec m;
  m.name = "test";
  m.layers = layers;
  m.hidden = 64;
  m.heads = 4;
  m.ffn_hidden = 256;
  m.seq_len = 64;
  m.vocab = 256;
  return m;
}

inline TrainSpec train_of(std::int64_t global_batch) {
  TrainSpec t;
  t.global_batch = global_batch;
  return t;
}

}  // namespace strata::testing
