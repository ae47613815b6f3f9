// Plan: loading, round trip, label, and each legality rule of check()/check_against_model(),
// with the rule and its numbers in the message.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/errors.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/train_spec.h"
#include "tests/cost_model/spec_test_util.h"

namespace strata {
namespace {

using strata::testing::expect_error;

Json plan_json() {
  return Json::parse(R"({"tp": 2, "pp": 2, "dp": 2, "virtual_stages": 2, "micro_batch": 1,
    "schedule": "interleaved", "zero_stage": 1,
    "offload": {"optimizer": "cpu", "gradients": "none", "params": "none"},
    "recompute": "selective", "sequence_parallel": true})");
}

// The tiny model: 8 layers, hidden 64, 4 heads, seq 64, vocab 256, ffn 256.
ModelSpec tiny_model() {
  ModelSpec m;
  m.name = "tiny";
  m.layers = 8;
  m.hidden = 64;
  m.heads = 4;
  m.seq_len = 64;
  m.vocab = 256;
  m.ffn_hidden = 256;
  return m;
}

TrainSpec train_with_batch(std::int64_t global_batch) {
  TrainSpec t;
  t.global_batch = global_batch;
  t.steps = 1;
  return t;
}

ClusterSpec cluster(std::int64_t nodes, std::int64_t gpus_per_node) {
  ClusterSpec c;
  c.name = "testc";
  c.nodes = nodes;
  c.gpus_per_node = gpus_per_node;
  // An NVMe tier, so that the offload rules, not its absence, decide (plans on a node without
  // NVMe: planner/sizing_test.cc NoNvmeTier).
  c.nvme = {1e12, 1e9, 1e9, "test"};
  return c;
}

TEST(Plan, LoadsRoundTripsAndLabels) {
  const Plan p = Plan::from_json(plan_json(), "plan.json");
  EXPECT_EQ(p.world_size(), 8);  // 2*2*2
  EXPECT_EQ(p.schedule, ScheduleKind::kInterleaved);
  EXPECT_EQ(p.offload.optimizer, OffloadTier::kCpu);
  EXPECT_EQ(p.recompute, Recompute::kSelective);
  EXPECT_EQ(p.to_json(), plan_json());
  EXPECT_EQ(Plan::from_json(p.to_json(), "again"), p);
  EXPECT_EQ(p.label(), "t2 p2 d2 v2 b1 interleaved z1 off=o:cpu,g:none,p:none rc=selective sp");
  Plan plain;
  EXPECT_EQ(plain.label(), "t1 p1 d1 v1 b1 1f1b z0 rc=none");
  // m = global_batch / (dp * b) = 8 / (2 * 1) = 4.
  EXPECT_EQ(p.micro_batches(train_with_batch(8)), 4);
}

TEST(Plan, UnevenStagesAreOptionalKeysWrittenOnlyWhenSet) {
  Json j = plan_json();
  EXPECT_EQ(Plan::from_json(j, "plan.json").first_stage_layers, 0);  // absent: even
  j["first_stage_layers"] = 3;
  j["last_stage_layers"] = 2;
  const Plan p = Plan::from_json(j, "plan.json");
  EXPECT_EQ(p.first_stage_layers, 3);
  EXPECT_EQ(p.last_stage_layers, 2);
  EXPECT_TRUE(p.uneven_stages());
  EXPECT_EQ(p.to_json(), j);
  EXPECT_NE(p.label().find("layers=3..2"), std::string::npos);
  j["last_stage_layers"] = -1;
  EXPECT_THROW(Plan::from_json(j, "plan.json"), ConfigError);
  // Megatron-Core's accounting options: booleans, written only when true.
  Json counted = plan_json();
  counted["embedding_counts_as_layer"] = true;
  counted["loss_counts_as_layer"] = true;
  const Plan c = Plan::from_json(counted, "plan.json");
  EXPECT_TRUE(c.embedding_counts_as_layer && c.loss_counts_as_layer && c.uneven_stages());
  EXPECT_EQ(c.to_json(), counted);
  EXPECT_NE(c.label().find("emb=layer loss=layer"), std::string::npos);
  counted["loss_counts_as_layer"] = false;
  EXPECT_EQ(Plan::from_json(counted, "plan.json").to_json().count("loss_counts_as_layer"), 0u);
  counted["loss_counts_as_layer"] = 1;
  EXPECT_THROW(Plan::from_json(counted, "plan.json"), ConfigError);
}

TEST(Plan, SkipsWhatStrataPlanWritesAroundIt) {
  Json j = plan_json();
  j["prediction"] = Json::object();
  j["model"] = "tiny";
  j["cluster"] = "local-cpu";
  j["train"] = "tiny";
  EXPECT_EQ(Plan::from_json(j, "plan.json"), Plan::from_json(plan_json(), "plan.json"));
}

TEST(Plan, EnumWordsBothWays) {
  for (ScheduleKind k : {ScheduleKind::kGpipe, ScheduleKind::kOneFOneB, ScheduleKind::kInterleaved}) {
    EXPECT_EQ(schedule_kind_from_string(to_string(k)), k);
  }
  for (OffloadTier t : {OffloadTier::kNone, OffloadTier::kCpu, OffloadTier::kNvme}) {
    EXPECT_EQ(offload_tier_from_string(to_string(t)), t);
  }
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    EXPECT_EQ(recompute_from_string(to_string(r)), r);
  }
  expect_error<ConfigError>([] { schedule_kind_from_string("zb"); },
                            {"schedule", "\"zb\"", "gpipe, 1f1b, interleaved"});
  expect_error<ConfigError>([] { offload_tier_from_string("disk"); },
                            {"offload tier", "\"disk\"", "none, cpu, nvme"});
  expect_error<ConfigError>([] { recompute_from_string("some"); },
                            {"recompute", "\"some\"", "none, selective, full"});
}

