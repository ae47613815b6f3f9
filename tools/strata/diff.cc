// `strata diff A B [C ...]`: plans or predictions side by side (plan files from `strata plan
// --out`, predictions from `strata predict --json`, or run reports): the plan each one is,
// the profile that priced it, step time and each of its parts, throughput, MFU and the worst
// rank's memory per tier, each value with its ratio to the first file's. The rows are
// compare's (cost_model/specs/compare.h), so `diff` and `compare` never disagree on a field.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <memory>
#include <ostream>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/compare.h"
#include "cost_model/specs/errors.h"
#include "cost_model/specs/json_reader.h"
#include "tools/strata/commands.h"
#include "tools/strata/inputs.h"
#include "tools/strata/report_files.h"

namespace strata::cli {
namespace {

struct DiffOptions {
  std::vector<std::string> files;
  bool json = false;
};

std::string profile_name(const ReportFile& file) {
  if (!file.is_prediction()) return "(measured)";
  return file.profile.empty() ? "(not recorded)" : file.profile;
}

// The value in its unit: seconds to 4 decimals, rates whole or to 3 decimals, fractions as
// percentages, bytes in the binary unit that suits them.
std::string value_cell(const FieldComparison& f, double value) {
  if (f.unit == "s") return fmt::format("{:.4f} s", value);
  if (f.unit == "tokens/s") return fmt::format("{:.0f}", value);
  if (f.unit == "TFLOP/s") return fmt::format("{:.3f}", value);
  if (f.unit == "fraction") return percent(value);
  if (f.unit == "bytes") return bytes_label(value);
  return fmt::format("{}", value);
}

// Ratio to the first file's value; "=" when both are 0, "n/a" when only the first is.
std::string ratio_cell(double first, double value) {
  if (first == 0) return value == 0 ? "=" : "n/a";
  return fmt::format("x{:.3f}", value / first);
}

int run_diff(const DiffOptions& options, std::ostream& out) {
  std::vector<ReportFile> files;
  for (const std::string& path : options.files) files.push_back(load_report_file(path));
  std::vector<ReportComparison> rows;  // rows[i]: first file against file i
  for (const ReportFile& f : files) rows.push_back(compare_reports(files.front().report, f.report));
  // The rows every file has: memory by kind comes last and only where both tell it.
  std::size_t common = rows.front().fields.size();
  for (const ReportComparison& c : rows) common = std::min(common, c.fields.size());
  for (ReportComparison& c : rows) c.fields.resize(common);

  if (options.json) {
    Json json{{"files", Json::array()}, {"fields", Json::array()}};
    for (std::size_t i = 0; i < files.size(); ++i) {
      json["files"].push_back(Json{{"file", options.files[i]},
                                   {"kind", files[i].report.kind},
                                   {"plan", files[i].report.plan_label},
                                   {"profile", files[i].profile.empty() ? Json(nullptr)
                                                                        : Json(files[i].profile)}});
    }
    for (std::size_t r = 0; r < rows.front().fields.size(); ++r) {
      const FieldComparison& first = rows.front().fields[r];
      Json field{{"key", first.key}, {"unit", first.unit}, {"values", Json::array()},
                 {"ratios", Json::array()}};
      for (const ReportComparison& c : rows) {
        const double v = c.fields[r].measured;
        field["values"].push_back(v);
        field["ratios"].push_back(first.predicted == 0 ? Json(nullptr) : Json(v / first.predicted));
      }
      json["fields"].push_back(std::move(field));
    }
    out << json.dump(2) << "\n";
    return 0;
  }

  constexpr int kLabel = 26, kCell = 26;
  const auto line = [&](const std::string& label, const std::vector<std::string>& cells) {
    out << fmt::format("{:<{}}", label, kLabel);
    for (const std::string& c : cells) out << fmt::format(" {:>{}}", c, kCell);
    out << "\n";
  };
  for (std::size_t i = 0; i < files.size(); ++i) {
    out << fmt::format("[{}] {}: {} {}, profile {}\n", i + 1, options.files[i],
                       files[i].report.kind, files[i].report.plan_label, profile_name(files[i]));
  }
  std::vector<std::string> header;
  for (std::size_t i = 0; i < files.size(); ++i) header.push_back(fmt::format("[{}]", i + 1));
  line("field", header);
  for (std::size_t r = 0; r < rows.front().fields.size(); ++r) {
    const FieldComparison& first = rows.front().fields[r];
    std::vector<std::string> cells;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const double v = rows[i].fields[r].measured;
      cells.push_back(i == 0 ? value_cell(first, v)
                             : fmt::format("{} {}", value_cell(first, v),
                                           ratio_cell(first.predicted, v)));
    }
    line(first.label, cells);
  }
  out << "xN = the value over [1]'s; memory = peak of the worst rank\n";
  // Predictions priced by different profiles differ by the profile as much as by the plan.
  for (std::size_t i = 1; i < files.size(); ++i) {
    if (files[i].is_prediction() && files.front().is_prediction() &&
        files[i].profile != files.front().profile) {
      out << fmt::format("note: [{}] and [1] were priced with different profiles ({} and {})\n",
                         i + 1, profile_name(files[i]), profile_name(files.front()));
    }
  }
  return 0;
}

}  // namespace

void add_diff_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<DiffOptions>();
  CLI::App* command = app.add_subcommand(
      "diff", "Set plans or predictions side by side: step time and its parts, MFU, memory, "
              "with ratios to the first and the profile each was priced with");
  command->add_option("files", options->files,
                      "two or more plan files (`plan --out`), predictions (`predict --json`) or "
                      "run reports")
      ->required()
      ->expected(2, -1);
  command->add_flag("--json", options->json, "print the table as JSON");
  command->callback([options, &context] { context.exit_code = run_diff(*options, *context.out); });
}

}  // namespace strata::cli
