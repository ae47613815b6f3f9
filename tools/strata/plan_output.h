// What `strata plan` prints and writes for one search (plan.cc) and for each count of a sizing
// (sizing.cc): the plan file's JSON, the counts line, the table of plans, the answer when no
// plan fits (memory) or none exists (no legal factorisation), and the --out file.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "cost_model/specs/json_reader.h"
#include "planner/planner.h"
#include "tools/strata/inputs.h"

namespace strata::cli {

struct PlanOptions {
  SpecOptions specs;
  std::int64_t gpus = 0;
  std::int64_t top = 5;
  std::string out;
  bool json = false;
  bool allow_tp_across_nodes = false;
  // Sizing (sizing.cc): --tokens with --days or --deadline-hours, --max-gpus.
  double tokens = 0;
  double days = 0;
  double deadline_hours = 0;
  std::int64_t max_gpus = 0;
};

// The planner's options of `strata plan` (a search, or each search of a sizing).
PlannerOptions planner_options(const PlanOptions& options, const Inputs& inputs);

// A plan file: the plan's keys plus its prediction (with the profile that priced it) and the
// names it was made for.
Json plan_file_json(const ScoredPlan& scored, const PlanOptions& options,
                    const ProfileChoice& profile);
// The search as JSON (`plan --json`).
Json search_json(const PlanSearchResult& result, const PlanOptions& options,
                 const ProfileChoice& profile);
// "no legal factorisation: ..." with the rules and the nearest legal counts, one line.
std::string no_legal_factorisation_line(const std::map<std::string, std::int64_t>& rule_drops,
                                        std::int64_t gpus, std::int64_t below, std::int64_t above);

// Writes --out (parents created) when set and a plan fits; prints the search as `plan` does.
// Returns the exit code: 0, kExitDoesNotFit or kExitNoLegalFactorisation.
int report_search(const PlanSearchResult& result, const PlanOptions& options, const Inputs& inputs,
                  std::ostream& out);

// `plan --tokens`: the sizing (sizing.cc).
int run_sizing(const PlanOptions& options, const Inputs& inputs, std::ostream& out);

}  // namespace strata::cli
