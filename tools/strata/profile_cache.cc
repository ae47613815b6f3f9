// The per-machine profile cache (see profile_cache.h).
#include "tools/strata/profile_cache.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/json_reader.h"
#include "executor/calibrate/calibration.h"

namespace strata::cli {
namespace fs = std::filesystem;
namespace {

// A directory name from free text: lower case letters and digits, every other run of
// characters one '-', at most 120 characters (a file name's limit is 255).
std::string slug(const std::string& text) {
  std::string s;
  for (const char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u) != 0) {
      s += static_cast<char>(std::tolower(u));
    } else if (!s.empty() && s.back() != '-') {
      s += '-';
    }
  }
  while (!s.empty() && s.back() == '-') s.pop_back();
  if (s.size() > 120) s.resize(120);
  return s.empty() ? "unknown" : s;
}

std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> out;
  std::string word;
  for (const char c : text + ' ') {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u) != 0) {
      word += static_cast<char>(std::tolower(u));
    } else if (!word.empty()) {
      out.push_back(word);
      word.clear();
    }
  }
  return out;
}

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

// "20261126T101500.123Z-4242": sorts by time; the pid keeps two calibrations of the same
// millisecond apart.
std::string timestamp_name() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(
                          now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%S", &utc);
  return fmt::format("{}.{:03d}Z-{}", stamp, static_cast<int>(millis), ::getpid());
}

// This host: its name, CPU model and hardware threads (describe_machine()); not the
// profile's "machine", which adds what the calibration was run with.
std::string cpu_machine_key() { return "cpu-" + slug(calibrate::describe_machine()); }

}  // namespace

std::optional<std::string> profile_cache_dir() {
  if (const char* dir = env("STRATA_CACHE_DIR")) {
    if (std::string(dir) == "off") return std::nullopt;
    return (fs::path(dir) / "profiles").string();
  }
  // The XDG base directory specification: a relative XDG_CACHE_HOME is invalid, ignored.
  if (const char* xdg = env("XDG_CACHE_HOME"); xdg != nullptr && fs::path(xdg).is_absolute()) {
    return (fs::path(xdg) / "strata" / "profiles").string();
  }
  if (const char* home = env("HOME")) {
    return (fs::path(home) / ".cache" / "strata" / "profiles").string();
  }
  return std::nullopt;
}

std::string gpu_class(const std::string& device_name) {
  const std::vector<std::string> all = words(device_name);
  for (const std::string& w : all) {
    // A model number: letters, then a digit ("h100", "a100", "l40s", "gh200"); not
    // "80gb" (a digit first) nor "nvidia" (no digit).
    const auto digit = std::find_if(w.begin(), w.end(), [](char c) { return std::isdigit(c) != 0; });
    if (digit != w.begin() && digit != w.end() &&
        std::all_of(w.begin(), digit, [](char c) { return std::isalpha(c) != 0; })) {
      return w;
    }
  }
  std::string joined;
  for (const std::string& w : all) joined += (joined.empty() ? "" : "-") + w;
  return joined.empty() ? "unknown" : joined;
}

std::string this_machine_key(const Profile& profile) {
  if (profile.backend == "cuda") {
    // calibrate --backend cuda writes "<GPU name>, <GiB> GiB, CUDA driver ..."
    // (executor/calibrate/cuda_calibration.cc): the name is what comes before the comma.
    return "cuda-" + gpu_class(profile.machine.substr(0, profile.machine.find(',')));
  }
  return cpu_machine_key();
}

std::string cluster_machine_key(const ClusterSpec& cluster) {
  if (cluster.backend == Backend::kCuda) return "cuda-" + gpu_class(cluster.device.name);
  return cpu_machine_key();
}

CacheStore store_in_profile_cache(const Profile& profile) {
  CacheStore result;
  const std::optional<std::string> root = profile_cache_dir();
  if (!root) return result;
  const fs::path dir = fs::path(*root) / this_machine_key(profile);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    result.warning = fmt::format("cannot create the profile cache directory '{}': {}",
                                 dir.string(), ec.message());
    return result;
  }
  const std::string path = (dir / (timestamp_name() + ".json")).string();
  try {
    write_json_file(path, profile.to_json());  // beside itself, then renamed
  } catch (const SystemError& e) {
    result.warning = fmt::format("cannot write to the profile cache: {}", e.what());
    return result;
  }
  result.path = path;
  return result;
}

std::optional<std::string> newest_cached_profile(const std::string& key) {
  const std::optional<std::string> root = profile_cache_dir();
  if (!root) return std::nullopt;
  std::optional<fs::path> newest;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(*root) / key, ec)) {
    // A profile being written is "<name>.json.tmp" until its rename: not a candidate.
    std::error_code file_ec;
    if (entry.path().extension() != ".json" || !entry.is_regular_file(file_ec)) continue;
    if (!newest || entry.path().filename() > newest->filename()) newest = entry.path();
  }
  if (!newest) return std::nullopt;
  return newest->string();
}

}  // namespace strata::cli
