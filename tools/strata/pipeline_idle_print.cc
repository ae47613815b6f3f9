// Printing a pipeline's idle split (see pipeline_idle_print.h).
#include "tools/strata/pipeline_idle_print.h"

#include <numeric>

#include <fmt/format.h>

#include "tools/strata/inputs.h"

namespace strata::cli {

void print_pipeline_idle(std::ostream& out, const PipelineIdle& idle, double step_s,
                         bool each_stage) {
  const auto& busy = idle.stage_busy_s;
  const double mean = std::accumulate(busy.begin(), busy.end(), 0.0) / static_cast<double>(busy.size());
  const double most = busy[static_cast<std::size_t>(idle.busiest_rank)];
  out << fmt::format("  of it, fill and drain {:.4f} s ({}), waiting on the busiest stage "
                     "{:.4f} s ({}); critical rank: pp_rank {} (its step ends last)\n",
                     idle.fill_drain_s, percent(idle.fill_drain_s / step_s), idle.imbalance_s,
                     percent(idle.imbalance_s / step_s), idle.critical_rank);
  out << fmt::format("stage busy (compute per step): busiest pp_rank {} {:.4f} s, {} over the "
                     "mean {:.4f} s\n",
                     idle.busiest_rank, most, percent(mean > 0 ? most / mean - 1 : 0), mean);
  if (!each_stage) return;
  std::string row;
  for (std::size_t r = 0; r < busy.size(); ++r) {
    row += fmt::format("{}{}: {:.4f}", row.empty() ? "  " : ", ", r, busy[r]);
    if ((r + 1) % 8 == 0 || r + 1 == busy.size()) {
      out << row << "\n";
      row.clear();
    }
  }
}

}  // namespace strata::cli
