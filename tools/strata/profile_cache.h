// The per-machine profile cache: where `strata calibrate` keeps every profile it writes, and
// which one is the newest for a machine, so that the pricing commands are calibrated by
// default (profile_choice.h decides which profile a command uses).
//
// Location: $STRATA_CACHE_DIR/profiles when that is set (STRATA_CACHE_DIR=off: no cache at
// all, read or written; ctest sets it so that a developer's calibrations never change a
// test), else $XDG_CACHE_HOME/strata/profiles, else ~/.cache/strata/profiles.
// Layout: <cache>/<machine key>/<UTC time of the calibration>.json, written beside itself
// and renamed (a reader never sees half a profile); the newest is the greatest name.
// Machine keys (this_machine_key / cluster_machine_key), one directory each:
//   - CPU backend: "cpu-" + this host's name, CPU model and hardware threads (what
//     describe_machine() says), because a CPU profile is a property of one host: the same
//     CPU model in a VM of another size, or beside other tenants, measures differently;
//   - CUDA backend: "cuda-" + the GPU's class ("h100", "a100": gpu_class), because a GPU's
//     rates follow its model, so one calibration serves every node of a cluster that shares
//     a home directory, and a cluster file names its GPU by model, not by host.
#pragma once

#include <optional>
#include <string>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/profile.h"

namespace strata::cli {

// The cache's directory, or nullopt when STRATA_CACHE_DIR=off or no home is known.
std::optional<std::string> profile_cache_dir();

// A GPU model's class from a device name as a cluster file or the CUDA runtime spells it:
// the first word of a letter and digits ("H100-SXM5-80GB", "NVIDIA H100 80GB HBM3" ->
// "h100"; "Tesla V100-SXM2-32GB" -> "v100"); else every word, lower case, joined by '-'.
std::string gpu_class(const std::string& device_name);

// The key of a profile calibrated on this machine (calibrate stores it at once): this host's
// for the CPU backend, the class of the GPU its "machine" names for CUDA.
std::string this_machine_key(const Profile& profile);

// The key under which a cluster's profile is looked for: a CPU cluster runs on this host; a
// CUDA cluster on GPUs of its device's class.
std::string cluster_machine_key(const ClusterSpec& cluster);

// Stores `profile` as the newest of its machine. Never throws for the file system: a cache
// that cannot be written must not fail the calibration, so the outcome says what happened.
struct CacheStore {
  std::string path;     // the file written; empty when not written
  std::string warning;  // why not (empty when written, or when the cache is off)
};
CacheStore store_in_profile_cache(const Profile& profile);

// The newest cached profile file of `key`, or nullopt (no cache, no directory, no file).
std::optional<std::string> newest_cached_profile(const std::string& key);

}  // namespace strata::cli
