// `strata simulate`: generates the plan's Program, replays it op by op with the cost model's
// durations (stage_op_times: the replay predict() is), prints the step time, the pipeline's
// end, the critical rank, the bubble and each rank's busy and tail time, and writes every op
// (passes, messages, compute steps, state moves, the tail) as a Chrome trace (--trace), one
// thread per stream. Deliberately no memory check: `predict` does that. --out DIR writes the
// step as `strata plot DIR` draws a run: report.json (predict()'s prediction, as `predict
// --json` prints it) and trace.json (the replayed step).
#include <CLI/CLI.hpp>
#include <filesystem>
#include <memory>
#include <ostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/program/chrome_trace.h"
#include "cost_model/pricing/cost_model.h"
#include "cost_model/specs/json_reader.h"
#include "tools/strata/commands.h"
#include "tools/strata/inputs.h"
#include "tools/strata/out_dir.h"
#include "tools/strata/pipeline_idle_print.h"

namespace strata::cli {
namespace {

std::string out_path(const std::string& dir, const char* name) {
  return (std::filesystem::path(dir) / name).string();
}

struct SimulateOptions {
  SpecOptions specs;
  std::string plan;
  std::string trace;
  std::string out_dir;
  bool json = false;
};

std::size_t count_ops(const ProgramTimeline& timeline) {
  std::size_t n = 0;
  for (const auto& rank : timeline.ranks) n += rank.size();
  return n;
}

int run_simulate(const SimulateOptions& options, std::ostream& out) {
  const Inputs inputs = load_inputs(options.specs);
  const Plan plan = load_plan(options.plan, options.specs, inputs.model);
  plan.check(inputs.model, inputs.cluster, inputs.train, plan_source(options.plan, options.specs));
  if (!options.out_dir.empty()) check_out_dir(options.out_dir);
  const StageOpTimes times =
      stage_op_times(inputs.model, inputs.cluster, inputs.train, plan, inputs.profile_ptr());
  const StepSimulation& sim = times.timeline.step;
  const PipelineIdle idle = PipelineIdle::split(sim.busy_s, sim.critical_rank, sim.parts.bubble_s);

  if (!options.trace.empty()) {
    write_chrome_trace(options.trace, program_trace(times.program, times.timeline, 0,
                                                    "simulated " + plan.label()));
  }
  if (!options.out_dir.empty()) {
    // "profile" beside the StepReport's keys, as `predict --json` writes it.
    Json report =
        predict(inputs.model, inputs.cluster, inputs.train, plan, inputs.profile_ptr()).to_json();
    report["profile"] = inputs.profile.name;
    write_chrome_trace(out_path(options.out_dir, "trace.json"),
                       program_trace(times.program, times.timeline, 0, "simulated " + plan.label()));
    write_json_file(out_path(options.out_dir, "report.json"), report);
  }
  const double tokens_per_s = static_cast<double>(inputs.train.global_batch) *
                              static_cast<double>(inputs.model.seq_len) / sim.step_s;
  if (options.json) {
    Json json = {{"plan", plan.label()},
                 {"micro_batches", times.program.micro_batches},
                 {"mode", to_string(times.mode)},
                 {"ops", count_ops(times.timeline)},
                 {"step_time_s", sim.step_s},
                 {"pipeline_s", sim.pipeline_s},
                 {"critical_rank", sim.critical_rank},
                 {"bubble_s", sim.parts.bubble_s},
                 {"bubble_fraction", sim.parts.bubble_s / sim.step_s},
                 {"fill_drain_s", idle.fill_drain_s},
                 {"imbalance_s", idle.imbalance_s},
                 {"busiest_rank", idle.busiest_rank},
                 {"busy_s", sim.busy_s},
                 {"tail_s", sim.tail_s},
                 {"tokens_per_s", tokens_per_s},
                 {"profile", inputs.profile.name}};
    out << json.dump(2) << "\n";
    return 0;
  }
  out << fmt::format("plan {} (model {}, cluster {}), {} micro-batches per pipeline\n",
                     plan.label(), inputs.model.name, inputs.cluster.name,
                     times.program.micro_batches);
  out << fmt::format("replayed {} ops, {}\n", count_ops(times.timeline),
                     times.mode == SimulationMode::kSerial
                         ? "one clock per rank (serial: the CPU backend)"
                         : "five streams per rank (the CUDA backend)");
  out << fmt::format("step time          {:>10.4f} s  (= predict's)\n", sim.step_s);
  out << fmt::format("pipeline           {:>10.4f} s  (then the tail)\n", sim.pipeline_s);
  out << fmt::format("bubble             {:>10.4f} s  = {} of the step\n",
                     sim.parts.bubble_s, percent(sim.parts.bubble_s / sim.step_s));
  if (sim.busy_s.size() > 1) print_pipeline_idle(out, idle, sim.step_s, false);
  out << fmt::format("tokens/s           {:>10.0f}\n", tokens_per_s);
  for (std::size_t r = 0; r < sim.busy_s.size(); ++r) {
    out << fmt::format("  pp_rank {:>3}: busy {:.4f} s, tail {:.4f} s\n", r, sim.busy_s[r],
                       sim.tail_s[r]);
  }
  out << inputs.profile.line() << "\n";
  if (!options.trace.empty()) out << fmt::format("wrote {}\n", options.trace);
  if (!options.out_dir.empty()) {
    out << fmt::format("wrote {} and {} (`strata plot {}` draws them)\n",
                       out_path(options.out_dir, "report.json"),
                       out_path(options.out_dir, "trace.json"), options.out_dir);
  }
  return 0;
}

}  // namespace

void add_simulate_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<SimulateOptions>();
  CLI::App* command = app.add_subcommand(
      "simulate", "Replay a plan's Program op by op and write its timeline");
  add_spec_options(*command, options->specs);
  command->add_option("--plan", options->plan, "plan: a JSON file or a bundled name")->required();
  command->add_option("--trace", options->trace, "write the timeline as Chrome trace JSON here");
  command->add_option("--out", options->out_dir,
                      "write the prediction (report.json) and the timeline (trace.json) into "
                      "this directory, for `strata plot`; created when missing");
  command->add_flag("--json", options->json, "print the result as JSON");
  command->callback(
      [options, &context] { context.exit_code = run_simulate(*options, *context.out); });
}

}  // namespace strata::cli
