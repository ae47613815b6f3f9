// Predicted vs measured, field by field: the pure comparison behind `strata compare`. A
// Prediction and a RunReport are the same StepReport record, so the comparison is a list of
// (field, predicted, measured, relative error) rows in a fixed order: step time, each of its
// parts, throughput, model TFLOP/s, MFU, bubble share, the worst rank's peak memory per
// tier, and when both reports tell it, the worst rank's device memory by kind
// ("memory_by_kind.<kind>.device", memory_kinds.h).
//
// Relative error is the prediction's error relative to the measurement:
//   (predicted - measured) / measured
// so +0.10 means "predicted 10% too high". When the measurement is 0 it is 0 if the
// prediction is 0 too, and undefined (no value) otherwise.
//
// Deliberately not here: reading files (the CLI loads the reports), printing, per-rank
// memory rows (the worst rank is the one that decides whether a plan fits), loss curves.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cost_model/specs/json_reader.h"
#include "cost_model/specs/step_report.h"

namespace strata {

struct FieldComparison {
  std::string key;    // the StepReport key path: "step_time_s", "parts.forward_s", ...
  std::string label;  // for tables: "step time", "  forward", "memory device"
  std::string unit;   // "s", "tokens/s", "TFLOP/s", "fraction", "bytes"
  double predicted = 0;
  double measured = 0;
  std::optional<double> relative_error;  // (predicted - measured) / measured
};

struct ReportComparison {
  std::string predicted_label;  // plan labels of both sides (they should agree)
  std::string measured_label;
  std::vector<FieldComparison> fields;
  bool labels_match() const { return predicted_label == measured_label; }
  // The row with this key, or nullptr.
  const FieldComparison* find(const std::string& key) const;
};

// (predicted - measured) / measured, 0 when both are 0, no value when only measured is 0.
std::optional<double> relative_error(double predicted, double measured);

ReportComparison compare_reports(const StepReport& predicted, const StepReport& measured);

// {"predicted_plan": ..., "measured_plan": ..., "fields": [{"key", "unit", "predicted",
// "measured", "relative_error" (null when undefined)}]}.
Json comparison_to_json(const ReportComparison& comparison);

}  // namespace strata
