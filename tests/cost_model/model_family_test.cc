// ModelSpec's family keys: GPT-2 defaults, a Llama-shaped config round-trips, and each bad
// value is an error naming the file, the key, the value and what was expected. Llama 3.1's
// rope_scaling likewise.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/model_spec.h"
#include "tests/cost_model/spec_test_util.h"

namespace strata {
namespace {

using strata::testing::expect_error;

Json gpt_json() {
  return Json::parse(R"({"name": "g", "layers": 2, "hidden": 16, "heads": 4, "seq_len": 8,
                         "vocab": 32, "ffn_hidden": 64})");
}

// Every family key, Llama 3's choices.
Json llama_json() {
  Json j = gpt_json();
  j.update(Json::parse(R"({"norm": "rmsnorm", "norm_epsilon": 1e-05, "mlp": "swiglu",
                           "position": "rope", "rope_theta": 500000.0, "kv_heads": 2,
                           "tied_output": false, "biases": false})"));
  return j;
}

TEST(ModelFamily, DefaultsAreGpt2AndWriteNothingNew) {
  const ModelSpec m = ModelSpec::from_json(gpt_json(), "g.json");
  EXPECT_EQ(m.norm, NormKind::kLayerNorm);
  EXPECT_EQ(m.mlp, MlpKind::kGelu);
  EXPECT_EQ(m.position, PositionKind::kLearned);
  EXPECT_EQ(m.kv_head_count(), 4);
  EXPECT_TRUE(m.tied_output);
  EXPECT_TRUE(m.biases);
  EXPECT_TRUE(m.is_gpt_family());
  EXPECT_EQ(m.family_name(), "gpt");
  EXPECT_EQ(m.to_json(), gpt_json());  // no family key appears in a GPT config written back
}

TEST(ModelFamily, LlamaRoundTrips) {
  const ModelSpec m = ModelSpec::from_json(llama_json(), "l.json");
  EXPECT_EQ(m.norm, NormKind::kRmsNorm);
  EXPECT_EQ(m.mlp, MlpKind::kSwiglu);
  EXPECT_EQ(m.position, PositionKind::kRope);
  EXPECT_DOUBLE_EQ(m.rope_theta, 500000.0);
  EXPECT_EQ(m.kv_head_count(), 2);
  EXPECT_FALSE(m.tied_output);
  EXPECT_FALSE(m.biases);
  EXPECT_FALSE(m.is_gpt_family());
  EXPECT_EQ(m.family_name(), "rmsnorm, swiglu, rope, kv_heads 2, untied output, no biases");
  EXPECT_EQ(m.to_json(), llama_json());
}

// Llama 3.1's published rope_scaling (config.json of meta-llama/Llama-3.1-8B).
Json llama31_json() {
  Json j = llama_json();
  j["rope_scaling"] = Json::parse(R"({"factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 8192})");
  return j;
}

TEST(ModelFamily, RopeScalingRoundTripsAndIsAbsentByDefault) {
  EXPECT_FALSE(ModelSpec::from_json(llama_json(), "l.json").rope_scaling.has_value());
  const ModelSpec m = ModelSpec::from_json(llama31_json(), "l31.json");
  ASSERT_TRUE(m.rope_scaling.has_value());
  EXPECT_EQ(*m.rope_scaling, (RopeScaling{8.0, 1.0, 4.0, 8192}));
  EXPECT_EQ(m.to_json(), llama31_json());
  EXPECT_EQ(m.family_name(),
            "rmsnorm, swiglu, rope, rope_scaling x8, kv_heads 2, untied output, no biases");
  // Hugging Face's config.json also says rope_type "llama3", the one type there is: accepted.
  Json typed = llama31_json();
  typed["rope_scaling"]["rope_type"] = "llama3";
  EXPECT_EQ(ModelSpec::from_json(typed, "hf.json"), m);
}

