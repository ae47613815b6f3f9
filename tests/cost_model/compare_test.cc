// compare_reports on a hand-made prediction / measurement pair: every row's values and
// relative error worked by hand, the row order, the undefined error when only the
// measurement is 0, and the JSON form.
#include "cost_model/specs/compare.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace strata {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Values are binary fractions so that the errors below are exact in double.
StepReport predicted_report() {
  StepReport r;
  r.kind = "prediction";
  r.plan_label = "t1.p2.d1.v1.b1.1f1b.z0";
  r.step_time_s = 2.0;
  r.parts.forward_s = 0.5;
  r.parts.backward_s = 1.0;
  r.parts.optimizer_s = 0.25;
  r.parts.bubble_s = 0.25;
  r.tokens_per_s = 1024;
  r.tflops_per_gpu = 0.015625;
  r.mfu = 0.3125;
  r.bubble_fraction = 0.125;
  r.memory_bytes = {1.0 * kGiB, 0.0, 0.0};
  return r;
}

StepReport measured_report() {
  StepReport r;
  r.kind = "measurement";
  r.plan_label = "t1.p2.d1.v1.b1.1f1b.z0";
  r.step_time_s = 2.5;
  r.parts.forward_s = 0.4;
  r.parts.backward_s = 1.25;
  r.parts.optimizer_s = 0.25;
  r.parts.bubble_s = 0.0;
  r.parts.other_s = 0.6;
  r.tokens_per_s = 819.2;
  r.tflops_per_gpu = 0.0125;
  r.mfu = 0.25;
  r.bubble_fraction = 0.0;
  r.memory_bytes = {1.25 * kGiB, 0.0, 0.0};
  r.steps_measured = 10;
  return r;
}

TEST(RelativeError, IsThePredictionsErrorRelativeToTheMeasurement) {
  // (3 - 2) / 2 = +0.5: predicted 50% too high; (1 - 2) / 2 = -0.5.
  EXPECT_DOUBLE_EQ(*relative_error(3.0, 2.0), 0.5);
  EXPECT_DOUBLE_EQ(*relative_error(1.0, 2.0), -0.5);
  // Both zero: the prediction is exactly right.
  EXPECT_EQ(*relative_error(0.0, 0.0), 0.0);
  // Measured zero, predicted not: no finite relative error.
  EXPECT_FALSE(relative_error(0.25, 0.0).has_value());
}

