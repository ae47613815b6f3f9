// Hugging Face Llama weights: the name table (hf_tensor.h, llama_tensors.h) read off the
// model's tensor description, a checkpoint's values landing on the right element of each TP
// rank's slice (q/k/v into q_w and kv_w, gate/up into fc_w, from F32 and BF16 shards), and
// every way a sharded checkpoint can be wrong, each a ConfigError naming the file and tensor.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/json_reader.h"
#include "cost_model/specs/layer_tensors.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/param_layout.h"
#include "executor/weights/full_tensors.h"
#include "executor/weights/hf_checkpoint.h"
#include "executor/weights/hf_tensor.h"
#include "executor/weights/llama_tensors.h"
#include "executor/weights/weights_io.h"
#include "tests/cost_model/spec_test_util.h"

namespace strata::weights {
namespace {
namespace fs = std::filesystem;
using strata::testing::expect_error;

ModelSpec tiny_llama() {
  // configs/models/tiny-llama.json: h 64, 4 heads of 16, 2 KV heads, f 176, V 256, untied;
  // two layers are enough to tell layers apart and keep the files small.
  ModelSpec m = ModelSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/models/tiny-llama.json");
  m.layers = 2;
  return m;
}

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("strata_hf_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// The value a test checkpoint holds at element j (row-major) of its k-th tensor: multiples of
// 1/8 below 32, exact in F32, F16 and BF16 (at most 8 significant bits), and varying along
// rows and columns so a misplaced row, column or tensor shows.
float value_of(std::size_t k, std::int64_t j) {
  return static_cast<float>((static_cast<std::int64_t>(k) * 37 + j) % 251) / 8.0f;
}

struct FileTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::string dtype = "F32";  // F32, BF16 or I32 (its bits are the F32 ones: only the dtype is wrong)
  std::size_t k = 0;          // value_of's tensor index
};

std::int64_t elements(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

// A safetensors file written byte by byte (the format: 8-byte little-endian header length,
// JSON header, data), independent of SafetensorsWriter.
void write_file(const fs::path& path, const std::vector<FileTensor>& tensors) {
  Json header = Json::object();
  std::string data;
  for (const FileTensor& t : tensors) {
    const std::int64_t begin = static_cast<std::int64_t>(data.size());
    for (std::int64_t j = 0; j < elements(t.shape); ++j) {
      const float v = value_of(t.k, j);
      std::uint32_t bits = 0;
      std::memcpy(&bits, &v, 4);
      if (t.dtype == "BF16") {
        const std::uint16_t hi = static_cast<std::uint16_t>(bits >> 16);  // exact for value_of
        data.append(reinterpret_cast<const char*>(&hi), 2);
      } else {
        data.append(reinterpret_cast<const char*>(&bits), 4);
      }
    }
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape},
                      {"data_offsets", {begin, static_cast<std::int64_t>(data.size())}}};
  }
  const std::string text = header.dump();
  const std::uint64_t n = text.size();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << text << data;
}

// The model's tensors as FileTensors, k = their place in the table.
std::vector<FileTensor> file_tensors(const ModelSpec& m) {
  std::vector<FileTensor> out;
  const std::vector<HfTensor> table = llama_tensors(m);
  for (std::size_t k = 0; k < table.size(); ++k) out.push_back({table[k].name, table[k].shape, "F32", k});
  return out;
}

// Writes `tensors` as shards (tensor i into shard i % shards, named like transformers'
// model-0000s-of-0000n.safetensors) and the index; returns the index's path.
fs::path write_sharded(const fs::path& dir, const std::vector<FileTensor>& tensors, int shards) {
  std::vector<std::vector<FileTensor>> parts(static_cast<std::size_t>(shards));
  Json map = Json::object();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const int s = static_cast<int>(i % static_cast<std::size_t>(shards));
    parts[static_cast<std::size_t>(s)].push_back(tensors[i]);
    map[tensors[i].name] = "model-0000" + std::to_string(s + 1) + "-of-0000" + std::to_string(shards) + ".safetensors";
  }
  for (int s = 0; s < shards; ++s) {
    write_file(dir / ("model-0000" + std::to_string(s + 1) + "-of-0000" + std::to_string(shards) + ".safetensors"),
               parts[static_cast<std::size_t>(s)]);
  }
  const fs::path index = dir / "model.safetensors.index.json";
  write_json_file(index.string(), Json{{"metadata", {{"total_size", 0}}}, {"weight_map", map}});
  return index;
}

