// Which profile prices a command's predictions (predict, plan, simulate, run, select), and the
// one line that says so. In order:
//   1. --profile FILE|NAME;
//   2. --no-profile: none, the cluster file's estimates;
//   3. the newest profile `strata calibrate` cached for the cluster's machine
//      (profile_cache.h: this host for a CPU cluster, the device's GPU class for a CUDA one);
//   4. the profile bundled for the cluster's GPU class (configs/profiles/, see
//      kBundledDefaults in profile_choice.cc), for GPU clusters with no calibration cached;
//   5. none: the line then says how far off an uncalibrated prediction has been and how to
//      calibrate.
// A cached profile that does not load is a ConfigError naming the file (exit 2), not skipped:
// silently falling back to an older profile or to none would change every prediction with
// nothing said, and one `strata calibrate` replaces it.
#pragma once

#include <optional>
#include <string>

#include "tools/strata/cli_fwd.h"

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/profile.h"

namespace strata::cli {

enum class ProfileSource { kOption, kNoProfile, kCache, kBundled, kNone };

struct ProfileChoice {
  std::optional<Profile> profile;
  ProfileSource source = ProfileSource::kNone;
  std::string path;  // the file read; empty when none
  // How the line and the JSON field "profile" name it: the file, the bundled name, or "none".
  std::string name = "none";
  std::string why;   // the rest of the line: where it came from, or what pricing without means

  const Profile* get() const { return profile ? &*profile : nullptr; }
  // Read like the optional profile it holds: `choice ? &*choice : nullptr`.
  explicit operator bool() const { return profile.has_value(); }
  const Profile& operator*() const { return *profile; }
  // "profile: <name> (<why>)": one line, no newline.
  std::string line() const;
};

// --profile (a file or a bundled name) and --no-profile, on one subcommand.
struct ProfileFlags {
  std::string profile;
  bool no_profile = false;
};
void add_profile_options(CLI::App& command, std::string& profile, bool& no_profile);

ProfileChoice choose_profile(const ProfileFlags& flags, const ClusterSpec& cluster);

}  // namespace strata::cli
