// `strata plot` through the binary: a three-step run of a two-stage pipeline with a
// validation stream, drawn beside its prediction, gives four PNGs of the promised size with
// the run's data drawn in them (read back with tests/tools/png_image.h, not with the library
// that wrote them); bad inputs are exit 2 before anything is written; a python3 without
// matplotlib is exit 2 naming the package, for `run --plot` before it trains. Each test
// trains what it draws: ~25 s together on the 2-core dev machine.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/json_reader.h"
#include "tests/tools/png_image.h"
#include "tests/tools/strata_command.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using namespace strata::testing;

// tools/plot_run.py draws every figure 9 x 5 inches at 100 dpi.
constexpr std::uint32_t kWidthPx = 900;
constexpr std::uint32_t kHeightPx = 500;
// A line, bar or marker of the data covers hundreds of pixels of its colour; an antialiased
// edge, a legend swatch (about 10 x 7 pixels) or text covers fewer of any one colour.
constexpr int kDrawnPixels = 300;

class PlotCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strata_plot_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // `strata run` of the tiny model into dir_/out, one thread a rank.
  void train(const std::string& args, const std::string& out) {
    const CommandResult run = run_strata(
        dir_, "run --model tiny --train tiny " + args + " --out " + out, "OMP_NUM_THREADS=1");
    ASSERT_EQ(run.exit_code, 0) << run.output;
  }
  fs::path dir_;
};

void expect_picture(const fs::path& png, int min_colours) {
  SCOPED_TRACE(png.string());
  ASSERT_TRUE(fs::exists(png));
  const PngImage image = read_png(png.string());
  EXPECT_EQ(image.width, kWidthPx);
  EXPECT_EQ(image.height, kHeightPx);
  EXPECT_GE(colours_covering(image, kDrawnPixels), min_colours);
}

// How many kinds rank 0 of the run holds on its device, by memory_tags.json's "by_kind",
// counting those of at least 5% of its total: each is one colour of memory.png's stacked bar,
// at least 5% of a bar some 350 pixels tall and 90 wide, over 1,500 pixels (a thinner slice
// could cover fewer than kDrawnPixels). A run that records no kinds is drawn as one total
// per rank: one colour.
int device_kinds_of_rank0(const fs::path& memory_tags) {
  const Json tags = read_json_file(memory_tags.string());
  const Json& rank0 = tags.at("ranks").at(0);
  if (!rank0.contains("by_kind")) return 1;
  double total = 0;
  for (const auto& [kind, tiers] : rank0.at("by_kind").items()) {
    total += tiers.at("device").get<double>();
  }
  int kinds = 0;
  for (const auto& [kind, tiers] : rank0.at("by_kind").items()) {
    kinds += tiers.at("device").get<double>() >= 0.05 * total ? 1 : 0;
  }
  return kinds;
}

TEST_F(PlotCli, DrawsEveryPictureOfTheRunBesideItsPrediction) {
  // Steps 2 and 3 measure a validation loss (--eval-every 2, and after the last step).
  train("--plan tiny-pp2 --steps 3 --valid-fraction 0.05 --eval-every 2", "run");
  const CommandResult predict = run_strata(
      dir_, "predict --model tiny --cluster local-cpu --train tiny --plan tiny-pp2 --json "
            "--no-profile > predicted.json", "", "");
  ASSERT_EQ(predict.exit_code, 0) << predict.output;

  const CommandResult plot = run_strata(dir_, "plot run --predicted predicted.json --out pictures");
  ASSERT_EQ(plot.exit_code, 0) << plot.output;
  EXPECT_NE(plot.output.find("loss.png, step_parts.png, memory.png, timeline.png"),
            std::string::npos)
      << plot.output;
  const fs::path pictures = dir_ / "pictures";
  // Training and validation losses: two lines.
  expect_picture(pictures / "loss.png", 2);
  // Measured and predicted parts: two bar colours.
  expect_picture(pictures / "step_parts.png", 2);
  expect_picture(pictures / "memory.png", device_kinds_of_rank0(dir_ / "run" / "memory_tags.json"));
  // At least the forward and backward passes of the compute streams.
  expect_picture(pictures / "timeline.png", 2);
  // Nothing but the pictures: no temporary file left behind.
  int files = 0;
  for (const auto& entry : fs::directory_iterator(pictures)) {
    EXPECT_EQ(entry.path().extension(), ".png") << entry.path();
    ++files;
  }
  EXPECT_EQ(files, 4);

  // Without --out, into the run directory.
  const CommandResult beside = run_strata(dir_, "plot run");
  ASSERT_EQ(beside.exit_code, 0) << beside.output;
  for (const char* name : {"loss.png", "step_parts.png", "memory.png", "timeline.png"}) {
    expect_picture(dir_ / "run" / name, 1);
  }
}

