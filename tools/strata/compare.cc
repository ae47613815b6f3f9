// `strata compare`: the prediction of a plan beside the measurement of a run, field by field
// (cost_model/specs/compare.h): step time and each part, tokens/s, TFLOP/s, MFU, bubble share and
// the worst rank's peak memory per tier, with the prediction's relative error. Optionally
// merges the simulated and the measured Chrome traces into one file, one process each.
// With --critical-path, the plan's predicted critical path beside the one the run measured
// (cost_model/checks/measured_path.h: the same graph, the run's op times), and with --trace both
// paths marked on the merged trace (cost_model/checks/path_trace.h).
// Deliberately no judgement of what error is acceptable: that is the reader's (and the
// tests') business.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/program/chrome_trace.h"
#include "cost_model/specs/compare.h"
#include "cost_model/pricing/cost_model.h"
#include "cost_model/checks/measured_path.h"
#include "cost_model/checks/path_trace.h"
#include "cost_model/specs/errors.h"
#include "cost_model/specs/json_reader.h"
#include "cost_model/specs/step_report.h"
#include "cost_model/specs/units.h"
#include "tools/strata/commands.h"
#include "tools/strata/inputs.h"
#include "tools/strata/path_summary.h"
#include "tools/strata/report_files.h"

namespace strata::cli {
namespace {

struct CompareOptions {
  std::string predicted;
  std::string measured;
  bool json = false;
  std::string trace;            // merged output
  std::string predicted_trace;  // `strata simulate --trace`
  std::string measured_trace;   // `strata run`'s DIR/trace.json
  bool critical_path = false;
  SpecOptions specs;            // --critical-path: what prices the plan's Program
  std::string plan;
};

// Both critical paths of the plan: predicted, and measured from the run's trace.
struct Paths {
  CriticalPath predicted;
  MeasuredPath measured;
};

// --measured-trace, else the trace.json `strata run` wrote beside --measured.
std::string measured_trace_path(const CompareOptions& options) {
  if (!options.measured_trace.empty()) return options.measured_trace;
  return (std::filesystem::path(options.measured).parent_path() / "trace.json").string();
}

Paths critical_paths(const CompareOptions& options) {
  const Inputs inputs = load_inputs(options.specs);
  const Plan plan = load_plan(options.plan, options.specs, inputs.model);
  plan.check(inputs.model, inputs.cluster, inputs.train, plan_source(options.plan, options.specs));
  const std::string trace = measured_trace_path(options);
  Paths paths;
  paths.predicted = step_critical_path(inputs.model, inputs.cluster, inputs.train, plan,
                                       inputs.profile_ptr()).path;
  paths.measured = step_measured_critical_path(inputs.model, inputs.cluster, inputs.train, plan,
                                               inputs.profile_ptr(),
                                               measured_ops(read_chrome_trace(trace), trace));
  return paths;
}

// Which profile priced the prediction, as the command that made it recorded.
std::string profile_line(const std::string& profile) {
  if (profile.empty()) return "profile of the prediction: not recorded in the file";
  if (profile == "none") {
    return "profile of the prediction: none (the cluster file's estimates, uncalibrated; "
           "`strata calibrate` caches a profile that later predictions use)";
  }
  return "profile of the prediction: " + profile;
}

// The value in the table's unit: seconds, tokens/s and TFLOP/s as they are, fractions as
// percentages, bytes in GiB.
std::string cell(const FieldComparison& f, double value) {
  if (f.unit == "s") return fmt::format("{:.4f}", value);
  if (f.unit == "tokens/s") return fmt::format("{:.0f}", value);
  if (f.unit == "TFLOP/s") return fmt::format("{:.4f}", value);
  if (f.unit == "fraction") return percent(value);
  if (f.unit == "bytes") return fmt::format("{:.3f}", value / units::kGiB);
  return fmt::format("{}", value);
}

// "step time (s)", "MFU (%)", "memory device (GiB)"; rates name their unit already.
std::string row_label(const FieldComparison& f) {
  if (f.unit == "s") return f.label + " (s)";
  if (f.unit == "fraction") return f.label + " (%)";
  if (f.unit == "bytes") return f.label + " (GiB)";
  return f.label;
}

std::string error_cell(const FieldComparison& f) {
  if (!f.relative_error) return "n/a";
  if (*f.relative_error == 0) return "0.0%";
  return fmt::format("{:+.1f}%", 100.0 * *f.relative_error);
}

void print_table(std::ostream& out, const CompareOptions& options, const StepReport& predicted,
                 const StepReport& measured, const ReportComparison& c) {
  out << fmt::format("predicted: {} ({}, plan {})\n", options.predicted, predicted.kind,
                     predicted.plan_label);
  out << fmt::format("measured:  {} ({} over {} steps, plan {})\n", options.measured,
                     measured.kind, measured.steps_measured, measured.plan_label);
  if (!c.labels_match()) out << "note: the plan labels differ\n";
  out << fmt::format("{:<26} {:>12} {:>12} {:>9}\n", "field", "predicted", "measured", "error");
  for (const FieldComparison& f : c.fields) {
    out << fmt::format("{:<26} {:>12} {:>12} {:>9}\n",
                       row_label(f), cell(f, f.predicted),
                       cell(f, f.measured), error_cell(f));
  }
  out << "error = (predicted - measured) / measured; memory = peak of the worst rank\n";
  if (const FieldComparison* inter = c.find("inter_node_comm_s")) {
    // The share of the tp + pp + dp comm rows that the inter-node rows hold.
    const auto share = [&](double seconds, const StepReport& r) {
      const double comm = r.parts.tp_comm_s + r.parts.pp_comm_s + r.parts.dp_comm_s;
      return comm > 0 ? percent(seconds / comm) : std::string("n/a (no comm)");
    };
    out << fmt::format("inter-node link: {} of the comm predicted, {} measured (the tp/pp/dp "
                       "groups that span nodes)\n",
                       share(inter->predicted, predicted), share(inter->measured, measured));
  }
}

int run_compare(const CompareOptions& options, std::ostream& out) {
  const ReportFile loaded = load_report_file(options.predicted);
  const StepReport& predicted = loaded.report;
  const ReportFile measured_file = load_report_file(options.measured);
  if (measured_file.is_prediction()) {
    // Two predictions compared as prediction and measurement read as "measured over 0
    // steps" with an error column; `diff` sets plans side by side with ratios instead.
    throw ConfigError(fmt::format(
        "--measured: {} is a prediction ({}), not a run's report.json; to set plans or "
        "predictions side by side use `strata diff {} {}`",
        options.measured, measured_file.plan_file ? "a plan file" : "kind \"prediction\"",
        options.predicted, options.measured));
  }
  const StepReport& measured = measured_file.report;
  const ReportComparison comparison = compare_reports(predicted, measured);
  if (!options.measured_trace.empty() && options.trace.empty() && !options.critical_path) {
    throw ConfigError("--measured-trace: used only with --trace or --critical-path");
  }
  std::optional<Paths> paths;
  if (options.critical_path) paths = critical_paths(options);
  if (!options.trace.empty()) {
    ChromeTrace predicted_trace = read_chrome_trace(options.predicted_trace);
    ChromeTrace measured_trace = read_chrome_trace(options.measured_trace);
    if (paths) {
      mark_critical_path(predicted_trace, paths->predicted);
      mark_critical_path(measured_trace, paths->measured.path, paths->measured.process);
    }
    const ChromeTrace merged = merge_chrome_traces(
        {{"predicted", std::move(predicted_trace)}, {"measured", std::move(measured_trace)}});
    write_chrome_trace(options.trace, merged);
  }
  if (options.json) {
    Json json = comparison_to_json(comparison);
    json["predicted_file"] = options.predicted;
    json["measured_file"] = options.measured;
    json["predicted_profile"] = loaded.profile.empty() ? Json(nullptr) : Json(loaded.profile);
    if (paths) {
      json["critical_path"] = {
          {"predicted", path_summary_json(summarize_path(paths->predicted), paths->predicted.ops.size())},
          {"measured", path_summary_json(summarize_path(paths->measured.path),
                                         paths->measured.path.ops.size())}};
    }
    out << json.dump(2) << "\n";
  } else {
    print_table(out, options, predicted, measured, comparison);
    out << profile_line(loaded.profile) << "\n";
    if (paths) {
      print_paths_side_by_side(out, summarize_path(paths->predicted),
                               summarize_path(paths->measured.path));
    }
    if (!options.trace.empty()) out << fmt::format("wrote {}\n", options.trace);
  }
  return 0;
}

}  // namespace

void add_compare_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<CompareOptions>();
  CLI::App* command = app.add_subcommand(
      "compare", "Compare a plan's prediction with a run's measured report, field by field");
  command->add_option("--predicted", options->predicted,
                      "plan file from `strata plan --out` (with its prediction) or a StepReport")
      ->required();
  command->add_option("--measured", options->measured, "report.json written by `strata run`")
      ->required();
  command->add_flag("--json", options->json, "print the comparison as JSON");
  CLI::Option* trace =
      command->add_option("--trace", options->trace,
                          "write the simulated and measured timelines merged into this file");
  CLI::Option* predicted_trace = command->add_option(
      "--predicted-trace", options->predicted_trace, "trace from `strata simulate --trace`");
  CLI::Option* measured_trace = command->add_option(
      "--measured-trace", options->measured_trace, "trace.json written by `strata run`");
  trace->needs(predicted_trace)->needs(measured_trace);
  predicted_trace->needs(trace);
  CLI::Option* path = command->add_flag(
      "--critical-path", options->critical_path,
      "also set the plan's predicted critical path beside the one the run measured (its "
      "--measured-trace, else trace.json beside --measured), by kind of op; with --trace, mark "
      "both on the merged trace");
  CLI::Option* model = command->add_option("--model", options->specs.model,
                                           "--critical-path: the model (a JSON file or a bundled name)");
  CLI::Option* cluster = command->add_option("--cluster", options->specs.cluster,
                                             "--critical-path: the cluster the run used");
  CLI::Option* train = command->add_option("--train", options->specs.train,
                                           "--critical-path: the training setup the run used");
  CLI::Option* plan = command->add_option("--plan", options->plan,
                                          "--critical-path: the plan the run used (a file or a bundled name)");
  add_profile_options(*command, options->specs.profile.profile, options->specs.profile.no_profile);
  path->needs(model)->needs(cluster)->needs(train)->needs(plan);
  command->callback(
      [options, &context] { context.exit_code = run_compare(*options, *context.out); });
}

}  // namespace strata::cli
