// Communication primitives of the time model: alpha-beta costs of NCCL-style collectives
// and point-to-point transfers, and which link a process group uses.
//
// Model (nccl-tests' "bus bandwidth" convention, Jeaugey, nccl-tests doc/PERFORMANCE.md):
//   t = steps * alpha + bus_bytes / B,   bus_bytes = N * factor(n)
//   all-reduce      factor 2(n-1)/n,  2(n-1) ring steps
//   all-gather      factor (n-1)/n,   (n-1) ring steps   (N = the gathered, full size)
//   reduce-scatter  factor (n-1)/n,   (n-1) ring steps   (N = the full, unreduced size)
//   p2p             factor 1,         1 step
// B is the per-GPU, one-direction bandwidth of the group's link class: NVLink/NVSwitch when
// the whole group sits inside one node, otherwise the GPU's share of the node's network
// (a multi-node ring is paced by its slowest hop, and each GPU's traffic leaves the node
// through its own NIC: hierarchical NCCL collectives across nodes are limited by the
// inter-node per-GPU bandwidth). A Profile's measured CollectiveFit replaces alpha and B,
// and its comm_time_scale (fitted from measured runs, profile_feedback.h) multiplies both
// terms.
//
// Why the per-GPU share even for a group that holds every GPU of its nodes (a stride-1 DP
// group): NCCL's multi-channel rings could then in principle drive all of a node's NICs for
// one collective (up to 8 x 25 GB/s on Selene), but the published ZeRO-3 runs on such groups
// (GPT-3 175B, d = 384 and 1536, Narayanan et al. 2021 Table 2) imply at most ~21 GB/s per
// GPU of gathered bytes over the step, which the per-GPU share reproduces (time_model.h).
//
// Deliberately not here: what overlaps with what (time_model.h), tree algorithms, SHARP,
// congestion between concurrent groups.
#pragma once

#include <cstdint>
#include <string>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/profile.h"

namespace strata {

enum class LinkClass { kIntraNode, kInterNode };
std::string to_string(LinkClass link);  // "intra_node" | "inter_node" (Profile's names)

enum class CollectiveOp { kAllReduce, kAllGather, kReduceScatter, kP2p };
std::string to_string(CollectiveOp op);  // "all_reduce" | "all_gather" | "reduce_scatter" | "p2p"

// The link parameters one collective runs at.
struct LinkRate {
  double bandwidth_bytes_per_s = 0;
  double latency_s = 0;  // per ring step
};

// Where a collective's time goes.
struct CollectiveTime {
  double bus_bytes = 0;     // N * bus factor
  double latency_s = 0;     // steps * alpha
  double bandwidth_s = 0;   // bus_bytes / B
  double total_s() const { return latency_s + bandwidth_s; }
};

// Bus factor of nccl-tests for `op` over n ranks (1 for p2p, 0 for n == 1 collectives).
double bus_factor(CollectiveOp op, std::int64_t ranks);
// Sequential ring steps (latency terms) of `op` over n ranks.
std::int64_t ring_steps(CollectiveOp op, std::int64_t ranks);

// t = ring_steps * alpha + bytes * bus_factor / B. n == 1 costs nothing. Throws ConfigError
// on a non-positive bandwidth or negative bytes.
CollectiveTime collective_time(CollectiveOp op, double bytes, std::int64_t ranks,
                               const LinkRate& rate);

// Link class of the groups of `ranks` members spaced `stride` global ranks apart in a job of
// `world_size` ranks that fill nodes of gpus_per_node in order (backend_facts.h; Megatron
// order: tensor fastest, then data, then pipeline: a TP group has stride 1, a DP group stride
// t, a pipeline pair stride t*d). Each such group lies in an aligned block of ranks * stride
// ranks (a TP group in its t, a DP group in its pipeline stage's t*d), so every one of them
// is inside a node iff the job fits one node or gpus_per_node is a multiple of the block; a
// block that straddles a node boundary has a group on both sides (its members are spread
// over the whole block), and such a collective is paced by the inter-node link.
LinkClass group_link(const ClusterSpec& cluster, std::int64_t ranks, std::int64_t stride,
                     std::int64_t world_size);

// The rate of `op` on `link`: the cluster's figures, or the Profile's fit for that op and link
// (the fit with the closest rank count) when a profile is given and has one.
LinkRate link_rate(const ClusterSpec& cluster, LinkClass link, CollectiveOp op,
                   std::int64_t ranks, const Profile* profile);

// Convenience: the time of `op` on a group (ranks, stride) of the cluster.
CollectiveTime group_collective_time(const ClusterSpec& cluster, const Profile* profile,
                                     CollectiveOp op, double bytes, std::int64_t ranks,
                                     std::int64_t stride, std::int64_t world_size);

}  // namespace strata
