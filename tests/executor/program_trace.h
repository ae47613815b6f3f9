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

inline std::vector<TracedOp> program_order(const RankProgram& rank) {
  std::vector<TracedOp> out;
  const auto unit = [&](std::int32_t u) {
    return u >= 0 ? rank.units[static_cast<std::size_t>(u)].name : std::string();
  };
  for (const ProgramOp& op : rank.ops) {
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
