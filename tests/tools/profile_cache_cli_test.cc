// Calibrated by default, through the `strata` binary (tools/strata/profile_cache.h,
// profile_choice.h): `calibrate` caches its profile per machine; predict, plan, run, select
// and compare use and name the newest one; --profile overrides it and --no-profile prices
// without; with no profile at all the line says how far off that can be; a cache that cannot
// be written only warns; a corrupt cached profile is an error naming the file. Every test
// runs with a cache directory of its own (ctest gives the others STRATA_CACHE_DIR=off).
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/json_reader.h"
#include "cost_model/specs/profile.h"
#include "tests/tools/strata_command.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

using Result = testing::CommandResult;
using testing::run_strata;

const std::string kTinySpec = " --model tiny --cluster local-cpu --train tiny --plan tiny-single";

std::string env_for(const fs::path& cache) { return "STRATA_CACHE_DIR='" + cache.string() + "'"; }

std::vector<fs::path> json_files_under(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    if (e.is_regular_file()) files.push_back(e.path());
  }
  return files;
}

// One quick calibration for the whole suite (~10 s): its cache is copied where a test
// changes it.
class ProfileCacheCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("strata_profile_cache_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    calibrate_ = run_strata(root_, "calibrate --quick --ranks 1 --out calibrated.json",
                            env_for(root_ / "cache"));
    const std::vector<fs::path> files = json_files_under(root_ / "cache");
    if (files.size() == 1) cached_ = files.front();
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  void SetUp() override {
    ASSERT_EQ(calibrate_.exit_code, 0) << calibrate_.output;
    ASSERT_FALSE(cached_.empty()) << "calibrate cached no single profile:\n" << calibrate_.output;
    dir_ = root_ / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::create_directories(dir_);
  }

  // A fresh cache holding a copy of the calibrated one; the copy's path.
  fs::path copy_cache(const fs::path& cache) const {
    const fs::path copy = cache / fs::relative(cached_, root_ / "cache");
    fs::create_directories(copy.parent_path());
    fs::copy_file(cached_, copy);
    return copy;
  }

  static double predicted_step(const Result& r) {
    return Json::parse(r.output).at("step_time_s").get<double>();
  }

  static fs::path root_;
  static Result calibrate_;
  static fs::path cached_;  // the file calibrate cached
  fs::path dir_;
};
fs::path ProfileCacheCli::root_;
Result ProfileCacheCli::calibrate_;
fs::path ProfileCacheCli::cached_;

TEST_F(ProfileCacheCli, CalibrateCachesWhatItWritesUnderTheMachineKey) {
  // <cache>/profiles/cpu-<host, CPU model, threads>/<time>.json, the same profile as --out.
  EXPECT_EQ(cached_.parent_path().parent_path(), root_ / "cache" / "profiles");
  EXPECT_EQ(cached_.parent_path().filename().string().rfind("cpu-", 0), 0u) << cached_;
  EXPECT_EQ(read_json_file(cached_.string()), read_json_file((root_ / "calibrated.json").string()));
  EXPECT_NE(calibrate_.output.find("cached " + cached_.string()), std::string::npos)
      << calibrate_.output;
  EXPECT_EQ(cached_.extension(), ".json");  // nothing half-written (a .tmp) left beside it
  EXPECT_EQ(json_files_under(root_ / "cache").size(), 1u);
}

TEST_F(ProfileCacheCli, PredictPlanAndRunUseAndNameTheCachedProfile) {
  const std::string env = env_for(root_ / "cache");
  const std::string line = "profile: " + cached_.string() + " (the newest `strata calibrate`";
  Result r = run_strata(dir_, "predict" + kTinySpec, env);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(line), std::string::npos) << r.output;

  // --json: the field names it, and the step is the one --profile with that file prices.
  const Result cached = run_strata(dir_, "predict --json" + kTinySpec, env, "2>/dev/null");
  ASSERT_EQ(cached.exit_code, 0) << cached.output;
  EXPECT_EQ(Json::parse(cached.output).at("profile"), cached_.string());
  const Result given = run_strata(
      dir_, "predict --json --profile '" + cached_.string() + "'" + kTinySpec, "", "2>/dev/null");
  ASSERT_EQ(given.exit_code, 0) << given.output;
  EXPECT_EQ(predicted_step(cached), predicted_step(given));

  r = run_strata(dir_, "plan --json --model tiny --cluster local-cpu --train tiny --top 1", env,
                 "2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json plans = Json::parse(r.output);
  EXPECT_EQ(plans.at("profile"), cached_.string());
  EXPECT_EQ(plans.at("plans").at(0).at("prediction").at("profile"), cached_.string());

  r = run_strata(dir_, "run --steps 1 --out out" + kTinySpec, env);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(line), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(cluster local-cpu, profile " + cached_.string() + ")"),
            std::string::npos) << r.output;
}

