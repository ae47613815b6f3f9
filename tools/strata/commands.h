// The subcommands of the `strata` CLI. Each file (plan.cc, predict.cc, simulate.cc) adds
// itself to the CLI11 app with add_<name>_command, binding its options to a struct it owns;
// main.cc only wires them and is the one place exceptions are caught.
//
// Exit codes (main.cc): 0 success; 2 bad input (ConfigError, InfeasiblePlan for a given
// plan, a CLI usage error), OutOfMemory or a failed system call; 3 a plan, or every plan of
// a search, does not fit in the cluster's memory (the output says by how much); 4 a rank of
// `strata run` waited past --comm-timeout-s; 5 `strata plan`: the GPU count has no legal
// factorisation t x p x d (nothing was scored; the nearest counts with one are named); 6
// `strata plan --tokens`: no GPU count up to the maximum meets the deadline; 128 + signal
// (130, 143) a run stopped by SIGINT or SIGTERM, after writing the report of the steps done.
// The text of main.cc's --help footer and the README's "Exit codes" say the same.
#pragma once

#include <ostream>

#include "tools/strata/cli_fwd.h"

namespace strata::cli {

inline constexpr int kExitDoesNotFit = 3;
// `strata run`: a rank waited past --comm-timeout-s in one MPI call (a hung or stopped peer).
inline constexpr int kExitCommTimeout = 4;
inline constexpr int kExitNoLegalFactorisation = 5;
inline constexpr int kExitMissesDeadline = 6;

// What a subcommand's callback hands back to main(): its exit code and where it prints.
struct CommandContext {
  std::ostream* out = nullptr;
  int exit_code = 0;
};

void add_plan_command(CLI::App& app, CommandContext& context);
void add_predict_command(CLI::App& app, CommandContext& context);
void add_simulate_command(CLI::App& app, CommandContext& context);
void add_compare_command(CLI::App& app, CommandContext& context);
void add_calibrate_command(CLI::App& app, CommandContext& context);
void add_run_command(CLI::App& app, CommandContext& context);
void add_select_command(CLI::App& app, CommandContext& context);
void add_data_command(CLI::App& app, CommandContext& context);
void add_cluster_command(CLI::App& app, CommandContext& context);
void add_diff_command(CLI::App& app, CommandContext& context);
void add_plot_command(CLI::App& app, CommandContext& context);

}  // namespace strata::cli
