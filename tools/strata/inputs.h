// Shared by the subcommands: finding bundled configs by name, loading the model / cluster /
// train / plan / profile a command names, and the fixed-format number helpers that keep
// the output byte-stable. Deliberately no printing of whole reports (each command owns its
// layout) and no option parsing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "tools/strata/cli_fwd.h"

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/profile.h"
#include "cost_model/specs/train_spec.h"
#include "tools/strata/profile_choice.h"

namespace strata::cli {

// The configs/ directory: $STRATA_CONFIG_DIR, else the first "configs" directory found
// walking up from the executable, else the source tree's (compiled in). "" when none.
std::string config_dir();

// `value` if it names an existing file, else configs/<kind>/<value>.json when `value` is a
// bare name (no '/', no ".json"). kind: "models" | "clusters" | "train" | "plans".
// ConfigError naming the flag, the value and the bundled names otherwise.
std::string resolve_config(const std::string& kind, const std::string& value,
                           const std::string& flag);

// --nodes / --gpus-per-node, on every subcommand that takes --cluster.
void add_cluster_shape_options(CLI::App& command, ClusterShape& shape);
// The one place a command's cluster is made: --cluster (a file or a bundled name) loaded,
// then --nodes / --gpus-per-node applied (cluster_spec.h: with_shape).
ClusterSpec load_cluster(const std::string& value, const ClusterShape& shape);

// The options every subcommand shares, bound to its CLI11 subcommand by add_spec_options.
struct SpecOptions {
  std::string model;
  std::string cluster;
  ClusterShape shape;  // --nodes / --gpus-per-node
  std::string train;
  ProfileFlags profile;  // --profile / --no-profile (profile_choice.h)
};
void add_spec_options(CLI::App& command, SpecOptions& options);

struct Inputs {
  ModelSpec model;
  ClusterSpec cluster;
  TrainSpec train;
  ProfileChoice profile;  // --profile, else the cached or bundled one, else none
  const Profile* profile_ptr() const { return profile.get(); }
};
Inputs load_inputs(const SpecOptions& options);

// Loads --plan (path or bundled name under configs/plans). A plan file that records the model
// it was made for ("model", written by `strata plan --out`) must name the model of --model:
// a ConfigError naming both otherwise (a plan's memory and time belong to its model).
Plan load_plan(const std::string& value, const SpecOptions& specs, const ModelSpec& model);

// How a plan's rule violations name their inputs: a rule such as layers % (pp*v) involves the
// plan and the model, so the message names every file the command read:
// "tiny-3d (model m.json, cluster local-cpu, train tiny)".
std::string plan_source(const std::string& plan, const SpecOptions& specs);

// Fixed formats: bytes / 2^30 and bytes / 1e9 ("%.2f" from 1 up, three significant digits
// below), a fraction as a percentage, a count with a K/M/B/T suffix, a value via readable().
std::string readable(double value);
std::string gib(double bytes);
std::string gb(double bytes);
std::string count_label(double count);
// Bytes in the binary unit that suits their size: "80.00 GiB", "7.00 MiB", "512.00 KiB", "12 B".
std::string bytes_label(double bytes);
// "1 GPU", "8 GPUs": `noun` with an "s" unless count is 1.
std::string plural(std::int64_t count, const std::string& noun);
std::string percent(double fraction);
// "none" or e.g. "opt=cpu,grad=cpu,param=nvme" (only the offloaded states).
std::string offload_label(const OffloadPlan& offload);

}  // namespace strata::cli
