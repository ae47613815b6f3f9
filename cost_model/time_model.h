// The time model's step-level primitives: the work of one (micro-batch, chunk), the
// tensor-parallel, pipeline and data-parallel/ZeRO communication, offload transfers, the
// optimizer step, and how a pipeline schedule turns per-chunk times into a step time.
//
// What overlaps with what (only the exposed part is counted):
//   TP collectives      not overlapped: each sits between two dependent GEMMs.
//   pipeline p2p        a send occupies its rank's stream (Megatron 2021 batches the send
//                       with the next receive and waits on it), so it is counted per send;
//                       the receiver's wait is the bubble. Sends are thus "partially"
//                       overlapped: the peer computes meanwhile, the sender does not.
//   DP gradient reduce  (ZeRO 0/1) bucketed, overlaps with the backward of the last
//                       micro-batch on the rank (earlier micro-batches only accumulate),
//                       except the last bucket, which can only start when the backward ends.
//   ZeRO 1/2 param all-gather after the optimizer step: exposed.
//   ZeRO-3 gathers      forward: prefetched one layer ahead, hidden behind compute when
//                       compute is longer; backward: the same, except under full
//                       recomputation, where they are fetched on demand (Zero3ChunkComm).
//   ZeRO-2 reduce       DeepSpeed reduce-scatters gradients every micro-batch (the gradient
//                       is kept only as the rank's partition): m reductions, hidden behind
//                       the m backwards except the last bucket.
//   PCIe grads to host  (optimizer offload) streamed during the last backward like the DP
//                       reduction; the CPU step and the params' copy back are exposed
//                       (ZeRO-Offload, Ren et al. 2021, without the one-step delay).
//   NVMe optimizer I/O  pipelined with the CPU step in chunks (ZeRO-Infinity's overlap-
//                       centric design): max(NVMe read + write, CPU step).
//   Every offload time is bytes / link rate, the bytes those of offload_traffic (what the
//   executor moves, offload_transfer_bytes); the rates are the Profile's measured PCIe and
//   NVMe rates, else the cluster's (NVMe shared by the node's GPUs). Gradients that go down
//   after every micro-batch's backward hide behind all m backwards but the last bucket.
// Deliberately not here: the ops' FLOP counts (compute_model.h), collective formulas
// (collectives.h), the Prediction record (cost_model.h).
#pragma once

#include <cstdint>
#include <memory>

#include "cost_model/cluster_spec.h"
#include "cost_model/collectives.h"
#include "cost_model/compute_model.h"
#include "cost_model/model_spec.h"
#include "cost_model/plan.h"
#include "cost_model/profile.h"
#include "cost_model/step_report.h"
#include "cost_model/train_spec.h"

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
  // Gradient-reduction bucket: PyTorch DDP's default 25 MB (bucket_cap_mb = 25).
  double grad_bucket_bytes = 25e6;
  // CPU backend: strata's executor runs every collective as a blocking MPI call on the core
  // that computes, and reduces the gradients once per step after the last backward (ZeRO 0/1:
  // all-reduce; 2 and 3: reduce-scatter per parameter unit): nothing overlaps, nothing is
  // reduced per micro-batch. ZeRO-3 gathers each layer before each pass, exposed.
  bool serial_comm = false;
};
TimeContext make_time_context(const ModelSpec& model, const ClusterSpec& cluster,
                              const TrainSpec& train, const Plan& plan, const Profile* profile,
                              const LayerKernels& kernels);

// Tensor-parallel collectives of one layer for one micro-batch (Megatron: f and g operators):
// forward 2 all-reduces of s b h elements (or, with sequence parallel, an all-gather before and
// a reduce-scatter after each block: same bus bytes), backward 2, recompute 2 (full only).
struct TpLayerComm {
  double forward_s = 0;
  double backward_s = 0;
  double recompute_s = 0;
};
TpLayerComm tp_layer_comm(const TimeContext& ctx);

