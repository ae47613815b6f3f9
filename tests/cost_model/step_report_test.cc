// StepReport (= Prediction = RunReport): round trip, every error path, the parts' sum, and
// Megatron's model-FLOPs formula worked by hand and against Table 1.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/step_report.h"
#include "tests/cost_model/spec_test_util.h"

namespace strata {
namespace {

using strata::testing::expect_error;

Json report_json() {
  return Json::parse(R"({
    "kind": "measurement", "plan_label": "t1 p2 d1 v1 b1 1f1b z0 rc=none",
    "step_time_s": 1.5,
    "parts": {"forward_s": 0.25, "backward_s": 0.5, "recompute_s": 0, "tp_comm_s": 0,
              "pp_comm_s": 0.125, "dp_comm_s": 0, "offload_s": 0, "optimizer_s": 0.125,
              "bubble_s": 0.375, "other_s": 0.125},
    "tokens_per_s": 341.5, "tflops_per_gpu": 0.02, "model_tflops_per_gpu": 0.015, "mfu": 0.4, "bubble_fraction": 0.25,
    "memory_bytes": {"device": 1048576, "host": 0, "nvme": 0},
    "per_rank": [{"rank": 0, "pp_rank": 0, "peak_bytes": {"device": 1048576, "host": 0, "nvme": 0}},
                 {"rank": 1, "pp_rank": 1, "peak_bytes": {"device": 524288, "host": 0, "nvme": 0}}],
    "steps_measured": 10, "losses": [5.5, 5.25, 5.0]})");
}

TEST(StepReport, RoundTrips) {
  const StepReport r = StepReport::from_json(report_json(), "r.json");
  EXPECT_EQ(r.kind, "measurement");
  ASSERT_EQ(r.per_rank.size(), 2u);
  EXPECT_EQ(r.per_rank[1].pp_rank, 1);
  EXPECT_DOUBLE_EQ(r.per_rank[1].peak_bytes.device, 524288);
  EXPECT_EQ(r.losses, (std::vector<double>{5.5, 5.25, 5.0}));
  EXPECT_EQ(r.to_json(), report_json());
}

TEST(StepReport, PartsSum) {
  const StepReport r = StepReport::from_json(report_json(), "r.json");
  // 0.25 + 0.5 + 0.125 + 0.125 + 0.375 + 0.125 = 1.5, all exact in binary.
  EXPECT_EQ(r.parts.sum(), 1.5);
  EXPECT_EQ(r.parts.sum(), r.step_time_s);
}

TEST(StepReport, ErrorPaths) {
  Json j = report_json();
  j["parts"]["idle_s"] = 0;
  expect_error<ConfigError>([&] { StepReport::from_json(j, "r.json"); },
                            {"r.json", "parts.idle_s", "unknown key"});
  j = report_json();
  j["parts"].erase("bubble_s");
  expect_error<ConfigError>([&] { StepReport::from_json(j, "r.json"); },
                            {"r.json", "parts.bubble_s", "missing key"});
  j = report_json();
  j["kind"] = "guess";
  expect_error<ConfigError>([&] { StepReport::from_json(j, "r.json"); },
                            {"r.json", "kind", "\"guess\"", "prediction, measurement"});
  j = report_json();
  j["step_time_s"] = -1;
  expect_error<ConfigError>([&] { StepReport::from_json(j, "r.json"); },
                            {"r.json", "step_time_s", "-1", ">= 0"});
  j = report_json();
  j["bubble_fraction"] = 1.5;
  expect_error<ConfigError>([&] { StepReport::from_json(j, "r.json"); },
                            {"r.json", "bubble_fraction", "1.5", "[0, 1]"});
  j = report_json();
  j["per_rank"][1]["peak_bytes"]["host"] = -8;
  expect_error<ConfigError>([&] { StepReport::from_json(j, "r.json"); },
                            {"r.json", "per_rank[1].peak_bytes.host", "-8", ">= 0"});
  j = report_json();
  j["per_rank"][0]["stage"] = 0;
  expect_error<ConfigError>([&] { StepReport::from_json(j, "r.json"); },
                            {"r.json", "per_rank[0].stage", "unknown key"});
  j = report_json();
  j["losses"][2] = "nan";
  expect_error<ConfigError>([&] { StepReport::from_json(j, "r.json"); },
                            {"r.json", "losses[2]", "\"nan\"", "a number"});
  j = report_json();
  j["per_rank"] = 3;
  expect_error<ConfigError>([&] { StepReport::from_json(j, "r.json"); },
                            {"r.json", "per_rank", "3", "an array"});
  j = report_json();
  j["steps_measured"] = -1;
  expect_error<ConfigError>([&] { StepReport::from_json(j, "r.json"); },
                            {"r.json", "steps_measured", ">= 0"});
}

TEST(StepReport, TransfersAreOptionalAndStrict) {
  // Absent: empty, and not written (RoundTrips above compares the whole JSON).
  EXPECT_TRUE(StepReport::from_json(report_json(), "r.json").transfers.empty());
  Json j = report_json();
  j["transfers"] = Json{{"device_to_host_bytes", 1024}, {"host_to_device_bytes", 2048},
                        {"host_to_nvme_bytes", 0}, {"nvme_to_host_bytes", 4096}};
  const StepReport r = StepReport::from_json(j, "r.json");
  EXPECT_EQ(r.transfers, (TransferBytes{1024, 2048, 0, 4096}));
  EXPECT_EQ(r.to_json(), j);
  j["transfers"]["pcie_bytes"] = 1;
  expect_error<ConfigError>([&] { StepReport::from_json(j, "r.json"); },
                            {"r.json", "transfers.pcie_bytes", "unknown key"});
  j["transfers"].erase("pcie_bytes");
  j["transfers"]["nvme_to_host_bytes"] = -1;
  expect_error<ConfigError>([&] { StepReport::from_json(j, "r.json"); },
                            {"r.json", "transfers.nvme_to_host_bytes", ">= 0"});
}

// The critical rank 0 (busy 1.0 s) idles 1.2 s; the busiest stage, 3 (2.0 s), has 1.0 s
// more work: 1.0 s of the idle is waiting on it, 0.2 s fill and drain. An idle shorter than
// the difference is all imbalance; the critical rank the busiest, none of it.
TEST(PipelineIdle, SplitsTheCriticalRanksIdle) {
  const PipelineIdle a = PipelineIdle::split({1.0, 1.25, 1.0, 2.0}, 0, 1.2);
  EXPECT_EQ(a.busiest_rank, 3);
  EXPECT_DOUBLE_EQ(a.imbalance_s, 1.0);
  EXPECT_NEAR(a.fill_drain_s, 0.2, 1e-15);
  const PipelineIdle b = PipelineIdle::split({1.0, 2.0}, 0, 0.5);
  EXPECT_DOUBLE_EQ(b.imbalance_s, 0.5);
  EXPECT_DOUBLE_EQ(b.fill_drain_s, 0.0);
  const PipelineIdle c = PipelineIdle::split({1.0, 2.0}, 1, 0.25);
  EXPECT_DOUBLE_EQ(c.imbalance_s, 0.0);
  EXPECT_DOUBLE_EQ(c.fill_drain_s, 0.25);
  // JSON: written and read back; a rank outside the stages refused.
  StepReport r = StepReport::from_json(report_json(), "r.json");
  r.pipeline_idle = a;
  EXPECT_EQ(StepReport::from_json(r.to_json(), "r.json").pipeline_idle, a);
  Json bad = r.to_json();
  bad["pipeline_idle"]["busiest_rank"] = 4;
  expect_error<ConfigError>([&] { StepReport::from_json(bad, "r.json"); },
                            {"r.json", "pipeline_idle.busiest_rank", "0..3"});
}

TEST(MegatronFlops, ByHand) {
  // l = 1, h = 6, s = 6, V = 16, B = 1:
  // 96 * 1 * 6 * 1 * 36 * (1 + 6/36 + 16/96) = 20736 * 4/3 = 27648.
  ModelSpec m;
  m.layers = 1;
  m.hidden = 6;
  m.heads = 1;
  m.seq_len = 6;
  m.vocab = 16;
  m.ffn_hidden = 24;
  EXPECT_DOUBLE_EQ(megatron_model_flops(m, 1), 27648.0);
  EXPECT_DOUBLE_EQ(megatron_model_flops(m, 3), 3 * 27648.0);  // linear in the batch
}

// Table 1's 1T row: l 128, h 25600, a 160, s 2048, V 51200.
ModelSpec megatron_1t() {
  ModelSpec m;
  m.layers = 128;
  m.hidden = 25600;
  m.heads = 160;
  m.seq_len = 2048;
  m.vocab = 51200;
  m.ffn_hidden = 4 * 25600;
  return m;
}

TEST(MegatronFlops, Table1OneTrillion) {
  // 1T row: l 128, h 25600, s 2048, V 51200, B 3072. Expanded by hand:
  // F = 96 B s l h^2 + 16 B s^2 l h + 6 B s h V.
  const ModelSpec m = megatron_1t();
  const double B = 3072, s = 2048, l = 128, h = 25600, V = 51200;
  const double expanded = 96 * B * s * l * h * h + 16 * B * s * s * l * h + 6 * B * s * h * V;
  EXPECT_NEAR(megatron_model_flops(m, 3072), expanded, 1e-12 * expanded);
  // About 8 * tokens * params (forward + backward + recomputed forward = 4 passes of 2 P
  // FLOPs per token); the attention and logits terms make F a few % larger: 1.0080e12
  // params * 6.29e6 tokens * 8 = 5.07e19, F = 5.14e19 (1.3% more).
  const double tokens = B * s;
  const double ratio = megatron_model_flops(m, 3072) / (8 * tokens * 1008.0387e9);
  EXPECT_GT(ratio, 1.0);
  EXPECT_LT(ratio, 1.05);
}

TEST(MegatronFlops, WithoutRecomputeCountsThreeLayerPasses) {
  // 1T row again. The layers' part of F (96 B s l h^2 (1 + s/(6h))) counts four passes a
  // forward; without recompute it is three, so 3/4 of it. The logits (6 B s h V) stay.
  const ModelSpec m = megatron_1t();
  const double B = 3072, s = 2048, l = 128, h = 25600, V = 51200;
  const double layers_f = 96 * B * s * l * h * h + 16 * B * s * s * l * h;
  const double expected = 0.75 * layers_f + 6 * B * s * h * V;
  EXPECT_NEAR(model_flops_without_recompute(m, 3072), expected, 1e-12 * expected);
}

}  // namespace
}  // namespace strata
