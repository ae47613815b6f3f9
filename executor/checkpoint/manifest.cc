// The checkpoint manifest (see manifest.h).
#include "executor/checkpoint/manifest.h"

#include <algorithm>
#include <charconv>
#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"

namespace strata::checkpoint {
namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "strata-checkpoint";
constexpr int kVersion = 1;
constexpr const char* kStepPrefix = "step-";

}  // namespace

Json Manifest::to_json() const {
  Json files_json = Json::array();
  for (const ShardFile& f : files) files_json.push_back({{"name", f.name}, {"bytes", f.bytes}});
  return Json{{"format", kFormat},
              {"version", kVersion},
              {"step", step},
              {"seed", seed},
              {"data", data},
              {"vocab_row_alignment", vocab_row_alignment},
              {"model", model.to_json()},
              {"train", train.to_json()},
              {"plan", plan.to_json()},
              {"files", files_json}};
}

Manifest Manifest::from_json(const Json& json, const std::string& source) {
  const auto bad = [&](const std::string& field, const std::string& what) {
    return ConfigError(fmt::format("{}: field '{}': {}", source, field, what));
  };
  try {
    if (!json.is_object()) throw bad("", "expected a JSON object");
    if (json.value("format", "") != kFormat) {
      throw bad("format", fmt::format("expected \"{}\"", kFormat));
    }
    if (json.value("version", 0) != kVersion) {
      throw bad("version", fmt::format("value {}, expected {}", json.value("version", Json()).dump(), kVersion));
    }
    Manifest m;
    m.step = json.at("step").get<std::int64_t>();
    if (m.step < 1) throw bad("step", fmt::format("value {}, expected >= 1", m.step));
    m.seed = json.at("seed").get<std::uint64_t>();
    m.data = json.at("data").get<std::string>();
    m.vocab_row_alignment = json.at("vocab_row_alignment").get<std::int64_t>();
    if (m.vocab_row_alignment < 1) throw bad("vocab_row_alignment", "expected >= 1");
    m.model = ModelSpec::from_json(json.at("model"), source + " (model)");
    m.train = TrainSpec::from_json(json.at("train"), source + " (train)");
    m.plan = Plan::from_json(json.at("plan"), source + " (plan)");
    for (const Json& f : json.at("files")) {
      ShardFile s{f.at("name").get<std::string>(), f.at("bytes").get<std::int64_t>()};
      if (s.name.empty() || s.name.find('/') != std::string::npos || s.bytes < 0) {
        throw bad("files", fmt::format("bad entry {}", f.dump()));
      }
      m.files.push_back(std::move(s));
    }
    if (static_cast<std::int64_t>(m.files.size()) != m.plan.world_size()) {
      throw bad("files", fmt::format("{} shard files, expected one per rank of the plan: {}",
                                     m.files.size(), m.plan.world_size()));
    }
    return m;
  } catch (const Json::exception& e) {
    throw ConfigError(fmt::format("{}: not a valid checkpoint manifest: {}", source, e.what()));
  }
}

std::string step_dir_name(std::int64_t step) { return fmt::format("{}{:06d}", kStepPrefix, step); }

std::optional<std::int64_t> step_of_dir_name(const std::string& name) {
  const std::string_view prefix(kStepPrefix);
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  std::int64_t step = 0;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + name.size();
  const auto [end, ec] = std::from_chars(first, last, step);
  if (ec != std::errc() || end != last || step < 0) return std::nullopt;
  return step;
}

Manifest read_complete(const fs::path& step_dir) {
  const fs::path path = step_dir / kManifestFile;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    throw ConfigError(fmt::format("checkpoint '{}': no {} (a checkpoint whose writing did not "
                                  "finish)", step_dir.string(), kManifestFile));
  }
  Manifest m = Manifest::from_json(read_json_file(path.string()), path.string());
  for (const ShardFile& f : m.files) {
    const fs::path shard = step_dir / f.name;
    const std::uintmax_t size = fs::file_size(shard, ec);
    if (ec) {
      throw ConfigError(fmt::format("{}: shard '{}' is missing: {}", path.string(), shard.string(),
                                    ec.message()));
    }
    if (static_cast<std::int64_t>(size) != f.bytes) {
      throw ConfigError(fmt::format("{}: shard '{}' has {} bytes, the manifest says {}",
                                    path.string(), shard.string(), size, f.bytes));
    }
  }
  return m;
}

std::vector<fs::path> complete_checkpoints(const fs::path& root) {
  std::vector<std::pair<std::int64_t, fs::path>> found;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::optional<std::int64_t> step = step_of_dir_name(it->path().filename().string());
    if (!step || !it->is_directory()) continue;
    try {
      read_complete(it->path());
      found.emplace_back(*step, it->path());
    } catch (const ConfigError&) {
      // Incomplete (a writer killed halfway): not a checkpoint.
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  for (auto& [step, p] : found) out.push_back(std::move(p));
  return out;
}

fs::path resolve_resume(const fs::path& path) {
  std::error_code ec;
  if (fs::is_regular_file(path / kManifestFile, ec)) {
    read_complete(path);  // named directly: its own error, not a fallback
    return path;
  }
  if (!fs::is_directory(path, ec)) {
    throw ConfigError(fmt::format("--resume: '{}' is not a directory", path.string()));
  }
  const std::vector<fs::path> complete = complete_checkpoints(path);
  if (!complete.empty()) return complete.back();
  std::string skipped;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    if (!step_of_dir_name(entry.path().filename().string())) continue;
    try {
      read_complete(entry.path());
    } catch (const ConfigError& e) {
      skipped += std::string("; ") + e.what();
    }
  }
  throw ConfigError(fmt::format("--resume: '{}' holds no complete checkpoint (no step-NNNNNN "
                                "directory with a valid {}){}", path.string(), kManifestFile,
                                skipped));
}

}  // namespace strata::checkpoint
