// Single-file and sharded Hugging Face checkpoints (see hf_checkpoint.h).
#include "executor/weights/hf_checkpoint.h"

#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/json_reader.h"

namespace strata::weights {
namespace fs = std::filesystem;
namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

HfCheckpoint::HfCheckpoint(const std::string& path, const std::string& flag) {
  std::error_code ec;
  std::string file = path;
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    if (fs::exists(dir / kIndexName, ec)) {
      file = (dir / kIndexName).string();
    } else if (fs::exists(dir / kSingleName, ec)) {
      file = (dir / kSingleName).string();
    } else {
      throw ConfigError(fmt::format("{}: '{}': a directory with neither {} (a sharded checkpoint) "
                                    "nor {}; expected a Hugging Face checkpoint directory, its "
                                    "index or a .safetensors file",
                                    flag, path, kIndexName, kSingleName));
    }
  }
  path_ = file;
  if (ends_with(file, ".json")) {
    open_index(file, flag);
    return;
  }
  files_.push_back(std::make_unique<SafetensorsFile>(file, flag));
  for (const TensorEntry& t : files_.back()->entries()) tensors_[t.name] = {files_.back().get(), &t};
}

void HfCheckpoint::open_index(const std::string& index, const std::string& flag) {
  sharded_ = true;
  const auto bad = [&](const std::string& what) {
    return ConfigError(fmt::format("{}: '{}': {}", flag, index, what));
  };
  const Json json = read_json_file(index);
  if (!json.is_object() || !json.contains("weight_map") || !json["weight_map"].is_object()) {
    throw bad("no \"weight_map\" object; expected a Hugging Face index "
              "{\"weight_map\": {tensor name: shard file}}");
  }
  const Json& map = json["weight_map"];
  if (map.empty()) throw bad("\"weight_map\" is empty; expected tensor name -> shard file");
  // Shards in the order the index first names them, each opened once.
  std::map<std::string, const SafetensorsFile*> shard_of_name;
  const fs::path dir = fs::path(index).parent_path();
  for (const auto& [tensor, shard] : map.items()) {
    if (!shard.is_string()) {
      throw bad(fmt::format("\"weight_map\".\"{}\" is {}; expected a shard file name", tensor,
                            value_text(shard)));
    }
    const std::string name = shard.get<std::string>();
    if (shard_of_name.count(name) == 0) {
      const std::string shard_path = (dir / name).string();
      std::error_code ec;
      if (!fs::is_regular_file(shard_path, ec)) {
        throw bad(fmt::format("shard '{}' (holding tensor '{}') does not exist; expected it beside "
                              "the index",
                              shard_path, tensor));
      }
      files_.push_back(std::make_unique<SafetensorsFile>(shard_path, flag));
      shard_of_name[name] = files_.back().get();
    }
    const SafetensorsFile* file = shard_of_name.at(name);
    const TensorEntry* entry = file->find(tensor);
    if (entry == nullptr) {
      throw bad(fmt::format("tensor '{}' is mapped to shard '{}', which does not hold it", tensor,
                            file->path()));
    }
    tensors_[tensor] = {file, entry};
  }
  for (const auto& file : files_) {
    for (const TensorEntry& t : file->entries()) {
      const auto it = tensors_.find(t.name);
      if (it == tensors_.end() || it->second.file != file.get()) {
        throw bad(fmt::format("shard '{}' holds tensor '{}', which \"weight_map\" {}", file->path(),
                              t.name,
                              it == tensors_.end() ? "does not list"
                                                   : "maps to shard '" + it->second.file->path() + "'"));
      }
    }
  }
}

HfTensorRef HfCheckpoint::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? HfTensorRef{} : it->second;
}

}  // namespace strata::weights
