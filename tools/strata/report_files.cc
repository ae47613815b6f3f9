// Reading plan files, predictions and run reports as StepReports; see report_files.h.
#include "tools/strata/report_files.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/json_reader.h"

namespace strata::cli {

ReportFile load_report_file(const std::string& path) {
  Json json = read_json_file(path);
  ReportFile file;
  file.plan_file = json.is_object() && json.contains("prediction");
  Json& report = file.plan_file ? json["prediction"] : json;
  if (report.is_object() && report.contains("profile")) {
    if (!report["profile"].is_string()) {
      throw ConfigError(fmt::format("{}: field '{}profile' is {}, expected a string", path,
                                    file.plan_file ? "prediction." : "", report["profile"].dump()));
    }
    file.profile = report["profile"].get<std::string>();
    report.erase("profile");
  }
  file.report = file.plan_file ? StepReport::from_json(report, path + ": prediction")
                               : StepReport::from_json(report, path);
  return file;
}

}  // namespace strata::cli
