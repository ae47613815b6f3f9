// Checkpoints of a training run (issue 15, "never lose a run"): DIR/step-NNNNNN/ holds one
// safetensors shard per rank and manifest.json (manifest.h).
//   save_checkpoint  collective over the world: every rank writes its own shard in parallel
//     into a temporary directory (DIR/.step-NNNNNN.partial): for each unit it holds, its
//     optimizer part (ModelState::optimizer_part: its ZeRO slice, the whole unit at stage 0,
//     which DP rank 0 alone writes) as "<unit>/params" (the fp32 master), "<unit>/adam_m"
//     and "<unit>/adam_v", each described in the header's metadata (unit, state, the rank's
//     tp/pp/dp coordinates, the slice [begin, end) of the rank's flat unit buffer, and each
//     segment's local and full shape); the tied wte copy is not saved (it equals the
//     embedding's). After a barrier rank 0 writes the manifest, fsyncs the directory and
//     renames it into place: the checkpoint is complete or absent. With `keep`, older
//     complete checkpoints beyond the last `keep` are deleted after that.
//   CheckpointReader  on any plan: reads every shard of a complete checkpoint into the full
//     tensors of the single-rank model (full_tensors.h, with the saved plan's layouts), so
//     each rank of the new plan takes its slices of the parameters (the UnitInit of
//     RankTraining) and of the AdamW moments (load_moments) by the same rule a fresh run
//     uses: any tp, pp, dp, ZeRO stage, offload tier or virtual stages on either side.
// The step counter, the data position and the LR schedule are the manifest's step; the
// model has no dropout, so there is no generator state to keep.
// Deliberately not here: when to save and the flags (tools/strata/run.cc), the manifest's
// format (manifest.h). Not yet: reading only the shards that overlap a rank's slices (each
// rank reads them all: fine for the models a CPU trains, a cost for large ones).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cost_model/specs/model_spec.h"
#include "executor/checkpoint/manifest.h"
#include "executor/comm/mpi_communicator.h"
#include "executor/comm/process_groups.h"
#include "executor/engine/model_state.h"
#include "executor/model/param_init.h"

namespace strata::checkpoint {

// Writes the checkpoint of `manifest.step` steps under `root` (which must exist); returns its
// directory. `manifest` carries everything but `files`. keep: complete checkpoints to keep
// (nullopt: all). Collective over world; SystemError naming the path on any I/O failure.
std::filesystem::path save_checkpoint(const std::filesystem::path& root, Manifest manifest,
                                      engine::ModelState& state, const ProcessGroups& groups,
                                      MpiCommunicator& world, std::optional<std::int64_t> keep);

class CheckpointReader {
 public:
  // The complete checkpoint in step_dir, for `model` (ConfigError when it was written for
  // another model, or a shard does not hold what the manifest's plan says it should).
  CheckpointReader(const std::filesystem::path& step_dir, const ModelSpec& model);

  const Manifest& manifest() const { return manifest_; }
  // Each unit's parameters, for RankTraining's init.
  model::UnitInit params() const;
  // Every unit's AdamW moments into the state, wherever its plan keeps them.
  void load_moments(engine::ModelState& state) const;

 private:
  struct FullTensor {
    std::int64_t cols = 1;
    std::vector<float> values[3];  // by ModelState::StateKind
    std::vector<bool> covered;     // some shard held the element (a missing one is an error)
  };
  using FullTensors = std::map<std::string, FullTensor>;  // "<unit>/<segment>"
  model::UnitInit init_of(int kind) const;

  Manifest manifest_;
  std::shared_ptr<const FullTensors> full_;
};

}  // namespace strata::checkpoint