// One pipeline activation (or gradient) transfer between adjacent ranks: s b h elements
// in compute precision. Across nodes with t > 1, Megatron's scatter/gather sends 1/t of it
// per TP rank over its own NIC and all-gathers the pieces over NVLink on the receiver.
struct P2pTransfer {
  LinkClass link = LinkClass::kIntraNode;
  double bytes = 0;         // per GPU over `link`
  double transfer_s = 0;
  double gather_s = 0;      // the receiver's NVLink all-gather (scatter/gather only)
  double total_s() const { return transfer_s + gather_s; }
};
P2pTransfer p2p_transfer(const TimeContext& ctx);

// ZeRO-3 data-parallel traffic of one (micro-batch, chunk) and what of it is exposed.
// Mechanism (Rajbhandari et al. 2020, sections 5.3 and 7.2.2): a layer's parameters exist in
// full only while a pass runs it: all-gathered from the d partitions just before, released
// just after; nothing is kept across passes or micro-batches (that is what holds the model
// state at 16 P / d). Its gradients are reduce-scattered as the backward produces them,
// every micro-batch, into the rank's accumulating gradient partition. Per layer and
// micro-batch the DP link therefore carries
//   forward 1 all-gather; backward 1 all-gather + 1 reduce-scatter;
//   full recomputation 1 more all-gather (the recompute replays the layer's forward and
//   re-gathers; selective recompute replays only the parameter-free attention core),
// i.e. 4 x the layer's bytes with full recompute, not the 3 x of the paper's count.
// Units of communication: one layer (one collective of its parameters, so the ring latency
// (n-1) alpha is paid per layer), plus one for the embedding / final-norm parameters on the
// chunks holding them. Offloaded parameters (ZeRO-Infinity) first come up over PCIe (and
// from NVMe) as the rank's 1/d partition (ChunkWork::fetch_pass, from offload_traffic), once
// per forward and once per backward: the full recomputation re-gathers over the DP group but
// reuses the backward's fetched shard, as the executor does.
// Overlap:
//   forward   prefetched one layer ahead: the first layer's gather is exposed, then whichever
//             of the remaining traffic and the compute is longer.
//   backward  without full recompute: the same prefetch against the backward compute; the
//             reduce-scatters share the link with the gathers, so their times add.
//             With full recompute: the gathers are fetched on demand. Each layer's backward
//             is gather, recompute, gather, backward; DeepSpeed's prefetch replays the module
//             order recorded in the forward, and the recompute re-entering the layers'
//             forward from inside the backward breaks that order (later DeepSpeed versions
//             log "Invalidate trace cache" and fetch on demand in exactly this case), so the
//             compute waits for both gathers. The gradients' reduce-scatter is bucketed and
//             runs beside the layer's own backward compute; its excess over that compute,
//             or at least its last bucket, holds up the next layer's gather on the link.
//             This reading is what the published GPT-3 175B ZeRO-3 runs (Narayanan et al.
//             2021, Table 2: 144 and 44 TFLOP/s per GPU) select at 384 GPUs, where compute
//             and traffic are of one size: prefetching the backward as the forward predicts
//             205 (+43%), serialising the reduce-scatter as well 118 (-18%), this 138 (-4%).
//             At 1536 GPUs (b = 1) the traffic dominates whatever overlaps: 50, 42 and 47.
struct Zero3ChunkComm {
  double unit_gather_s = 0;      // one layer's all-gather over the DP group
  double gather_pass_s = 0;      // all-gather of the whole chunk (every unit), one pass
  double reduce_scatter_s = 0;   // the chunk's gradients, one micro-batch
  double fetch_pass_s = 0;       // offloaded params' partition up to the device, one pass
  int backward_gathers = 1;      // 2 with full recompute
  bool backward_prefetched = true;
  double forward_comm_s = 0;     // gather + fetch of the forward
  double backward_comm_s = 0;    // gathers + fetches + reduce-scatter of backward/recompute
  double exposed_forward_s = 0;
  double exposed_backward_s = 0;
  double fetch_exposed_forward_s = 0;   // the offload fetches' share of the exposed time
  double fetch_exposed_backward_s = 0;
};

