// The bundled configs (configs/<kind>/<name>.json) as the cost model's tests load them.
#pragma once

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/train_spec.h"

namespace strata::testing {

// The .json files of `dir`, sorted so that failures list in a stable order; none when it
// does not exist.
inline std::vector<std::filesystem::path> json_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> out;
  if (!std::filesystem::exists(dir)) return out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().extension() == ".json") out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The names of the bundled configs of a kind ("models", "clusters", ...), sorted.
inline std::vector<std::string> bundled_names(const std::string& kind) {
  std::vector<std::string> names;
  for (const auto& file : json_files(std::filesystem::path(STRATA_SOURCE_DIR) / "configs" / kind)) {
    names.push_back(file.stem().string());
  }
  return names;
}

inline ModelSpec bundled_model(const std::string& name) {
  return ModelSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/models/" + name + ".json");
}
inline ClusterSpec bundled_cluster(const std::string& name) {
  return ClusterSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/clusters/" + name + ".json");
}
inline TrainSpec bundled_train(const std::string& name) {
  return TrainSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/train/" + name + ".json");
}

}  // namespace strata::testing
