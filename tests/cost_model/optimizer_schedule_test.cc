// The LR schedule (warmup, constant / linear / cosine decay to min_lr) and the weight-decay
// rule, with values worked by hand; and the schedule keys' validation and round trip.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/optimizer_schedule.h"
#include "cost_model/specs/train_spec.h"
#include "tests/cost_model/bundled_configs.h"
#include "tests/cost_model/spec_test_util.h"

namespace strata {
namespace {

using strata::testing::expect_error;

OptimizerSpec schedule(OptimizerSpec::DecayStyle style) {
  OptimizerSpec o;
  o.lr = 1e-3;
  o.min_lr = 1e-4;
  o.lr_warmup_steps = 10;
  o.lr_decay_style = style;
  o.lr_decay_steps = 110;
  return o;
}

TEST(LearningRate, ConstantWithoutScheduleKeysIsTheSameDouble) {
  OptimizerSpec o;
  o.lr = 3e-4;
  for (std::int64_t t : {1, 2, 100, 10000}) EXPECT_EQ(learning_rate(o, t, 50), o.lr);
}

TEST(LearningRate, WarmupThenLinearDecay) {
  const OptimizerSpec o = schedule(OptimizerSpec::DecayStyle::kLinear);
  EXPECT_DOUBLE_EQ(learning_rate(o, 1, 200), 1e-4);   // 1e-3 * 1/10
  EXPECT_DOUBLE_EQ(learning_rate(o, 5, 200), 5e-4);   // 1e-3 * 5/10
  EXPECT_DOUBLE_EQ(learning_rate(o, 10, 200), 1e-3);  // the peak, end of warmup
  // t = 60: ratio (60-10)/(110-10) = 0.5 -> 1e-4 + 9e-4 * 0.5 = 5.5e-4.
  EXPECT_DOUBLE_EQ(learning_rate(o, 60, 200), 5.5e-4);
  EXPECT_DOUBLE_EQ(learning_rate(o, 110, 200), 1e-4);  // decay over: min_lr
  EXPECT_DOUBLE_EQ(learning_rate(o, 150, 200), 1e-4);
}

TEST(LearningRate, CosineDecayAndRunStepsAsDefaultEnd) {
  OptimizerSpec o = schedule(OptimizerSpec::DecayStyle::kCosine);
  // t = 35: ratio 0.25 -> 1e-4 + 9e-4 (1 + cos(pi/4)) / 2 = 1e-4 + 9e-4 * 0.853553 = 8.6820e-4.
  EXPECT_NEAR(learning_rate(o, 35, 200), 1e-4 + 9e-4 * (1 + std::cos(std::numbers::pi / 4)) / 2,
              1e-15);
  EXPECT_NEAR(learning_rate(o, 60, 200), 5.5e-4, 1e-15);  // ratio 0.5: the midpoint
  // lr_decay_steps 0: the decay ends at the run's last step (here 20): t = 15 is ratio 0.5.
  o.lr_decay_steps = 0;
  EXPECT_NEAR(learning_rate(o, 15, 20), 5.5e-4, 1e-15);
  EXPECT_DOUBLE_EQ(learning_rate(o, 20, 20), 1e-4);
}

// The bundled GPT train configs start a run as GPT-2 and nanoGPT do: a linear warmup from 0,
// then a cosine decay to lr / 10, ending at a fixed step, so that a run cut to fewer steps
// (the GPU check's 6 and 10, the Llama phase's 2 beside 10) has the same lr at each step.
// GPT-2 1.5B at gpt2.json's former constant 6e-4 went 10.9 -> 4.9 -> 20.2 in five steps on
// an H200; with 20 steps of warmup its fifth step runs at 6e-4 * 5/20 = 1.5e-4.
TEST(LearningRate, BundledGptTrainConfigsWarmUpThenDecay) {
  for (const char* name : {"gpt2", "gpt-8b"}) {
    const OptimizerSpec o = strata::testing::bundled_train(name).optimizer;
    SCOPED_TRACE(name);
    ASSERT_GT(o.lr_warmup_steps, 1);
    EXPECT_EQ(o.lr_decay_style, OptimizerSpec::DecayStyle::kCosine);
    EXPECT_GT(o.lr_decay_steps, o.lr_warmup_steps);
    EXPECT_DOUBLE_EQ(o.min_lr, o.lr / 10);
    EXPECT_DOUBLE_EQ(learning_rate(o, 1, 6), o.lr / static_cast<double>(o.lr_warmup_steps));
    // The same lr whatever the run's length.
    for (std::int64_t t = 1; t <= o.lr_decay_steps; ++t) {
      EXPECT_EQ(learning_rate(o, t, 2), learning_rate(o, t, 1000)) << "step " << t;
    }
  }
}

TEST(WeightDecay, MatricesOnlyUnlessAsked) {
  ModelSpec m;
  m.name = "m";
  m.layers = 2;
  m.hidden = 8;
  m.heads = 2;
  m.seq_len = 4;
  m.vocab = 16;
  m.ffn_hidden = 32;
  const UnitLayout layer = layer_layout(m, TpShape{}, 0);
  OptimizerSpec o;
  for (const char* name : {"qkv_w", "proj_w", "fc_w", "fc2_w"}) EXPECT_TRUE(decays(o, layer.segment(name))) << name;
  for (const char* name : {"ln1_w", "ln1_b", "qkv_b", "proj_b", "ln2_w", "ln2_b", "fc_b", "fc2_b"}) {
    EXPECT_FALSE(decays(o, layer.segment(name))) << name;
  }
  EXPECT_TRUE(decays(o, embedding_layout(m, TpShape{}).segment("wpe")));
  o.decay_biases_and_norms = true;
  EXPECT_TRUE(decays(o, layer.segment("ln1_w")));
}

Json schedule_train_json() {
  return Json::parse(R"({"global_batch": 8, "precision": "fp32",
    "optimizer": {"name": "adamw", "lr": 0.001, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
                  "weight_decay": 0.1, "grad_clip": 1.0, "lr_warmup_steps": 10,
                  "lr_decay_style": "cosine", "lr_decay_steps": 100, "min_lr": 0.0001,
                  "decay_biases_and_norms": true},
    "seed": 1, "steps": 200})");
}

TEST(TrainSpecSchedule, LoadsAndRoundTrips) {
  const TrainSpec t = TrainSpec::from_json(schedule_train_json(), "t.json");
  EXPECT_EQ(t.optimizer.lr_warmup_steps, 10);
  EXPECT_EQ(t.optimizer.lr_decay_style, OptimizerSpec::DecayStyle::kCosine);
  EXPECT_EQ(t.optimizer.lr_decay_steps, 100);
  EXPECT_DOUBLE_EQ(t.optimizer.min_lr, 1e-4);
  EXPECT_TRUE(t.optimizer.decay_biases_and_norms);
  EXPECT_EQ(t.to_json(), schedule_train_json());
}

TEST(TrainSpecSchedule, RejectsImpossibleValues) {
  Json j = schedule_train_json();
  j["optimizer"]["min_lr"] = 0.01;
  expect_error<ConfigError>([&] { TrainSpec::from_json(j, "t.json"); },
                            {"t.json", "optimizer.min_lr", "0.01", "[0, lr = 0.001]"});
  j = schedule_train_json();
  j["optimizer"]["lr_decay_style"] = "step";
  expect_error<ConfigError>([&] { TrainSpec::from_json(j, "t.json"); },
                            {"t.json", "optimizer.lr_decay_style", "step"});
  j = schedule_train_json();
  j["optimizer"]["lr_decay_steps"] = 10;
  expect_error<ConfigError>([&] { TrainSpec::from_json(j, "t.json"); },
                            {"t.json", "optimizer.lr_decay_steps", "lr_warmup_steps = 10"});
  j = schedule_train_json();
  j["optimizer"]["lr_warmup_steps"] = -1;
  expect_error<ConfigError>([&] { TrainSpec::from_json(j, "t.json"); },
                            {"t.json", "optimizer.lr_warmup_steps"});
}

}  // namespace
}  // namespace strata
