// The memory model: bytes per pipeline rank (stage) and per tier (device, host, NVMe) for
// one plan, built from small pure functions, one per term, each with its formula and source.
//
// What it models, per GPU of pipeline rank r (every TP and DP rank of a stage holds the
// same bytes, so a stage is described by one GPU):
//   params / gradients / optimizer  ZeRO stage 0-3 over the DP group (Rajbhandari et al.
//       2020), each kind on the tier its Plan::offload names (kCpu -> host, kNvme -> nvme).
//   activations  per-layer tensors (see layer_activation_tensors) x layers per chunk x the
//       chunk-micro-batches the schedule keeps in flight on that rank (in_flight_chunks),
//       plus the embedding/head tensors of the first/last virtual stage and the one-layer
//       working set of recomputation.
//   buffers  gradient-reduction bucket, ZeRO-3 gathered parameters (current + prefetched
//       unit), pipeline send/receive messages, a GEMM workspace.
//
// Host and NVMe bytes are reported per GPU (the share of that GPU's ranks); the planner
// multiplies by GPUs per node to compare with a node's host memory or NVMe capacity.
//
// What it deliberately does not model: allocator fragmentation, CUDA context / NCCL
// internal buffers, staging (bounce) buffers for NVMe I/O, the data loader, the
// transient peaks inside one kernel. The total is the sum of all terms (a conservative
// peak: gradients and activations are counted as if live together).
//
// The CPU backend without offload (the kCpuExecutor convention) is predicted as strata's
// executor allocates it, to within a few percent of its accounting allocator: fp32 state
// in flat per-unit buffers padded to a multiple of d, ZeRO-2/3 full gradient buffers that
// live from a unit's first gradient to the step's reduce-scatter, pipeline sends that
// complete at the step's end, and the peak taken over the moments where it can occur (the
// first backward, the last steady-state backward, the head's forward, the optimizer step)
// instead of summing every term (see cpu_executor_peak in memory_model.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/model_state_bytes.h"
#include "cost_model/specs/param_layout.h"
#include "cost_model/specs/plan.h"
#include "cost_model/program/program.h"
#include "cost_model/specs/profile.h"
#include "cost_model/specs/step_report.h"
#include "cost_model/specs/train_spec.h"