TEST(ModelFamily, BadRopeScalingNamesFileKeyValueAndExpectation) {
  auto with = [](const char* key, const Json& value) {
    Json j = llama31_json();
    j["rope_scaling"][key] = value;
    return j;
  };
  expect_error<ConfigError>([&] { ModelSpec::from_json(with("factor", 0.5), "l31.json"); },
                            {"l31.json", "rope_scaling.factor", "0.5", ">= 1"});
  expect_error<ConfigError>(
      [&] { ModelSpec::from_json(with("low_freq_factor", 4.0), "l31.json"); },
      {"l31.json", "rope_scaling.high_freq_factor", "4", "> low_freq_factor = 4"});
  expect_error<ConfigError>(
      [&] { ModelSpec::from_json(with("low_freq_factor", 0.0), "l31.json"); },
      {"l31.json", "rope_scaling.low_freq_factor", "0", "> 0"});
  expect_error<ConfigError>(
      [&] { ModelSpec::from_json(with("original_max_position_embeddings", 0), "l31.json"); },
      {"l31.json", "rope_scaling.original_max_position_embeddings", "0", "> 0"});
  expect_error<ConfigError>([&] { ModelSpec::from_json(with("alpha", 1.0), "l31.json"); },
                            {"l31.json", "rope_scaling.alpha", "unknown key"});
  expect_error<ConfigError>([&] { ModelSpec::from_json(with("rope_type", "yarn"), "l31.json"); },
                            {"l31.json", "rope_scaling.rope_type", "yarn", "llama3"});
  Json missing = llama31_json();
  missing["rope_scaling"].erase("factor");  // half a scaling is a mistake, not a default
  expect_error<ConfigError>([&] { ModelSpec::from_json(missing, "l31.json"); },
                            {"l31.json", "rope_scaling.factor"});
  Json learned = gpt_json();
  learned["rope_scaling"] = llama31_json()["rope_scaling"];  // nothing would read it
  expect_error<ConfigError>([&] { ModelSpec::from_json(learned, "g.json"); },
                            {"g.json", "rope_scaling", "position = \"rope\""});
}

TEST(ModelFamily, OneChoiceWritesAllFamilyKeys) {
  Json j = gpt_json();
  j["tied_output"] = false;
  const Json back = ModelSpec::from_json(j, "g.json").to_json();
  // The spec written back says every choice, defaults included, once one differs.
  EXPECT_EQ(back["norm"], "layernorm");
  EXPECT_EQ(back["kv_heads"], 4);
  EXPECT_FALSE(back.contains("rope_theta"));  // learned positions have no theta
  EXPECT_EQ(ModelSpec::from_json(back, "again").to_json(), back);
}

TEST(ModelFamily, BadValuesNameFileKeyValueAndExpectation) {
  Json kv = llama_json();
  kv["kv_heads"] = 3;  // 4 % 3 = 1
  expect_error<ConfigError>([&] { ModelSpec::from_json(kv, "l.json"); },
                            {"l.json", "kv_heads", "3", "a divisor of heads = 4"});
  Json kv_big = llama_json();
  kv_big["kv_heads"] = 8;  // more KV heads than query heads
  expect_error<ConfigError>([&] { ModelSpec::from_json(kv_big, "l.json"); },
                            {"l.json", "kv_heads", "8", "a divisor of heads = 4"});
  Json kv_zero = llama_json();
  kv_zero["kv_heads"] = 0;
  expect_error<ConfigError>([&] { ModelSpec::from_json(kv_zero, "l.json"); },
                            {"l.json", "kv_heads", "0", "> 0"});
  Json odd = llama_json();
  odd["hidden"] = 12;  // head_dim 12 / 4 = 3: no rotary pairs
  odd["heads"] = 4;
  expect_error<ConfigError>([&] { ModelSpec::from_json(odd, "l.json"); },
                            {"l.json", "position", "\"rope\"", "even head_dim", "12 / 4 = 3"});
  Json theta = gpt_json();
  theta["rope_theta"] = 10000.0;  // with learned positions: a typo, not an extra
  expect_error<ConfigError>([&] { ModelSpec::from_json(theta, "g.json"); },
                            {"g.json", "rope_theta", "position = \"rope\""});
  Json norm = llama_json();
  norm["norm"] = "batchnorm";
  expect_error<ConfigError>([&] { ModelSpec::from_json(norm, "l.json"); },
                            {"l.json", "norm", "batchnorm", "layernorm, rmsnorm"});
  Json mlp = llama_json();
  mlp["mlp"] = "relu";
  expect_error<ConfigError>([&] { ModelSpec::from_json(mlp, "l.json"); },
                            {"l.json", "mlp", "relu", "gelu, swiglu"});
  Json eps = llama_json();
  eps["norm_epsilon"] = 0.0;
  expect_error<ConfigError>([&] { ModelSpec::from_json(eps, "l.json"); },
                            {"l.json", "norm_epsilon", "0", "(0, 1)"});
  Json theta_neg = llama_json();
  theta_neg["rope_theta"] = -1.0;
  expect_error<ConfigError>([&] { ModelSpec::from_json(theta_neg, "l.json"); },
                            {"l.json", "rope_theta", "-1", "> 0"});
  Json tied = llama_json();
  tied["tied_output"] = "no";
  expect_error<ConfigError>([&] { ModelSpec::from_json(tied, "l.json"); },
                            {"l.json", "tied_output", "\"no\""});
}

}  // namespace
}  // namespace strata
