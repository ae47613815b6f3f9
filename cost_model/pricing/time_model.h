// The time model's step-level primitives: the context one prediction is priced in, the
// tensor-parallel collectives of a layer, one pipeline transfer, the optimizer step on the
// device and on the host, and the offload bytes a step moves over PCIe and NVMe.
//
// What overlaps with what is deliberately not here: op_costs.h prices each op of the
// Program from these primitives, and the overlap emerges from replaying the Program's
// streams (program_simulator.h). Every offload time is bytes / link rate, the bytes those of
// unit_offload_bytes (what the executor moves, offload_transfer_bytes); the rates are the
// Profile's measured PCIe and NVMe rates, else the cluster's (NVMe shared by the node's
// GPUs).
// Deliberately not here either: the ops' FLOP counts (compute_model.h), collective formulas
// (collectives.h), the Prediction record (cost_model.h).
#pragma once

#include <cstdint>
#include <memory>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/pricing/collectives.h"
#include "cost_model/pricing/compute_model.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/profile.h"
#include "cost_model/specs/step_report.h"
#include "cost_model/specs/train_spec.h"

namespace strata {

// Everything one prediction needs, computed once.
struct TimeContext {
  const ModelSpec* model = nullptr;
  const ClusterSpec* cluster = nullptr;
  const TrainSpec* train = nullptr;
  const Plan* plan = nullptr;
  const Profile* profile = nullptr;
  // CPU ranks time-sharing the cores with a fitted time_sliced_sync_s: the profile as given,
  // with time_sliced_sync_s x (ranks x threads / cores - 1) added to each collective fit's
  // latency (a blocking call may wait for a peer the scheduler has swapped out, behind the
  // other ranks of its core: a cost per synchronisation, not per byte or per FLOP; without
  // collective fits there is nothing to add it to). `profile` then points here; shared so
  // that copies of the context stay valid.
  std::shared_ptr<const Profile> time_sliced_profile;
  DeviceRates rates;
  LayerKernels kernels;
  std::int64_t micro_batches = 0;  // m
  std::int64_t ranks_per_node = 1;  // GPUs of this plan sharing a node's host and NVMe
};
// node_ranks: ranks busy on a node at once, when other work shares the node with this plan
// (strata select runs other jobs on the other devices); 0: the plan's own ranks.
TimeContext make_time_context(const ModelSpec& model, const ClusterSpec& cluster,
                              const TrainSpec& train, const Plan& plan, const Profile* profile,
                              const LayerKernels& kernels, std::int64_t node_ranks = 0);

// Tensor-parallel collectives of one layer for one micro-batch (Megatron: f and g operators):
// forward 2 all-reduces of s b h elements (or, with sequence parallel, an all-gather before and
// a reduce-scatter after each block: same bus bytes), backward 2, recompute 2 (full only; 1
// when the recomputation stops before fc2, LayerKernels::recompute_skips_output).
struct TpLayerComm {
  double forward_s = 0;
  double backward_s = 0;
  double recompute_s = 0;
};
TpLayerComm tp_layer_comm(const TimeContext& ctx);

// One pipeline activation (or gradient) transfer between adjacent ranks: s b h elements
// in compute precision (s b h / t with sequence parallelism: already sharded). Across nodes
// with t > 1, Megatron's scatter/gather sends 1/t of it per TP rank over its own NIC and
// all-gathers the pieces over NVLink on the receiver. The pipeline is paced by its slowest
// hop, so every hop is priced on the inter-node link once any boundary crosses nodes.
struct P2pTransfer {
  LinkClass link = LinkClass::kIntraNode;
  double bytes = 0;         // per GPU over `link`
  double transfer_s = 0;
  double gather_s = 0;      // the receiver's NVLink all-gather (scatter/gather only)
  double total_s() const { return transfer_s + gather_s; }
};
P2pTransfer p2p_transfer(const TimeContext& ctx);

// AdamW on the device, memory bound: reads fp32 master params, m, v and the gradient, writes
// params, m, v and the compute-precision copy: 28 bytes/param in bf16 (12 + 2 + 12 + 2).
double device_optimizer_s(const TimeContext& ctx, double params);
// AdamW on the CPU (ZeRO-Offload's CPU-Adam): 4 fp32 arrays read, 3 written + a 2-byte copy:
// 30 bytes/param over the GPU's share of host memory bandwidth, or ~12 FLOP/param over its
// share of cpu_flops, whichever is slower; a Profile's cpu_adam_params_per_s replaces both.
double cpu_optimizer_s(const TimeContext& ctx, double params);

// Seconds to move `bytes` over the offload links: the sum over the links of bytes / rate
// (PCIe each way; NVMe read and write: the node's drives shared by its GPUs). A link with
// bytes to carry must have a rate > 0 (ConfigError naming the cluster key otherwise).
double offload_link_time(const TimeContext& ctx, const TransferBytes& bytes);

// What one parameter unit moves over PCIe and NVMe per op, exactly as the executor moves it
// (executor/engine/offload_tiers.h), so that a measured run can be checked to the byte.
// n = the unit's parameters on one TP rank, padded to a multiple of d; S = n_pad / d its
// ZeRO shard; O = S (ZeRO >= 1) or n_pad (ZeRO 0) the optimizer's part; e bytes per
// parameter or gradient element moved (the executor: 4, fp32; a bf16 run: 2; the fp32
// optimizer state m, v and master params stay 4).
//   fetch (params on cpu/nvme, ZeRO-3): one gather's shard comes up: S e (and from NVMe S e).
//   grads_down (gradients on cpu/nvme, ZeRO >= 2): the reduced shard goes down, S e; on NVMe
//     it accumulates in place: written, and read back once (the next accumulation, or the
//     optimizer step for the last one).
//   optimizer (its step):
//     optimizer on cpu/nvme (CPU AdamW): gradients on the device go down (O e); updated
//       params on the device come back up (O e); each of master params, m, v on NVMe is read
//       and written once (O x 4 each). With offloaded params the params' shard is the master.
//     optimizer on the device: offloaded gradients come back up (S e); offloaded params come
//       up (S e) and go back down (S e), to and from NVMe when there.
struct UnitOffloadBytes {
  TransferBytes fetch;
  TransferBytes grads_down;
  TransferBytes optimizer;
  TransferBytes optimizer_nvme;  // of `optimizer`, the NVMe part (pipelined with a CPU step)
};
UnitOffloadBytes unit_offload_bytes(const Plan& plan, std::int64_t unit_params,
                                    double element_bytes);

// Offload bytes of one step on pipeline rank pp_rank (any TP / DP rank of it), per link and
// direction: unit_offload_bytes over the rank's units (each layer, the embedding on the first
// stage, the tied wte copy and the final LayerNorm on the last stage) times how often the
// step does each op: a unit is fetched at each gather, 2m a layer (forward, backward; a
// recomputation reuses the backward's shard), 2m the final norm, m the embedding (2m when
// p = 1: it is also the head's wte), m the tied copy; a layer's gradient goes down m times
// (after each micro-batch's backward; 1 with sequence parallel, whose LayerNorm gradients
// are complete only at the end of the step), any other unit's once; one optimizer step each.
// The Program's ops move exactly this (tests/cost_model/op_costs_test.cc counts them).
TransferBytes offload_traffic(const ModelSpec& model, const Plan& plan, const TrainSpec& train,
                              std::int64_t pp_rank, double element_bytes);
// offload_traffic in fp32 elements (e = 4): what the executor moves and measures.
TransferBytes offload_transfer_bytes(const ModelSpec& model, const Plan& plan,
                                     const TrainSpec& train, std::int64_t pp_rank);

}  // namespace strata