TEST(LlamaNames, DerivedFromTheModelsTensors) {
  const ModelSpec m = tiny_llama();
  const std::vector<HfTensor> t = llama_tensors(m);
  // embed_tokens + 2 layers x (2 norms, q, k, v, o, gate, up, down) + norm + lm_head.
  ASSERT_EQ(t.size(), 1u + 2u * 9u + 1u + 1u);
  std::map<std::string, const HfTensor*> by_name;
  std::int64_t total = 0;
  for (const HfTensor& x : t) {
    by_name[x.name] = &x;
    total += elements(x.shape);
    EXPECT_FALSE(x.transposed) << x.name;  // nn.Linear's (out, in) is strata's layout
  }
  // Every parameter once: the table's elements are the model's count.
  EXPECT_EQ(total, m.total_params());
  const auto at = [&](const std::string& name) -> const HfTensor& {
    EXPECT_EQ(by_name.count(name), 1u) << name;
    return *by_name.at(name);
  };
  EXPECT_EQ(at("model.embed_tokens.weight").shape, (std::vector<std::int64_t>{256, 64}));
  EXPECT_EQ(at("model.embed_tokens.weight").unit, "embedding");
  // 2 KV heads of 16: k_proj and v_proj are (32, 64), rows [0, 32) and [32, 64) of kv_w.
  const HfTensor& k = at("model.layers.1.self_attn.k_proj.weight");
  const HfTensor& v = at("model.layers.1.self_attn.v_proj.weight");
  EXPECT_EQ(k.shape, (std::vector<std::int64_t>{32, 64}));
  EXPECT_EQ(k.unit, "layer1");
  EXPECT_EQ(k.segment, "kv_w");
  EXPECT_EQ(k.first_row, 0);
  EXPECT_EQ(v.segment, "kv_w");
  EXPECT_EQ(v.first_row, 32);
  EXPECT_EQ(at("model.layers.0.self_attn.q_proj.weight").segment, "q_w");
  EXPECT_EQ(at("model.layers.0.self_attn.o_proj.weight").segment, "proj_w");
  // SwiGLU: gate rows [0, 176), up rows [176, 352) of fc_w; down_proj (64, 176).
  EXPECT_EQ(at("model.layers.0.mlp.gate_proj.weight").first_row, 0);
  EXPECT_EQ(at("model.layers.0.mlp.up_proj.weight").first_row, 176);
  EXPECT_EQ(at("model.layers.0.mlp.up_proj.weight").segment, "fc_w");
  EXPECT_EQ(at("model.layers.0.mlp.down_proj.weight").shape, (std::vector<std::int64_t>{64, 176}));
  EXPECT_EQ(at("model.layers.0.input_layernorm.weight").shape, (std::vector<std::int64_t>{64}));
  EXPECT_EQ(at("model.layers.0.post_attention_layernorm.weight").segment, "ln2_w");
  EXPECT_EQ(at("model.norm.weight").unit, "final_norm");
  EXPECT_EQ(at("lm_head.weight").unit, "output");

  // As many KV heads as query heads: q, k, v are the three parts of the fused qkv_w.
  ModelSpec mha = m;
  mha.kv_heads = 0;
  std::map<std::string, std::int64_t> first_row;
  for (const HfTensor& x : llama_tensors(mha)) {
    if (x.unit == "layer0" && x.segment == "qkv_w") first_row[x.name] = x.first_row;
  }
  EXPECT_EQ(first_row, (std::map<std::string, std::int64_t>{{"model.layers.0.self_attn.q_proj.weight", 0},
                                                            {"model.layers.0.self_attn.k_proj.weight", 64},
                                                            {"model.layers.0.self_attn.v_proj.weight", 128}}));
  // Tied (Llama 3.2 1B): no lm_head, and a file's lm_head copy is skipped on load.
  ModelSpec tied = m;
  tied.tied_output = true;
  for (const HfTensor& x : llama_tensors(tied)) EXPECT_NE(x.name, "lm_head.weight");
  EXPECT_TRUE(is_ignored_llama_tensor("lm_head.weight", tied));
  EXPECT_FALSE(is_ignored_llama_tensor("lm_head.weight", m));
  EXPECT_TRUE(is_ignored_llama_tensor("model.layers.3.self_attn.rotary_emb.inv_freq", m));
  // With biases (attention_bias, mlp_bias): q_proj.bias, ..., down_proj.bias.
  ModelSpec biased = m;
  biased.biases = true;
  std::set<std::string> names;
  for (const HfTensor& x : llama_tensors(biased)) names.insert(x.name);
  EXPECT_EQ(names.count("model.layers.0.self_attn.v_proj.bias"), 1u);
  EXPECT_EQ(names.count("model.layers.0.mlp.down_proj.bias"), 1u);

  // The family picks the table: GPT-2 names for the GPT family, Llama's otherwise, and
  // neither for a mix with no Hugging Face architecture (a GeLU MLP with rotary positions).
  EXPECT_EQ(hf_names(m).family, "Llama");
  ModelSpec gpt;
  gpt.name = "tiny";
  gpt.layers = 1, gpt.hidden = 64, gpt.heads = 4, gpt.seq_len = 64, gpt.vocab = 256, gpt.ffn_hidden = 256;
  EXPECT_EQ(hf_names(gpt).family, "GPT-2");
  EXPECT_EQ(hf_names(gpt).tensors.front().name, "wte.weight");
  ModelSpec mix = m;
  mix.mlp = MlpKind::kGelu;
  expect_error<ConfigError>([&] { hf_names(mix); }, {"tiny-llama", "Llama (rmsnorm, swiglu, rope)"});
}

