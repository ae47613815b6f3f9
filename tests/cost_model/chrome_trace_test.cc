// Tests of the Chrome trace writer: field names and units of the trace-event format,
// deterministic ordering, round trips through JSON and a file, a replayed Program's events and the
// merge used by `strata compare --trace`.
#include "cost_model/program/chrome_trace.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "cost_model/program/program_simulator.h"

namespace strata {
namespace {

std::vector<TraceEvent> sample_events() {
  return {
      {"backward", "compute", 0, 0, 3e-3, 2e-3, Json{{"micro_batch", 0}, {"chunk", 0}}},
      {"forward", "compute", 0, 0, 0.0, 1e-3, Json{{"micro_batch", 0}, {"chunk", 0}}},
      {"send_forward", "p2p", 0, 1, 1e-3, 0.5e-3, Json{{"micro_batch", 0}, {"chunk", 0}}},
      {"optimizer_step", "tail", 1, 0, 0.25, 0.125, Json::object()},
  };
}

TEST(ChromeTrace, FieldsAndUnits) {
  const Json j = chrome_trace_json(sample_events(), {{0, "simulated"}, {1, "other"}},
                                   {{{0, 0}, "pp_rank 0 compute"}});
  EXPECT_EQ(j.at("displayTimeUnit"), "ms");
  const Json& ev = j.at("traceEvents");
  // 2 process names + 1 thread name first, then the 4 complete events.
  ASSERT_EQ(ev.size(), 7u);
  EXPECT_EQ(ev[0].at("ph"), "M");
  EXPECT_EQ(ev[0].at("name"), "process_name");
  EXPECT_EQ(ev[0].at("args").at("name"), "simulated");
  EXPECT_EQ(ev[2].at("name"), "thread_name");
  EXPECT_EQ(ev[2].at("args").at("name"), "pp_rank 0 compute");
  // Sorted by (pid, tid, start): forward at 0 s, backward at 3 ms on (0,0), then the send
  // on (0,1), then the optimizer on (1,0).
  const Json& fwd = ev[3];
  EXPECT_EQ(fwd.at("name"), "forward");
  EXPECT_EQ(fwd.at("cat"), "compute");
  EXPECT_EQ(fwd.at("ph"), "X");
  EXPECT_EQ(fwd.at("pid"), 0);
  EXPECT_EQ(fwd.at("tid"), 0);
  EXPECT_DOUBLE_EQ(fwd.at("ts").get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(fwd.at("dur").get<double>(), 1000.0);  // 1 ms = 1000 us
  EXPECT_EQ(fwd.at("args"), (Json{{"micro_batch", 0}, {"chunk", 0}}));
  EXPECT_EQ(ev[4].at("name"), "backward");
  EXPECT_DOUBLE_EQ(ev[4].at("ts").get<double>(), 3000.0);  // 3 ms
  EXPECT_EQ(ev[5].at("name"), "send_forward");
  EXPECT_EQ(ev[6].at("name"), "optimizer_step");
  EXPECT_DOUBLE_EQ(ev[6].at("ts").get<double>(), 250000.0);  // 0.25 s
  EXPECT_DOUBLE_EQ(ev[6].at("dur").get<double>(), 125000.0);
}

TEST(ChromeTrace, OrderDoesNotDependOnInputOrder) {
  std::vector<TraceEvent> a = sample_events();
  std::vector<TraceEvent> b(a.rbegin(), a.rend());
  EXPECT_EQ(chrome_trace_json(a, {}, {}).dump(), chrome_trace_json(b, {}, {}).dump());
}

TEST(ChromeTrace, JsonAndFileRoundTrip) {
  ChromeTrace t;
  t.events = sample_events();
  t.process_names = {{0, "simulated"}, {1, "other"}};
  t.thread_names = {{{0, 0}, "pp_rank 0 compute"}, {{0, 1}, "pp_rank 0 p2p"}};
  const ChromeTrace back = chrome_trace_from_json(chrome_trace_json(t), "test");
  // Times go through microseconds and back: equal to rounding.
  ASSERT_EQ(back.events.size(), t.events.size());
  EXPECT_EQ(back.process_names, t.process_names);
  EXPECT_EQ(back.thread_names, t.thread_names);
  for (const TraceEvent& e : t.events) {
    bool found = false;
    for (const TraceEvent& g : back.events) {
      if (g.name == e.name && g.pid == e.pid && g.tid == e.tid) {
        found = true;
        EXPECT_EQ(g.category, e.category);
        EXPECT_NEAR(g.start_s, e.start_s, 1e-15);
        EXPECT_NEAR(g.duration_s, e.duration_s, 1e-15);
        EXPECT_EQ(g.args, e.args);
      }
    }
    EXPECT_TRUE(found) << e.name;
  }

  const auto dir = std::filesystem::temp_directory_path() /
                   ("strata_trace_test_" + std::to_string(::testing::UnitTest::GetInstance()
                                                              ->random_seed()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "trace.json").string();
  write_chrome_trace(path, t);
  EXPECT_EQ(chrome_trace_json(read_chrome_trace(path)), chrome_trace_json(back));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));  // atomic: no temp file left
  std::filesystem::remove_all(dir);
}

TEST(ChromeTrace, MalformedTraceIsAConfigError) {
  EXPECT_THROW(chrome_trace_from_json(Json::array(), "t.json"), ConfigError);
  EXPECT_THROW(chrome_trace_from_json(Json{{"traceEvents", 3}}, "t.json"), ConfigError);
  const Json no_ts = {{"traceEvents", Json::array({Json{{"name", "forward"}, {"ph", "X"},
                                                        {"pid", 0}, {"tid", 0}, {"dur", 1}}})}};
  try {
    chrome_trace_from_json(no_ts, "t.json");
    FAIL() << "missing ts accepted";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("t.json"), std::string::npos) << what;
    EXPECT_NE(what.find("ts"), std::string::npos) << what;
  }
}

// A layer's forward 1 s, its backward 2 s, everything else free.
struct LayerCosts final : OpCosts {
  StepTimeParts compute(const RankProgram&, Part part, std::int32_t, bool forward) const override {
    StepTimeParts t;
    if (part == Part::kLayer) (forward ? t.forward_s : t.backward_s) = forward ? 1.0 : 2.0;
    return t;
  }
  StepTimeParts state_move(const RankProgram&, ProgramOpKind, std::int32_t) const override { return {}; }
  StepTimeParts transfer(const RankProgram&, ProgramOpKind, std::int32_t) const override { return {}; }
  StepTimeParts tail(const RankProgram&, const ProgramOp&) const override { return {}; }
};

TEST(ChromeTrace, ProgramEventsOneThreadPerStream) {
  // GPipe p = 2, m = 1, a layer a rank: every op of the Program is an event (passes and
  // messages, each pass's body ops, the tail), on thread kStreamCount * pp_rank + stream.
  ModelSpec model;
  model.name = "m";
  model.layers = 2;
  model.hidden = 64;
  model.heads = 4;
  model.ffn_hidden = 256;
  model.seq_len = 64;
  model.vocab = 256;
  TrainSpec train;
  train.global_batch = 1;
  Plan plan;
  plan.pp = 2;
  plan.schedule = ScheduleKind::kGpipe;
  const Program program = make_program(model, train, plan);
  const ProgramTimeline timeline = simulate_program(program, LayerCosts{}, SimulationMode::kStreams);
  const ChromeTrace t = program_trace(program, timeline, 7, "simulated");
  std::size_t ops = 0;
  for (const RankProgram& rank : program.ranks) {
    ops += rank.ops.size();
    for (const ProgramOp& op : rank.ops) {
      if (op.is_pass()) ops += rank.bodies[static_cast<std::size_t>(op.body)].ops.size();
    }
  }
  ASSERT_EQ(t.events.size(), ops);
  EXPECT_EQ(t.process_names.at(7), "simulated");
  EXPECT_EQ(t.thread_names.at({7, stream_tid(1, Stream::kP2p)}), "pp_rank 1 p2p");
  EXPECT_EQ(t.thread_names.at({7, stream_tid(0, Stream::kComm)}), "pp_rank 0 comm");
  EXPECT_EQ(stream_tid(1, Stream::kP2p), 8);  // 5 * 1 + 3
  int passes = 0, messages = 0, steps = 0, moves = 0, tail = 0;
  for (const TraceEvent& e : t.events) {
    EXPECT_EQ(e.pid, 7);
    if (e.name == "forward" || e.name == "backward") {
      ++passes;
      EXPECT_EQ(e.category, "compute");
      EXPECT_EQ(e.tid % kStreamCount, 0);
      // "op": its index among its rank's step ops (the name path_trace.h finds it by).
      EXPECT_EQ(e.args, (Json{{"micro_batch", 0}, {"chunk", 0}, {"op", e.args.at("op")}}));
      const RankProgram& rank = program.ranks[static_cast<std::size_t>(e.tid / kStreamCount)];
      EXPECT_EQ(to_string(rank.ops[e.args.at("op").get<std::size_t>()].kind), e.name);
    } else if (e.category == "p2p") {
      ++messages;
      EXPECT_EQ(e.tid % kStreamCount, 3);
    } else if (e.name == "compute") {
      ++steps;
      EXPECT_EQ(e.args.at("micro_batch"), 0);
      EXPECT_TRUE(e.args.contains("part") && e.args.contains("unit"));
    } else if (e.category == "state") {
      ++moves;  // the last backward's reductions (d = 1: free, still ops of the Program)
      EXPECT_EQ(e.name, "reduce_grads");
      EXPECT_EQ(e.tid % kStreamCount, 1);
    } else {
      ++tail;
      EXPECT_EQ(e.category, "tail");
    }
  }
  EXPECT_EQ(passes, 4);    // F and B on each rank
  EXPECT_EQ(messages, 4);  // SF0, RB0 on rank 0; RF0, SB0 on rank 1
  EXPECT_EQ(steps, 8);     // rank 0: embedding, layer0 each way; rank 1: layer1, head each way
  EXPECT_GT(moves, 0);
  EXPECT_GT(tail, 0);
  // Rank 1's backward pass runs after its forward [1,2]: [2,4] -> ts 2e6 us, dur 2e6 us; its
  // layer's backward step inside it, [2,4] too (the head's backward costs nothing).
  const Json j = chrome_trace_json(t);
  int found = 0;
  for (const Json& e : j.at("traceEvents")) {
    if (e.at("ph") == "X" && e.at("tid") == stream_tid(1, Stream::kCompute) &&
        e.at("dur").get<double>() == 2e6) {
      ++found;
      EXPECT_DOUBLE_EQ(e.at("ts").get<double>(), 2e6);
    }
  }
  EXPECT_EQ(found, 2);
}

TEST(ChromeTrace, MergeGivesOneProcessPerTrace) {
  ChromeTrace predicted;
  predicted.events = {{"forward", "compute", 5, 0, 0.0, 1.0, Json::object()},
                      {"forward", "compute", 5, 2, 1.0, 1.0, Json::object()}};
  predicted.process_names = {{5, "sim"}};
  predicted.thread_names = {{{5, 0}, "pp_rank 0 compute"}, {{5, 2}, "pp_rank 1 compute"}};
  ChromeTrace measured;  // two processes (global ranks 0 and 1), one thread each
  measured.events = {{"forward", "compute", 1, 0, 0.5, 1.0, Json::object()},
                     {"forward", "compute", 0, 0, 0.0, 1.0, Json::object()}};
  measured.process_names = {{0, "rank 0"}, {1, "rank 1"}};
  measured.thread_names = {{{0, 0}, "compute"}, {{1, 0}, "compute"}};

  const ChromeTrace m = merge_chrome_traces({{"predicted", predicted}, {"measured", measured}});
  EXPECT_EQ(m.process_names,
            (std::map<std::int64_t, std::string>{{0, "predicted"}, {1, "measured"}}));
  // Trace 0 had one process: its thread names are kept; (5,0) -> tid 0, (5,2) -> tid 1.
  // Trace 1 had two: "<process> / <thread>", (0,0) -> tid 0, (1,0) -> tid 1.
  const std::map<ThreadKey, std::string> threads = {{{0, 0}, "pp_rank 0 compute"},
                                                    {{0, 1}, "pp_rank 1 compute"},
                                                    {{1, 0}, "rank 0 / compute"},
                                                    {{1, 1}, "rank 1 / compute"}};
  EXPECT_EQ(m.thread_names, threads);
  ASSERT_EQ(m.events.size(), 4u);
  EXPECT_EQ(m.events[1].pid, 0);
  EXPECT_EQ(m.events[1].tid, 1);
  EXPECT_EQ(m.events[2].pid, 1);  // measured rank 1's event
  EXPECT_EQ(m.events[2].tid, 1);
  EXPECT_DOUBLE_EQ(m.events[2].start_s, 0.5);
}

}  // namespace
}  // namespace strata
