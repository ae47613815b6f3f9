// `strata predict`: the cost model's Prediction for one given plan: step time and its parts,
// throughput, MFU, bubble and memory per tier (worst rank, then each pipeline rank by kind:
// cost_model/specs/memory_kinds.h, the kinds of `run`'s memory_tags.json), as text
// or as StepReport JSON; with --critical-path the ops that set the step time
// (critical_path_print.h). Exit code 3 when the plan does not fit (the prediction is printed).
#include <CLI/CLI.hpp>
#include <memory>
#include <ostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/pricing/cost_model.h"
#include "cost_model/specs/json_reader.h"
#include "cost_model/specs/limits.h"
#include "planner/levers.h"
#include "planner/planner.h"
#include "tools/strata/commands.h"
#include "tools/strata/critical_path_print.h"
#include "tools/strata/inputs.h"
#include "tools/strata/memory_advice.h"
#include "tools/strata/pipeline_idle_print.h"

namespace strata::cli {
namespace {

struct PredictOptions {
  SpecOptions specs;
  std::string plan;
  bool json = false;
  bool critical_path = false;
  int prefetch_depth = kDefaultPrefetchDepth;  // as `strata run --prefetch-depth`
};

// The worst rank's tiers against the cluster, then each stage's peak by kind (memory_kinds.h):
// a row per pipeline rank on the device, and host or NVMe rows where a stage uses them.
void print_memory(std::ostream& out, const Prediction& r, const ClusterSpec& cluster) {
  const RankMemory* worst = worst_device_rank(r.per_rank);
  out << fmt::format("memory, worst rank: device {} of {}, host {}/GPU, nvme {}/GPU\n",
                     bytes_label(r.memory_bytes.device), bytes_label(cluster.device.memory_bytes),
                     bytes_label(r.memory_bytes.host), bytes_label(r.memory_bytes.nvme));
  if (worst == nullptr || !worst->by_kind) return;
  const MemoryKind largest = worst->by_kind->largest_on_device();
  out << fmt::format("  largest on the device: {} {} ({} of pp_rank {}'s peak)\n",
                     describe(largest), bytes_label((*worst->by_kind)[largest].device),
                     percent((*worst->by_kind)[largest].device / worst->peak_bytes.device),
                     worst->pp_rank);
  constexpr int kCell = 11;
  const auto table = [&](const char* tier, double TierBytes::*field) {
    out << fmt::format("  {:<6} {:>7} {:>6}", tier, "pp_rank", "rank");
    for (const MemoryKind k : kMemoryKinds) out << fmt::format(" {:>{}}", to_string(k), kCell);
    out << fmt::format(" {:>{}} {:>9}\n", "total", kCell, "in flight");
    for (const RankMemory& m : r.per_rank) {
      out << fmt::format("  {:<6} {:>7} {:>6}", "", m.pp_rank, m.rank);
      for (const MemoryKind k : kMemoryKinds) {
        out << fmt::format(" {:>{}}", bytes_label((*m.by_kind)[k].*field), kCell);
      }
      out << fmt::format(" {:>{}} {:>9}\n", bytes_label(m.peak_bytes.*field), kCell, m.in_flight);
    }
  };
  out << "memory by kind at each stage's peak (in flight: the chunk-micro-batches whose "
         "activations it holds then)\n";
  table("device", &TierBytes::device);
  const auto used = [&](double TierBytes::*field) {
    for (const RankMemory& m : r.per_rank) {
      if (m.peak_bytes.*field > 0) return true;
    }
    return false;
  };
  if (used(&TierBytes::host)) table("host", &TierBytes::host);
  if (used(&TierBytes::nvme)) table("nvme", &TierBytes::nvme);
}

void print_prediction(std::ostream& out, const Prediction& r, const Inputs& inputs,
                      const Plan& plan, const CostModelOptions& cost, const MemoryOvershoot& over) {
  out << fmt::format("plan {} (model {}, cluster {}, {})\n", plan.label(), inputs.model.name,
                     inputs.cluster.name, plural(plan.world_size(), "GPU"));
  const StepTimeParts& t = r.parts;
  out << fmt::format("step time        {:>10.4f} s\n", r.step_time_s);
  const std::pair<const char*, double> parts[] = {
      {"forward", t.forward_s},   {"backward", t.backward_s},   {"recompute", t.recompute_s},
      {"tp comm", t.tp_comm_s},   {"pp comm", t.pp_comm_s},     {"dp comm", t.dp_comm_s},
      {"offload", t.offload_s},   {"optimizer", t.optimizer_s}, {"bubble", t.bubble_s},
      {"other", t.other_s}};
  for (const auto& [name, seconds] : parts) {
    out << fmt::format("  {:<14} {:>10.4f} s\n", name, seconds);
  }
  out << fmt::format("tokens/s         {:>10.0f}\n", r.tokens_per_s);
  // What hardware_flops (step_report.h) adds to the model's FLOPs for this plan.
  const char* counted = plan.recompute == Recompute::kFull        ? "a recomputed forward counted"
                        : plan.recompute == Recompute::kSelective ? "the recomputed attention counted"
                                                                  : "no recomputation to count";
  out << fmt::format("TFLOP/s per GPU  {:>10.3f}   hardware: {}\n", r.tflops_per_gpu, counted);
  out << fmt::format("  model          {:>10.3f}   the model's FLOPs alone (MFU's numerator)\n",
                     r.model_tflops_per_gpu);
  out << fmt::format("MFU              {:>10}\n", percent(r.mfu));
  out << fmt::format("bubble           {:>10} of the step\n", percent(r.bubble_fraction));
  if (r.pipeline_idle) print_pipeline_idle(out, *r.pipeline_idle, r.step_time_s, true);
  print_memory(out, r, inputs.cluster);
  out << lever_line(plan_levers(inputs.model, inputs.cluster, inputs.train, plan,
                                inputs.profile_ptr(), cost),
                    r.tokens_per_s)
      << "\n";
  if (over.fits()) {
    out << "fits: yes\n";
  } else {
    out << fmt::format("fits: no (over by device {}/GPU, host {}/node, nvme {}/node)\n",
                       bytes_label(std::max(over.device_bytes, 0.0)),
                       bytes_label(std::max(over.host_bytes, 0.0)),
                       bytes_label(std::max(over.nvme_bytes, 0.0)));
    if (const RankMemory* worst = worst_device_rank(r.per_rank)) {
      const std::string advice = memory_advice(*worst, plan, inputs.cluster);
      if (!advice.empty()) out << "  " << advice << "\n";
    }
  }
}

int run_predict(const PredictOptions& options, std::ostream& out) {
  const Inputs inputs = load_inputs(options.specs);
  const Plan plan = load_plan(options.plan, options.specs, inputs.model);
  plan.check(inputs.model, inputs.cluster, inputs.train, plan_source(options.plan, options.specs));
  CostModelOptions cost;
  cost.prefetch_depth = options.prefetch_depth;
  const Prediction prediction =
      predict(inputs.model, inputs.cluster, inputs.train, plan, inputs.profile_ptr(), cost);
  const MemoryOvershoot over = memory_overshoot(prediction, inputs.cluster, plan.world_size());
  if (options.json) {
    // "profile" beside the StepReport's keys (compare reads it back: load_predicted).
    Json json = prediction.to_json();
    json["profile"] = inputs.profile.name;
    out << json.dump(2) << "\n";
  } else {
    print_prediction(out, prediction, inputs, plan, cost, over);
    out << inputs.profile.line() << "\n";
  }
  if (options.critical_path) {
    const StepCriticalPath path =
        step_critical_path(inputs.model, inputs.cluster, inputs.train, plan, inputs.profile_ptr(), cost);
    print_critical_path(out, path.path);
  }
  return over.fits() ? 0 : kExitDoesNotFit;
}

}  // namespace

void add_predict_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<PredictOptions>();
  CLI::App* command =
      app.add_subcommand("predict", "Predict step time, throughput and memory of one plan");
  add_spec_options(*command, options->specs);
  command->add_option("--plan", options->plan, "plan: a JSON file or a bundled name")->required();
  command->add_flag("--json", options->json, "print the prediction as StepReport JSON");
  command->add_option("--prefetch-depth", options->prefetch_depth,
                      "ZeRO-3 with offloaded parameters: layers fetched ahead, as `strata run "
                      "--prefetch-depth` (default 2)")
      ->check(CLI::Range(1, static_cast<int>(limits::kPrefetchDepth)));
  command->add_flag("--critical-path", options->critical_path,
                    "also print the chain of ops that sets the step time, its share by kind and "
                    "the slack of the longest ops off it");
  command->footer("Exit code 3 when the plan does not fit in memory (the prediction is printed).");
  command->callback(
      [options, &context] { context.exit_code = run_predict(*options, *context.out); });
}

}  // namespace strata::cli
