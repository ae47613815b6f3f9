// The memory floor (cost_model/memory/memory_floor.h) against the walk it bounds: never above
// estimate_memory's worst device bytes, to the bit, on a broad matrix of plans (GPT- and
// Llama-shaped models, the CPU and the CUDA conventions with and without headroom, GPipe,
// 1F1B and interleaved schedules, p 1..6, m from 1 to past the steady cut, ZeRO 0-3, offload
// of each kind of state, recomputation, SP, uneven first and last stages); and close enough
// to the walk to be worth having (the planner drops by it).
#include "cost_model/memory/memory_floor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "cost_model/specs/errors.h"
#include "cost_model/memory/memory_model.h"
#include "cost_model/specs/units.h"

namespace strata {
namespace {

ModelSpec gpt(std::int64_t layers) {
  ModelSpec m;
  m.name = "gpt";
  m.layers = layers;
  m.hidden = 64;
  m.heads = 4;
  m.seq_len = 64;
  m.vocab = 256;
  m.ffn_hidden = 256;
  return m;
}

// Llama-shaped: RMSNorm, SwiGLU, rotary, 2 KV heads, an untied output layer, no biases.
ModelSpec llama(std::int64_t layers) {
  ModelSpec m = gpt(layers);
  m.name = "llama";
  m.ffn_hidden = 176;
  m.norm = NormKind::kRmsNorm;
  m.mlp = MlpKind::kSwiglu;
  m.position = PositionKind::kRope;
  m.kv_heads = 2;
  m.tied_output = false;
  m.biases = false;
  return m;
}

ClusterSpec cluster(Backend backend, bool headroom) {
  ClusterSpec c;
  c.name = "test";
  c.backend = backend;
  c.nodes = 8;
  c.gpus_per_node = 8;
  if (headroom) {
    c.headroom.context_bytes = 512 * units::kMiB;
    c.headroom.communicator_bytes = 200 * units::kMiB;
    c.headroom.fragmentation_fraction = 0.05;
  }
  return c;
}

// The plan of one matrix cell; `variant` picks d, t, ZeRO, offload, recomputation, SP.
Plan floor_plan(std::int64_t p, std::int64_t v, ScheduleKind kind, int variant) {
  Plan plan;
  plan.pp = p;
  plan.virtual_stages = v;
  plan.schedule = kind;
  plan.tp = variant % 2 == 0 ? 1 : 2;
  plan.sequence_parallel = plan.tp > 1 && variant % 4 == 1;
  plan.dp = variant / 2 % 2 == 0 ? 1 : 2;
  plan.zero_stage = variant % 4;
  plan.recompute = variant / 4 % 3 == 0   ? Recompute::kNone
                   : variant / 4 % 3 == 1 ? Recompute::kSelective
                                          : Recompute::kFull;
  switch (variant / 12) {
    case 1: plan.offload.optimizer = OffloadTier::kCpu; break;
    case 2:
      if (plan.zero_stage >= 2) plan.offload.gradients = OffloadTier::kCpu;
      plan.offload.optimizer = OffloadTier::kCpu;
      break;
    case 3:
      if (plan.zero_stage == 3) plan.offload = {OffloadTier::kCpu, OffloadTier::kCpu, OffloadTier::kCpu};
      break;
    default: break;
  }
  return plan;
}

TEST(MemoryFloor, NeverAboveTheWalkedEstimate) {
  std::int64_t compared = 0, close = 0, uneven = 0;
  for (const bool is_llama : {false, true}) {
    for (const Backend backend : {Backend::kCpu, Backend::kCuda}) {
      for (const bool headroom : {false, true}) {
        const ClusterSpec c = cluster(backend, headroom);
        for (const std::int64_t p : {1, 2, 3, 4, 6}) {
          for (const ScheduleKind kind :
               {ScheduleKind::kGpipe, ScheduleKind::kOneFOneB, ScheduleKind::kInterleaved}) {
            for (const std::int64_t v : {1, 2, 3}) {
              if ((kind == ScheduleKind::kInterleaved) != (v > 1)) continue;
              // 12 layers divide by every p * v here but 6 * 3 (skipped by the plan's check).
              const ModelSpec model = is_llama ? llama(12) : gpt(12);
              for (const std::int64_t m : {1, 2, 6, 24, 60}) {
                for (int variant = 0; variant < 48; ++variant) {
                  for (const bool uneven_stages : {false, true}) {
                    Plan plan = floor_plan(p, v, kind, variant);
                    if (uneven_stages) {
                      if (p < 3 || variant % 3 != 0) continue;
                      // Megatron's uneven split: one layer fewer on the first and last
                      // stages, the rest over the middle ones (12 = 2 (12/p - 1) + ...).
                      plan.first_stage_layers = 12 / (p * v) - 1;
                      plan.last_stage_layers = 12 / (p * v) - 1;
                    }
                    TrainSpec train;
                    train.precision = backend == Backend::kCuda ? Precision::kBf16 : Precision::kFp32;
                    train.global_batch = m * plan.dp * plan.micro_batch;
                    MemoryModelOptions options;
                    options.headroom = c.headroom;
                    MemoryEstimate estimate;
                    try {
                      plan.check(model, c, train);
                      estimate = estimate_memory(model, c, train, plan, options);
                    } catch (const InfeasiblePlan&) {
                      continue;
                    }
                    const double floor = device_memory_floor(model, c, train, plan, options);
                    const std::string what = std::string(is_llama ? "llama " : "gpt ") +
                                             (backend == Backend::kCuda ? "cuda " : "cpu ") +
                                             (headroom ? "headroom " : "") + plan.label() +
                                             " m=" + std::to_string(m);
                    EXPECT_LE(floor, estimate.worst.device) << what;
                    // The planner's estimate (the ranks that can be the worst) is the same.
                    options.every_rank = false;
                    EXPECT_LE(floor, estimate_memory(model, c, train, plan, options).worst.device) << what;
                    EXPECT_GT(floor, 0) << what;
                    ++compared;
                    if (floor >= 0.5 * estimate.worst.device) ++close;
                    if (uneven_stages) ++uneven;
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  // 2 models x 2 backends x 2 headrooms x (5 p x (2 + 2 v)) x 5 m x 48 variants, less those
  // the plan rules refuse (v | 12 / p, m % p for interleaving, t | 2 KV heads ...).
  EXPECT_GT(compared, 10000);
  EXPECT_GT(uneven, 500);
  // Worth having: most plans' floor is at least half their walked peak (the model state and
  // the first backward's in-flight activations are most of a peak).
  EXPECT_GT(close, compared * 3 / 4) << close << " of " << compared;
  RecordProperty("compared", std::to_string(compared));
  RecordProperty("uneven", std::to_string(uneven));
  RecordProperty("floor_at_least_half", std::to_string(close));
}

TEST(MemoryFloor, PublishedConventionHasNoFloor) {
  // The published convention's closed forms walk nothing: no floor to save them.
  const ClusterSpec c = cluster(Backend::kCuda, false);
  TrainSpec train;
  train.global_batch = 8;
  Plan plan;
  plan.pp = 2;
  MemoryModelOptions options;
  options.published_activations = true;
  EXPECT_EQ(device_memory_floor(gpt(12), c, train, plan, options), 0);
}

}  // namespace
}  // namespace strata
