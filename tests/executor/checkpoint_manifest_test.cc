// The checkpoint manifest and what makes a step directory a checkpoint (see checkpoint.cmake).
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "executor/checkpoint/durable_files.h"
#include "executor/checkpoint/manifest.h"

namespace strata::checkpoint {
namespace {

namespace fs = std::filesystem;

class ManifestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strata_manifest_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A dp2 checkpoint of `step` steps whose two shards hold 10 and 20 bytes.
  static Manifest manifest(std::int64_t step) {
    Manifest m;
    m.step = step;
    m.model = ModelSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/models/tiny.json");
    m.train = TrainSpec::load(std::string(STRATA_SOURCE_DIR) + "/configs/train/tiny.json");
    m.plan = Plan::load(std::string(STRATA_SOURCE_DIR) + "/configs/plans/tiny-dp2.json");
    m.seed = m.train.seed;
    m.data = "generated corpus, 1048576 training tokens";
    m.files = {{"rank-00000.safetensors", 10}, {"rank-00001.safetensors", 20}};
    return m;
  }

  fs::path write_checkpoint(const Manifest& m) {
    const fs::path d = dir_ / step_dir_name(m.step);
    fs::create_directories(d);
    for (const ShardFile& f : m.files) std::ofstream(d / f.name) << std::string(static_cast<std::size_t>(f.bytes), 'x');
    write_file_durably(d / kManifestFile, m.to_json().dump());
    return d;
  }

  fs::path dir_;
};

TEST_F(ManifestTest, StepDirectoryNames) {
  EXPECT_EQ(step_dir_name(123), "step-000123");
  EXPECT_EQ(step_dir_name(1234567), "step-1234567");
  EXPECT_EQ(step_of_dir_name("step-000123"), 123);
  EXPECT_EQ(step_of_dir_name(".step-000123.partial"), std::nullopt);  // a writer's temporary
  EXPECT_EQ(step_of_dir_name("step-12x"), std::nullopt);
  EXPECT_EQ(step_of_dir_name("step-"), std::nullopt);
}

TEST_F(ManifestTest, RoundTripsEveryField) {
  const Manifest m = manifest(7);
  const Manifest back = Manifest::from_json(m.to_json(), "m.json");
  EXPECT_EQ(back.step, 7);
  EXPECT_EQ(back.model.to_json(), m.model.to_json());
  EXPECT_EQ(back.train.to_json(), m.train.to_json());
  EXPECT_EQ(back.plan, m.plan);
  EXPECT_EQ(back.seed, m.seed);
  EXPECT_EQ(back.data, m.data);
  ASSERT_EQ(back.files.size(), 2u);
  EXPECT_EQ(back.files[1].name, "rank-00001.safetensors");
  EXPECT_EQ(back.files[1].bytes, 20);
}

TEST_F(ManifestTest, RefusesWhatIsNotOneOfOurs) {
  const auto refused = [](Json j, const std::string& field) {
    try {
      Manifest::from_json(j, "m.json");
      ADD_FAILURE() << "accepted " << j.dump();
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("m.json"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  Json j = manifest(3).to_json();
  refused([&] { Json k = j; k["version"] = 2; return k; }(), "version");
  refused([&] { Json k = j; k["format"] = "pytorch"; return k; }(), "format");
  refused([&] { Json k = j; k["step"] = 0; return k; }(), "step");
  refused([&] { Json k = j; k["files"].erase(1); return k; }(), "one per rank");  // dp2: 2 files
  refused([&] { Json k = j; k["files"][0]["name"] = "../x"; return k; }(), "files");
  refused([&] { Json k = j; k.erase("seed"); return k; }(), "seed");
}

TEST_F(ManifestTest, CompleteMeansAManifestAndEveryShardAtItsSize) {
  const fs::path two = write_checkpoint(manifest(2));
  const fs::path nine = write_checkpoint(manifest(9));
  const fs::path ten = write_checkpoint(manifest(10));
  EXPECT_EQ(complete_checkpoints(dir_), (std::vector<fs::path>{two, nine, ten}));  // by step
  // A shard cut short, a shard missing, a manifest missing, a temporary directory.
  fs::resize_file(ten / "rank-00001.safetensors", 19);
  fs::remove(nine / "rank-00000.safetensors");
  const fs::path eleven = write_checkpoint(manifest(11));
  fs::remove(eleven / kManifestFile);
  fs::create_directories(dir_ / ".step-000012.partial");
  EXPECT_EQ(complete_checkpoints(dir_), (std::vector<fs::path>{two}));
  EXPECT_EQ(resolve_resume(dir_), two);
  EXPECT_EQ(resolve_resume(two), two);
  try {
    resolve_resume(ten);
    ADD_FAILURE() << "a cut shard was taken";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("has 19 bytes, the manifest says 20"), std::string::npos) << e.what();
  }
  fs::remove_all(two);
  try {
    resolve_resume(dir_);
    ADD_FAILURE() << "no complete checkpoint, yet one was found";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("holds no complete checkpoint"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("step-000011"), std::string::npos) << e.what();
  }
}

TEST_F(ManifestTest, DurableWritesNameThePathTheyFailOn) {
  const fs::path missing = dir_ / "no_such_dir" / "manifest.json";
  try {
    write_file_durably(missing, "{}");
    ADD_FAILURE() << "wrote into a missing directory";
  } catch (const SystemError& e) {
    EXPECT_NE(std::string(e.what()).find(missing.string()), std::string::npos) << e.what();
  }
  try {
    rename_durably(dir_ / "absent", dir_ / "there");
    ADD_FAILURE() << "renamed nothing";
  } catch (const SystemError& e) {
    EXPECT_NE(std::string(e.what()).find((dir_ / "absent").string()), std::string::npos) << e.what();
  }
  write_file_durably(dir_ / "x.json", "{}");
  EXPECT_TRUE(fs::exists(dir_ / "x.json"));
  EXPECT_FALSE(fs::exists(dir_ / "x.json.tmp"));
}

}  // namespace
}  // namespace strata::checkpoint
