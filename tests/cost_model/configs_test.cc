// Every bundled config under configs/ loads, round-trips byte-for-byte as JSON
// (to_json(from_json(file)) == file), and the bundled plans pass Plan::check against the
// model, cluster and train setup they were written for.
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/profile.h"
#include "cost_model/specs/step_report.h"
#include "cost_model/specs/train_spec.h"
#include "tests/cost_model/bundled_configs.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

const fs::path kConfigs = fs::path(STRATA_SOURCE_DIR) / "configs";

using testing::json_files;

// Loads with `from_json` and checks the JSON written back equals the file's.
template <typename Spec>
void expect_round_trip(const fs::path& file) {
  SCOPED_TRACE(file.string());
  const Json json = read_json_file(file.string());
  Spec spec;
  ASSERT_NO_THROW(spec = Spec::from_json(json, file.string()));
  EXPECT_EQ(spec.to_json(), json) << "written back:\n" << spec.to_json().dump(2);
}

TEST(Configs, EveryFileLoadsAndRoundTrips) {
  std::map<std::string, int> counted;
  for (const auto& entry : fs::directory_iterator(kConfigs)) {
    if (!entry.is_directory()) continue;
    const std::string kind = entry.path().filename().string();
    for (const fs::path& file : json_files(entry.path())) {
      ++counted[kind];
      if (kind == "models") {
        expect_round_trip<ModelSpec>(file);
      } else if (kind == "clusters") {
        expect_round_trip<ClusterSpec>(file);
      } else if (kind == "train") {
        expect_round_trip<TrainSpec>(file);
      } else if (kind == "plans") {
        expect_round_trip<Plan>(file);
      } else if (kind == "profiles") {
        expect_round_trip<Profile>(file);
      } else if (kind == "reports") {
        expect_round_trip<StepReport>(file);
      } else {
        // A kind this test does not know yet: at least valid JSON.
        EXPECT_NO_THROW(read_json_file(file.string())) << file;
      }
    }
  }
  // The bundled set named in the design: these must exist.
  EXPECT_GE(counted["models"], 11);
  EXPECT_GE(counted["clusters"], 4);
  EXPECT_GE(counted["train"], 8);
  EXPECT_GE(counted["plans"], 6);
}

TEST(Configs, ModelNameMatchesFileName) {
  for (const fs::path& file : json_files(kConfigs / "models")) {
    EXPECT_EQ(ModelSpec::load(file.string()).name, file.stem().string()) << file;
  }
  for (const fs::path& file : json_files(kConfigs / "clusters")) {
    EXPECT_EQ(ClusterSpec::load(file.string()).name, file.stem().string()) << file;
  }
}

fs::path config(const std::string& kind, const std::string& name) {
  return kConfigs / kind / (name + ".json");
}

// (plan, model, cluster, train) that belong together.
struct Bundle {
  const char* plan;
  const char* model;
  const char* cluster;
  const char* train;
  std::int64_t gpus;  // the published GPU count for the row; 0 = not a published row
};

constexpr Bundle kBundles[] = {
    {"tiny-single", "tiny", "local-cpu", "tiny", 0},
    {"tiny-tp2", "tiny", "local-cpu", "tiny", 0},
    {"tiny-pp2", "tiny", "local-cpu", "tiny", 0},
    {"tiny-dp2", "tiny", "local-cpu", "tiny", 0},
    {"tiny-3d", "tiny", "local-cpu", "tiny", 0},
    // Narayanan et al. 2021, Table 1: GPUs = t * p * d.
    {"megatron-1.7b", "megatron-1.7b", "selene-a100", "megatron-1.7b", 32},
    {"megatron-7.5b", "megatron-7.5b", "selene-a100", "megatron-7.5b", 128},
    {"megatron-39.1b", "megatron-39.1b", "selene-a100", "megatron-39.1b", 512},
    {"megatron-145.6b", "megatron-145.6b", "selene-a100", "megatron-145.6b", 1536},
    {"megatron-1t", "megatron-1t", "selene-a100", "megatron-1t", 3072},
    // Same paper, Table 2 (GPT-3 175B): 384 and 1536 GPUs.
    {"gpt3-175b-ptdp-384", "gpt3-175b", "selene-a100", "gpt3-175b", 384},
    {"gpt3-175b-ptdp-1536", "gpt3-175b", "selene-a100", "gpt3-175b", 1536},
    {"gpt3-175b-zero3-384", "gpt3-175b", "selene-a100", "gpt3-175b", 384},
    {"gpt3-175b-zero3-1536", "gpt3-175b", "selene-a100", "gpt3-175b", 1536},
};

