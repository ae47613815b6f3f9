// `strata plan`: searches the plans of a model on a cluster (planner/planner.h), prints the
// best ones as a table (or JSON) with the counts of candidates and of dropped plans, and
// writes the best as a plan file (--out) that `strata predict/simulate/run` load. When no
// plan fits it says which reason dropped the most plans and which plan came closest; when the
// GPU count has no legal factorisation it says so and names the nearest counts that have one.
// With --tokens and a deadline it sizes the cluster instead (sizing.cc).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <memory>
#include <system_error>
#include <utility>
#include <vector>
#include <ostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/json_reader.h"
#include "cost_model/specs/units.h"
#include "planner/levers.h"
#include "planner/planner.h"
#include "planner/stage_balance.h"
#include "planner/sizing.h"
#include "tools/strata/commands.h"
#include "tools/strata/inputs.h"
#include "tools/strata/memory_advice.h"
#include "tools/strata/plan_output.h"

namespace strata::cli {
namespace fs = std::filesystem;

Json plan_file_json(const ScoredPlan& scored, const PlanOptions& options,
                    const ProfileChoice& profile) {
  Json json = scored.plan.to_json();
  json["prediction"] = scored.prediction.to_json();
  json["prediction"]["profile"] = profile.name;
  json["model"] = options.specs.model;
  json["cluster"] = options.specs.cluster;
  json["train"] = options.specs.train;
  return json;
}

Json search_json(const PlanSearchResult& result, const PlanOptions& options,
                 const ProfileChoice& profile) {
  Json json = {{"model", options.specs.model},
               {"cluster", options.specs.cluster},
               {"train", options.specs.train},
               {"gpus", result.gpus},
               {"candidates", result.candidates},
               {"scored", result.scored},
               {"pruned", result.pruned},
               {"fitting", result.fitting},
               {"dropped", result.dropped},
               {"profile", profile.name}};
  if (!result.deadlock_example.empty()) json["deadlock_example"] = result.deadlock_example;
  json["plans"] = Json::array();
  for (const ScoredPlan& scored : result.top) json["plans"].push_back(plan_file_json(scored, options, profile));
  if (result.top.empty()) {
    json["top_reason"] = result.top_reason;
    json["closest"] =
        result.closest ? plan_file_json(*result.closest, options, profile) : Json(nullptr);
  }
  return json;
}

std::string no_legal_factorisation_line(const std::map<std::string, std::int64_t>& rule_drops,
                                        std::int64_t gpus, std::int64_t below, std::int64_t above) {
  std::vector<std::string> rules;
  for (const auto& [reason, count] : rule_drops) {
    rules.push_back(fmt::format("{} ({} of them)", reason, count));
  }
  std::vector<std::string> nearest;
  if (below > 0) nearest.push_back(std::to_string(below));
  if (above > 0) nearest.push_back(std::to_string(above));
  return fmt::format("no legal factorisation: every t x p x d = {} breaks a rule: {}; nearest "
                     "counts with one: {}",
                     gpus, fmt::join(rules, "; "),
                     nearest.empty() ? std::string("none") : fmt::format("{}", fmt::join(nearest, ", ")));
}

namespace {

void print_counts(std::ostream& out, const PlanSearchResult& result) {
  out << fmt::format("candidates {}, scored {}, pruned {} (a faster variant fits), fit {}\n",
                     result.candidates, result.scored, result.pruned, result.fitting);
  // Most frequent reason first; equal counts in the map's (alphabetical) order.
  std::vector<std::pair<std::string, std::int64_t>> dropped(result.dropped.begin(),
                                                            result.dropped.end());
  std::stable_sort(dropped.begin(), dropped.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  out << "dropped:";
  if (dropped.empty()) out << " none";
  for (const auto& [reason, count] : dropped) out << fmt::format(" [{}: {}]", reason, count);
  out << "\n";
  if (!result.deadlock_example.empty()) out << "  e.g. " << result.deadlock_example << "\n";
}

void print_table(std::ostream& out, const PlanSearchResult& result, const ModelSpec& model) {
  out << fmt::format("{:>2} {:>2} {:>3} {:>4} {:>2} {:>2} {:<11} {:>4} {:<22} {:<9} {:<3} "
                     "{:>10} {:>12} {:>11} {:>9} {:>12} {:>10} {:>6} {:>6}\n",
                     "#", "t", "p", "d", "v", "b", "schedule", "ZeRO", "offload", "recompute",
                     "sp", "device_GiB", "host_GiB/gpu", "nvme_GB/gpu", "step_s", "tokens/s",
                     "hw_TFLOP/s", "MFU", "bubble");
  int rank = 1;
  for (const ScoredPlan& s : result.top) {
    const Plan& p = s.plan;
    const Prediction& r = s.prediction;
    out << fmt::format("{:>2} {:>2} {:>3} {:>4} {:>2} {:>2} {:<11} {:>4} {:<22} {:<9} {:<3} "
                       "{:>10} {:>12} {:>11} {:>9.4g} {:>12.0f} {:>10} {:>6} {:>6}\n",
                       rank++, p.tp, p.pp, p.dp, p.virtual_stages, p.micro_batch,
                       to_string(p.schedule), p.zero_stage, offload_label(p.offload),
                       to_string(p.recompute), p.sequence_parallel ? "yes" : "no",
                       gib(r.memory_bytes.device), gib(r.memory_bytes.host),
                       gb(r.memory_bytes.nvme), r.step_time_s, r.tokens_per_s,
                       readable(r.tflops_per_gpu), percent(r.mfu), percent(r.bubble_fraction));
  }
  // Uneven pipeline splits (the planner proposes them where they balance the stages).
  rank = 1;
  for (const ScoredPlan& s : result.top) {
    if (s.plan.uneven_stages()) {
      out << fmt::format("#{} layers: {}\n", rank, split_description(model, s.plan));
    }
    ++rank;
  }
}

void print_infeasible(std::ostream& out, const PlanSearchResult& result, const Inputs& inputs) {
  const std::int64_t count = result.dropped.count(result.top_reason) != 0
                                 ? result.dropped.at(result.top_reason) : 0;
  out << fmt::format("no plan fits in memory: the most common reason is '{}' ({} dropped)\n",
                     result.top_reason, count);
  if (!result.closest) return;
  const MemoryOvershoot& over = *result.closest_overshoot;
  const double per_node = static_cast<double>(std::min(result.gpus, inputs.cluster.gpus_per_node));
  const Prediction& r = result.closest->prediction;
  out << fmt::format("closest plan: {}\n", result.closest->plan.label());
  out << fmt::format("  device {} GiB of {} GiB per GPU (over by {} GiB)\n",
                     gib(r.memory_bytes.device), gib(inputs.cluster.device.memory_bytes),
                     gib(std::max(over.device_bytes, 0.0)));
  out << fmt::format("  host {} GiB of {} GiB usable per node (over by {} GiB)\n",
                     gib(r.memory_bytes.host * per_node),
                     gib(usable_host_bytes(inputs.cluster.host.memory_bytes,
                                           static_cast<std::int64_t>(per_node),
                                           host_headroom_for(inputs.cluster))),
                     gib(std::max(over.host_bytes, 0.0)));
  out << fmt::format("  nvme {} GB of {} GB per node (over by {} GB)\n",
                     gb(r.memory_bytes.nvme * per_node), gb(inputs.cluster.nvme.capacity_bytes),
                     gb(std::max(over.nvme_bytes, 0.0)));
  if (const RankMemory* worst = worst_device_rank(r.per_rank)) {
    const std::string advice = memory_advice(*worst, result.closest->plan, inputs.cluster);
    if (!advice.empty()) out << "  " << advice << "\n";
  }
}

// --out's parent directories are made as `run --out` makes its directory; the file itself is
// written whole or not at all (write_json_file).
void write_plan_file(const std::string& path, const Json& json) {
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    fs::create_directories(parent, ec);
    if (ec) {
      throw ConfigError(fmt::format("--out: cannot create directory '{}' for '{}': {}",
                                    parent.string(), path, ec.message()));
    }
  }
  write_json_file(path, json);
}

int run_plan(const PlanOptions& options, std::ostream& out) {
  const Inputs inputs = load_inputs(options.specs);
  if (options.tokens > 0) return run_sizing(options, inputs, out);
  PlannerOptions planner = planner_options(options, inputs);
  planner.gpus = options.gpus;
  const PlanSearchResult result = search_plans(inputs.model, inputs.cluster, inputs.train, planner);
  return report_search(result, options, inputs, out);
}

}  // namespace

PlannerOptions planner_options(const PlanOptions& options, const Inputs& inputs) {
  PlannerOptions planner;
  planner.top_k = options.top;
  planner.allow_tp_across_nodes = options.allow_tp_across_nodes;
  planner.profile = inputs.profile_ptr();
  return planner;
}

int report_search(const PlanSearchResult& result, const PlanOptions& options, const Inputs& inputs,
                  std::ostream& out) {
  if (!options.out.empty() && !result.top.empty()) {
    write_plan_file(options.out, plan_file_json(result.top.front(), options, inputs.profile));
  }
  std::pair<std::int64_t, std::int64_t> nearest{0, 0};
  if (result.no_legal_factorisation()) {
    nearest = nearest_legal_counts(inputs.model, inputs.cluster, inputs.train, result.gpus,
                                   inputs.cluster.total_gpus(),
                                   degree_rules(planner_options(options, inputs), inputs.cluster));
  }
  if (options.json) {
    Json json = search_json(result, options, inputs.profile);
    if (result.no_legal_factorisation()) {
      json["no_legal_factorisation"] = true;
      json["nearest_legal_gpus"] = Json::array();
      for (std::int64_t g : {nearest.first, nearest.second}) {
        if (g > 0) json["nearest_legal_gpus"].push_back(g);
      }
    }
    out << json.dump(2) << "\n";
  } else {
    out << fmt::format("model {} ({} parameters) on {} of {} of {}, global batch {}, {}\n",
                       inputs.model.name,
                       count_label(static_cast<double>(inputs.model.total_params())), result.gpus,
                       plural(inputs.cluster.total_gpus(), "GPU"), inputs.cluster.name,
                       inputs.train.global_batch, to_string(inputs.train.precision));
    print_counts(out, result);
    if (result.no_legal_factorisation()) {
      out << no_legal_factorisation_line(result.dropped, result.gpus, nearest.first,
                                         nearest.second)
          << "\n";
    } else if (result.top.empty()) {
      print_infeasible(out, result, inputs);
    } else {
      print_table(out, result, inputs.model);
      const ScoredPlan& best = result.top.front();
      out << "#1 " << lever_line(plan_levers(inputs.model, inputs.cluster, inputs.train, best.plan,
                                             inputs.profile_ptr(), CostModelOptions{}),
                                 best.prediction.tokens_per_s)
          << "\n";
      if (!options.out.empty()) out << fmt::format("wrote {}\n", options.out);
    }
    out << inputs.profile.line() << "\n";
  }
  if (result.no_legal_factorisation()) return kExitNoLegalFactorisation;
  return result.top.empty() ? kExitDoesNotFit : 0;
}

void add_plan_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<PlanOptions>();
  CLI::App* command = app.add_subcommand(
      "plan", "Search the plans of a model on a cluster and rank those that fit by throughput; "
              "with --tokens and a deadline, find the fewest GPUs that meet it");
  add_spec_options(*command, options->specs);
  CLI::Option* gpus =
      command->add_option("--gpus", options->gpus, "GPUs to use (default: the whole cluster)")
          ->check(CLI::PositiveNumber);
  command->add_option("--top", options->top, "plans to show")->check(CLI::PositiveNumber);
  command->add_option("--out", options->out,
                      "write the best plan (with its prediction) here; parent directories are "
                      "created");
  command->add_flag("--json", options->json, "print the result as JSON");
  command->add_flag("--allow-tp-across-nodes", options->allow_tp_across_nodes,
                    "also try tensor parallelism wider than a node");
  CLI::Option* tokens = command->add_option(
      "--tokens", options->tokens,
      "size the cluster: tokens to train on (e.g. 300e9); needs --days or --deadline-hours")
      ->check(CLI::PositiveNumber);
  CLI::Option* days = command->add_option("--days", options->days, "deadline in days, with --tokens")
                          ->check(CLI::PositiveNumber);
  CLI::Option* hours = command->add_option("--deadline-hours", options->deadline_hours,
                                           "deadline in hours, with --tokens")
                           ->check(CLI::PositiveNumber);
  CLI::Option* max_gpus = command->add_option(
      "--max-gpus", options->max_gpus,
      "with --tokens: the most GPUs to try (default: the cluster's, after --nodes)")
      ->check(CLI::PositiveNumber);
  days->excludes(hours);
  days->needs(tokens);
  hours->needs(tokens);
  max_gpus->needs(tokens);
  tokens->excludes(gpus);
  command->footer(
      "Exit codes: 0 a plan (or, with --tokens, a GPU count that meets the deadline); 2 bad "
      "input; 3 no plan fits in memory (the most common reason and the closest plan are "
      "named); 5 the GPU count has no legal factorisation t x p x d (the nearest counts that "
      "have one are named); 6 with --tokens, no count up to the maximum meets the deadline.");
  command->callback([options, &context] {
    if (options->tokens > 0 && options->days == 0 && options->deadline_hours == 0) {
      throw ConfigError("--tokens: needs a deadline, --days D or --deadline-hours H");
    }
    context.exit_code = run_plan(*options, *context.out);
  });
}

}  // namespace strata::cli
