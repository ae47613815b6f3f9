// Which profile prices a command's predictions (see profile_choice.h).
#include "tools/strata/profile_choice.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cost_model/specs/errors.h"
#include "tools/strata/inputs.h"
#include "tools/strata/profile_cache.h"

namespace strata::cli {
namespace {

// The profiles bundled for GPU classes nobody has calibrated on this machine yet: a measured
// GPU prices another of its generation far better than a datasheet does (GPT-2 124M on an
// H200: +38% uncalibrated, -7.6% with this profile; ../shared/reference/profiles/README.md).
// An H100 calibration replaces the H200 one for the "h100" class once one is measured.
struct BundledDefault {
  const char* gpu_class;
  const char* name;  // configs/profiles/<name>.json
  const char* note;
};
constexpr BundledDefault kBundledDefaults[] = {
    {"h100", "h200-calibrated-2026-11-26",
     "measured on an NVIDIA H200 by `strata calibrate --backend cuda`; no H100 profile is "
     "bundled yet"},
    {"h200", "h200-calibrated-2026-11-26",
     "measured on an NVIDIA H200 by `strata calibrate --backend cuda`"},
};

// What an uncalibrated prediction has cost, measured (issue 25), and how to calibrate.
std::string uncalibrated_why(const ClusterSpec& cluster) {
  if (cluster.backend == Backend::kCuda) {
    return fmt::format(
        "the cluster file's estimates, uncalibrated: GPT-2 124M on an H200 was predicted 38% "
        "slow without a profile and within 8% with one; `strata calibrate --backend cuda` on "
        "one of the cluster's GPUs ({}) measures it (about 90 s) and caches the profile for "
        "every command",
        cluster.device.name);
  }
  return "the cluster file's estimates, uncalibrated, which have been far off: `select "
         "--workload tiny-grid` on 2 CPU devices predicted 12.6 s for a 5.2 s makespan (+140%; "
         "-5.5% with a profile) and `run` of the tiny model 0.119 s for a 0.030 s step; "
         "`strata calibrate` measures this machine (--quick: about 10 s) and caches the "
         "profile for every command";
}

Profile load_cached(const std::string& path) {
  try {
    return Profile::load(path);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format(
        "the newest cached profile '{}' does not load: {}; run `strata calibrate` again to "
        "replace it, delete the file, or choose with --profile FILE or --no-profile",
        path, e.what()));
  }
}

}  // namespace

std::string ProfileChoice::line() const { return fmt::format("profile: {} ({})", name, why); }

void add_profile_options(CLI::App& command, std::string& profile, bool& no_profile) {
  CLI::Option* file = command.add_option(
      "--profile", profile,
      "profile: a calibrated file (strata calibrate) or a bundled name (megatron-lm-2021: the "
      "published Megatron-LM runs' kernels); default: the newest profile `strata calibrate` "
      "cached for the cluster's machine");
  command.add_flag("--no-profile", no_profile,
                   "price with the cluster file's estimates, not a cached or bundled profile")
      ->excludes(file);
}

ProfileChoice choose_profile(const ProfileFlags& flags, const ClusterSpec& cluster) {
  ProfileChoice c;
  if (!flags.profile.empty()) {
    c.source = ProfileSource::kOption;
    c.path = resolve_config("profiles", flags.profile, "--profile");
    c.profile = Profile::load(c.path);
    c.name = flags.profile;
    c.why = "--profile";
    return c;
  }
  if (flags.no_profile) {
    c.source = ProfileSource::kNoProfile;
    c.why = "--no-profile: the cluster file's estimates, uncalibrated";
    return c;
  }
  const std::string key = cluster_machine_key(cluster);
  if (const std::optional<std::string> cached = newest_cached_profile(key)) {
    c.source = ProfileSource::kCache;
    c.path = *cached;
    c.profile = load_cached(*cached);
    c.name = *cached;
    c.why = fmt::format("the newest `strata calibrate` of {} in the profile cache; --profile "
                        "FILE or --no-profile to price otherwise", key);
    return c;
  }
  if (cluster.backend == Backend::kCuda) {
    const std::string gpu = gpu_class(cluster.device.name);
    for (const BundledDefault& d : kBundledDefaults) {
      if (gpu != d.gpu_class) continue;
      c.source = ProfileSource::kBundled;
      c.path = resolve_config("profiles", d.name, "bundled profile");
      c.profile = Profile::load(c.path);
      c.name = d.name;
      c.why = fmt::format("bundled for {} GPUs, as none of this class is calibrated in the "
                          "profile cache: {}; `strata calibrate --backend cuda` on one "
                          "replaces it", cluster.device.name, d.note);
      return c;
    }
  }
  c.why = uncalibrated_why(cluster);
  return c;
}

}  // namespace strata::cli
