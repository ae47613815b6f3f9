// A checkpoint's manifest (DIR/step-NNNNNN/manifest.json), written last by rank 0 once every
// rank's shard is on disk: what run wrote the checkpoint (model, train spec and plan, the
// data's seed and identity, the backend's wte row alignment, which fixes the saved slices),
// the step it stopped after, and every shard file with its size. A step directory without a
// manifest that parses and whose files all exist at their sizes is not a checkpoint, so a
// writer killed halfway leaves nothing a loader takes for one.
// Deliberately not here: the tensors (checkpoint_io.h), the run's flags (tools/strata).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cost_model/specs/json_reader.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/train_spec.h"

namespace strata::checkpoint {

struct ShardFile {
  std::string name;        // relative to the step directory
  std::int64_t bytes = 0;
};

struct Manifest {
  std::int64_t step = 0;   // steps done: the next step's data (batch.h) and LR position
  ModelSpec model;
  TrainSpec train;
  Plan plan;
  std::uint64_t seed = 0;  // the data stream's (train.seed), checked on resume
  std::string data;        // the training data's identity, checked on resume
  std::int64_t vocab_row_alignment = 1;
  std::vector<ShardFile> files;  // one per rank, world rank order

  Json to_json() const;
  // ConfigError naming `source` and the field.
  static Manifest from_json(const Json& json, const std::string& source);
};

constexpr const char* kManifestFile = "manifest.json";

// "step-000123": the directory of the checkpoint after `step` steps.
std::string step_dir_name(std::int64_t step);
// The step of a "step-NNNNNN" name; nullopt for anything else (temporary directories).
std::optional<std::int64_t> step_of_dir_name(const std::string& name);

// The manifest of a step directory, checked: parses, and every shard file listed exists with
// its size. ConfigError naming the file and what is wrong otherwise.
Manifest read_complete(const std::filesystem::path& step_dir);

// The complete checkpoints under `root`, oldest first (incomplete ones skipped).
std::vector<std::filesystem::path> complete_checkpoints(const std::filesystem::path& root);

// What `--resume PATH` means: PATH itself when it holds a manifest (a step directory), else
// the newest complete step-* directory under it. ConfigError when there is none, naming the
// incomplete directories it skipped.
std::filesystem::path resolve_resume(const std::filesystem::path& path);

}  // namespace strata::checkpoint