TEST(Plan, LoadErrors) {
  Json j = plan_json();
  j["pipeline"] = 2;
  expect_error<ConfigError>([&] { Plan::from_json(j, "plan.json"); },
                            {"plan.json", "pipeline", "unknown key"});
  j = plan_json();
  j["offload"]["activations"] = "cpu";
  expect_error<ConfigError>([&] { Plan::from_json(j, "plan.json"); },
                            {"plan.json", "offload.activations", "unknown key"});
  for (const char* key : {"tp", "pp", "dp", "virtual_stages", "micro_batch", "schedule",
                          "zero_stage", "offload", "recompute", "sequence_parallel"}) {
    j = plan_json();
    j.erase(key);
    expect_error<ConfigError>([&] { Plan::from_json(j, "plan.json"); },
                              {"plan.json", key, "missing key"});
  }
  for (const char* key : {"optimizer", "gradients", "params"}) {
    j = plan_json();
    j["offload"].erase(key);
    expect_error<ConfigError>([&] { Plan::from_json(j, "plan.json"); },
                              {"plan.json", std::string("offload.") + key, "missing key"});
  }
  j = plan_json();
  j["sequence_parallel"] = "yes";
  expect_error<ConfigError>([&] { Plan::from_json(j, "plan.json"); },
                            {"plan.json", "sequence_parallel", "\"yes\"", "true or false"});
  j = plan_json();
  j["tp"] = 2.5;
  expect_error<ConfigError>([&] { Plan::from_json(j, "plan.json"); },
                            {"plan.json", "tp", "2.5", "an integer"});
  for (const char* key : {"tp", "pp", "dp", "virtual_stages", "micro_batch"}) {
    j = plan_json();
    j[key] = 0;
    expect_error<ConfigError>([&] { Plan::from_json(j, "plan.json"); },
                              {"plan.json", key, "got 0", "> 0"});
  }
  for (int bad : {-1, 4}) {
    j = plan_json();
    j["zero_stage"] = bad;
    expect_error<ConfigError>([&] { Plan::from_json(j, "plan.json"); },
                              {"plan.json", "zero_stage", std::to_string(bad), "0, 1, 2 or 3"});
  }
  j = plan_json();
  j["schedule"] = "pipedream";
  expect_error<ConfigError>([&] { Plan::from_json(j, "plan.json"); },
                            {"plan.json", "schedule", "\"pipedream\"", "gpipe, 1f1b, interleaved"});
  j = plan_json();
  j["recompute"] = "partial";
  expect_error<ConfigError>([&] { Plan::from_json(j, "plan.json"); },
                            {"plan.json", "recompute", "\"partial\"", "none, selective, full"});
  j = plan_json();
  j["offload"]["params"] = "disk";
  expect_error<ConfigError>([&] { Plan::from_json(j, "plan.json"); },
                            {"plan.json", "offload.params", "\"disk\"", "none, cpu, nvme"});
}

