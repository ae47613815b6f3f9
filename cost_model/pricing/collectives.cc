// Alpha-beta collective costs (see collectives.h for the model and its sources).
#include "cost_model/pricing/collectives.h"

#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"

namespace strata {

std::string to_string(LinkClass link) {
  return link == LinkClass::kIntraNode ? "intra_node" : "inter_node";
}

std::string to_string(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllReduce: return "all_reduce";
    case CollectiveOp::kAllGather: return "all_gather";
    case CollectiveOp::kReduceScatter: return "reduce_scatter";
    case CollectiveOp::kP2p: return "p2p";
  }
  return "unknown";
}

double bus_factor(CollectiveOp op, std::int64_t ranks) {
  if (op == CollectiveOp::kP2p) return 1.0;
  if (ranks <= 1) return 0.0;
  const double n = static_cast<double>(ranks);
  // nccl-tests PERFORMANCE.md: all-reduce moves 2(n-1)/n of the buffer through each rank's
  // link (reduce-scatter then all-gather); all-gather and reduce-scatter move (n-1)/n.
  return op == CollectiveOp::kAllReduce ? 2.0 * (n - 1.0) / n : (n - 1.0) / n;
}

std::int64_t ring_steps(CollectiveOp op, std::int64_t ranks) {
  if (op == CollectiveOp::kP2p) return 1;
  if (ranks <= 1) return 0;
  return op == CollectiveOp::kAllReduce ? 2 * (ranks - 1) : ranks - 1;
}

CollectiveTime collective_time(CollectiveOp op, double bytes, std::int64_t ranks,
                               const LinkRate& rate) {
  if (bytes < 0 || ranks < 1) {
    throw ConfigError(fmt::format("{}: expected bytes >= 0 and ranks >= 1, got {} bytes over {}",
                                  to_string(op), bytes, ranks));
  }
  CollectiveTime time;
  // Before the bandwidth check: a one-GPU node has no intra-node link (cluster_spec.h) and
  // its one-rank groups move nothing.
  if (bytes == 0 || (op != CollectiveOp::kP2p && ranks == 1)) return time;
  if (!(rate.bandwidth_bytes_per_s > 0)) {
    throw ConfigError(fmt::format("{}: link bandwidth must be > 0 bytes/s, got {}", to_string(op),
                                  rate.bandwidth_bytes_per_s));
  }
  time.bus_bytes = bytes * bus_factor(op, ranks);
  time.latency_s = static_cast<double>(ring_steps(op, ranks)) * rate.latency_s;
  time.bandwidth_s = time.bus_bytes / rate.bandwidth_bytes_per_s;
  return time;
}

LinkClass group_link(const ClusterSpec& cluster, std::int64_t ranks, std::int64_t stride,
                     std::int64_t world_size) {
  if (ranks <= 1 || world_size <= cluster.gpus_per_node) return LinkClass::kIntraNode;
  return cluster.gpus_per_node % (ranks * stride) == 0 ? LinkClass::kIntraNode
                                                       : LinkClass::kInterNode;
}

LinkRate link_rate(const ClusterSpec& cluster, LinkClass link, CollectiveOp op,
                   std::int64_t ranks, const Profile* profile) {
  const LinkSpec& spec = link == LinkClass::kIntraNode ? cluster.intra_node : cluster.inter_node;
  LinkRate rate{spec.bandwidth_bytes_per_s, spec.latency_s};
  if (profile == nullptr) return rate;
  const CollectiveFit* best = nullptr;
  for (const CollectiveFit& fit : profile->collectives) {
    if (fit.op != to_string(op) || fit.link != to_string(link) ||
        !(fit.bus_bandwidth_bytes_per_s > 0)) {
      continue;
    }
    // Closest rank count; ties go to the first listed (deterministic).
    if (best == nullptr || std::llabs(fit.ranks - ranks) < std::llabs(best->ranks - ranks)) {
      best = &fit;
    }
  }
  if (best != nullptr) {
    rate.bandwidth_bytes_per_s = best->bus_bandwidth_bytes_per_s;
    // The fit's latency is per collective at best->ranks ranks; spread it over its ring steps
    // so that other rank counts scale with their own step count.
    const std::int64_t steps = ring_steps(op, best->ranks);
    rate.latency_s = steps > 0 ? best->latency_s / static_cast<double>(steps) : best->latency_s;
  }
  // What measured runs taught the profile (profile_feedback.h): both terms at once.
  if (profile->comm_time_scale > 0) {
    rate.latency_s *= profile->comm_time_scale;
    rate.bandwidth_bytes_per_s /= profile->comm_time_scale;
  }
  return rate;
}

CollectiveTime group_collective_time(const ClusterSpec& cluster, const Profile* profile,
                                     CollectiveOp op, double bytes, std::int64_t ranks,
                                     std::int64_t stride, std::int64_t world_size) {
  const LinkClass link = group_link(cluster, ranks, stride, world_size);
  return collective_time(op, bytes, ranks, link_rate(cluster, link, op, ranks, profile));
}

}  // namespace strata