// The work of one (micro-batch, chunk) on a rank, before pipeline composition.
struct ChunkWork {
  std::int64_t layers = 0;
  bool has_embedding = false;  // virtual stage 0
  bool has_head = false;       // the last virtual stage
  double params = 0;           // parameters of the chunk on one TP rank
  double compute_forward_s = 0;
  double compute_backward_s = 0;  // 2 x forward compute
  double recompute_s = 0;         // full: the layers' forward again; selective: attention core
  double tp_forward_s = 0;
  double tp_backward_s = 0;       // incl. the recompute's collectives
  double zero3_forward_s = 0;     // exposed ZeRO-3 gathers
  double zero3_backward_s = 0;    // exposed ZeRO-3 gathers + gradient reduce-scatter
  double offload_forward_s = 0;   // exposed parameter fetches (params offloaded, ZeRO-3)
  double offload_backward_s = 0;
  double sends = 0;               // p2p sends per micro-batch (forward + backward)
  // Offloaded params' shard fetched for one pass of this chunk (host_to_device, and
  // nvme_to_host from NVMe): the rank's OffloadTraffic::fetch spread evenly over its 2 m
  // passes (forward, backward) and v chunks; zero3_chunk_comm prices it.
  TransferBytes fetch_pass;
  Zero3ChunkComm zero3;           // zero_stage 3 with d > 1 only
  double forward_s() const { return compute_forward_s + tp_forward_s + zero3_forward_s + offload_forward_s; }
  double backward_s() const {
    return compute_backward_s + recompute_s + tp_backward_s + zero3_backward_s + offload_backward_s;
  }
};
// `sends` counts this chunk's p2p sends per micro-batch; the caller prices them (P2pTransfer).
ChunkWork chunk_work(const TimeContext& ctx, std::int64_t pp_rank, std::int64_t chunk);
// The ZeRO-3 terms of a chunk whose compute times, layers and params are already filled in;
// `layer_params` per TP rank.
Zero3ChunkComm zero3_chunk_comm(const TimeContext& ctx, const ChunkWork& work,
                                double layer_params);

// Tail work of a pipeline rank after its last backward, for `params` parameters per TP rank
// on the stage and `window_s` of backward compute of one micro-batch to hide behind (the
// last micro-batch's; ZeRO-2's per-micro-batch reductions hide behind all m of them).
struct TailWork {
  double dp_reduce_s = 0;      // gradient all-reduce / reduce-scatter (full, before overlap;
                               // ZeRO-2: all m micro-batches' reduce-scatters)
  double dp_gather_s = 0;      // ZeRO 1/2 parameter all-gather
  double embedding_sync_s = 0; // tied embedding gradient all-reduce, first <-> last stage
  double dp_exposed_s = 0;     // what of the above is on the critical path
  double d2h_s = 0;            // gradients to host (optimizer offload)
  double cpu_step_s = 0;       // CPU AdamW
  double nvme_s = 0;           // optimizer state (and gradient) NVMe reads + writes
  double h2d_s = 0;            // updated params back to the device
  double offload_exposed_s = 0;
  double optimizer_s = 0;      // device or CPU optimizer step, exposed
};
TailWork tail_work(const TimeContext& ctx, std::int64_t pp_rank, double params,
                   double window_s);

// AdamW on the device, memory bound: reads fp32 master params, m, v and the gradient, writes
// params, m, v and the compute-precision copy: 28 bytes/param in bf16 (12 + 2 + 12 + 2).
double device_optimizer_s(const TimeContext& ctx, double params);
// AdamW on the CPU (ZeRO-Offload's CPU-Adam): 4 fp32 arrays read, 3 written + a 2-byte copy:
// 30 bytes/param over the GPU's share of host memory bandwidth, or ~12 FLOP/param over its
// share of cpu_flops, whichever is slower; a Profile's cpu_adam_params_per_s replaces both.
double cpu_optimizer_s(const TimeContext& ctx, double params);