namespace strata {

class RankProgramCache;  // rank_program_cache.h

// ---------------------------------------------------------------------------------------
// Model state (parameters, gradients, optimizer) per parameter.

// Bytes per parameter held by one GPU for each kind of model state, ZeRO over dp ranks.
// Mixed precision bf16 with Adam (ZeRO paper, section 3.1): 2 (bf16 params) + 2 (bf16
// grads) + 12 (fp32 master params, m, v). fp32: 4 + 4 + 8 (m, v; the params are the master).
// Stage 1 partitions the optimizer state, 2 also the gradients, 3 also the parameters:
//   bf16 per-GPU model state = 16 (0), 4 + 12/d (1), 2 + 14/d (2), 16/d (3).
struct ModelStateBytesPerParam {
  double params = 0;
  double gradients = 0;
  double optimizer = 0;
  double total() const { return params + gradients + optimizer; }
};
// Throws InfeasiblePlan on zero_stage outside 0..3 or dp < 1.
ModelStateBytesPerParam zero_model_state_bytes_per_param(int zero_stage, std::int64_t dp,
                                                         Precision precision);

// ---------------------------------------------------------------------------------------
// Parameters of one pipeline rank, on one TP rank.

// Per-unit counts (one transformer layer, the embedding, ...): cost_model/specs/param_layout.h.

struct StageParams {
  std::int64_t layers = 0;             // transformer layers on this rank (all its chunks)
  std::int64_t layer_params = 0;       // layers * layer_params_per_tp_rank
  std::int64_t embedding_params = 0;   // first stage: V h / t + s h; last stage (p > 1): V h / t (tied copy)
  std::int64_t final_norm_params = 0;  // last stage: 2h
  std::int64_t largest_unit = 0;       // the largest unit ZeRO-3 gathers at once (a layer or the embedding)
  std::int64_t largest_module = 0;     // the largest module: qkv, fc1/fc2 or the embedding
  std::int64_t total() const { return layer_params + embedding_params + final_norm_params; }
};
// Rank 0 holds virtual stage 0 (the embedding), rank p-1 holds the last virtual stage (final
// LayerNorm and the tied output embedding when p > 1). The vocabulary shard is ceil(V / t)
// rows (the last shard padded). Throws InfeasiblePlan when pp, tp or v < 1, pp_rank is
// outside [0, pp), layers % (pp * v) != 0, heads % tp != 0 or ffn % tp != 0.
StageParams stage_params(const ModelSpec& model, const Plan& plan, std::int64_t pp_rank);
StageParams stage_params(const ModelSpec& model, std::int64_t tp, std::int64_t pp,
                         std::int64_t virtual_stages, std::int64_t pp_rank);

// ---------------------------------------------------------------------------------------
// Activations.

// Which bytes a layer keeps for its backward.
//   kPublished  Korthikanti et al. 2022 (arXiv 2205.05198, section 4.1): bf16, dropout masks
//               (1 byte per element), materialised attention softmax; s b h (34 + 5 a s / h).
//   kCpuExecutor  strata's CPU backend: compute_bytes per element (4 in fp32), no dropout,
//               tiled (flash) attention: a fp32 logsumexp of b * a/t * s, LayerNorm mean/rstd.
//   kCudaExecutor  strata's CUDA backend: compute_bytes per element, no dropout, flash
//               attention (no s^2 term; a fp32 logsumexp of b * a/t * s), LayerNorm mean/rstd.
enum class ActivationConvention { kPublished, kCpuExecutor, kCudaExecutor };
ActivationConvention activation_convention(Backend backend);

struct ActivationTensor {
  std::string name;
  std::int64_t elements = 0;    // on one TP rank, for one micro-batch of b sequences
  int bytes_per_element = 0;
  bool attention_core = false;  // dropped by selective recomputation (recomputed in backward)
  double bytes() const { return static_cast<double>(elements) * bytes_per_element; }
};

// The tensors one transformer layer saves for its backward, on one TP rank, for one
// micro-batch, WITHOUT recomputation (apply_recompute filters). s = seq, b = micro-batch,
// h = hidden, f = ffn, a = heads, t = tp; S = s/t with sequence parallel, else s (tensors
// outside the TP region are sequence-sharded; inputs to the linears are saved sharded and
// re-gathered in backward, as Megatron does). c = compute bytes, 4 = fp32.
//
// kPublished (c = 2), the list that sums to Korthikanti's formula:
//   ln1_in          S b h     2     LayerNorm 1 input
//   qkv_in          S b h     2     LayerNorm 1 output = QKV linear input
//   q, k            2 s b h/t 2     for Q K^T
//   v               s b h/t   2     for probs x V
//   attn_probs      a/t s s b 2     softmax output          (attention core)
//   attn_mask       a/t s s b 1     attention dropout mask  (attention core)
//   attn_dropped    a/t s s b 2     dropout output, for x V (attention core)
//   proj_in         s b h/t   2     attention output = projection input
//   proj_mask       S b h     1     dropout mask after the projection
//   ln2_in          S b h     2
//   fc1_in          S b h     2     LayerNorm 2 output
//   gelu_in         s b f/t   2     fc1 output
//   fc2_in          s b f/t   2     GeLU output
//   mlp_mask        S b h     1     dropout mask after fc2
//   sum at f = 4h, t = 1: s b h (2+2+4+2+2+1+2+2+8+8+1) + 5 a s^2 b = s b h (34 + 5 a s / h).
//
// kCpuExecutor / kCudaExecutor (c = compute_bytes; the executor's pre-LN GPT layer:
// ln1 -> qkv -> attention -> proj -> residual -> ln2 -> fc1 -> gelu -> fc2 -> residual):
//   ln1_in        S b h      c    ln1_mean, ln1_rstd  S b  4 (fp32 statistics)
//   ln1_out       S b h      c    QKV linear input
//   qkv           3 s b h/t  c    q, k, v (one tensor)
//   attn_lse      a/t s b    4    flash attention's logsumexp (attention core)
//   attn_out      s b h/t    c    projection input and flash attention's O (attention core:
//                                 the executor's selective recomputation reruns the kernel)
//   ln2_in        S b h      c    ln2_mean, ln2_rstd  S b  4
//   ln2_out       S b h      c    fc1 input
//   fc1_out       s b f/t    c    GeLU input
//   gelu_out      s b f/t    c    fc2 input
// Residual adds save nothing. Throws InfeasiblePlan on tp not dividing heads/ffn/seq (SP).
std::vector<ActivationTensor> layer_activation_tensors(const ModelSpec& model,
                                                       std::int64_t micro_batch, std::int64_t tp,
                                                       bool sequence_parallel,
                                                       ActivationConvention convention,
                                                       int compute_bytes);

// Filters a layer's list for a recomputation policy:
//   kNone: unchanged; kSelective: without the attention-core tensors (Korthikanti 4.2.2);
//   kFull: only the layer input ln1_in (2 s b h in bf16, / t with sequence parallel).
std::vector<ActivationTensor> apply_recompute(const std::vector<ActivationTensor>& tensors,
                                              Recompute recompute);

double sum_bytes(const std::vector<ActivationTensor>& tensors);

// Korthikanti et al. 2022, bytes per layer per micro-batch on one TP rank, bf16:
//   none:      s b h (10 + 24/t + 5 a s / (h t))   (t = 1: 34 + 5as/h); with SP: s b h (34 + 5as/h) / t
//   selective: the 5as/h term dropped;  full: 2 s b h (/ t with SP).
// The published formula assumes f = 4h; used to test layer_activation_tensors.
double korthikanti_layer_activation_bytes(std::int64_t seq, std::int64_t micro_batch,
                                          std::int64_t hidden, std::int64_t heads,
                                          std::int64_t tp, bool sequence_parallel,
                                          Recompute recompute);

// The tensors the first / last virtual stage keeps besides its layers, per micro-batch
// in flight (embedding: the published convention's embedding dropout mask S b h bytes;
// nothing else, the embedding output is layer 0's ln1_in. Head: final LayerNorm input
// (+ mean/rstd for the executor conventions) and its output = output-layer input).
std::vector<ActivationTensor> embedding_activation_tensors(const ModelSpec& model,
                                                           std::int64_t micro_batch,
                                                           std::int64_t tp, bool sequence_parallel,
                                                           ActivationConvention convention,
                                                           int compute_bytes);
std::vector<ActivationTensor> head_activation_tensors(const ModelSpec& model,
                                                      std::int64_t micro_batch, std::int64_t tp,
                                                      bool sequence_parallel,
                                                      ActivationConvention convention,
                                                      int compute_bytes);
// The logits of ONE micro-batch on the last stage, live while its loss and the loss's
// gradient are computed (the head runs forward, loss and backward of the logits before
// the next micro-batch's head): s b V / t in fp32 (Megatron casts logits to fp32 for the
// vocab-parallel cross-entropy and keeps the softmax in place), plus the GEMM output in
// compute precision when that is not fp32.
std::vector<ActivationTensor> logits_tensors(const ModelSpec& model, std::int64_t micro_batch,
                                             std::int64_t tp, int compute_bytes);

// The executors' head working set while one micro-batch's loss and logit gradients are
// computed (gpt_head.cc): the LayerNorm output on every token row, fp32 logits and their
// gradient (vocab shard), five fp32 per-row statistics, and with SP the full gradient at
// the LayerNorm output before its reduce-scatter.
std::vector<ActivationTensor> head_working_tensors(const ModelSpec& model,
                                                   std::int64_t micro_batch, std::int64_t tp,
                                                   bool sequence_parallel, int compute_bytes);

// Peak bytes during one layer's backward on an executor convention (gpt_layer.cc's
// layer_backward, phase by phase): its working set plus its saved (and recomputed) tensors
// that are still held, besides its input and the gradient flowing through it.
double layer_backward_peak_bytes(const ModelSpec& model, std::int64_t micro_batch,
                                 std::int64_t tp, bool sequence_parallel,
                                 ActivationConvention convention, int compute_bytes);

// CUDA's norm backward scratch for `rows` token rows (kernels/cuda/scratch_sizes.h): the
// model's LayerNorm (2 h partials a block) or RMSNorm (h a block).
double cuda_norm_backward_scratch_bytes(const ModelSpec& model, std::int64_t rows,
                                        std::int64_t hidden);

// Peak bytes during one layer's forward on an executor convention (gpt_layer.cc's
// layer_forward, phase by phase: the tensors saved so far and its transients -- the gathered
// inputs with SP, the row-parallel GEMMs' partial sums), above what the layer keeps for its
// backward after the recomputation policy's drop; its input and output not counted.
double layer_forward_extra_bytes(const ModelSpec& model, std::int64_t micro_batch, std::int64_t tp,
                                 bool sequence_parallel, ActivationConvention convention,
                                 int compute_bytes, Recompute recompute);

// The CUDA backend's head working set while one micro-batch's loss and logit gradients are
// computed (gpt_head.cc over cuda_op_allocations.h), the largest moment of: the LayerNorm
// output (SP: gathered beside its rows), bf16 logits over the 128-aligned wte shard (their
// gradient in place) with the loss's four fp32 row statistics, and with SP the full
// gradient at the LayerNorm output.
double cuda_head_working_bytes(const ModelSpec& model, std::int64_t micro_batch, std::int64_t tp,
                               bool sequence_parallel);

// Chunk-micro-batches whose forward activations pipeline rank r holds at its peak
// (closed form, O(1)); m = micro-batches per pipeline per step, v = chunks per rank:
//   GPipe: m * v (all forwards before any backward);
//   1F1B: min(p - r, m);
//   interleaved (v > 1): min(2 (p - r - 1) + (v - 1) p + 1, m v) — Megatron's warm-up
//     count plus the one forward of the steady state; with v == 1 it is 1F1B.
// Must equal max_in_flight(make_schedule(...), r) from cost_model/program/schedule.h.
// Throws InfeasiblePlan on pp, v, m < 1 or pp_rank outside [0, pp).
std::int64_t in_flight_chunks(ScheduleKind kind, std::int64_t pp, std::int64_t v,
                              std::int64_t m, std::int64_t pp_rank);

// ---------------------------------------------------------------------------------------
// Buffers and the estimate.

struct MemoryModelOptions {
  // Gradient reduction bucket (all-reduce for ZeRO 0/1, reduce-scatter for 2/3), in
  // elements of the gradient type; PyTorch DDP's default 25 MB bucket in bf16 elements.
  std::int64_t grad_bucket_elements = 12'500'000;
  // GEMM workspace per GPU; negative: the backend's (backend_facts.h: workspace_bytes).
  double workspace_bytes = -1;
  // Use the published (Korthikanti) activation convention instead of the backend's
  // executor convention: for checking the model against published figures.
  bool published_activations = false;
  // ZeRO-3 gathers module by module (KernelConventions::zero3_module_gathers): the gathered
  // working set is two of the largest module (the one computing, the next prefetched)
  // instead of two whole layers.
  bool zero3_module_gathers = false;
  // What the device loses outside the model's tensors (profile.h); added to every rank's
  // device total, so a plan that fits fits with it.
  DeviceHeadroom headroom;
  // The executor's walk applies a repeated pass as its recorded sums (program_memory.h:
  // WalkOptions); false walks every op. Either gives the same estimate, to the bit (tested).
  bool walk_reuses_passes = true;
  // The executor's walk skips the settled middle of a long steady phase (steady_cut.h);
  // false walks every micro-batch. Either gives the same estimate, to the bit (tested).
  bool walk_cuts_steady_phase = true;
  // Estimate every pipeline rank (predict's per-rank report), or only those that can be the
  // worst (the planner, which needs `worst` alone): the first and the last rank, each with
  // units of its own, and of the middle ranks (the same units on each) the second and the
  // last that keeps as many inputs in flight as the second (in_flight_chunks, non-increasing
  // in the rank). More inputs in flight hold more at the first backward (each a layer's
  // saved tensors and more); among ranks with as many (m caps them), the last, whose next
  // neighbour warms up less, holds one forward send more pending (program_sends.h).
  // `stages` then holds those ranks; `worst` is the same to the byte (memory_model_test
  // checks it against every rank on a matrix of schedules, degrees, micro-batch counts,
  // ZeRO stages, recomputation, offload and uneven stages). The walks are O(p v) each, so a
  // plan's estimate is O(p v) instead of O(p^2 v).
  bool every_rank = true;
  // Where the walked ranks' Programs come from: made for this estimate (nullptr), or the
  // planner's cache, reused across the candidates that make the same Program.
  RankProgramCache* programs = nullptr;
  // The walked Programs' options (program.h: program_options); unset: strata's executor on
  // the cluster's backend with the default prefetch depth (executor_program_options).
  std::optional<ProgramOptions> program;
};

struct StageMemory {
  std::int64_t pp_rank = 0;
  TierBytes params, gradients, optimizer, activations, buffers, total;
  // How the activation and buffer bytes are made up (device), for reports and tests.
  std::int64_t in_flight = 0;            // chunk-micro-batches in flight (in_flight_chunks)
  double layer_activation_bytes = 0;     // per layer per micro-batch after recompute filter
  double recompute_working_bytes = 0;    // one layer's extra activations during its backward
  double embedding_head_bytes = 0;       // embedding + head tensors, all in-flight micro-batches
  double logits_bytes = 0;               // one micro-batch's logits (last stage)
  double grad_bucket_bytes = 0;
  double headroom_bytes = 0;             // context, communicator buffers, fragmentation
  double zero3_gather_bytes = 0;
  double pipeline_buffer_bytes = 0;
  double workspace_bytes = 0;
  // CPU executor (see the file comment): the working set (a layer's backward with its
  // recomputed tensors, or the head) and the ZeRO-2/3 full gradient buffers live at the
  // peak moment, which is "backward", "head", "optimizer", or "sum" for the other
  // conventions' conservative sum.
  double working_bytes = 0;
  double step_gradient_bytes = 0;
  std::string peak_moment = "sum";
  StageParams stage_params;
};

struct MemoryEstimate {
  std::vector<StageMemory> stages;  // one per pipeline rank, index = pp_rank
  std::int64_t worst_pp_rank = 0;   // the stage with the most device bytes (lowest rank on ties)
  TierBytes worst;                  // per tier, the maximum over stages (each tier on its own)
};

// Throws InfeasiblePlan when the plan does not divide the model (see stage_params) or the
// global batch (global_batch % (dp * micro_batch)). Does not compare with capacities: the
// planner does that (fits_in).
MemoryEstimate estimate_memory(const ModelSpec& model, const ClusterSpec& cluster,
                               const TrainSpec& train, const Plan& plan);
MemoryEstimate estimate_memory(const ModelSpec& model, const ClusterSpec& cluster,
                               const TrainSpec& train, const Plan& plan,
                               const MemoryModelOptions& options);

// The GEMM workspace a rank holds outside the walked pool: options.workspace_bytes, or the
// backend's default (MemoryModelOptions::workspace_bytes).
double device_workspace_bytes(const MemoryModelOptions& options, Backend backend);

// The headroom (DeviceHeadroom) a rank reserves beside the `device_bytes` its tensors take:
// the fragmentation share of them, the context, one communicator's buffers per parallel
// dimension the rank talks over. Added to every rank's device total when headroom.any().
double device_headroom_bytes(double device_bytes, const Plan& plan, const DeviceHeadroom& headroom);

// Writes the Prediction's memory fields: memory_bytes = estimate.worst, per_rank = one
// RankMemory per stage (rank = the stage's first global rank in Megatron order, tp = dp = 0:
// pp_rank * tp * dp).
void fill_prediction_memory(const MemoryEstimate& estimate, const Plan& plan,
                            StepReport& report);

}  // namespace strata
