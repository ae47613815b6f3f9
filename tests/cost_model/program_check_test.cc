// The deadlock check (cost_model/checks/program_check.h): every bundled plan's Program passes; each
// kind of fault planted into a sound Program (a missing receive, a receive of the wrong
// count or dtype, two collectives entered in different orders, a cycle through a pipeline
// send) is named, with the ops involved; the check graph has what it should (one vertex per
// step op, one edge per message).
#include "cost_model/checks/program_check.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <boost/range/iterator_range.hpp>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/pricing/cost_model.h"
#include "cost_model/checks/program_graph.h"
#include "tests/cost_model/program_test_util.h"

namespace strata {
namespace {

using Kind = ProgramOpKind;
namespace fs = std::filesystem;

Plan check_plan(ScheduleKind kind, std::int64_t p, std::int64_t v, std::int64_t m_per_d = 1) {
  Plan plan;
  plan.pp = p;
  plan.virtual_stages = v;
  plan.schedule = kind;
  plan.micro_batch = m_per_d;
  return plan;
}

// Moves op `from` of `rank` to position `to`, renumbering every `after` so that each op
// still waits for the same ops.
void move_op(RankProgram& rank, std::size_t from, std::size_t to) {
  std::vector<std::int32_t> order(rank.ops.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int32_t>(i);
  const std::int32_t moved = order[from];
  order.erase(order.begin() + static_cast<std::ptrdiff_t>(from));
  order.insert(order.begin() + static_cast<std::ptrdiff_t>(to), moved);
  std::vector<std::int32_t> position(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) position[static_cast<std::size_t>(order[i])] = static_cast<std::int32_t>(i);
  std::vector<ProgramOp> ops;
  for (std::int32_t old : order) {
    ProgramOp op = rank.ops[static_cast<std::size_t>(old)];
    for (auto& a : op.after) a = a < 0 ? a : position[static_cast<std::size_t>(a)];
    ops.push_back(op);
  }
  rank.ops = std::move(ops);
}

std::size_t find_op(const RankProgram& rank, Kind kind, std::int32_t mb = -1) {
  for (std::size_t i = 0; i < rank.ops.size(); ++i) {
    if (rank.ops[i].kind == kind && (mb < 0 || rank.ops[i].micro_batch == mb)) return i;
  }
  throw std::runtime_error("op not found");
}

std::string fault_of(const Program& program) {
  try {
    check_deadlock_free(program);
  } catch (const ProgramDeadlock& e) {
    return e.what();
  }
  return "";
}

TEST(ProgramCheck, GeneratedProgramsPassForEverySchedule) {
  // make_program's own Programs, every schedule on 1-4 ranks: none can hang.
  for (ScheduleKind kind : {ScheduleKind::kGpipe, ScheduleKind::kOneFOneB, ScheduleKind::kInterleaved}) {
    for (std::int64_t p : {1, 2, 4}) {
      const std::int64_t v = kind == ScheduleKind::kInterleaved ? 2 : 1;
      SCOPED_TRACE(to_string(kind) + " p=" + std::to_string(p));
      const Program program = make_program(testing::small_gpt(8), testing::train_of(8), check_plan(kind, p, v));
      EXPECT_EQ(fault_of(program), "");
    }
  }
}

TEST(ProgramCheck, TheCheckGraphHasAVertexPerStepOpAndAnEdgePerMessage) {
  // 1F1B on 2 ranks, m = 4: each rank sends 4 activations (rank 0) or 4 gradients (rank 1),
  // so 8 message edges; the tail's tied sum (ranks 0, 1) and grad norm (ranks 0, 1) add a
  // join each.
  const Program program = make_program(testing::small_gpt(4), testing::train_of(4),
                                       check_plan(ScheduleKind::kOneFOneB, 2, 1));
  const ProgramGraph g = dependency_graph(program);
  std::size_t ops = 0, joins = 0, messages = 0;
  for (const RankProgram& r : program.ranks) ops += r.ops.size();
  for (auto v : boost::make_iterator_range(boost::vertices(g.graph))) {
    if (g.graph[v].role == VertexRole::kJoin) ++joins;
  }
  for (auto e : boost::make_iterator_range(boost::edges(g.graph))) {
    const GraphVertex& from = g.graph[boost::source(e, g.graph)];
    const GraphVertex& to = g.graph[boost::target(e, g.graph)];
    if (dependency_between(from, to) == Dependency::kMessage) ++messages;
  }
  EXPECT_EQ(boost::num_vertices(g.graph), ops + joins);
  EXPECT_EQ(joins, 2u);
  EXPECT_EQ(messages, 8u);
}

TEST(ProgramCheck, AMissingReceiveIsNamed) {
  Program program = make_program(testing::small_gpt(4), testing::train_of(4),
                                 check_plan(ScheduleKind::kOneFOneB, 2, 1));
  RankProgram& rank1 = program.ranks[1];
  const std::size_t recv = find_op(rank1, Kind::kRecvForward, 2);
  // Make micro-batch 2's receive expect micro-batch 9 (nobody sends it): the send of
  // micro-batch 2 on rank 0 now has no receive.
  rank1.ops[recv].micro_batch = 9;
  const std::string fault = fault_of(program);
  EXPECT_NE(fault.find("deadlock"), std::string::npos) << fault;
  EXPECT_NE(fault.find("no matching"), std::string::npos) << fault;
  // The first message in (sender, receiver, tag) order without a partner: rank 0's send of
  // micro-batch 2 (tag (2 * 2 + 1) * 2 = 10) sorts before the receive's tag 38.
  EXPECT_NE(fault.find("rank 0 op"), std::string::npos) << fault;
  EXPECT_NE(fault.find("send_forward mb=2"), std::string::npos) << fault;
  EXPECT_NE(fault.find("no matching receive"), std::string::npos) << fault;
}

TEST(ProgramCheck, AReceiveOfTheWrongCountIsNamed) {
  // 1F1B on 2 ranks, 2 sequences per micro-batch: every message is (2 x 64 rows, 64 hidden)
  // (small_gpt: seq_len 64, hidden 64; no sequence parallelism) in bf16 (ProgramOptions'
  // default, the CUDA backend's). Rank 1 now expects one token row fewer per sequence of
  // micro-batch 1's activation: (2 x 63, 64) = (126, 64).
  Program program = make_program(testing::small_gpt(4), testing::train_of(8),
                                 check_plan(ScheduleKind::kOneFOneB, 2, 1, 2));
  RankProgram& rank1 = program.ranks[1];
  const std::size_t recv = find_op(rank1, Kind::kRecvForward, 1);
  ASSERT_EQ(message_elements(rank1.ops[recv], 2), 2 * 64 * 64);  // as generated
  rank1.ops[recv].message_rows -= 1;
  const std::size_t send = find_op(program.ranks[0], Kind::kSendForward, 1);
  const std::string fault = fault_of(program);
  EXPECT_NE(fault.find("deadlock"), std::string::npos) << fault;
  // Both ends by rank and op index, both shapes; the tag is micro-batch 1's to virtual stage
  // 1 forward: (1 * 2 * 1 + 1) * 2 + 0 = 6 (pipeline_message_tag).
  EXPECT_NE(fault.find(fmt::format("rank 0 op {} send_forward mb=1 chunk=0 peer=1 sends (128, 64) bf16", send)),
            std::string::npos) << fault;
  EXPECT_NE(fault.find(fmt::format("rank 1 op {} recv_forward mb=1 chunk=0 peer=0 receives (126, 64) bf16", recv)),
            std::string::npos) << fault;
  EXPECT_NE(fault.find("(tag 6)"), std::string::npos) << fault;
}

TEST(ProgramCheck, AReceiveOfTheWrongDtypeIsNamed) {
  // Rank 0 receives micro-batch 0's gradient as fp32 while rank 1 sends it in bf16 (the
  // CPU backend's dtype on one side, the CUDA backend's on the other): the same (64, 64)
  // shape (1 sequence of 64 rows, hidden 64), the wrong element type. Tag: micro-batch 0
  // to virtual stage 0, backward: (0 + 0) * 2 + 1 = 1.
  Program program = make_program(testing::small_gpt(4), testing::train_of(4),
                                 check_plan(ScheduleKind::kOneFOneB, 2, 1));
  RankProgram& rank0 = program.ranks[0];
  const std::size_t recv = find_op(rank0, Kind::kRecvBackward, 0);
  ASSERT_EQ(rank0.ops[recv].message_dtype, DType::kBF16);  // as generated
  rank0.ops[recv].message_dtype = DType::kF32;
  const std::size_t send = find_op(program.ranks[1], Kind::kSendBackward, 0);
  const std::string fault = fault_of(program);
  EXPECT_NE(fault.find(fmt::format("rank 1 op {} send_backward mb=0 chunk=0 peer=0 sends (64, 64) bf16", send)),
            std::string::npos) << fault;
  EXPECT_NE(fault.find(fmt::format("rank 0 op {} recv_backward mb=0 chunk=0 peer=1 receives (64, 64) f32", recv)),
            std::string::npos) << fault;
  EXPECT_NE(fault.find("(tag 1)"), std::string::npos) << fault;
  EXPECT_NE(fault.find("shape and dtype must agree"), std::string::npos) << fault;
}

TEST(ProgramCheck, CollectivesInDifferentOrdersAreNamed) {
  // The last rank enters the global norm before the tied-embedding sum, rank 0 the other way
  // around: rank 0 waits in the sum for rank 1, which waits in the norm for rank 0.
  Program program = make_program(testing::small_gpt(4), testing::train_of(4),
                                 check_plan(ScheduleKind::kOneFOneB, 2, 1));
  RankProgram& last = program.ranks[1];
  move_op(last, find_op(last, Kind::kGradNorm), find_op(last, Kind::kTiedEmbeddingSum));
  const std::string fault = fault_of(program);
  EXPECT_NE(fault.find("different orders"), std::string::npos) << fault;
  EXPECT_NE(fault.find("rank 0 enters tied_embedding_sum, grad_norm"), std::string::npos) << fault;
  EXPECT_NE(fault.find("rank 1 enters grad_norm, tied_embedding_sum"), std::string::npos) << fault;
}

TEST(ProgramCheck, ACollectiveAMemberNeverEntersIsNamed) {
  Program program = make_program(testing::small_gpt(4), testing::train_of(4),
                                 check_plan(ScheduleKind::kOneFOneB, 2, 1));
  RankProgram& last = program.ranks[1];
  last.ops[find_op(last, Kind::kGradNorm)].kind = Kind::kGatherParams;  // not a world collective
  const std::string fault = fault_of(program);
  EXPECT_NE(fault.find("grad_norm over pipeline ranks 0,1 is entered 0 time(s) by rank 1"),
            std::string::npos) << fault;
}

TEST(ProgramCheck, ACycleThroughAPipelineSendIsNamedRankByRank) {
  // Rank 0 of 1F1B on 2 ranks sends micro-batch 0's activation only after receiving its
  // gradient; rank 1 computes that gradient only after receiving the activation.
  Program program = make_program(testing::small_gpt(4), testing::train_of(4),
                                 check_plan(ScheduleKind::kOneFOneB, 2, 1));
  RankProgram& first = program.ranks[0];
  const std::size_t send = find_op(first, Kind::kSendForward, 0);
  const std::size_t recv = find_op(first, Kind::kRecvBackward, 0);
  move_op(first, send, recv);  // right after the receive (the send is before it: indices shift)
  const std::string fault = fault_of(program);
  EXPECT_NE(fault.find("wait for each other in a cycle"), std::string::npos) << fault;
  // Both ranks' ops are named, with the send and the receive that close the cycle.
  EXPECT_NE(fault.find("rank 0 op"), std::string::npos) << fault;
  EXPECT_NE(fault.find("rank 1 op"), std::string::npos) << fault;
  EXPECT_NE(fault.find("send_forward mb=0"), std::string::npos) << fault;
  EXPECT_NE(fault.find("recv_forward mb=0"), std::string::npos) << fault;
  EXPECT_NE(fault.find("recv_backward mb=0"), std::string::npos) << fault;
}

TEST(ProgramCheck, AnAfterOutsideTheListIsNamed) {
  Program program = make_program(testing::small_gpt(4), testing::train_of(4),
                                 check_plan(ScheduleKind::kOneFOneB, 2, 1));
  program.ranks[1].ops[3].after[2] = 999;
  const std::string fault = fault_of(program);
  EXPECT_NE(fault.find("rank 1 op 3"), std::string::npos) << fault;
  EXPECT_NE(fault.find("waits for op 999"), std::string::npos) << fault;
}

TEST(ProgramCheck, ThePlannersSkeletonOfEveryShapePasses) {
  // The planner checks a pipeline shape through its skeleton: the same verdict as the
  // Program's, here for every schedule on up to 8 ranks.
  for (ScheduleKind kind : {ScheduleKind::kGpipe, ScheduleKind::kOneFOneB, ScheduleKind::kInterleaved}) {
    for (std::int64_t p : {1, 2, 3, 8}) {
      const std::int64_t v = kind == ScheduleKind::kInterleaved ? 2 : 1;
      const std::int64_t m = kind == ScheduleKind::kInterleaved ? 2 * p : 5;
      SCOPED_TRACE(to_string(kind) + " p=" + std::to_string(p));
      EXPECT_EQ(deadlock_fault(skeleton_program(pipeline_skeleton(kind, p, v, m))), "");
    }
  }
}

TEST(ProgramCheck, TheSkeletonProgramsMessagesAreTheProgramsMessages) {
  // The skeleton's Program has the generated Program's step ops (kind, micro-batch, chunk,
  // peer, after) before the tail: the planner checks the messages the engine sends.
  const Plan plan = check_plan(ScheduleKind::kInterleaved, 4, 2);
  const Program program = make_program(testing::small_gpt(8), testing::train_of(8), plan);
  const Program skeleton = skeleton_program(pipeline_skeleton(program));
  ASSERT_EQ(skeleton.ranks.size(), program.ranks.size());
  for (std::size_t r = 0; r < program.ranks.size(); ++r) {
    const RankProgram& a = program.ranks[r];
    const RankProgram& b = skeleton.ranks[r];
    ASSERT_EQ(b.ops.size(), static_cast<std::size_t>(a.tail_begin));
    for (std::size_t i = 0; i < b.ops.size(); ++i) {
      EXPECT_EQ(b.ops[i].kind, a.ops[i].kind);
      EXPECT_EQ(b.ops[i].micro_batch, a.ops[i].micro_batch);
      EXPECT_EQ(b.ops[i].peer, a.ops[i].peer) << "rank " << r << " op " << i;
      EXPECT_EQ(b.ops[i].after, a.ops[i].after);
    }
  }
}

// Each bundled plan with the model, cluster and train it was published with (the names say
// which: configs/plans/<model>[-<variant>].json; tiny-* on the local CPU).
struct BundleSetup {
  std::string model, cluster, train;
};
BundleSetup setup_of(const std::string& plan) {
  if (plan.rfind("tiny", 0) == 0) return {"tiny", "local-cpu", "tiny"};
  if (plan.rfind("gpt3-175b", 0) == 0) return {"gpt3-175b", "selene-a100", "gpt3-175b"};
  if (plan.rfind("llama3-405b", 0) == 0) return {"llama3-405b", "dgx-h100", "llama3-405b"};
  return {plan, "selene-a100", plan};
}

TEST(ProgramCheck, EveryBundledPlanPasses) {
  const fs::path configs = fs::path(STRATA_SOURCE_DIR) / "configs";
  std::size_t checked = 0;
  for (const auto& entry : fs::directory_iterator(configs / "plans")) {
    const std::string name = entry.path().stem().string();
    SCOPED_TRACE(name);
    const BundleSetup s = setup_of(name);
    const Plan plan = Plan::load(entry.path().string());
    const ModelSpec model = ModelSpec::load((configs / "models" / (s.model + ".json")).string());
    const ClusterSpec cluster = ClusterSpec::load((configs / "clusters" / (s.cluster + ".json")).string());
    const TrainSpec train = TrainSpec::load((configs / "train" / (s.train + ".json")).string());
    const Program program =
        make_program(model, train, plan, predicted_program_options(cluster, nullptr, {}));
    EXPECT_EQ(fault_of(program), "");
    // The check compared real shapes, not zeros: every message is one sequence's token rows
    // on its TP rank (seq_len, 1/tp of it with sequence parallelism) by hidden.
    const std::int64_t rows = model.seq_len / (plan.sequence_parallel ? plan.tp : 1);
    for (const RankProgram& rank : program.ranks) {
      for (const ProgramOp& op : rank.ops) {
        if (!op.is_message()) continue;
        EXPECT_EQ(op.message_rows, rows);
        EXPECT_EQ(op.message_width, model.hidden);
      }
    }
    ++checked;
  }
  EXPECT_GE(checked, 14u);  // the 14 bundled plans at the time of writing, at least
}

}  // namespace
}  // namespace strata
