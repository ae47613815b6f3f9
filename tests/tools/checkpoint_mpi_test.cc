// Checkpoints through the strata binary (see checkpoint.cmake). Every run is the tiny model
// and train spec (8 layers, hidden 64, batches of 8 x 64 tokens, fp32 on the CPU backend),
// so a step takes milliseconds and a run's cost is starting its ranks.
// Why the expected values hold:
//   - Bit for bit: a checkpoint holds every value the next step reads (fp32 parameters,
//     AdamW m and v, the step that fixes the batch and the learning rate), copied without
//     arithmetic; the resumed step runs the same kernels on the same values in the same
//     order as the uninterrupted run, so its losses are the same doubles.
//   - Another plan: the same state, but the plans differ in the order of their sums
//     (reductions over TP/DP, pipeline micro-batches): the losses of steps 5-6 (~5.0)
//     differ by ~1e-8 (measured on t2, p2, t2p2v2 and one rank), far inside 1e-4; a lost
//     optimizer state moves them by ~5e-2 (the 1e-3 learning rate on fresh moments).
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/json_reader.h"
#include "executor/checkpoint/manifest.h"
#include "tests/tools/child_process.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using namespace strata::testing;

std::string plan_json(int tp, int pp, int dp, int v, int zero, const char* optimizer_tier,
                      const char* other_tiers = "none") {
  return Json{{"tp", tp}, {"pp", pp}, {"dp", dp}, {"virtual_stages", v}, {"micro_batch", 1},
              {"schedule", v > 1 ? "interleaved" : "1f1b"}, {"zero_stage", zero},
              {"offload", {{"optimizer", optimizer_tier}, {"gradients", other_tiers},
                           {"params", other_tiers}}},
              {"recompute", "none"}, {"sequence_parallel", false}}
      .dump();
}

struct NamedPlan {
  const char* name;
  std::string json;
};
void PrintTo(const NamedPlan& p, std::ostream* os) { *os << p.name; }

const NamedPlan kSingle{"single", plan_json(1, 1, 1, 1, 0, "none")};
const NamedPlan kT2P2V2{"t2p2v2", plan_json(2, 2, 1, 2, 0, "none")};
const NamedPlan kZero3{"zero3_dp2", plan_json(1, 1, 2, 1, 3, "none")};
const NamedPlan kNvme{"nvme_dp2", plan_json(1, 1, 2, 1, 1, "nvme")};
const NamedPlan kZero1{"zero1_dp2", plan_json(1, 1, 2, 1, 1, "none")};
const NamedPlan kTp2{"tp2", plan_json(2, 1, 1, 1, 0, "none")};
const NamedPlan kTp4{"tp4", plan_json(4, 1, 1, 1, 0, "none")};
const NamedPlan kPp2{"pp2", plan_json(1, 2, 1, 1, 0, "none")};
// ZeRO-Infinity on the host: the parameter shards are the master, in host memory.
const NamedPlan kHostOffload{"zero3_host_offload", plan_json(1, 1, 2, 1, 3, "cpu", "cpu")};

struct Result {
  int code = -1;
  std::string out, err;
  std::vector<double> losses;  // report.json's: the steps this run trained
};

