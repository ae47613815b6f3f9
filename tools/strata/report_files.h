// The JSON files that hold a StepReport, as `compare` and `diff` read them: a plan file
// (`strata plan --out`: the plan's keys plus "prediction"), a prediction (`strata predict
// --json`: a StepReport plus "profile") or a run's report.json (a StepReport of kind
// "measurement").
#pragma once

#include <string>

#include "cost_model/specs/step_report.h"

namespace strata::cli {

struct ReportFile {
  StepReport report;
  std::string profile;     // the profile that priced a prediction; empty when not recorded
  bool plan_file = false;  // the report came from a plan file's "prediction"
  bool is_prediction() const { return plan_file || report.kind == "prediction"; }
};

// ConfigError naming the file and the key when it is none of the three.
ReportFile load_report_file(const std::string& path);

}  // namespace strata::cli
