// Config lookup, loading and number formatting for the subcommands (see inputs.h).
#include "tools/strata/inputs.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/json_reader.h"
#include "cost_model/specs/units.h"

namespace strata::cli {
namespace fs = std::filesystem;

namespace {

bool is_dir(const fs::path& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

bool is_file(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

// Sorted stems of configs/<kind>/*.json, for the "did you mean" part of a message.
std::vector<std::string> bundled_names(const std::string& kind) {
  std::vector<std::string> names;
  const std::string dir = config_dir();
  if (dir.empty() || !is_dir(fs::path(dir) / kind)) return names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(dir) / kind, ec)) {
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

std::string config_dir() {
  if (const char* env = std::getenv("STRATA_CONFIG_DIR"); env != nullptr && *env != '\0') {
    return env;
  }
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (fs::path dir = exe.parent_path(); !dir.empty(); dir = dir.parent_path()) {
      if (is_dir(dir / "configs" / "models")) return (dir / "configs").string();
      if (dir == dir.root_path()) break;
    }
  }
#ifdef STRATA_DEFAULT_CONFIG_DIR
  if (is_dir(STRATA_DEFAULT_CONFIG_DIR)) return STRATA_DEFAULT_CONFIG_DIR;
#endif
  return "";
}

std::string resolve_config(const std::string& kind, const std::string& value,
                           const std::string& flag) {
  if (is_file(value)) return value;
  const bool bare_name = value.find('/') == std::string::npos &&
                         fs::path(value).extension() != ".json" && !value.empty();
  if (bare_name) {
    const std::string dir = config_dir();
    if (!dir.empty()) {
      const fs::path bundled = fs::path(dir) / kind / (value + ".json");
      if (is_file(bundled)) return bundled.string();
    }
    throw ConfigError(fmt::format("{}: value '{}' is neither a file nor a bundled name in "
                                  "configs/{} (bundled: {})",
                                  flag, value, kind, fmt::join(bundled_names(kind), ", ")));
  }
  throw ConfigError(fmt::format("{}: file '{}' does not exist", flag, value));
}

void add_cluster_shape_options(CLI::App& command, ClusterShape& shape) {
  command.add_option("--nodes", shape.nodes, "nodes of the cluster (default: the file's)")
      ->check(CLI::PositiveNumber);
  command.add_option("--gpus-per-node", shape.gpus_per_node,
                     "GPUs per node (default: the file's); per-GPU and per-node figures stay")
      ->check(CLI::PositiveNumber);
}

ClusterSpec load_cluster(const std::string& value, const ClusterShape& shape) {
  return with_shape(ClusterSpec::load(resolve_config("clusters", value, "--cluster")), shape);
}

void add_spec_options(CLI::App& command, SpecOptions& options) {
  command.add_option("--model", options.model, "model: a JSON file or a bundled name (tiny, ...)")
      ->required();
  command.add_option("--cluster", options.cluster, "cluster: a JSON file or a bundled name")
      ->required();
  add_cluster_shape_options(command, options.shape);
  command.add_option("--train", options.train, "training setup: a JSON file or a bundled name")
      ->required();
  add_profile_options(command, options.profile.profile, options.profile.no_profile);
}

Inputs load_inputs(const SpecOptions& options) {
  Inputs inputs;
  inputs.model = ModelSpec::load(resolve_config("models", options.model, "--model"));
  inputs.cluster = load_cluster(options.cluster, options.shape);
  inputs.train = TrainSpec::load(resolve_config("train", options.train, "--train"));
  inputs.profile = choose_profile(options.profile, inputs.cluster);
  return inputs;
}

namespace {

// Whether a plan file's recorded "model" means the model of this command: the same --model
// text, the same model name once resolved, or (a path that no longer resolves from here) the
// same file stem. Paths differ between directories; the model's name does not.
bool same_model(const std::string& recorded, const SpecOptions& specs, const ModelSpec& model) {
  if (recorded == specs.model) return true;
  try {
    return ModelSpec::load(resolve_config("models", recorded, "plan")).name == model.name;
  } catch (const ConfigError&) {
    const std::string stem = fs::path(recorded).stem().string();
    return stem == model.name || stem == fs::path(specs.model).stem().string();
  }
}

}  // namespace

Plan load_plan(const std::string& value, const SpecOptions& specs, const ModelSpec& model) {
  const std::string path = resolve_config("plans", value, "--plan");
  const Json json = read_json_file(path);
  if (json.is_object() && json.contains("model") && json["model"].is_string()) {
    const std::string recorded = json["model"].get<std::string>();
    if (!same_model(recorded, specs, model)) {
      throw ConfigError(fmt::format(
          "--plan: {} was made for model '{}' (its \"model\"), but --model is '{}' ({}); "
          "plan for this model with `strata plan --model {}`, or pass --model {}",
          path, recorded, specs.model, model.name, specs.model, recorded));
    }
  }
  return Plan::from_json(json, path);
}

std::string plan_source(const std::string& plan, const SpecOptions& specs) {
  return fmt::format("{} (model {}, cluster {}, train {})", plan, specs.model, specs.cluster,
                     specs.train);
}

// Two decimals hide a tiny model's megabytes as 0.00; below 1 the format keeps three
// significant digits instead, still byte-stable.
std::string readable(double value) {
  if (value == 0.0) return "0";
  return std::fabs(value) >= 1.0 ? fmt::format("{:.2f}", value) : fmt::format("{:.3g}", value);
}
std::string gib(double bytes) { return readable(bytes / units::kGiB); }
std::string gb(double bytes) { return readable(bytes / units::kGB); }

std::string count_label(double count) {
  if (count >= 1e12) return fmt::format("{:.2f}T", count / 1e12);
  if (count >= 1e9) return fmt::format("{:.2f}B", count / 1e9);
  if (count >= 1e6) return fmt::format("{:.1f}M", count / 1e6);
  if (count >= 1e3) return fmt::format("{:.1f}K", count / 1e3);
  return fmt::format("{:.0f}", count);
}
std::string bytes_label(double bytes) {
  const double size = std::fabs(bytes);
  if (size >= units::kGiB) return fmt::format("{:.2f} GiB", bytes / units::kGiB);
  if (size >= units::kMiB) return fmt::format("{:.2f} MiB", bytes / units::kMiB);
  if (size >= units::kKiB) return fmt::format("{:.2f} KiB", bytes / units::kKiB);
  return fmt::format("{:.0f} B", bytes);
}

std::string plural(std::int64_t count, const std::string& noun) {
  return fmt::format("{} {}{}", count, noun, count == 1 ? "" : "s");
}

std::string percent(double fraction) { return fmt::format("{:.1f}%", 100.0 * fraction); }

std::string offload_label(const OffloadPlan& offload) {
  std::vector<std::string> parts;
  if (offload.optimizer != OffloadTier::kNone) parts.push_back("opt=" + to_string(offload.optimizer));
  if (offload.gradients != OffloadTier::kNone) parts.push_back("grad=" + to_string(offload.gradients));
  if (offload.params != OffloadTier::kNone) parts.push_back("param=" + to_string(offload.params));
  if (parts.empty()) return "none";
  return fmt::format("{}", fmt::join(parts, ","));
}

}  // namespace strata::cli
