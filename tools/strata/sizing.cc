// `strata plan --tokens N --days D` (or --deadline-hours H): the sizing of planner/sizing.h
// printed: the rate the deadline needs, each GPU count tried with its best plan's days,
// tokens/s and GPU-hours (or why it has none), the smallest count that meets the deadline,
// and then that count's search as `strata plan --gpus N` prints and writes it.
#include <algorithm>
#include <memory>
#include <vector>
#include <ostream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cost_model/specs/units.h"
#include "planner/sizing.h"
#include "tools/strata/commands.h"
#include "tools/strata/inputs.h"
#include "tools/strata/plan_output.h"

namespace strata::cli {
namespace {

constexpr double kSecondsPerDay = 86400.0;

double deadline_seconds(const PlanOptions& options) {
  return options.days > 0 ? options.days * kSecondsPerDay : options.deadline_hours * 3600.0;
}

// One line per count tried, in the order tried.
std::string try_line(const SizingTry& t, const SizingRequest& request, const ClusterSpec& cluster) {
  const std::string head = fmt::format("{:>6} {:>6}  ", t.gpus, t.gpus / cluster.gpus_per_node);
  if (!t.legal) {
    return head + no_legal_factorisation_line(t.rule_drops, t.gpus, t.nearest_legal_below,
                                              t.nearest_legal_above);
  }
  if (!t.fits()) {
    return head + fmt::format("no plan fits in memory (most common reason '{}')",
                              t.search->top_reason);
  }
  const Prediction& r = t.best().prediction;
  return head + fmt::format("{:>12.0f} {:>9.2f} {:>12.0f} {:>6}  {:<6} {}", r.tokens_per_s,
                            t.train_seconds(request.tokens) / kSecondsPerDay,
                            t.gpu_hours(request.tokens), percent(r.mfu),
                            t.meets ? "meets" : "misses", t.best().plan.label());
}

Json try_json(const SizingTry& t, const SizingRequest& request, const PlanOptions& options,
              const ProfileChoice& profile) {
  Json json{{"gpus", t.gpus}, {"legal", t.legal}, {"meets", t.meets}};
  if (!t.legal) {
    json["rule_drops"] = t.rule_drops;
    json["nearest_legal_gpus"] = Json::array();
    for (std::int64_t g : {t.nearest_legal_below, t.nearest_legal_above}) {
      if (g > 0) json["nearest_legal_gpus"].push_back(g);
    }
  } else if (!t.fits()) {
    json["top_reason"] = t.search->top_reason;
  } else {
    json["days"] = t.train_seconds(request.tokens) / kSecondsPerDay;
    json["tokens_per_s"] = t.best().prediction.tokens_per_s;
    json["gpu_hours"] = t.gpu_hours(request.tokens);
    json["plan"] = plan_file_json(t.best(), options, profile);
  }
  return json;
}

// The counts tried, fewest GPUs first (the search tries them out of order).
std::vector<SizingTry> by_gpus(std::vector<SizingTry> tries) {
  std::sort(tries.begin(), tries.end(),
            [](const SizingTry& a, const SizingTry& b) { return a.gpus < b.gpus; });
  return tries;
}

// When no count meets the deadline: how many GPUs would, and why that many.
std::string needed_clause(const SizingResult& sizing, const ClusterSpec& cluster) {
  if (sizing.needed_gpus == 0) return "";
  const std::int64_t nodes = sizing.needed_gpus / cluster.gpus_per_node;
  std::string why = "even at 100% MFU";
  if (sizing.needed_from) {
    const SizingTry& t = sizing.tries[*sizing.needed_from];
    why = fmt::format("at the {}-GPU plan's {:.0f} tokens/s a GPU, if more GPUs scaled as well",
                      t.gpus, t.best().prediction.tokens_per_s / static_cast<double>(t.gpus));
  }
  return fmt::format("; it needs at least {} ({}, {}): --nodes {} sizes up to them",
                     plural(sizing.needed_gpus, "GPU"), plural(nodes, "node"), why, nodes);
}

}  // namespace

int run_sizing(const PlanOptions& options, const Inputs& inputs, std::ostream& out) {
  SizingRequest request;
  request.tokens = options.tokens;
  request.deadline_s = deadline_seconds(options);
  request.max_gpus = options.max_gpus;
  const PlannerOptions planner = planner_options(options, inputs);
  const SizingResult sizing =
      size_for_deadline(inputs.model, inputs.cluster, inputs.train, planner, request);

  if (options.json) {
    Json json{{"tokens", request.tokens},
              {"deadline_s", request.deadline_s},
              {"required_tokens_per_s", sizing.required_tokens_per_s},
              {"max_gpus", sizing.max_gpus},
              {"peak_floor_gpus", sizing.peak_floor_gpus},
              {"profile", inputs.profile.name},
              {"tries", Json::array()}};
    for (const SizingTry& t : by_gpus(sizing.tries)) {
      json["tries"].push_back(try_json(t, request, options, inputs.profile));
    }
    if (sizing.needed_gpus > 0) json["needed_gpus"] = sizing.needed_gpus;
    json["smallest_gpus"] =
        sizing.smallest ? Json(sizing.tries[*sizing.smallest].gpus) : Json(nullptr);
    if (sizing.smallest && !options.out.empty()) {
      PlanOptions quiet = options;
      std::ostringstream ignored;
      report_search(*sizing.tries[*sizing.smallest].search, quiet, inputs, ignored);
      json["wrote"] = options.out;
    }
    out << json.dump(2) << "\n";
    return sizing.smallest ? 0 : kExitMissesDeadline;
  }

  out << fmt::format("sizing {} ({} parameters) on {} ({} per node, up to {}), global batch {}\n",
                     inputs.model.name,
                     count_label(static_cast<double>(inputs.model.total_params())),
                     inputs.cluster.name, plural(inputs.cluster.gpus_per_node, "GPU"),
                     plural(sizing.max_gpus, "GPU"), inputs.train.global_batch);
  const double days = request.deadline_s / kSecondsPerDay;
  out << fmt::format("{} tokens in {:.4g} day{} needs {:.0f} tokens/s", count_label(request.tokens),
                     days, days == 1 ? "" : "s", sizing.required_tokens_per_s);
  if (sizing.peak_floor_gpus > 0) {
    out << fmt::format("; fewer than {} cannot reach it even at 100% MFU",
                       plural(sizing.peak_floor_gpus, "GPU"));
  }
  out << "\n";
  out << fmt::format("{:>6} {:>6}  {:>12} {:>9} {:>12} {:>6}  {:<6} {}\n", "GPUs", "nodes",
                     "tokens/s", "days", "GPU-hours", "MFU", "", "best plan");
  for (const SizingTry& t : by_gpus(sizing.tries)) out << try_line(t, request, inputs.cluster) << "\n";
  if (!sizing.smallest) {
    out << fmt::format("no count up to {} meets the deadline{}\n", plural(sizing.max_gpus, "GPU"),
                       needed_clause(sizing, inputs.cluster));
    out << inputs.profile.line() << "\n";
    return kExitMissesDeadline;
  }
  const SizingTry& best = sizing.tries[*sizing.smallest];
  out << fmt::format("smallest count that meets the deadline: {} ({}), {:.2f} days, {:.0f} "
                     "GPU-hours\n\n",
                     plural(best.gpus, "GPU"), plural(best.gpus / inputs.cluster.gpus_per_node, "node"),
                     best.train_seconds(request.tokens) / kSecondsPerDay,
                     best.gpu_hours(request.tokens));
  return report_search(*best.search, options, inputs, out);
}

}  // namespace strata::cli
