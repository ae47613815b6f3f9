// The equivalence driver's single-rank reference, kept for the rest of one ctest run: every
// entry of a matrix compares its plan with the same single rank (same model, training setup
// and steps), which each entry used to train again, a third of its time. The first entry to
// need a reference writes it (to a temporary name, then renamed, so a concurrent entry reads
// a whole file or none); the later ones read it. The directory is emptied by a ctest fixture
// before the entries run (tests/executor/engine.cmake), so a reference never outlives the
// binary that computed it. JSON keeps a double's every bit.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace strata::testing_support {

struct StepLossesAndNorms {
  std::vector<double> losses, norms;
};

// The file of reference `key` in `dir` ("" when no directory was given).
inline std::string reference_file(const std::string& dir, const std::string& key) {
  return dir.empty() ? "" : dir + "/" + key + ".json";
}

// The stored reference, or nothing when `file` is "" or absent.
inline std::optional<StepLossesAndNorms> read_cached_reference(const std::string& file) {
  if (file.empty() || !std::filesystem::exists(file)) return std::nullopt;
  std::ifstream in(file);
  const nlohmann::json j = nlohmann::json::parse(in);
  return StepLossesAndNorms{j.at("losses").get<std::vector<double>>(),
                            j.at("norms").get<std::vector<double>>()};
}

inline void write_cached_reference(const std::string& file, const StepLossesAndNorms& r) {
  if (file.empty()) return;
  std::filesystem::create_directories(std::filesystem::path(file).parent_path());
  const std::string temporary = file + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(temporary);
    out << nlohmann::json{{"losses", r.losses}, {"norms", r.norms}}.dump() << "\n";
    if (!out) throw std::runtime_error("cannot write " + temporary);
  }
  std::filesystem::rename(temporary, file);
}

}  // namespace strata::testing_support