class Checkpoints : public ::testing::Test {
 protected:
  void SetUp() override {
    // Parameterised tests are named "Test/param": one flat directory each, nothing left above.
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = fs::temp_directory_path() / ("strata_ckpt_" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "nvme");
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  fs::path plan(const NamedPlan& p) {
    const fs::path path = dir_ / (std::string(p.name) + ".json");
    std::ofstream(path) << p.json;
    return path;
  }

  std::vector<std::string> argv(const NamedPlan& p, int steps, const std::string& out,
                                const std::vector<std::string>& extra) {
    std::vector<std::string> a = {STRATA_BINARY, "run", "--plan", plan(p).string(), "--model",
                                  model_, "--train", "tiny", "--steps", std::to_string(steps),
                                  "--nvme-dir", (dir_ / "nvme").string(), "--out",
                                  (dir_ / out).string()};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }

  Result run(const NamedPlan& p, int steps, const std::string& out,
             const std::vector<std::string>& extra) {
    const Child c = spawn(argv(p, steps, out, extra), dir_, out);
    double elapsed = 0;
    Result r;
    r.code = wait_exit(c.pid, 240, &elapsed);
    r.out = read_file(c.out);
    r.err = read_file(c.err);
    const fs::path report = dir_ / out / "report.json";
    if (r.code == 0 || r.code == 143) {
      const Json json = read_json_file(report.string());
      for (const Json& l : json.at("losses")) r.losses.push_back(l.get<double>());
    }
    return r;
  }

  fs::path dir_;
  std::string model_ = "tiny";  // the bundled model config the runs train
};

// The uninterrupted run's losses from step `from` on.
std::vector<double> tail(const std::vector<double>& losses, std::size_t from) {
  return {losses.begin() + static_cast<std::ptrdiff_t>(std::min(from, losses.size())), losses.end()};
}

// --- the same plan: bit for bit --------------------------------------------------------

class SamePlan : public Checkpoints, public ::testing::WithParamInterface<NamedPlan> {};

// 6 steps with a checkpoint every 2; the last one removed, as if the run had been killed in
// step 5 or 6; the resumed run from step-000004 trains steps 5 and 6 to the same doubles.
TEST_P(SamePlan, ResumedRunEqualsTheUninterruptedOneBitForBit) {
  const NamedPlan& p = GetParam();
  const Result full = run(p, 6, "full", {"--save", (dir_ / "ckpt").string(), "--save-every", "2"});
  ASSERT_EQ(full.code, 0) << full.err;
  ASSERT_EQ(full.losses.size(), 6u);
  for (int step : {2, 4, 6}) {
    EXPECT_TRUE(fs::exists(dir_ / "ckpt" / checkpoint::step_dir_name(step) / "manifest.json")) << step;
  }
  fs::remove_all(dir_ / "ckpt" / "step-000006");
  const Result resumed = run(p, 6, "resumed", {"--resume", (dir_ / "ckpt").string()});
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find("resumed from " + (dir_ / "ckpt" / "step-000004").string() +
                             " after step 4"), std::string::npos) << resumed.out;
  ASSERT_EQ(resumed.losses.size(), 2u);
  EXPECT_EQ(resumed.losses[0], full.losses[4]);  // exact doubles
  EXPECT_EQ(resumed.losses[1], full.losses[5]);
}

INSTANTIATE_TEST_SUITE_P(Plans, SamePlan,
                         ::testing::Values(kSingle, kT2P2V2, kZero3, kNvme, kHostOffload),
                         [](const auto& info) { return std::string(info.param.name); });

// --- another plan: resharded on load -------------------------------------------------------

// Saved under dp2 ZeRO-1 after step 4 of 6, resumed under t2, p2, ZeRO-3, the NVMe
// optimizer and ZeRO-3 with everything on the host: steps 5 and 6 within 1e-4 of the
// uninterrupted run's.
TEST_F(Checkpoints, ReshardsOntoOtherPlans) {
  const Result full = run(kZero1, 6, "full", {"--save", (dir_ / "ckpt").string(), "--save-every", "4"});
  ASSERT_EQ(full.code, 0) << full.err;
  ASSERT_EQ(full.losses.size(), 6u);
  const std::string step4 = (dir_ / "ckpt" / "step-000004").string();
  for (const NamedPlan& p : {kTp2, kPp2, kZero3, kNvme, kHostOffload}) {
    const Result r = run(p, 6, std::string("resumed_") + p.name, {"--resume", step4});
    ASSERT_EQ(r.code, 0) << p.name << ": " << r.err;
    ASSERT_EQ(r.losses.size(), 2u) << p.name;
    for (std::size_t i = 0; i < 2; ++i) {
      EXPECT_NEAR(r.losses[i], full.losses[4 + i], 1e-4) << p.name << " step " << 5 + i;
    }
  }
}

