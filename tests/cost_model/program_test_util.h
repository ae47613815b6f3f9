// Test helper for the Program's tests (generator, simulator, op costs, critical path): a tiny
// GPT of a given depth (the Program only cares which units exist), a training setup of one
// global batch and a pipeline plan.
#pragma once

#include <cstdint>

#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/train_spec.h"

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

// A pipeline plan of p stages (v chunks each) under `kind`, d-way data parallel at ZeRO `zero`.
inline Plan plan_of(ScheduleKind kind, std::int64_t p, std::int64_t v, std::int64_t d = 1,
                    int zero = 0) {
  Plan plan;
  plan.pp = p;
  plan.dp = d;
  plan.virtual_stages = v;
  plan.schedule = kind;
  plan.zero_stage = zero;
  return plan;
}

}  // namespace strata::testing