// A prediction drawn alone, from `strata simulate --out` (no training): the predicted parts
// (one colour), the predicted memory of each pipeline stage by kind, the simulated
// timeline; no loss.png, since a prediction has no losses. The tiny-pp2 prediction holds at
// least params, gradients, optimizer state and activations on each stage's device, each well
// over 5% of it (the tiny model's state is ~4x its activations at micro-batch 1, its
// activations far over the 5% too): 2 colours at least is a loose floor.
TEST_F(PlotCli, DrawsAPredictionFromItsSimulation) {
  const CommandResult sim = run_strata(
      dir_, "simulate --model tiny --cluster local-cpu --train tiny --plan tiny-pp2 "
            "--no-profile --out predicted");
  ASSERT_EQ(sim.exit_code, 0) << sim.output;
  ASSERT_TRUE(fs::exists(dir_ / "predicted" / "report.json"));
  ASSERT_TRUE(fs::exists(dir_ / "predicted" / "trace.json"));
  const Json report = read_json_file((dir_ / "predicted" / "report.json").string());
  EXPECT_EQ(report.at("kind"), "prediction");

  const CommandResult plot = run_strata(dir_, "plot predicted --out pictures");
  ASSERT_EQ(plot.exit_code, 0) << plot.output;
  EXPECT_NE(plot.output.find("step_parts.png, memory.png, timeline.png"), std::string::npos)
      << plot.output;
  EXPECT_NE(plot.output.find("not drawn: loss.png (a prediction has no losses)"),
            std::string::npos) << plot.output;
  const fs::path pictures = dir_ / "pictures";
  EXPECT_FALSE(fs::exists(pictures / "loss.png"));
  expect_picture(pictures / "step_parts.png", 1);
  expect_picture(pictures / "memory.png", 2);
  expect_picture(pictures / "timeline.png", 2);

  // A prediction beside a prediction is `strata diff`'s, refused before drawing.
  const CommandResult twice =
      run_strata(dir_, "plot predicted --predicted predicted/report.json --out bad");
  EXPECT_EQ(twice.exit_code, 2) << twice.output;
  EXPECT_NE(twice.output.find("is already a prediction"), std::string::npos) << twice.output;
  EXPECT_FALSE(fs::exists(dir_ / "bad"));
}

TEST_F(PlotCli, RefusesBadInputsBeforeWritingAnything) {
  train("--plan tiny-single --steps 1", "run");
  fs::create_directories(dir_ / "empty");
  struct Case {
    std::string args;
    std::string message;
  };
  const Case cases[] = {
      {"plot missing --out bad", "RUN_DIR 'missing' is not a directory"},
      {"plot empty --out bad", "RUN_DIR 'empty' has no report.json"},
      {"plot run --predicted nowhere.json --out bad", "--predicted: file 'nowhere.json' does not exist"},
      {"plot run --predicted run/report.json --out bad",
       "--predicted: 'run/report.json' is a run's measurement"},
  };
  for (const Case& c : cases) {
    const CommandResult r = run_strata(dir_, c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_FALSE(fs::exists(dir_ / "bad")) << c.args;
  }
}

// An environment in which python3's `import matplotlib` fails, as on a machine without
// python3-matplotlib: a package of that name first on its path that raises ImportError.
std::string without_matplotlib(const fs::path& dir) {
  const fs::path shadow = dir / "no_matplotlib" / "matplotlib";
  fs::create_directories(shadow);
  std::ofstream(shadow / "__init__.py") << "raise ImportError('no matplotlib here')\n";
  return "PYTHONPATH='" + shadow.parent_path().string() + "'";
}

TEST_F(PlotCli, NamesThePackageWhenMatplotlibIsMissing) {
  train("--plan tiny-single --steps 1", "run");
  const CommandResult r = run_strata(dir_, "plot run --out no_pictures", without_matplotlib(dir_));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("python3-matplotlib"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "no_pictures"));

  const CommandResult none =
      run_strata(dir_, "plot run --out no_pictures", "STRATA_PYTHON=/nonexistent/python3");
  EXPECT_EQ(none.exit_code, 2) << none.output;
  EXPECT_NE(none.output.find("cannot start /nonexistent/python3"), std::string::npos)
      << none.output;
}

TEST_F(PlotCli, RunWithPlotDrawsItsOutDirectory) {
  const CommandResult run = run_strata(
      dir_, "run --plan tiny-single --model tiny --train tiny --steps 2 --out plotted --plot",
      "OMP_NUM_THREADS=1");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // The report first, then the pictures of it.
  EXPECT_LT(run.output.find("report.json"), run.output.find("loss.png")) << run.output;
  for (const char* name : {"loss.png", "step_parts.png", "memory.png", "timeline.png"}) {
    expect_picture(dir_ / "plotted" / name, 1);
  }
}

TEST_F(PlotCli, RunWithPlotRefusesBeforeTrainingWhenMatplotlibIsMissing) {
  const CommandResult run = run_strata(
      dir_, "run --plan tiny-single --model tiny --train tiny --steps 2 --out unplotted --plot",
      "OMP_NUM_THREADS=1 " + without_matplotlib(dir_));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("python3-matplotlib"), std::string::npos) << run.output;
  EXPECT_FALSE(fs::exists(dir_ / "unplotted"));  // checked before --out is made
}

}  // namespace
}  // namespace strata
