// The CPU equivalence matrix's plans (tests/executor/engine.cmake) pass the deadlock check:
// each entry parsed as engine_equivalence_main.cc parses it ("t2_2_1_1_1f1b_0_1_0_full_sp":
// t p d v schedule zero micro_batch grad_clip [recompute [sp|nosp [offload [F..L]]]]), its
// Program made with the options the CPU engine makes it with (prefetch depth 2, no
// regathers, no wte padding, fp32 messages) for the tiny model and train the matrix trains.
// Its messages are what the engine sends: the activation buffer of the layers' dimensions
// (model::Dims::act_local), so the check matched the shapes the engine moves.
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cost_model/specs/plan.h"
#include "cost_model/program/program.h"
#include "cost_model/checks/program_check.h"
#include "executor/model/tp_context.h"

namespace strata {
namespace {

std::vector<std::string> split(const std::string& s, char by) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, by);) out.push_back(item);
  return out;
}

Plan plan_of(const std::string& entry) {
  const std::vector<std::string> a = split(entry.substr(1), '_');
  Plan plan;
  plan.tp = std::stoll(a.at(0));
  plan.pp = std::stoll(a.at(1));
  plan.dp = std::stoll(a.at(2));
  plan.virtual_stages = std::stoll(a.at(3));
  plan.schedule = schedule_kind_from_string(a.at(4));
  plan.zero_stage = std::stoi(a.at(5));
  plan.micro_batch = std::stoll(a.at(6));
  if (a.size() > 8) plan.recompute = recompute_from_string(a[8]);
  if (a.size() > 9) plan.sequence_parallel = a[9] == "sp";
  if (a.size() > 10) {
    const OffloadTier tier = offload_tier_from_string(a[10]);
    plan.offload.optimizer = tier;
    if (plan.zero_stage >= 2) plan.offload.gradients = tier;
    if (plan.zero_stage == 3) plan.offload.params = tier;
  }
  if (a.size() > 11) {
    const std::size_t dots = a[11].find("..");
    plan.first_stage_layers = std::stoll(a[11].substr(0, dots));
    plan.last_stage_layers = std::stoll(a[11].substr(dots + 2));
  }
  return plan;
}

TEST(EngineProgramCheck, EveryEquivalencePlanCannotDeadlock) {
  // Paths as fs::path: GCC 12 warns (-Warray-bounds, a false positive) on the string
  // concatenation once this test body grew.
  const std::filesystem::path configs = std::filesystem::path(STRATA_SOURCE_DIR) / "configs";
  const ModelSpec model = ModelSpec::load((configs / "models" / "tiny.json").string());
  const TrainSpec train = TrainSpec::load((configs / "train" / "tiny.json").string());
  const std::vector<std::string> entries = split(STRATA_EQUIVALENCE_PLANS, ',');
  ASSERT_GE(entries.size(), 30u);  // the matrix had 32 entries when this was written
  for (const std::string& entry : entries) {
    SCOPED_TRACE(entry);
    const Plan plan = plan_of(entry);
    const Program program = make_program(model, train, plan, executor_program_options(Backend::kCpu));
    // Every TP rank holds the same number of rows (sequence parallelism needs seq_len % tp
    // == 0), so TP rank 0's dimensions stand for all.
    const std::int64_t engine_elements =
        model::make_dims(model, plan.micro_batch, plan.tp, 0, plan.sequence_parallel).act_local();
    std::size_t messages = 0;
    for (const RankProgram& rank : program.ranks) {
      for (const ProgramOp& op : rank.ops) {
        if (!op.is_message()) continue;
        ++messages;
        EXPECT_EQ(message_elements(op, plan.micro_batch), engine_elements);
        EXPECT_EQ(op.message_dtype, DType::kF32);  // CpuBackend::compute_dtype
      }
    }
    EXPECT_EQ(messages == 0, plan.pp == 1 && plan.virtual_stages == 1);  // p = v = 1 sends nothing
    std::string fault;
    try {
      check_deadlock_free(program);
    } catch (const ProgramDeadlock& e) {
      fault = e.what();
    }
    EXPECT_EQ(fault, "");
  }
}

}  // namespace
}  // namespace strata