// Offload bytes of one step on pipeline rank pp_rank (any TP / DP rank of it), per link and
// direction, exactly as the executor moves them (executor/engine/offload_tiers.h), so a
// measured run can be checked to the byte. Units are the executor's: each layer, the
// embedding (first stage), the tied wte copy (last stage, p > 1), the final LayerNorm (last
// stage); n = a unit's parameters on one TP rank (stage_params), padded to a multiple of d;
// S = n_pad / d its ZeRO shard; O = S (ZeRO >= 1) or n_pad (ZeRO 0) the optimizer's part;
// m micro-batches; 4 bytes per fp32 element. Per unit and step:
//   params on cpu/nvme (ZeRO-3): every gather first fetches the shard: up S (and from NVMe S);
//     gathers per step: a layer 2m (forward, backward; a recomputation reuses the backward's
//     gather), the final norm 2m, the embedding m (2m when p = 1: it is also the head's wte),
//     the tied copy m.
//   gradients on cpu/nvme (ZeRO >= 2): the reduced shard goes down k times, k = m for a layer
//     (after each micro-batch's backward; 1 with sequence parallel, whose LayerNorm gradients
//     are complete only at the end of the step) and 1 for the others (after the tied-
//     embedding sum); on NVMe it accumulates in place: written k times, read k - 1 times, and
//     read once more for the optimizer step.
//   optimizer on cpu/nvme (CPU AdamW): gradients on the device go down (O); updated params on
//     the device come back up (O); each of master params, m, v on NVMe is read and written
//     once (O each). With offloaded params the params' own shard is the master copy.
//   optimizer on the device: offloaded gradients come back up (S); offloaded params come up
//     (S) and go back down (S), to and from NVMe when there.
TransferBytes offload_transfer_bytes(const ModelSpec& model, const Plan& plan,
                                     const TrainSpec& train, std::int64_t pp_rank);

// The same traffic with `element_bytes` per parameter / gradient element (the executor: 4,
// fp32; a bf16 run: 2; the fp32 optimizer state m, v and master params stay 4), split by when
// it moves: `fetch` is the ZeRO-3 parameter fetches inside the passes (priced per pass by
// zero3_chunk_comm), `rest` everything else (gradients down, optimizer I/O, params back,
// priced by tail_work). offload_transfer_bytes == offload_traffic(..., 4).total().
struct OffloadTraffic {
  TransferBytes fetch;
  TransferBytes rest;
  TransferBytes total() const;
};
OffloadTraffic offload_traffic(const ModelSpec& model, const Plan& plan, const TrainSpec& train,
                               std::int64_t pp_rank, double element_bytes);

// Pipeline composition: with W the per-micro-batch work of the slowest rank (sum over its
// chunks of forward + backward + sends), m micro-batches, p ranks, v chunks per rank:
//   step_pipeline = m W + (p - 1)/v W;   bubble = (p-1)/v W, i.e. (p-1)/(v m) of the ideal
// (Narayanan et al. 2021, section 2.2: (p-1)/m for GPipe and 1F1B, (p-1)/(v m) interleaved).
struct PipelineTime {
  double busy_s = 0;    // m W
  double bubble_s = 0;  // (p-1)/v W
  double total_s() const { return busy_s + bubble_s; }
};
PipelineTime pipeline_time(std::int64_t micro_batches, std::int64_t pp, std::int64_t v,
                           double work_per_micro_batch_s);
// (p - 1) / (v m): the bubble as a fraction of the ideal time m W.
double bubble_ratio(std::int64_t micro_batches, std::int64_t pp, std::int64_t v);

}  // namespace strata
