// TrainSpec: loading, round trip and every error path (unknown, missing, wrong type,
// impossible values, bad enums).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/train_spec.h"
#include "tests/cost_model/spec_test_util.h"

namespace strata {
namespace {

using strata::testing::expect_error;

Json train_json() {
  return Json::parse(R"({"global_batch": 8, "precision": "fp32",
    "optimizer": {"name": "adamw", "lr": 0.001, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
                  "weight_decay": 0.0, "grad_clip": 1.0},
    "seed": 1234, "steps": 200})");
}

TEST(TrainSpec, LoadsAndRoundTrips) {
  const TrainSpec t = TrainSpec::from_json(train_json(), "t.json");
  EXPECT_EQ(t.global_batch, 8);
  EXPECT_EQ(t.precision, Precision::kFp32);
  EXPECT_EQ(t.compute_bytes(), 4);
  EXPECT_DOUBLE_EQ(t.optimizer.lr, 1e-3);
  EXPECT_DOUBLE_EQ(t.optimizer.grad_clip, 1.0);
  EXPECT_EQ(t.seed, 1234u);
  EXPECT_EQ(t.steps, 200);
  EXPECT_EQ(t.to_json(), train_json());
}

TEST(TrainSpec, Bf16AndOptionalGradClip) {
  Json j = train_json();
  j["precision"] = "bf16";
  j["optimizer"].erase("grad_clip");
  const TrainSpec t = TrainSpec::from_json(j, "t.json");
  EXPECT_EQ(t.precision, Precision::kBf16);
  EXPECT_EQ(t.compute_bytes(), 2);
  EXPECT_EQ(to_string(t.precision), "bf16");
  EXPECT_DOUBLE_EQ(t.optimizer.grad_clip, 0.0);  // absent = off
}

TEST(TrainSpec, UnknownAndMissingKeys) {
  Json unknown = train_json();
  unknown["optimizer"]["momentum"] = 0.9;
  expect_error<ConfigError>([&] { TrainSpec::from_json(unknown, "t.json"); },
                            {"t.json", "optimizer.momentum", "unknown key"});
  unknown = train_json();
  unknown["micro_batch"] = 1;
  expect_error<ConfigError>([&] { TrainSpec::from_json(unknown, "t.json"); },
                            {"t.json", "micro_batch", "unknown key"});
  for (const char* key : {"global_batch", "precision", "optimizer", "seed", "steps"}) {
    Json j = train_json();
    j.erase(key);
    expect_error<ConfigError>([&] { TrainSpec::from_json(j, "t.json"); },
                              {"t.json", key, "missing key"});
  }
  for (const char* key : {"name", "lr", "beta1", "beta2", "eps", "weight_decay"}) {
    Json j = train_json();
    j["optimizer"].erase(key);
    expect_error<ConfigError>([&] { TrainSpec::from_json(j, "t.json"); },
                              {"t.json", std::string("optimizer.") + key, "missing key"});
  }
}

TEST(TrainSpec, WrongTypesAndBadEnums) {
  Json j = train_json();
  j["global_batch"] = "8";
  expect_error<ConfigError>([&] { TrainSpec::from_json(j, "t.json"); },
                            {"t.json", "global_batch", "\"8\"", "an integer"});
  j = train_json();
  j["precision"] = "fp16";
  expect_error<ConfigError>([&] { TrainSpec::from_json(j, "t.json"); },
                            {"t.json", "precision", "\"fp16\"", "one of bf16, fp32"});
  j = train_json();
  j["optimizer"]["name"] = "sgd";
  expect_error<ConfigError>([&] { TrainSpec::from_json(j, "t.json"); },
                            {"t.json", "optimizer.name", "\"sgd\"", "adamw"});
  j = train_json();
  j["optimizer"]["lr"] = true;
  expect_error<ConfigError>([&] { TrainSpec::from_json(j, "t.json"); },
                            {"t.json", "optimizer.lr", "true", "a number"});
}

TEST(TrainSpec, ImpossibleValues) {
  struct Case {
    const char* block;
    const char* key;
    Json value;
    const char* expected;
  };
  const Case cases[] = {
      {"", "global_batch", 0, "> 0"},
      {"", "steps", -1, "> 0"},
      {"", "seed", -5, ">= 0"},
      {"optimizer", "lr", 0.0, "> 0"},
      {"optimizer", "beta1", 1.0, "[0, 1)"},
      {"optimizer", "beta2", -0.1, "[0, 1)"},
      {"optimizer", "eps", 0.0, "> 0"},
      {"optimizer", "weight_decay", -0.01, ">= 0"},
      {"optimizer", "grad_clip", -1.0, ">= 0"},
  };
  for (const Case& c : cases) {
    Json j = train_json();
    const std::string b = c.block;
    (b.empty() ? j : j[b])[c.key] = c.value;
    const std::string path = b.empty() ? c.key : b + "." + c.key;
    expect_error<ConfigError>([&] { TrainSpec::from_json(j, "t.json"); },
                              {"t.json", path, c.expected});
  }
}

}  // namespace
}  // namespace strata