// Full-tensor element (R, C) of strata's segment `seg`: the Hugging Face tensor and element it
// comes from, written out by hand from transformers' LlamaForCausalLM (not from the table).
std::pair<std::string, std::int64_t> source_of(const std::string& unit, const std::string& seg,
                                               std::int64_t R, std::int64_t C) {
  const std::string p = unit.rfind("layer", 0) == 0 ? "model.layers." + unit.substr(5) + "." : "";
  if (seg == "wte") return {"model.embed_tokens.weight", R * 64 + C};
  if (seg == "lm_head") return {"lm_head.weight", R * 64 + C};
  if (seg == "lnf_w") return {"model.norm.weight", R};
  if (seg == "ln1_w") return {p + "input_layernorm.weight", R};
  if (seg == "ln2_w") return {p + "post_attention_layernorm.weight", R};
  if (seg == "q_w") return {p + "self_attn.q_proj.weight", R * 64 + C};
  if (seg == "kv_w") {  // K heads' rows, then V's (32 each)
    return R < 32 ? std::pair{p + "self_attn.k_proj.weight", R * 64 + C}
                  : std::pair{p + "self_attn.v_proj.weight", (R - 32) * 64 + C};
  }
  if (seg == "proj_w") return {p + "self_attn.o_proj.weight", R * 64 + C};
  if (seg == "fc_w") {  // gate's rows, then up's (176 each)
    return R < 176 ? std::pair{p + "mlp.gate_proj.weight", R * 64 + C}
                   : std::pair{p + "mlp.up_proj.weight", (R - 176) * 64 + C};
  }
  if (seg == "fc2_w") return {p + "mlp.down_proj.weight", R * 176 + C};
  ADD_FAILURE() << "no source for " << unit << "." << seg;
  return {"", 0};
}

// Every element of every unit on each rank of t = 1 and t = 2 holds the checkpoint's value.
void expect_loaded(const std::string& path, const ModelSpec& m, const std::vector<FileTensor>& tensors) {
  std::map<std::string, std::size_t> k_of;
  for (const FileTensor& t : tensors) k_of[t.name] = t.k;
  const model::UnitInit init = weights_file_init(path, m, "--init-from");
  for (const TpShape tp : {TpShape{1, 0, 1}, TpShape{2, 0, 1}, TpShape{2, 1, 1}}) {
    std::vector<UnitLayout> units = {embedding_layout(m, tp), final_norm_layout(m), output_layout(m, tp)};
    for (std::int64_t l = 0; l < m.layers; ++l) units.push_back(layer_layout(m, tp, l));
    for (const UnitLayout& u : units) {
      std::vector<float> got(static_cast<std::size_t>(u.count), -1.0f);
      init(u, got.data(), 0, u.count);
      std::int64_t checked = 0;
      for_each_full_element(u, 0, u.count, [&](const ParamSegment& s, std::int64_t i, std::int64_t R,
                                               std::int64_t C) {
        const auto [name, j] = source_of(u.name, s.name, R, C);
        ASSERT_EQ(k_of.count(name), 1u) << name;
        ASSERT_EQ(got[static_cast<std::size_t>(i)], value_of(k_of.at(name), j))
            << u.name << "." << s.name << " (" << R << ", " << C << ") t" << tp.tp << " rank " << tp.tp_rank;
        ++checked;
      });
      EXPECT_GT(checked, 0) << u.name;
    }
  }
}

TEST(LlamaWeights, OneFileAndShardsLoadOnEveryTpRank) {
  const ModelSpec m = tiny_llama();
  const fs::path dir = scratch("load");
  std::vector<FileTensor> tensors = file_tensors(m);
  const fs::path single = dir / "model.safetensors";
  write_file(single, tensors);
  expect_loaded(single.string(), m, tensors);
  // Sharded over three files, every other tensor BF16 (transformers' usual dtype), named by
  // the index or by its directory.
  for (std::size_t i = 0; i < tensors.size(); i += 2) tensors[i].dtype = "BF16";
  const fs::path sharded = dir / "sharded";
  fs::create_directories(sharded);
  const fs::path index = write_sharded(sharded, tensors, 3);
  EXPECT_EQ(HfCheckpoint(index.string(), "--init-from").shard_count(), 3u);
  expect_loaded(index.string(), m, tensors);
  expect_loaded(sharded.string(), m, tensors);
  // A tied model's checkpoint that keeps lm_head.weight loads (the copy is skipped).
  ModelSpec tied = m;
  tied.tied_output = true;
  EXPECT_NO_THROW(check_weights_file(single.string(), tied, "--init-from"));
}