TEST(PlanCheck, AcceptsLegalPlans) {
  const Plan p = Plan::from_json(plan_json(), "plan.json");
  // 8 ranks on one node of 8: heads 4 % 2, ffn 256 % 2, layers 8 % (2*2), batch 8 % (2*1),
  // m = 4 % pp 2, optimizer offload at ZeRO-1, sp with tp 2.
  EXPECT_NO_THROW(p.check(tiny_model(), cluster(1, 8), train_with_batch(8), "plan.json"));
  // Part of a cluster is fine (Table 1 uses 32..3072 of Selene's GPUs).
  EXPECT_NO_THROW(p.check(tiny_model(), cluster(4, 8), train_with_batch(8), "plan.json"));
  // Interleaved with v = 1 is the 1F1B order; it is legal (m % pp still applies).
  Plan v1 = p;
  v1.virtual_stages = 1;
  EXPECT_NO_THROW(v1.check_against_model(tiny_model(), train_with_batch(8), "plan.json"));
  // Optimizer offload needs no ZeRO stage at all (one GPU, ZeRO-Offload's setting).
  Plan z0;
  z0.offload.optimizer = OffloadTier::kNvme;
  EXPECT_NO_THROW(z0.check(tiny_model(), cluster(1, 1), train_with_batch(8), "plan.json"));
  // ZeRO-3 may offload everything.
  Plan z3;
  z3.zero_stage = 3;
  z3.offload = {OffloadTier::kNvme, OffloadTier::kCpu, OffloadTier::kNvme};
  EXPECT_NO_THROW(z3.check(tiny_model(), cluster(1, 1), train_with_batch(8), "plan.json"));
}

