// What strata's executor on each backend supports and needs, one description per backend,
// and the rules that follow from it: the one place these facts live. Read by the engine
// (its Program's options and the dtypes it moves: program.h's program_options), `strata
// run`'s checks, predict and the memory walk (through the same Program options), and the
// planner, sizing and select (which rank only plans `strata run` accepts).
//
// Placement: launchers fill nodes by slot (executor/comm/node_layout.h), so world ranks
// 0..G-1 share the first node, G..2G-1 the next, and a TP group (t consecutive ranks,
// partition.h's order) stays inside a node exactly when the job fits one node or G is a
// multiple of t. The TP group must: its all-reduces run on every layer, and the plan prices
// them on the intra-node link (collectives.h: group_link prices the same layout).
// Deliberately not here: how fast a backend is (cluster files, profiles), the kernels'
// conventions for a framework (conventions.h), the checks of a live launch against its real
// hosts (executor/comm/node_layout.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/train_spec.h"
#include "kernels/dtype.h"

namespace strata {

// The gradients' dtype on every backend (BackendFacts::gradient_dtype).
inline constexpr DType kGradientDType = DType::kF32;

struct BackendFacts {
  Backend backend = Backend::kCpu;
  const char* name = "CPU";  // in messages
  // Activations, the weights' compute copy, the pipeline messages, the TP collectives and
  // ZeRO's parameter gathers: fp32 on the CPU, bf16 on CUDA.
  DType compute_dtype = DType::kF32;
  // Gradients and every reduction of them (DP, the tied embedding, the SP norm sums, the
  // replicated KV heads' sums): fp32 on both (executor/engine/model_state.cc).
  DType gradient_dtype = DType::kF32;
  // The wte shard's row padding: 1 on the CPU; 128 on CUDA, where the logits GEMMs over
  // unaligned rows measured 7x slower on an H100 (99 vs 782 TFLOP/s,
  // tools/bench/gpt_ops_bench.cc). The padding rows stay zero and are never trained.
  std::int64_t vocab_row_alignment = 1;
  // hidden / heads the attention kernel runs; empty: any.
  std::vector<std::int64_t> head_sizes;
  // hidden / t and ffn_hidden / t a multiple of this: 16-byte aligned bf16 rows on CUDA.
  std::int64_t tp_width_multiple = 1;
  // The precisions it trains in; empty: any (the CPU computes a bf16 plan in fp32).
  std::vector<Precision> precisions;
  // Host work runs on a host thread beside the device's (the CPU backend's host stream), so the
  // host optimizer may step each layer inside the backward (program.h, "optimizer"). Not on
  // CUDA yet: it runs host work on the thread that issues the GPU's, where a layer's step in
  // the backward would hold the issue of the layers below behind its reduction, D2H copy and
  // AdamW (slower than the tail); a host thread there needs a GPU to write and check.
  bool host_optimizer_in_backward = false;
  // Host optimizer steps that touch host memory only (ZeRO-3 with parameters, gradients and
  // optimizer state in host memory) run on a host stream beside the device's and may be
  // carried into the next step (program.h, "carried"): the CPU backend's host thread, CUDA's
  // host functions on a stream of their own (which make no CUDA call: cuda_backend.h).
  bool host_steps_carried = false;
  // Device memory outside the pool a Program's walk prices: CUDA's cuBLASLt workspace
  // (32 MiB, the size NVIDIA recommends for Hopper: CUBLAS_WORKSPACE_CONFIG) and the
  // bias-gradient scratch (4 MiB; kernels/cuda/cuda_resources.h); none on the CPU.
  double workspace_bytes = 0;
  // The device memory a run takes outside its tensors where neither a profile nor the cluster
  // file says (cost_model.h: device_headroom_for): CUDA's as `strata calibrate --backend
  // cuda` measured it on an H200 (configs/profiles/h200-calibrated-2026-11-26.json); none on
  // the CPU, whose ranks' budgets are their tensors'.
  DeviceHeadroom default_headroom;
  // The host memory of a node its ranks' tensors cannot have, where the cluster file does not
  // say (host_headroom_for): measured on this project's 2-core VM (2026-11-28): the kernel
  // and firmware keep 1.9% (a 24 GiB VM shows MemTotal 24,683,620 kB), and a CPU-backend rank
  // training tiny peaked at 34,252 kB resident with 8.6 MiB of tensors: 32 MiB a rank. A CUDA
  // rank's runtime keeps more on the host (driver, cuBLASLt, NCCL), not yet measured: the
  // same figures stand until it is.
  HostHeadroom default_host_headroom;
};

// The host headroom of a cluster: its file's "host_headroom", else the backend's default.
const HostHeadroom& host_headroom_for(const ClusterSpec& cluster);

const BackendFacts& backend_facts(Backend backend);

// What the executor's layers do not run yet, on either backend: "" or the reason
// (grouped-query attention with biases, whose q bias sits between Q and K|V; a LayerNorm
// without its bias). KV heads replicated over TP (t > kv_heads) are run.
std::string executor_family_violation(const ModelSpec& model);

// "" when the executor on `backend` trains `model` with `train` at tensor-parallel degree
// `tp`, else the reason, naming the numbers and the fact broken (head size, row widths,
// precision, the layer family).
std::string backend_violation(const BackendFacts& backend, const ModelSpec& model,
                              const TrainSpec& train, std::int64_t tp);

// "" when the TP groups of `plan` stay inside nodes of `ranks_per_node` ranks filled in
// world-rank order (see the file comment), else the reason.
std::string placement_violation(const Plan& plan, std::int64_t ranks_per_node);

// Everything above for `plan` on `cluster` (its backend; its nodes of gpus_per_node): ""
// when `strata run` accepts the plan there, as far as the plan itself decides (the rest of
// run's checks are of the machine, the data and the files).
std::string runnable_violation(const ModelSpec& model, const TrainSpec& train, const Plan& plan,
                               const ClusterSpec& cluster);

}  // namespace strata
