// `strata plot`'s drawing, shared with `strata run --plot`: tools/plot_run.py run on a run
// directory with Debian's python3-matplotlib (plot.cc says which interpreter and script).
#pragma once

#include <string>

namespace strata::cli {

// 0 when the interpreter can import matplotlib; otherwise the script's exit code (2) after
// it printed which package to install. For a run that will be drawn: asked before it trains.
int check_plot_available();

// Draws run_dir into out_dir (loss.png, step_parts.png, memory.png, timeline.png), with
// `predicted` (a prediction or plan file; "" for none) beside the measurement. The script's
// exit code. The inputs are the caller's to check.
int draw_run(const std::string& run_dir, const std::string& predicted, const std::string& out_dir);

}  // namespace strata::cli
