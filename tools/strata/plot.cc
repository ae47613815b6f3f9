// `strata plot RUN_DIR [--predicted FILE] [--out DIR]`: pictures of a run (loss, step time by
// part, memory by kind per rank, the timeline of its trace), drawn by tools/plot_run.py with
// Debian's python3-matplotlib. This file checks the inputs before anything is started, finds
// the interpreter and the script, and hands back the script's exit code; what is drawn, and
// how, lives in the script alone.
#include <CLI/CLI.hpp>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"
#include "tools/strata/commands.h"
#include "tools/strata/plot.h"
#include "tools/strata/report_files.h"

extern char** environ;

namespace strata::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kScript = "tools/plot_run.py";

struct PlotOptions {
  std::string run_dir;
  std::string predicted;
  std::string out;  // default: the run directory
};

// RUN_DIR must hold a run's report.json and --predicted a prediction: ConfigError (exit 2)
// naming the path and what was expected, before any picture is started.
void check_inputs(const PlotOptions& options) {
  std::error_code ec;
  if (!fs::is_directory(options.run_dir, ec)) {
    throw ConfigError(fmt::format("RUN_DIR '{}' is not a directory: expected the --out "
                                  "directory of a `strata run`",
                                  options.run_dir));
  }
  const fs::path report = fs::path(options.run_dir) / "report.json";
  if (!fs::is_regular_file(report, ec)) {
    throw ConfigError(fmt::format("RUN_DIR '{}' has no report.json: expected the --out "
                                  "directory of a `strata run`",
                                  options.run_dir));
  }
  if (load_report_file(report.string()).is_prediction() && !options.predicted.empty()) {
    // A `strata simulate --out` directory is drawn alone; a prediction beside a prediction
    // is `strata diff`'s.
    throw ConfigError(fmt::format("--predicted: {} is already a prediction (`strata simulate "
                                  "--out`), drawn alone; to set two plans side by side use "
                                  "`strata diff`",
                                  report.string()));
  }
  if (!options.predicted.empty()) {
    if (!fs::is_regular_file(options.predicted, ec)) {
      throw ConfigError(fmt::format("--predicted: file '{}' does not exist", options.predicted));
    }
    if (!load_report_file(options.predicted).is_prediction()) {
      throw ConfigError(fmt::format("--predicted: '{}' is a run's measurement: expected "
                                    "`strata predict --json` output or a `strata plan --out` "
                                    "file",
                                    options.predicted));
    }
  }
}

// tools/plot_run.py: the first one found walking up from the executable (a build directory
// inside the source tree, or an install that keeps tools/ beside bin/), else the source
// tree's (compiled in). ConfigError when neither has it.
std::string plot_script() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (fs::path dir = exe.parent_path(); !dir.empty(); dir = dir.parent_path()) {
      if (fs::is_regular_file(dir / kScript, ec)) return (dir / kScript).string();
      if (dir == dir.root_path()) break;
    }
  }
  const fs::path source = fs::path(STRATA_SOURCE_TREE) / kScript;
  if (fs::is_regular_file(source, ec)) return source.string();
  throw ConfigError(fmt::format("cannot find {} above {} or in {}: `strata plot` needs the "
                                "strata source tree's tools/ directory",
                                kScript, exe.parent_path().string(), STRATA_SOURCE_TREE));
}

// $STRATA_PYTHON, else Debian's /usr/bin/python3 (where python3-matplotlib installs, whatever
// python3 comes first on PATH: a pyenv or venv one rarely has it), else python3 on PATH.
std::string python() {
  if (const char* env = std::getenv("STRATA_PYTHON"); env != nullptr && *env != '\0') return env;
  if (::access("/usr/bin/python3", X_OK) == 0) return "/usr/bin/python3";
  return "python3";
}

// Runs argv to its end with this process's stdin/stdout/stderr; its exit code, or 128 +
// the signal that ended it (the shell's convention, as `run` reports SIGINT as 130).
int run_to_end(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::cout.flush();
  pid_t pid = 0;
  if (const int err = ::posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ);
      err != 0) {
    throw ConfigError(fmt::format("cannot start {} ({}): `strata plot` needs python3 with "
                                  "matplotlib (Debian: apt-get install python3-matplotlib; "
                                  "or set STRATA_PYTHON)",
                                  argv[0], std::strerror(err)));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      throw SystemError(fmt::format("waitpid for {}: {}", argv[0], std::strerror(errno)));
    }
  }
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

int run_plot(const PlotOptions& options) {
  check_inputs(options);
  return draw_run(options.run_dir, options.predicted,
                  options.out.empty() ? options.run_dir : options.out);
}

}  // namespace

int check_plot_available() { return run_to_end({python(), plot_script(), "--check"}); }

int draw_run(const std::string& run_dir, const std::string& predicted, const std::string& out_dir) {
  std::vector<std::string> argv{python(), plot_script(), run_dir, "--out", out_dir};
  if (!predicted.empty()) {
    argv.push_back("--predicted");
    argv.push_back(predicted);
  }
  return run_to_end(argv);
}

void add_plot_command(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<PlotOptions>();
  CLI::App* command = app.add_subcommand(
      "plot", "Draw a run (or a prediction: `strata simulate --out`) as PNGs: loss (training "
              "and validation), step time by part beside the prediction, memory by kind per "
              "rank, the timeline of its trace");
  command->add_option("RUN_DIR", options->run_dir,
                      "the --out directory of a `strata run`, or of a `strata simulate` (the "
                      "prediction's pictures, from the simulated trace)")
      ->required();
  command->add_option("--predicted", options->predicted,
                      "a prediction (`predict --json`) or plan file (`plan --out`) to draw "
                      "beside the measurement");
  command->add_option("--out", options->out,
                      "directory for loss.png, step_parts.png, memory.png and timeline.png "
                      "(default: RUN_DIR)");
  command->callback([options, &context] { context.exit_code = run_plot(*options); });
}

}  // namespace strata::cli