// And back: saved under t2 p2 interleaved (each rank a TP and pipeline slice), resumed on
// one rank.
TEST_F(Checkpoints, ReshardsAnInterleavedCheckpointOntoOneRank) {
  const Result full = run(kT2P2V2, 6, "full", {"--save", (dir_ / "ckpt").string(), "--save-every", "3"});
  ASSERT_EQ(full.code, 0) << full.err;
  const Result r = run(kSingle, 6, "resumed", {"--resume", (dir_ / "ckpt" / "step-000003").string()});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(r.losses.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_NEAR(r.losses[i], full.losses[3 + i], 1e-4) << i;
}

// KV heads replicated over TP: tiny-llama (2 KV heads) saved under t4, where each head is on
// 2 TP ranks, after step 3 of 5; resumed under t2 (the heads split, one a rank) and on one
// rank: steps 4 and 5 within 1e-4 of the uninterrupted run's. Every rank holding a head
// wrote it; the reader takes it whole from them, then each new rank its slice.
TEST_F(Checkpoints, ReshardsReplicatedKvHeadsOntoFewerTpRanks) {
  model_ = "tiny-llama";
  const Result full = run(kTp4, 5, "full", {"--save", (dir_ / "ckpt").string(), "--save-every", "3"});
  ASSERT_EQ(full.code, 0) << full.err;
  ASSERT_EQ(full.losses.size(), 5u);
  const std::string step3 = (dir_ / "ckpt" / "step-000003").string();
  for (const NamedPlan& p : {kTp2, kSingle}) {
    const Result r = run(p, 5, std::string("resumed_") + p.name, {"--resume", step3});
    ASSERT_EQ(r.code, 0) << p.name << ": " << r.err;
    ASSERT_EQ(r.losses.size(), 2u) << p.name;
    for (std::size_t i = 0; i < 2; ++i) {
      EXPECT_NEAR(r.losses[i], full.losses[3 + i], 1e-4) << p.name << " step " << 4 + i;
    }
  }
}

// --- killed runs -------------------------------------------------------------------------

// A run really killed with SIGKILL once a checkpoint exists (maybe while writing the next
// one); --resume takes the newest complete checkpoint and trains the rest to the same
// doubles as an uninterrupted run. --keep 2 bounds what the killed run left.
TEST_F(Checkpoints, SigkilledRunResumesFromItsLastCompleteCheckpoint) {
  // Long enough that the kill (within 50 ms of step-000004's line, wait_for_text) lands with
  // 26 steps to go, at least 2.6 s of training at the tiny model's ~0.1 s a step; 120 steps
  // made this one test 50 s of CI for the same check.
  constexpr int kSteps = 30;
  const std::string save = (dir_ / "ckpt").string();
  const Child c = spawn(argv(kSingle, kSteps, "killed",
                             {"--save", save, "--save-every", "2", "--keep", "2"}),
                        dir_, "killed");
  ASSERT_TRUE(wait_for_text(c.out, "step-000004", 60)) << read_file(c.err);
  ASSERT_EQ(::kill(c.pid, SIGKILL), 0);
  double elapsed = 0;
  EXPECT_EQ(wait_exit(c.pid, 30, &elapsed), 128 + SIGKILL);
  const std::vector<fs::path> left = checkpoint::complete_checkpoints(save);
  ASSERT_GE(left.size(), 1u);
  EXPECT_LE(left.size(), 3u);  // 2, and a third only between its rename and the pruning
  const std::int64_t step = *checkpoint::step_of_dir_name(left.back().filename().string());
  ASSERT_LT(step, kSteps) << "the run ended before the kill; make it longer";

  // Into the killed run's --out: its metrics.jsonl goes on, each step once.
  const Result resumed = run(kSingle, kSteps, "killed", {"--resume", save});
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_NE(resumed.out.find(fmt::format("after step {}", step)), std::string::npos) << resumed.out;
  std::ifstream metrics(dir_ / "killed" / "metrics.jsonl");
  int lines = 0;
  for (std::string line; std::getline(metrics, line); ++lines) {
    EXPECT_EQ(Json::parse(line)["step"], lines + 1) << line;
  }
  EXPECT_EQ(lines, kSteps);
  const Result full = run(kSingle, kSteps, "full", {});
  ASSERT_EQ(full.code, 0) << full.err;
  const std::vector<double> want = tail(full.losses, static_cast<std::size_t>(step));
  ASSERT_EQ(resumed.losses.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(resumed.losses[i], want[i]) << "step " << step + 1 + static_cast<std::int64_t>(i);
  }
}

// SIGTERM with --save-on-signal: the ranks agree on a step boundary, write the report and a
// checkpoint of exactly the steps done, which resumes.
TEST_F(Checkpoints, StoppedRunSavesOnSignal) {
  const std::string save = (dir_ / "ckpt").string();
  const Child c = spawn(argv(kZero1, 100000, "stopped", {"--save", save, "--save-on-signal"}),
                        dir_, "stopped");
  ASSERT_TRUE(wait_for_text(c.out, "step     3/", 60)) << read_file(c.err);
  ASSERT_EQ(::kill(c.pid, SIGTERM), 0);
  double elapsed = 0;
  const int code = wait_exit(c.pid, 60, &elapsed);
  const std::string err = read_file(c.err);
  ASSERT_EQ(code, 143) << err;
  const Json report = read_json_file((dir_ / "stopped" / "report.json").string());
  EXPECT_EQ(report["stopped_by"], "SIGTERM");
  const std::vector<fs::path> saved = checkpoint::complete_checkpoints(save);
  ASSERT_EQ(saved.size(), 1u);
  const checkpoint::Manifest m = checkpoint::read_complete(saved[0]);
  EXPECT_EQ(m.step, static_cast<std::int64_t>(report["losses"].size()));
  const Result resumed = run(kZero1, static_cast<int>(m.step) + 2, "resumed", {"--resume", save});
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_EQ(resumed.losses.size(), 2u);
}

// --- half-written checkpoints ------------------------------------------------------------

// A temporary directory, a step directory without a manifest and one whose shard was cut
// short are all newer than the complete step-000004; --resume takes step-000004, and names
// the broken one when it is asked for by name. --keep 2 left the last two complete ones.
TEST_F(Checkpoints, HalfWrittenCheckpointsAreNeverTaken) {
  const fs::path save = dir_ / "ckpt";
  const Result full = run(kZero1, 4, "full",
                          {"--save", save.string(), "--save-every", "1", "--keep", "2"});
  ASSERT_EQ(full.code, 0) << full.err;
  EXPECT_EQ(checkpoint::complete_checkpoints(save),
            (std::vector<fs::path>{save / "step-000003", save / "step-000004"}));
  // A writer killed before its rename.
  fs::create_directories(save / ".step-000005.partial");
  fs::copy_file(save / "step-000004" / "rank-00000.safetensors",
                save / ".step-000005.partial" / "rank-00000.safetensors");
  // Killed before the manifest (as an older writer that renamed first would leave).
  fs::copy(save / "step-000004", save / "step-000006");
  fs::remove(save / "step-000006" / "manifest.json");
  // A shard cut short under a manifest.
  fs::copy(save / "step-000004", save / "step-000007");
  const fs::path cut = save / "step-000007" / "rank-00001.safetensors";
  fs::resize_file(cut, fs::file_size(cut) / 2);

  const Result r = run(kZero1, 6, "resumed", {"--resume", save.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("step-000004 after step 4"), std::string::npos) << r.out;
  ASSERT_EQ(r.losses.size(), 2u);

  const Result named = run(kZero1, 6, "named", {"--resume", (save / "step-000007").string()});
  EXPECT_EQ(named.code, 2);
  EXPECT_NE(named.err.find(cut.string()), std::string::npos) << named.err;
  EXPECT_NE(named.err.find("bytes, the manifest says"), std::string::npos) << named.err;

  fs::remove_all(save / "step-000003");
  fs::remove_all(save / "step-000004");
  const Result none = run(kZero1, 6, "none", {"--resume", save.string()});
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("holds no complete checkpoint"), std::string::npos) << none.err;
  EXPECT_NE(none.err.find("step-000006"), std::string::npos) << none.err;  // why it was skipped
}

// --- flags checked before any rank starts -------------------------------------------------

TEST_F(Checkpoints, FlagsAreCheckedBeforeAnyRankStarts) {
  const fs::path save = dir_ / "ckpt";
  const Result saved = run(kSingle, 2, "saved", {"--save", save.string()});
  ASSERT_EQ(saved.code, 0) << saved.err;
  const std::string step2 = (save / "step-000002").string();
  const auto expect_error = [&](const std::vector<std::string>& flags, int steps,
                                const std::string& text, const NamedPlan& p = kSingle,
                                const std::vector<std::string>& model = {}) {
    std::vector<std::string> a = flags;
    a.insert(a.end(), model.begin(), model.end());
    const Result r = run(p, steps, "bad", a);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find(text), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("step "), std::string::npos) << r.out;  // nothing trained
  };
  expect_error({"--save", save.string(), "--save-every", "0"}, 4, "--save-every: value 0");
  expect_error({"--save", save.string(), "--keep", "0"}, 4, "--keep: value 0");
  expect_error({"--save-every", "2"}, 4, "need --save DIR");
  expect_error({"--save", (dir_ / "ckpt" / "step-000002" / "manifest.json" / "x").string()}, 4,
               "--save: cannot create directory");
  expect_error({"--resume", (dir_ / "nothing").string()}, 4, "--resume:");
  expect_error({"--resume", step2}, 2, "field 'step' is 2, expected less than the run's 2 steps");
  // Issue 28: each refusal names the flag that would make the run the checkpoint's.
  expect_error({"--resume", step2}, 2, "add --steps 3 or more");
  std::ofstream(dir_ / "text.txt") << std::string(1 << 16, 'a');  // bytes: a valid --data
  expect_error({"--resume", step2, "--data", (dir_ / "text.txt").string()}, 4,
               "drop --data: the checkpoint's run trained on the generated corpus");
  // Another model: the manifest's field, its value and the run's.
  Json other = read_json_file((fs::path(STRATA_SOURCE_DIR) / "configs/models/tiny.json").string());
  other["layers"] = 4;
  write_json_file((dir_ / "tiny4.json").string(), other);
  const std::vector<std::string> a = {"--resume", step2};
  std::vector<std::string> args = argv(kSingle, 4, "bad", a);
  args[5] = (dir_ / "tiny4.json").string();  // --model
  const Child c = spawn(args, dir_, "model");
  double elapsed = 0;
  EXPECT_EQ(wait_exit(c.pid, 60, &elapsed), 2);
  const std::string err = read_file(c.err);
  EXPECT_NE(err.find("field 'model.layers' is 8, expected 4"), std::string::npos) << err;
  EXPECT_NE(err.find(step2 + "/manifest.json"), std::string::npos) << err;
}

}  // namespace
}  // namespace strata