TEST(LlamaWeights, BadShardedCheckpointsAreNamed) {
  const ModelSpec m = tiny_llama();
  const std::vector<FileTensor> good = file_tensors(m);
  const std::string up = "model.layers.1.mlp.up_proj.weight";
  const auto check = [&](const fs::path& p) { check_weights_file(p.string(), m, "--init-from"); };

  {  // A shard the index names is missing.
    const fs::path dir = scratch("missing_shard");
    const fs::path index = write_sharded(dir, good, 2);
    fs::remove(dir / "model-00002-of-00002.safetensors");
    expect_error<ConfigError>([&] { check(index); },
                              {"--init-from", index.string(), "model-00002-of-00002.safetensors",
                               "does not exist", "holding tensor '"});
  }
  {  // A tensor in no shard (and not in the index).
    const fs::path dir = scratch("absent");
    std::vector<FileTensor> t;
    for (const FileTensor& x : good) {
      if (x.name != up) t.push_back(x);
    }
    const fs::path index = write_sharded(dir, t, 2);
    expect_error<ConfigError>([&] { check(dir); },
                              {index.string(), "no tensor '" + up + "'", "[176, 64]", "in any of its 2 shards",
                               "tiny-llama"});
  }
  {  // The index maps a tensor to a shard that does not hold it.
    const fs::path dir = scratch("mismapped");
    const fs::path index = write_sharded(dir, good, 2);
    Json j = read_json_file(index.string());
    const std::string was = j["weight_map"][up].get<std::string>();
    j["weight_map"][up] = was == "model-00001-of-00002.safetensors" ? "model-00002-of-00002.safetensors"
                                                                      : "model-00001-of-00002.safetensors";
    write_json_file(index.string(), j);
    expect_error<ConfigError>([&] { check(index); },
                              {index.string(), "tensor '" + up + "' is mapped to shard", "which does not hold it"});
  }
  {  // A shard holds a tensor the index does not list.
    const fs::path dir = scratch("unlisted");
    const fs::path index = write_sharded(dir, good, 2);
    Json j = read_json_file(index.string());
    j["weight_map"].erase(up);
    write_json_file(index.string(), j);
    expect_error<ConfigError>([&] { check(index); }, {"holds tensor '" + up + "'", "does not list"});
  }
  {  // A shape that is not the model's: the shard that holds it is named.
    const fs::path dir = scratch("shape");
    std::vector<FileTensor> t = good;
    for (FileTensor& x : t) {
      if (x.name == "model.layers.0.self_attn.k_proj.weight") x.shape = {64, 64};  // MHA's, not 2 KV heads'
    }
    write_sharded(dir, t, 2);
    expect_error<ConfigError>([&] { check(dir); },
                              {(dir / "model-0000").string(), "tensor 'model.layers.0.self_attn.k_proj.weight'",
                               "has shape [64, 64], expected [32, 64]"});
  }
  {  // A dtype that is not a float.
    const fs::path dir = scratch("dtype");
    std::vector<FileTensor> t = good;
    for (FileTensor& x : t) {
      if (x.name == "model.norm.weight") x.dtype = "I32";
    }
    write_sharded(dir, t, 2);
    expect_error<ConfigError>([&] { check(dir); },
                              {"tensor 'model.norm.weight'", "dtype I32", "expected F32, F16, BF16 or F64"});
  }
  {  // A tensor the model does not have (a third layer's).
    const fs::path dir = scratch("extra");
    std::vector<FileTensor> t = good;
    t.push_back({"model.layers.2.input_layernorm.weight", {64}, "F32", 0});
    write_sharded(dir, t, 2);
    expect_error<ConfigError>([&] { check(dir); },
                              {"'model.layers.2.input_layernorm.weight' is not a parameter", "Llama names"});
  }
  {  // An index with no weight_map; a directory with neither file.
    const fs::path dir = scratch("no_map");
    const fs::path index = dir / "model.safetensors.index.json";
    write_json_file(index.string(), Json{{"metadata", Json::object()}});
    expect_error<ConfigError>([&] { check(index); }, {index.string(), "no \"weight_map\" object"});
    fs::remove(index);
    expect_error<ConfigError>([&] { check(dir); },
                              {dir.string(), "neither model.safetensors.index.json", "nor model.safetensors"});
  }
  fs::remove_all(fs::temp_directory_path() / ("strata_hf_" + std::to_string(::getpid())));
}

}  // namespace
}  // namespace strata::weights