TEST_F(ProfileCacheCli, TheNewestOfSeveralCachedProfilesWins) {
  const fs::path calibrated = copy_cache(dir_ / "cache");
  // A later calibration, told apart by its rates: everything twice as slow.
  Profile slower = Profile::load(calibrated.string());
  slower.compute_time_scale = 2.0;
  const fs::path newer = calibrated.parent_path() / "99991231T235959.999Z-1.json";
  write_json_file(newer.string(), slower.to_json());
  const Result r = run_strata(dir_, "predict --json" + kTinySpec, env_for(dir_ / "cache"),
                              "2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Json::parse(r.output).at("profile"), newer.string());
  const Result given = run_strata(dir_, "predict --json --profile '" + newer.string() + "'" +
                                            kTinySpec, "", "2>/dev/null");
  EXPECT_EQ(predicted_step(r), predicted_step(given));
}

TEST_F(ProfileCacheCli, ProfileOverridesAndNoProfileDisablesTheCache) {
  const std::string env = env_for(root_ / "cache");
  Profile other = Profile::load(cached_.string());
  other.compute_time_scale = 3.0;
  write_json_file((dir_ / "other.json").string(), other.to_json());
  Result r = run_strata(dir_, "predict --profile other.json" + kTinySpec, env);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("profile: other.json (--profile)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(cached_.string()), std::string::npos) << r.output;

  // --no-profile prices as if there were no cache at all (STRATA_CACHE_DIR=off).
  r = run_strata(dir_, "predict --no-profile" + kTinySpec, env);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("profile: none (--no-profile"), std::string::npos) << r.output;
  const Result none = run_strata(dir_, "predict --json --no-profile" + kTinySpec, env, "2>/dev/null");
  const Result off = run_strata(dir_, "predict --json" + kTinySpec, "STRATA_CACHE_DIR=off",
                                "2>/dev/null");
  EXPECT_EQ(Json::parse(none.output).at("profile"), "none");
  EXPECT_EQ(predicted_step(none), predicted_step(off));

  r = run_strata(dir_, "predict --no-profile --profile other.json" + kTinySpec, env);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("excludes"), std::string::npos) << r.output;
}

TEST_F(ProfileCacheCli, WithoutAProfileTheLineSaysHowFarOffAndHowToCalibrate) {
  fs::create_directories(dir_ / "empty");
  for (const std::string& command : {"predict" + kTinySpec,
                                    std::string("select --workload tiny-grid --plan-only")}) {
    const Result r = run_strata(dir_, command, env_for(dir_ / "empty"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("profile: none (the cluster file's estimates, uncalibrated"),
              std::string::npos) << r.output;
    EXPECT_NE(r.output.find("12.6 s for a 5.2 s makespan (+140%"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("`strata calibrate`"), std::string::npos) << r.output;
  }
}

TEST_F(ProfileCacheCli, SelectAndCompareNameTheProfile) {
  const std::string env = env_for(root_ / "cache");
  Result r = run_strata(dir_, "select --workload tiny-grid --plan-only", env);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("profile: " + cached_.string()), std::string::npos) << r.output;

  // compare reads the profile the plan file recorded.
  r = run_strata(dir_, "plan --model tiny --cluster local-cpu --train tiny --gpus 1 --top 1 "
                       "--out plan.json", env);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_strata(dir_, "run --steps 1 --out out --plan plan.json --model tiny --train tiny", env);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_strata(dir_, "compare --predicted plan.json --measured out/report.json", env);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("profile of the prediction: " + cached_.string()), std::string::npos)
      << r.output;
  r = run_strata(dir_, "compare --json --predicted plan.json --measured out/report.json", env,
                 "2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Json::parse(r.output).at("predicted_profile"), cached_.string());
}

// Decided: an error, not a skip. Skipping would price with an older profile, or none, and
// change every prediction with nothing but a warning; one `strata calibrate` replaces it.
TEST_F(ProfileCacheCli, ACorruptCachedProfileIsAnErrorNamingTheFile) {
  const fs::path calibrated = copy_cache(dir_ / "cache");
  const fs::path corrupt = calibrated.parent_path() / "99991231T235959.999Z-1.json";
  std::ofstream(corrupt) << "{\"machine\": \"half a";
  const Result r = run_strata(dir_, "predict" + kTinySpec, env_for(dir_ / "cache"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(corrupt.string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("strata calibrate"), std::string::npos) << r.output;
  // Both ways out work with the corrupt file still there.
  EXPECT_EQ(run_strata(dir_, "predict --no-profile" + kTinySpec, env_for(dir_ / "cache")).exit_code, 0);
  EXPECT_EQ(run_strata(dir_, "predict --profile '" + calibrated.string() + "'" + kTinySpec,
                       env_for(dir_ / "cache")).exit_code, 0);
}

TEST_F(ProfileCacheCli, AnUnwritableCacheWarnsAndCalibrateStillSucceeds) {
  // A regular file where the cache directory should be: no directory can be made under it,
  // whoever runs the test (root included).
  std::ofstream(dir_ / "not_a_dir") << "x";
  const Result r = run_strata(dir_, "calibrate --quick --ranks 1 --out profile.json",
                              env_for(dir_ / "not_a_dir"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("strata: warning: cannot create the profile cache directory '" +
                          (dir_ / "not_a_dir" / "profiles").string()), std::string::npos)
      << r.output;
  EXPECT_NO_THROW(Profile::load((dir_ / "profile.json").string()));
}

}  // namespace
}  // namespace strata
