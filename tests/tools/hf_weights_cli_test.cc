// Hugging Face Llama weights through the binary: `--save-weights` writes tiny-llama with
// transformers' LlamaForCausalLM names, the file (and the same tensors split over two shards
// with an index) loads under other plans with the same loss, and a broken sharded checkpoint
// is refused with exit 2 before any rank starts.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <tuple>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cost_model/specs/json_reader.h"
#include "cost_model/specs/model_spec.h"
#include "executor/weights/llama_tensors.h"
#include "executor/weights/safetensors.h"
#include "tests/tools/strata_command.h"

namespace strata {
namespace {
namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("strata_hf_cli_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// `strata <args>` on one thread in `dir`: its exit code, and its stderr as the output.
testing::CommandResult strata(const std::string& args, const fs::path& dir) {
  return testing::run_strata(dir, args, "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1",
                             "2>&1 >/dev/null");
}

double first_loss(const fs::path& out) {
  std::ifstream in(out / "metrics.jsonl");
  std::string line;
  std::getline(in, line);
  return Json::parse(line).at("loss").get<double>();
}

Json plan_json(int t, int p, int d, int zero, int micro_batch) {
  return Json{{"tp", t}, {"pp", p}, {"dp", d}, {"virtual_stages", 1}, {"micro_batch", micro_batch},
              {"schedule", "1f1b"}, {"zero_stage", zero},
              {"offload", {{"optimizer", "none"}, {"gradients", "none"}, {"params", "none"}}},
              {"recompute", "none"}, {"sequence_parallel", false}};
}

// The tensors of `file` split over two F32 shards (alternately) beside an index.
fs::path shard(const fs::path& file, const fs::path& dir) {
  const weights::SafetensorsFile in(file.string(), "test");
  weights::SafetensorsWriter a((dir / "model-00001-of-00002.safetensors").string());
  weights::SafetensorsWriter b((dir / "model-00002-of-00002.safetensors").string());
  Json map = Json::object();
  for (std::size_t i = 0; i < in.entries().size(); ++i) {
    const weights::TensorEntry& t = in.entries()[i];
    (i % 2 == 0 ? a : b).declare(t.name, t.shape);
    map[t.name] = i % 2 == 0 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  a.begin({});
  b.begin({});
  for (std::size_t i = 0; i < in.entries().size(); ++i) {
    const weights::TensorEntry& t = in.entries()[i];
    std::vector<float> values(static_cast<std::size_t>(t.elements()));
    for (std::int64_t j = 0; j < t.elements(); ++j) values[static_cast<std::size_t>(j)] = in.value(t, j);
    (i % 2 == 0 ? a : b).write(t.name, values.data());
  }
  a.finish();
  b.finish();
  const fs::path index = dir / "model.safetensors.index.json";
  write_json_file(index.string(), Json{{"metadata", Json::object()}, {"weight_map", map}});
  return index;
}

TEST(LlamaWeightsCli, SavedNamesLoadUnderOtherPlansAndFromShards) {
  const fs::path dir = scratch("roundtrip");
  const fs::path a = dir / "a.json";
  write_json_file(a.string(), plan_json(2, 1, 2, 3, 2));  // t2 d2 ZeRO-3
  const fs::path w = dir / "trained.safetensors";
  const testing::CommandResult trained = strata("run --plan " + a.string() + " --model tiny-llama --train tiny --steps 3 "
                                "--save-weights " + w.string() + " --out " + (dir / "train").string(), dir);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  // The file holds exactly transformers' names and shapes of the model.
  const ModelSpec m = ModelSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/models/tiny-llama.json");
  const weights::SafetensorsFile file(w.string(), "test");
  std::set<std::string> expected, written;
  for (const weights::HfTensor& t : weights::llama_tensors(m)) {
    expected.insert(t.name);
    ASSERT_NE(file.find(t.name), nullptr) << t.name;
    EXPECT_EQ(file.find(t.name)->shape, t.shape) << t.name;
  }
  for (const weights::TensorEntry& t : file.entries()) written.insert(t.name);
  EXPECT_EQ(written, expected);
  EXPECT_EQ(written.count("model.layers.3.self_attn.k_proj.weight"), 1u);

  const fs::path sharded = dir / "sharded";
  fs::create_directories(sharded);
  shard(w, sharded);
  // Each plan loads the weights and takes one step: its step-1 loss is batch 0's loss under
  // the saved weights; differences are float reduction order only (~1e-7 relative).
  const fs::path p2 = dir / "p2.json";
  write_json_file(p2.string(), plan_json(1, 2, 1, 0, 2));
  // t4 > kv_heads 2: each KV head is read by the 2 TP ranks that hold it.
  const fs::path tp4 = dir / "tp4.json";
  write_json_file(tp4.string(), plan_json(4, 1, 1, 0, 2));
  double reference = 0;
  for (const auto& [label, plan, from] :
       {std::tuple{"single", std::string("tiny-single"), w}, std::tuple{"tp2", std::string("tiny-tp2"), w},
        std::tuple{"tp4", tp4.string(), w},
        std::tuple{"p2_shards", p2.string(), sharded}, std::tuple{"single_shards", std::string("tiny-single"), sharded}}) {
    const fs::path out = dir / label;
    const testing::CommandResult r = strata("run --plan " + plan + " --model tiny-llama --train tiny --steps 1 --init-from " +
                                from.string() + " --out " + out.string(), dir);
    ASSERT_EQ(r.exit_code, 0) << label << ": " << r.output;
    const double loss = first_loss(out);
    if (reference == 0) {
      reference = loss;
      EXPECT_LT(loss, std::log(256.0) - 0.05);  // trained weights, not a fresh init
    }
    EXPECT_NEAR(loss, reference, 1e-6 * reference) << label;
  }

  // Saved under t4, where 2 TP ranks hold each KV head (one of them writes it): the same 3
  // steps as the t2 d2 ZeRO-3 run, so loaded on one rank the same step-1 loss within the
  // reduction order of 3 steps (1e-5 relative).
  const fs::path w4 = dir / "trained_tp4.safetensors";
  const testing::CommandResult trained4 = strata("run --plan " + tp4.string() + " --model tiny-llama --train tiny --steps 3 "
                                 "--save-weights " + w4.string() + " --out " + (dir / "train_tp4").string(), dir);
  ASSERT_EQ(trained4.exit_code, 0) << trained4.output;
  const testing::CommandResult loaded4 = strata("run --plan tiny-single --model tiny-llama --train tiny --steps 1 --init-from " +
                                    w4.string() + " --out " + (dir / "from_tp4").string(), dir);
  ASSERT_EQ(loaded4.exit_code, 0) << loaded4.output;
  EXPECT_NEAR(first_loss(dir / "from_tp4"), reference, 1e-5 * reference);

  // A missing shard: exit 2 naming it, before any rank starts (no metrics written).
  fs::remove(sharded / "model-00002-of-00002.safetensors");
  const fs::path out = dir / "broken";
  const testing::CommandResult r = strata("run --plan tiny-single --model tiny-llama --train tiny --steps 1 --init-from " +
                              sharded.string() + " --out " + out.string(), dir);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("model-00002-of-00002.safetensors"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out / "metrics.jsonl"));
  fs::remove_all(fs::temp_directory_path() / ("strata_hf_cli_" + std::to_string(::getpid())));
}

}  // namespace
}  // namespace strata
