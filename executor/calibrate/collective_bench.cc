// Collective timing and alpha-beta fits; see collective_bench.h.
#include "executor/calibrate/collective_bench.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "cost_model/pricing/collectives.h"
#include "executor/calibrate/timing.h"

namespace strata::calibrate {

AlphaBeta fit_alpha_beta(const std::vector<std::pair<double, double>>& points) {
  if (points.size() < 2) throw std::invalid_argument("fit_alpha_beta: need >= 2 points");
  // Weighted least squares with weights 1/t^2 (relative residuals): message sizes span four
  // orders of magnitude, and an unweighted fit lets the largest messages' noise decide the
  // intercept, which then says nothing about the latency.
  double W = 0, X = 0, T = 0, XX = 0, XT = 0;
  for (const auto& [x, t] : points) {
    const double w = t > 0 ? 1.0 / (t * t) : 1.0;
    W += w, X += w * x, T += w * t, XX += w * x * x, XT += w * x * t;
  }
  const double denominator = W * XX - X * X;
  if (!(denominator > 1e-12 * W * XX)) {
    throw std::invalid_argument("fit_alpha_beta: need distinct sizes");
  }
  const double slope = (W * XT - X * T) / denominator;
  AlphaBeta fit;
  if (slope > 0) {
    fit.bus_bandwidth_bytes_per_s = 1.0 / slope;
    fit.latency_s = std::max(0.0, (T - slope * X) / W);
  } else {
    const auto [min_it, max_it] = std::minmax_element(
        points.begin(), points.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    fit.bus_bandwidth_bytes_per_s = max_it->first / max_it->second;
    fit.latency_s = min_it->second;
  }
  return fit;
}

namespace {

// Seconds per call of fn on the slowest rank, median over repeats (same on every rank).
double group_seconds(Communicator& comm, const std::function<void()>& fn, int calls,
                     int repeats) {
  fn();  // warm-up: connection setup, first-touch of buffers
  std::vector<double> per_call;
  for (int r = 0; r < repeats; ++r) {
    comm.barrier();
    const double t0 = now_s();
    for (int i = 0; i < calls; ++i) fn();
    double s = (now_s() - t0) / calls;
    comm.all_reduce_max(&s, 1);
    per_call.push_back(s);
  }
  return median(std::move(per_call));
}

// One op's fit over the group: timed at each buffer size, fitted to alpha-beta.
CollectiveFit measure_op(Communicator& comm, CollectiveOp op, const CollectiveBenchOptions& options,
                         const std::function<void()>& point_done) {
  const int size = comm.size();
  std::int64_t largest = 0;
  for (std::int64_t f : options.buffer_floats) largest = std::max(largest, f);
  // Zeros: an in-place all-reduce repeated a thousand times keeps them bounded (and the
  // arithmetic cost of adding zeros is that of adding anything else).
  std::vector<float> in(static_cast<std::size_t>(largest), 0.0f);
  std::vector<float> out(static_cast<std::size_t>(largest), 0.0f);
  std::vector<std::pair<double, double>> points;
  for (std::int64_t floats : options.buffer_floats) {
    const std::int64_t per_rank = floats / size;  // a rank's share of the buffer
    if (per_rank < 1) continue;
    const std::int64_t buffer = per_rank * size;
    const double bytes = static_cast<double>(buffer) * sizeof(float);
    const int calls = static_cast<int>(
        std::clamp(std::floor(options.bytes_per_repeat / bytes), 1.0, 1000.0));
    std::function<void()> fn;
    switch (op) {
      case CollectiveOp::kAllReduce:
        fn = [&] { comm.all_reduce_sum(in.data(), buffer); };
        break;
      case CollectiveOp::kReduceScatter:
        fn = [&] { comm.reduce_scatter_sum(in.data(), out.data(), per_rank); };
        break;
      case CollectiveOp::kAllGather:
        fn = [&] { comm.all_gather(in.data(), out.data(), per_rank); };
        break;
      case CollectiveOp::kP2p:
        // Ping-pong 0 <-> 1; one call is a round trip, so a one-way message is half.
        fn = [&] {
          if (comm.rank() == 0) {
            comm.send(in.data(), buffer, 1, 0).wait();
            comm.recv(out.data(), buffer, 1, 1);
          } else if (comm.rank() == 1) {
            comm.recv(out.data(), buffer, 0, 0);
            comm.send(in.data(), buffer, 0, 1).wait();
          }
        };
        break;
    }
    double seconds = group_seconds(comm, fn, calls, options.repeats);
    if (op == CollectiveOp::kP2p) seconds /= 2.0;
    points.emplace_back(bytes * bus_factor(op, size), seconds);
    if (point_done) point_done();
  }
  const AlphaBeta ab = fit_alpha_beta(points);
  CollectiveFit fit;
  fit.op = to_string(op);
  fit.link = to_string(options.link);
  fit.ranks = size;
  fit.latency_s = ab.latency_s;
  fit.bus_bandwidth_bytes_per_s = ab.bus_bandwidth_bytes_per_s;
  return fit;
}

}  // namespace

std::vector<CollectiveFit> measure_collectives(Communicator& comm,
                                               const CollectiveBenchOptions& options,
                                               const std::function<void(int, int)>& progress) {
  const int size = comm.size();
  if (size < 2) throw std::invalid_argument("measure_collectives: need a group of >= 2 ranks");
  std::vector<CollectiveOp> ops = {CollectiveOp::kAllReduce, CollectiveOp::kReduceScatter,
                                   CollectiveOp::kAllGather};
  if (size == 2) ops.push_back(CollectiveOp::kP2p);
  const int total = static_cast<int>(ops.size() * options.buffer_floats.size());
  int done = 0;
  const auto point_done = [&] {
    if (progress && comm.rank() == 0) progress(++done, total);
  };
  std::vector<CollectiveFit> fits;
  for (CollectiveOp op : ops) fits.push_back(measure_op(comm, op, options, point_done));
  return fits;
}

CollectiveFit measure_p2p(Communicator& comm, const CollectiveBenchOptions& options) {
  if (comm.size() != 2) throw std::invalid_argument("measure_p2p: need a group of 2 ranks");
  return measure_op(comm, CollectiveOp::kP2p, options, {});
}

}  // namespace strata::calibrate