// One broken rule at a time, starting from the legal plan above.
TEST(PlanCheck, EachRuleNamesItsNumbers) {
  const Plan good = Plan::from_json(plan_json(), "plan.json");
  const ModelSpec model = tiny_model();
  const TrainSpec train = train_with_batch(8);
  const ClusterSpec node8 = cluster(1, 8);
  const auto expect_rule = [&](const Plan& p, const ModelSpec& m, const TrainSpec& t,
                               const ClusterSpec& c,
                               std::initializer_list<std::string> fragments) {
    expect_error<InfeasiblePlan>([&] { p.check(m, c, t, "plan.json"); }, fragments);
  };

  Plan p = good;
  p.dp = 0;
  expect_rule(p, model, train, node8, {"plan.json", "must all be >= 1", "dp = 0"});

  p = good;
  p.tp = 8;  // heads 4 % 8 = 4
  expect_rule(p, model, train, cluster(8, 8), {"plan.json", "heads % tp = 4 % 8 = 4"});

  ModelSpec odd_ffn = model;
  odd_ffn.ffn_hidden = 250;  // 250 % 4 = 2, while heads 4 % 4 = 0
  p = good;
  p.tp = 4;
  p.sequence_parallel = false;
  expect_rule(p, odd_ffn, train, cluster(2, 8), {"plan.json", "ffn_hidden % tp = 250 % 4 = 2"});

  p = good;
  p.virtual_stages = 3;  // 8 % (2*3) = 2
  expect_rule(p, model, train, node8, {"plan.json", "layers % (pp*v) = 8 % (2*3) = 2"});

  p = good;
  p.micro_batch = 3;  // 8 % (2*3) = 2
  expect_rule(p, model, train, node8,
              {"plan.json", "global_batch % (dp*micro_batch) = 8 % (2*3) = 2"});

  p = good;
  p.schedule = ScheduleKind::kOneFOneB;  // v = 2 needs interleaving
  expect_rule(p, model, train, node8,
              {"plan.json", "virtual_stages = 2 > 1 needs schedule \"interleaved\"", "\"1f1b\""});
  p.schedule = ScheduleKind::kGpipe;
  expect_rule(p, model, train, node8, {"plan.json", "virtual_stages = 2", "\"gpipe\""});

  p = good;
  p.pp = 4;  // t2 p4 d1 = 8 ranks; layers 8 % (4*2) = 0
  p.dp = 1;
  p.virtual_stages = 2;
  const TrainSpec batch6 = train_with_batch(6);  // m = 6 / (1*1) = 6, 6 % 4 = 2
  expect_rule(p, model, batch6, node8,
              {"plan.json", "m % pp == 0", "= 6/(1*1) = 6", "6 % 4 = 2"});
  p.virtual_stages = 1;  // interleaved with v = 1 still needs m % pp
  expect_rule(p, model, batch6, node8, {"plan.json", "m % pp == 0", "6 % 4 = 2"});

  p = good;
  p.zero_stage = 5;
  expect_rule(p, model, train, node8, {"plan.json", "zero_stage = 5", "0, 1, 2 or 3"});

  p = good;
  p.zero_stage = 2;
  p.offload.params = OffloadTier::kCpu;
  expect_rule(p, model, train, node8,
              {"plan.json", "offload.params = \"cpu\" needs zero_stage 3, got 2"});

  p = good;
  p.zero_stage = 1;
  p.offload.gradients = OffloadTier::kNvme;
  expect_rule(p, model, train, node8,
              {"plan.json", "offload.gradients = \"nvme\" needs zero_stage >= 2, got 1"});

  p = good;
  p.tp = 1;
  p.dp = 4;
  expect_rule(p, model, train, node8, {"plan.json", "sequence_parallel = true needs tp > 1"});

  // Cluster rules (check only).
  expect_rule(good, model, train, cluster(1, 4),
              {"plan.json", "tp*pp*dp = 2*2*2 = 8", "cluster testc has 4 GPUs"});
  p = good;
  p.tp = 4;  // 4 > gpus_per_node 2, on 8 GPUs in all
  p.dp = 1;
  expect_rule(p, model, train, cluster(4, 2), {"plan.json", "tp = 4 > gpus_per_node = 2"});
  p = good;
  p.dp = 3;  // 2*2*3 = 12 ranks on nodes of 8: one and a half nodes
  const TrainSpec batch12 = train_with_batch(12);  // 12 % (3*1) = 0, m = 4, 4 % 2 = 0
  expect_rule(p, model, batch12, cluster(2, 8),
              {"plan.json", "tp*pp*dp = 12 spans nodes", "gpus_per_node = 8"});
}

TEST(PlanCheck, AgainstModelIgnoresTheCluster) {
  // The executor runs any plan on any number of local ranks: no cluster rule applies.
  Plan big;
  big.tp = 4;
  big.dp = 2;
  EXPECT_NO_THROW(big.check_against_model(tiny_model(), train_with_batch(8), "plan.json"));
  expect_error<InfeasiblePlan>(
      [&] { big.check(tiny_model(), cluster(1, 2), train_with_batch(8), "plan.json"); },
      {"tp*pp*dp = 4*1*2 = 8"});
}

}  // namespace
}  // namespace strata