TEST(Configs, BundledPlansAreLegalForTheirSetup) {
  for (const Bundle& b : kBundles) {
    SCOPED_TRACE(b.plan);
    const Plan plan = Plan::load(config("plans", b.plan).string());
    const ModelSpec model = ModelSpec::load(config("models", b.model).string());
    const ClusterSpec cluster = ClusterSpec::load(config("clusters", b.cluster).string());
    const TrainSpec train = TrainSpec::load(config("train", b.train).string());
    EXPECT_NO_THROW(plan.check(model, cluster, train, b.plan));
    if (b.gpus > 0) {
      EXPECT_EQ(plan.world_size(), b.gpus);
    }
  }
}

TEST(Configs, PublishedRowsAsInTable1) {
  // (global batch, layers, hidden, heads) from Table 1 of Narayanan et al. 2021; all rows
  // use full recomputation and, where p > 1, the interleaved schedule.
  struct Row {
    const char* name;
    std::int64_t batch, layers, hidden, heads, t, p, d;
  };
  constexpr Row kRows[] = {
      {"megatron-1.7b", 512, 24, 2304, 24, 1, 1, 32},
      {"megatron-7.5b", 512, 36, 4096, 32, 4, 1, 32},
      {"megatron-39.1b", 1536, 48, 8192, 64, 8, 2, 32},
      {"megatron-145.6b", 2304, 80, 12288, 96, 8, 8, 24},
      {"megatron-1t", 3072, 128, 25600, 160, 8, 64, 6},
  };
  for (const Row& r : kRows) {
    SCOPED_TRACE(r.name);
    const ModelSpec m = ModelSpec::load(config("models", r.name).string());
    const TrainSpec t = TrainSpec::load(config("train", r.name).string());
    const Plan p = Plan::load(config("plans", r.name).string());
    EXPECT_EQ(m.layers, r.layers);
    EXPECT_EQ(m.hidden, r.hidden);
    EXPECT_EQ(m.heads, r.heads);
    EXPECT_EQ(m.seq_len, 2048);
    EXPECT_EQ(m.vocab, 51200);
    EXPECT_EQ(t.global_batch, r.batch);
    EXPECT_EQ(t.precision, Precision::kBf16);
    EXPECT_EQ(p.tp, r.t);
    EXPECT_EQ(p.pp, r.p);
    EXPECT_EQ(p.dp, r.d);
    EXPECT_EQ(p.recompute, Recompute::kFull);
    EXPECT_EQ(p.schedule, r.p > 1 ? ScheduleKind::kInterleaved : ScheduleKind::kOneFOneB);
  }
}

TEST(Configs, TinyTrainsOnTheLocalCpu) {
  const ModelSpec m = ModelSpec::load(config("models", "tiny").string());
  const ClusterSpec c = ClusterSpec::load(config("clusters", "local-cpu").string());
  const TrainSpec t = TrainSpec::load(config("train", "tiny").string());
  EXPECT_EQ(c.backend, Backend::kCpu);
  EXPECT_EQ(t.precision, Precision::kFp32);
  EXPECT_EQ(t.global_batch, 8);
  EXPECT_EQ(t.seed, 1234u);
  // layers divisible by p*v up to 4*2, heads by t up to 4.
  EXPECT_EQ(m.layers % 8, 0);
  EXPECT_EQ(m.heads % 4, 0);
  // Small: 8 * (12*64^2 + 13*64) + (256 + 64) * 64 + 2*64 = 8 * 49984 + 20480 + 128 = 420,480
  // parameters (ffn 256 = 4 * 64, so the 12 h^2 + 13 h layer formula holds).
  EXPECT_EQ(m.total_params(), 420480);
  // 8 ranks of 2 GiB fit in the node's host memory.
  EXPECT_LE(c.gpus_per_node * c.device.memory_bytes, c.host.memory_bytes);
}

}  // namespace
}  // namespace strata
