// `strata`: wires the subcommands into one CLI11 app and is the single place where errors
// become one line on stderr and an exit code (see commands.h for the codes). Nothing else
// here: each subcommand lives in its own file.
#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>

#include "cost_model/specs/errors.h"
#include "kernels/cpu/isa.h"
#include "tools/strata/commands.h"
#include "tools/strata/suggest.h"

int main(int argc, char** argv) {
  CLI::App app{"strata: plan, simulate and run the training of large transformer models", "strata"};
  app.require_subcommand(1);
  app.footer(
      "Exit codes: 0 ok; 2 bad input or a failed system call; 3 the plan (or every plan) does "
      "not fit in memory; 4 `run`: a rank waited past --comm-timeout-s; 5 `plan`: the GPU count "
      "has no legal factorisation t x p x d; 6 `plan --tokens`: no GPU count meets the "
      "deadline; 130, 143 `run` stopped by SIGINT, SIGTERM (the steps done are reported).");
  strata::cli::CommandContext context{&std::cout, 0};
  strata::cli::add_plan_command(app, context);
  strata::cli::add_predict_command(app, context);
  strata::cli::add_simulate_command(app, context);
  strata::cli::add_compare_command(app, context);
  strata::cli::add_calibrate_command(app, context);
  strata::cli::add_run_command(app, context);
  strata::cli::add_select_command(app, context);
  strata::cli::add_data_command(app, context);
  strata::cli::add_cluster_command(app, context);
  strata::cli::add_diff_command(app, context);
  strata::cli::add_plot_command(app, context);

  const auto fail = [](const char* kind, const std::exception& e) {
    std::cerr << "strata: " << kind << e.what() << "\n";
    return 2;
  };
  try {
    if (const std::string unknown = strata::cli::unknown_subcommand_message(app, argc, argv);
        !unknown.empty()) {
      throw strata::ConfigError(unknown);
    }
    // A bad STRATA_CPU_ISA is one clear message before any work, not a kernel's mid-run.
    strata::kernels::cpu::check_isa_environment();
    app.parse(argc, argv);
    return context.exit_code;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // CLI11 names a mistyped flag only as "not expected"; say what it may have meant.
    if (const std::string unknown = strata::cli::unknown_flags_message(app, argc, argv);
        !unknown.empty()) {
      std::cerr << "strata: " << unknown << "\n";
      return 2;
    }
    return fail("", e);
  } catch (const strata::ConfigError& e) {
    return fail("", e);
  } catch (const strata::InfeasiblePlan& e) {
    return fail("infeasible plan: ", e);
  } catch (const strata::OutOfMemory& e) {
    return fail("out of memory: ", e);
  } catch (const strata::SystemError& e) {
    return fail("system error: ", e);
  } catch (const std::exception& e) {
    // A kernel's argument check or a CUDA failure that no layer above turned into one of
    // the above: still a message and exit code 2, never an abort.
    return fail("error: ", e);
  }
}
