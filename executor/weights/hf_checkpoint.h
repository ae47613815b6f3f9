// A Hugging Face checkpoint as transformers writes it: one safetensors file, or shards named
// by model.safetensors.index.json ({"metadata": {...}, "weight_map": {tensor: shard file}}).
// The path given may be the file, the index, or the directory that holds either
// (model.safetensors.index.json preferred over model.safetensors). Everything is checked on
// open, each a ConfigError naming the index, the shard and the tensor: the index's JSON and
// its weight_map (an object of file names), a shard that does not exist or is not
// safetensors, a tensor mapped to a shard that does not hold it, a tensor a shard holds that
// the index does not map (two shards could then disagree on it).
// Deliberately not here: what the tensors mean (hf_tensor.h), which of them a model needs
// (weights_io.h).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "executor/weights/safetensors.h"

namespace strata::weights {

// A tensor and the file (shard) that holds it.
struct HfTensorRef {
  const SafetensorsFile* file = nullptr;
  const TensorEntry* entry = nullptr;
};

class HfCheckpoint {
 public:
  // `flag` names the command-line flag in messages ("--init-from").
  HfCheckpoint(const std::string& path, const std::string& flag);

  // The tensor and its shard; {nullptr, nullptr} when no shard holds it.
  HfTensorRef find(const std::string& name) const;
  // Every tensor of every shard, by name.
  const std::map<std::string, HfTensorRef>& tensors() const { return tensors_; }
  // The path messages name: the index for a sharded checkpoint, else the file.
  const std::string& path() const { return path_; }
  std::size_t shard_count() const { return files_.size(); }
  bool sharded() const { return sharded_; }

 private:
  void open_index(const std::string& index, const std::string& flag);

  std::string path_;
  bool sharded_ = false;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, HfTensorRef> tensors_;
};

}  // namespace strata::weights