TEST(CompareReports, RowsInStepReportOrder) {
  const ReportComparison c = compare_reports(predicted_report(), measured_report());
  const std::vector<std::string> keys = {
      "step_time_s",         "parts.forward_s",     "parts.backward_s", "parts.recompute_s",
      "parts.tp_comm_s",     "parts.pp_comm_s",     "parts.dp_comm_s",  "parts.offload_s",
      "parts.optimizer_s",   "parts.bubble_s",      "parts.other_s",    "tokens_per_s",
      "tflops_per_gpu",      "model_tflops_per_gpu", "mfu",             "bubble_fraction",
      "memory_bytes.device", "memory_bytes.host",   "memory_bytes.nvme"};
  ASSERT_EQ(c.fields.size(), keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(c.fields[i].key, keys[i]) << i;
  EXPECT_TRUE(c.labels_match());
}

TEST(CompareReports, ValuesAndErrorsWorkedByHand) {
  const ReportComparison c = compare_reports(predicted_report(), measured_report());
  const auto row = [&](const std::string& key) {
    const FieldComparison* f = c.find(key);
    EXPECT_NE(f, nullptr) << key;
    return *f;
  };
  // step time: (2.0 - 2.5) / 2.5 = -0.2 (predicted 20% short).
  EXPECT_EQ(row("step_time_s").predicted, 2.0);
  EXPECT_EQ(row("step_time_s").measured, 2.5);
  EXPECT_NEAR(*row("step_time_s").relative_error, -0.2, 1e-15);
  // forward: (0.5 - 0.4) / 0.4 = +0.25.
  EXPECT_NEAR(*row("parts.forward_s").relative_error, 0.25, 1e-15);
  // backward: (1.0 - 1.25) / 1.25 = -0.2.
  EXPECT_NEAR(*row("parts.backward_s").relative_error, -0.2, 1e-15);
  // optimizer: 0.25 vs 0.25 -> 0.
  EXPECT_EQ(*row("parts.optimizer_s").relative_error, 0.0);
  // bubble: predicted 0.25 s, measured none -> undefined.
  EXPECT_FALSE(row("parts.bubble_s").relative_error.has_value());
  // other: predicted 0 of a measured 0.6 s -> (0 - 0.6) / 0.6 = -1.
  EXPECT_NEAR(*row("parts.other_s").relative_error, -1.0, 1e-15);
  // recompute: 0 and 0 -> 0.
  EXPECT_EQ(*row("parts.recompute_s").relative_error, 0.0);
  // tokens/s: 1024 / 819.2 = 1.25 -> +0.25; TFLOP/s and MFU scale with it: +0.25.
  EXPECT_NEAR(*row("tokens_per_s").relative_error, 0.25, 1e-12);
  EXPECT_NEAR(*row("tflops_per_gpu").relative_error, 0.25, 1e-12);
  EXPECT_NEAR(*row("mfu").relative_error, 0.25, 1e-12);
  // bubble share: 0.125 predicted, 0 measured -> undefined.
  EXPECT_FALSE(row("bubble_fraction").relative_error.has_value());
  // device memory: (1 - 1.25) GiB / 1.25 GiB = -0.2; host and nvme 0 vs 0.
  EXPECT_EQ(row("memory_bytes.device").measured, 1.25 * kGiB);
  EXPECT_NEAR(*row("memory_bytes.device").relative_error, -0.2, 1e-15);
  EXPECT_EQ(*row("memory_bytes.host").relative_error, 0.0);
  EXPECT_EQ(row("memory_bytes.device").unit, "bytes");
  EXPECT_EQ(row("mfu").unit, "fraction");
}

TEST(CompareReports, LabelsThatDifferAreReported) {
  StepReport measured = measured_report();
  measured.plan_label = "t2.p1.d1.v1.b1.1f1b.z0";
  const ReportComparison c = compare_reports(predicted_report(), measured);
  EXPECT_FALSE(c.labels_match());
  EXPECT_EQ(c.measured_label, "t2.p1.d1.v1.b1.1f1b.z0");
}

TEST(CompareReports, JsonHasNullForUndefinedErrors) {
  const Json j = comparison_to_json(compare_reports(predicted_report(), measured_report()));
  EXPECT_EQ(j.at("predicted_plan"), "t1.p2.d1.v1.b1.1f1b.z0");
  ASSERT_EQ(j.at("fields").size(), 19u);
  const Json& step = j.at("fields")[0];
  EXPECT_EQ(step.at("key"), "step_time_s");
  EXPECT_NEAR(step.at("relative_error").get<double>(), -0.2, 1e-15);
  const Json& bubble = j.at("fields")[9];  // parts.bubble_s: measured 0, predicted 0.25
  EXPECT_EQ(bubble.at("key"), "parts.bubble_s");
  EXPECT_TRUE(bubble.at("relative_error").is_null());
}

TEST(CompareReports, InterNodeShareAfterThePartsWhenBothReportsTellIt) {
  StepReport predicted = predicted_report();
  StepReport measured = measured_report();
  // Only the prediction tells it (a report written before the field): no row.
  predicted.inter_node_comm_s = 0.5;
  EXPECT_EQ(compare_reports(predicted, measured).find("inter_node_comm_s"), nullptr);
  // Both: one row right after parts.other_s, (0.5 - 0.25) / 0.25 = +1.
  measured.inter_node_comm_s = 0.25;
  const ReportComparison c = compare_reports(predicted, measured);
  ASSERT_EQ(c.fields.size(), 20u);
  EXPECT_EQ(c.fields[10].key, "parts.other_s");
  EXPECT_EQ(c.fields[11].key, "inter_node_comm_s");
  EXPECT_EQ(c.fields[11].unit, "s");
  EXPECT_EQ(c.fields[11].predicted, 0.5);
  EXPECT_EQ(c.fields[11].measured, 0.25);
  EXPECT_EQ(*c.fields[11].relative_error, 1.0);
  EXPECT_EQ(comparison_to_json(c).at("fields")[11].at("key"), "inter_node_comm_s");
}

TEST(StepReportJson, InterNodeShareRoundTripsAndIsAbsentUnlessSet) {
  StepReport r = predicted_report();
  EXPECT_FALSE(r.to_json().contains("inter_node_comm_s"));
  EXPECT_FALSE(StepReport::from_json(r.to_json(), "r").inter_node_comm_s.has_value());
  r.inter_node_comm_s = 0.125;
  EXPECT_EQ(StepReport::from_json(r.to_json(), "r").inter_node_comm_s, 0.125);
}

}  // namespace
}  // namespace strata
