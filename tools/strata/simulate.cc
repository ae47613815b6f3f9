// `strata simulate`: generates the plan's pipeline schedule, replays it in the task-graph
// simulator with the cost model's per-op durations (stage_op_times), prints the makespan,
// the bubble and each rank's busy time next to the analytic prediction, and writes the
// timeline as a Chrome trace (--trace). Deliberately no memory check: `predict` does that.
#include <memory>
#include <ostream>

#include <fmt/format.h>

#include "cost_model/chrome_trace.h"
#include "cost_model/cost_model.h"
#include "cost_model/schedule.h"
#include "cost_model/simulator.h"
#include "tools/strata/commands.h"
#include "tools/strata/inputs.h"

namespace strata::cli {
namespace {

struct SimulateOptions {
  SpecOptions specs;
  std::string plan;
  std::string trace;
  bool json = false;
};

// Forward/backward take their chunk's time, sends the p2p transfer, receives only wait.
OpDurations durations_from(const StageOpTimes& times) {
  return {[&times](std::int64_t pp_rank, const PipelineOp& op) {
    const ChunkOpTimes& chunk =
        times.ranks.at(static_cast<std::size_t>(pp_rank)).chunks.at(static_cast<std::size_t>(op.chunk));
    switch (op.kind) {
      case OpKind::kForward: return chunk.forward_s;
      case OpKind::kBackward: return chunk.backward_s;
      case OpKind::kSendForward:
      case OpKind::kSendBackward: return times.p2p_s;
      case OpKind::kRecvForward:
      case OpKind::kRecvBackward: return 0.0;
    }
    return 0.0;
  }};
}

std::vector<std::vector<TailTask>> tails_from(const StageOpTimes& times) {
  std::vector<std::vector<TailTask>> tails;
  for (const RankOpTimes& rank : times.ranks) {
    tails.push_back({{"dp_grad_sync", rank.dp_sync_s},
                     {"offload", rank.offload_s},
                     {"optimizer_step", rank.optimizer_s}});
  }
  return tails;
}

int run_simulate(const SimulateOptions& options, std::ostream& out) {
  const Inputs inputs = load_inputs(options.specs);
  const Plan plan = load_plan(options.plan);
  plan.check(inputs.model, inputs.cluster, inputs.train, options.plan);
  const StageOpTimes times =
      stage_op_times(inputs.model, inputs.cluster, inputs.train, plan, inputs.profile_ptr());
  const Prediction prediction =
      predict(inputs.model, inputs.cluster, inputs.train, plan, inputs.profile_ptr());
  const Schedule schedule = make_schedule(plan.schedule, plan.pp, plan.virtual_stages,
                                          plan.micro_batches(inputs.train));
  const SimulationResult sim = simulate(schedule, durations_from(times), tails_from(times));

  if (!options.trace.empty()) {
    write_chrome_trace(options.trace, simulation_trace(sim, 0, "simulated " + plan.label()));
  }
  const double tokens_per_s = static_cast<double>(inputs.train.global_batch) *
                              static_cast<double>(inputs.model.seq_len) / sim.makespan_s;
  if (options.json) {
    Json json = {{"plan", plan.label()},
                 {"micro_batches", schedule.micro_batches},
                 {"makespan_s", sim.makespan_s},
                 {"pipeline_s", sim.pipeline_s},
                 {"bubble_s", sim.bubble_s},
                 {"bubble_fraction", sim.bubble_fraction},
                 {"busiest_rank", sim.busiest_rank},
                 {"busy_s", sim.busy_s},
                 {"tokens_per_s", tokens_per_s},
                 {"predicted_step_time_s", prediction.step_time_s}};
    out << json.dump(2) << "\n";
    return 0;
  }
  out << fmt::format("plan {} (model {}, cluster {}), {} micro-batches per pipeline\n",
                     plan.label(), inputs.model.name, inputs.cluster.name, schedule.micro_batches);
  out << fmt::format("makespan           {:>10.4f} s  (predicted step time {:.4f} s)\n",
                     sim.makespan_s, prediction.step_time_s);
  out << fmt::format("pipeline           {:>10.4f} s\n", sim.pipeline_s);
  out << fmt::format("bubble             {:>10.4f} s  = {} of the busiest rank's compute "
                     "(rank {})\n",
                     sim.bubble_s, percent(sim.bubble_fraction), sim.busiest_rank);
  out << fmt::format("tokens/s           {:>10.0f}\n", tokens_per_s);
  for (std::size_t r = 0; r < sim.busy_s.size(); ++r) {
    out << fmt::format("  pp_rank {:>3}: busy {:.4f} s\n", r, sim.busy_s[r]);
  }
  if (!options.trace.empty()) out << fmt::format("wrote {}\n", options.trace);
  return 0;
}

}  // namespace

void add_simulate_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<SimulateOptions>();
  CLI::App* command = app.add_subcommand(
      "simulate", "Replay a plan's pipeline schedule in the simulator and write its timeline");
  add_spec_options(*command, options->specs);
  command->add_option("--plan", options->plan, "plan: a JSON file or a bundled name")->required();
  command->add_option("--trace", options->trace, "write the timeline as Chrome trace JSON here");
  command->add_flag("--json", options->json, "print the result as JSON");
  command->callback(
      [options, &context] { context.exit_code = run_simulate(*options, *context.out); });
}

}  // namespace strata::cli
