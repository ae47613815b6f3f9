// Collective microbenchmarks over a Communicator (the MPI one on the CPU backend): times
// all-reduce, reduce-scatter, all-gather and point-to-point at several message sizes and
// fits each to the time model's alpha-beta form (cost_model/pricing/collectives.h)
//   t(bytes) = latency_s + bytes * bus_factor(op, n) / bus_bandwidth_bytes_per_s
// where `bytes` is the whole buffer, nccl-tests' convention: the all-reduced vector, the
// reduce-scatter input (n x the output), the all-gather output (n x the input), one message.
//
// Every rank of the group calls measure_collectives with the same arguments; the fits are
// the same on every rank (each repeat's time is the slowest rank's, shared by all-reduce
// max). p2p is a ping-pong between ranks 0 and 1 (half the round trip), measured only in a
// 2-rank group: with more ranks than cores the idle ranks would compete for the CPU.
//
// Deliberately not here: launching the ranks (the CLI relaunches itself under mpirun), which
// ranks of a job across nodes form the group of each link (node_collectives.h): the group is
// given, and the fits are labelled with the link the caller says it spans.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cost_model/pricing/collectives.h"
#include "cost_model/specs/profile.h"
#include "executor/comm/communicator.h"

namespace strata::calibrate {

struct AlphaBeta {
  double latency_s = 0;
  double bus_bandwidth_bytes_per_s = 0;
};

// Least-squares line t = a + b x through (x = bus bytes, t = seconds) points, weighted by
// 1/t^2 (relative residuals, so small messages pin the latency), giving latency a (clamped
// to >= 0) and bandwidth 1/b. When noise makes the slope non-positive
// the bandwidth falls back to the largest point's x / t and the latency to the smallest
// point's t. std::invalid_argument with fewer than two points or distinct x values.
AlphaBeta fit_alpha_beta(const std::vector<std::pair<double, double>>& bus_bytes_seconds);

struct CollectiveBenchOptions {
  std::vector<std::int64_t> buffer_floats = {1 << 10, 1 << 14, 1 << 18, 1 << 20};
  int repeats = 5;
  // Calls per repeat: enough that a repeat moves about this many bytes (at least 1 call).
  double bytes_per_repeat = 16.0 * (1 << 20);
  // The link the group's traffic crosses, written into each fit: inside one node, or one
  // rank per node across the network.
  LinkClass link = LinkClass::kIntraNode;
};

// Returns one CollectiveFit per op (options.link, ranks = comm.size()): all_reduce,
// reduce_scatter, all_gather, and p2p when comm.size() == 2. Buffer sizes are rounded down
// to a multiple of the group size. `progress(done, total)` is called on rank 0 only after
// each (op, size) point (may be empty).
std::vector<CollectiveFit> measure_collectives(
    Communicator& comm, const CollectiveBenchOptions& options,
    const std::function<void(int, int)>& progress = {});

// The p2p fit alone, of a 2-rank group (std::invalid_argument otherwise): one hop of a ring
// across nodes (node_collectives.h).
CollectiveFit measure_p2p(Communicator& comm, const CollectiveBenchOptions& options);

}  // namespace strata::calibrate
