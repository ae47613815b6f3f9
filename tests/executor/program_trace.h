// Test helper: a rank's Program flattened the way the engine's trace reports it (each pass,
// then its body's ops; the tail last), and a measured trace read back in the same form, so a
// test can check that the engine ran exactly the Program.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost_model/program/chrome_trace.h"
#include "cost_model/program/program.h"

namespace strata::testing_support {

struct TracedOp {
  std::string name;
  std::int64_t micro_batch = -1, chunk = -1;
  std::string unit;
  bool operator==(const TracedOp&) const = default;
};

// with_carried: the tail's carried ops too (program.h, "carried"); a step's trace has them
// (the last step's) unless the engine carried and it follows no carrying step
// (Engine::carries_host_steps).
inline std::vector<TracedOp> program_order(const RankProgram& rank, bool with_carried = true) {
  std::vector<TracedOp> out;
  const auto unit = [&](std::int32_t u) {
    return u >= 0 ? rank.units[static_cast<std::size_t>(u)].name : std::string();
  };
  const std::size_t end = with_carried || !rank.carries() ? rank.ops.size()
                                                          : static_cast<std::size_t>(rank.carried_begin);
  for (std::size_t i = 0; i < end; ++i) {
    const ProgramOp& op = rank.ops[i];
    out.push_back({to_string(op.kind), op.micro_batch, op.chunk, unit(op.unit)});
    if (!op.is_pass()) continue;
    for (const ProgramOp& b : rank.bodies[static_cast<std::size_t>(op.body)].ops) {
      out.push_back({to_string(b.kind), op.micro_batch, op.chunk, unit(b.unit)});
    }
  }
  return out;
}

inline std::vector<TracedOp> measured_order(const std::vector<TraceEvent>& events) {
  std::vector<TracedOp> out;
  for (const TraceEvent& e : events) {
    TracedOp x;
    x.name = e.name;
    if (e.args.contains("micro_batch")) x.micro_batch = e.args["micro_batch"].get<std::int64_t>();
    if (e.args.contains("chunk")) x.chunk = e.args["chunk"].get<std::int64_t>();
    if (e.args.contains("unit")) x.unit = e.args["unit"].get<std::string>();
    out.push_back(x);
  }
  return out;
}

}  // namespace strata::testing_support
