// The split of a pipeline's idle time (cost_model/specs/step_report.h: PipelineIdle) as `predict`
// and `simulate` print it: the critical rank's bubble as fill and drain plus waiting on the
// busiest stage, and each stage's busy time.
#pragma once

#include <ostream>

#include "cost_model/specs/step_report.h"

namespace strata::cli {

// `each_stage`: also each stage's busy time, eight to a line (simulate prints its own rows).
void print_pipeline_idle(std::ostream& out, const PipelineIdle& idle, double step_s,
                         bool each_stage);

}  // namespace strata::cli
