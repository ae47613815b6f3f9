// Profile: calibrated rates of one machine (`strata calibrate`), used by the time model in
// place of its default curves. Every field is optional: an empty table means "use the
// default curve from the ClusterSpec".
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cost_model/specs/conventions.h"
#include "cost_model/specs/device_headroom.h"
#include "cost_model/specs/json_reader.h"

namespace strata {

// One measured GEMM: C(m,n) = A(m,k) B(k,n) at the given dtype reached `flops_per_s`.
struct GemmSample {
  std::int64_t m = 0, n = 0, k = 0;
  double flops_per_s = 0;
};

// A collective fitted as t(bytes) = latency_s + bytes * bus_factor / bandwidth_bytes_per_s
// (nccl-tests' bus bandwidth), measured over `ranks` ranks on one link class.
// Grouped-query attention (the query heads of a group sharing one key/value head, as Llama 3
// runs it) timed at one head size: causal FLOPs (2 B NH T^2 HS, NH the query heads) per second
// forward, and the backward's (twice those FLOPs) per second (0: not measured). A kernel's rate
// follows its head size (a GPU kernel's tiles are built for 64 and 128), so the time model
// reads the sample nearest the model's head size.
struct AttentionSample {
  std::int64_t head_size = 0;
  double flops_per_s = 0;
  double backward_flops_per_s = 0;
};

struct CollectiveFit {
  std::string op;          // "all_reduce" | "reduce_scatter" | "all_gather" | "p2p"
  std::string link;        // "intra_node" | "inter_node"
  std::int64_t ranks = 0;
  double latency_s = 0;
  double bus_bandwidth_bytes_per_s = 0;
};

// CPU AdamW's memory traffic a parameter: the fp32 parameter, gradient and two moments read
// (16 bytes), the parameter and moments written (12). The host must carry it: a profile
// whose cpu_adam_params_per_s times this exceeds kAdamOverMemoryTolerance times its measured
// host_memory_bytes_per_s was timed on arrays the cache held, and is refused on load
// (profile.cc says why the check is on that rate only).
inline constexpr double kCpuAdamBytesPerParam = 28;
// The two rates are timed apart on a machine others share: 20% for the noise between them.
inline constexpr double kAdamOverMemoryTolerance = 1.2;

struct Profile {
  std::string machine;                     // free text: hostname, CPU/GPU model
  std::string backend;                     // "cpu" | "cuda"
  std::vector<GemmSample> gemm;            // GEMM efficiency by shape
  double elementwise_bytes_per_s = 0;      // memory-bound kernels (LayerNorm, GeLU, softmax...)
  double attention_flops_per_s = 0;        // causal attention kernel rate
  // Backward twins (0: not measured; the time model then prices a backward from the forward):
  // attention backward in causal backward FLOPs (4 B NH T^2 HS) per second, and the
  // memory-bound backward kernels (LayerNorm, GeLU backward, gradient copies).
  double attention_backward_flops_per_s = 0;
  double elementwise_backward_bytes_per_s = 0;
  // Llama's operators, each timed alone on the backend's kernels (0: not measured; the time
  // model then prices their bytes at the elementwise rates above, and a backward without its
  // own rate at its forward's): RMSNorm, SwiGLU and the rotary embedding in the bytes
  // compute_model.h's llama_op_bytes counts for them, forward and backward; grouped-query
  // attention by head size (empty: not measured; the attention rates above then apply).
  double rmsnorm_bytes_per_s = 0;
  double rmsnorm_backward_bytes_per_s = 0;
  double swiglu_bytes_per_s = 0;
  double swiglu_backward_bytes_per_s = 0;
  double rope_bytes_per_s = 0;
  double rope_backward_bytes_per_s = 0;
  std::vector<AttentionSample> gqa_attention;
  double host_to_device_bytes_per_s = 0;
  double device_to_host_bytes_per_s = 0;
  double nvme_read_bytes_per_s = 0;
  double nvme_write_bytes_per_s = 0;
  double cpu_adam_params_per_s = 0;        // CPU AdamW update rate (all cores)
  double device_adam_params_per_s = 0;     // AdamW on the device
  // The host's streaming memory bandwidth, all cores, on arrays out of the cache (0: not
  // measured), and the sizes the host-memory rates (it, CPU AdamW, the CPU backend's
  // copies) were timed at: their arrays' bytes and the last-level cache they exceed.
  double host_memory_bytes_per_s = 0;
  std::int64_t memory_working_set_bytes = 0;
  std::int64_t last_level_cache_bytes = 0;
  std::vector<CollectiveFit> collectives;
  // Per-op fixed overhead (kernel launch / framework dispatch), set by hand; nothing measures
  // it (runs fold into the factors below instead).
  double op_overhead_s = 0;
  // CPU backend: the OpenMP/BLAS threads of one rank the kernel rates above were timed at
  // (0: not recorded, taken as 1). Ranks sharing a node's cores get a share of these rates.
  std::int64_t threads_per_rank = 0;
  // CPU backend: how much slower those kernels ran with all busy_cores cores of the node
  // running them at once than alone (usually >= 1; a VM can show less; 0: not recorded, taken
  // as 1). Ranks that keep n of the cores busy see a slowdown interpolated linearly from 1 at
  // n = 1.
  double busy_cores_slowdown = 0;
  std::int64_t busy_cores = 0;
  // CPU backend, ranks time-sharing the cores (ranks x threads > cores): the seconds each
  // blocking collective or transfer waits, on average, for a peer the scheduler has swapped
  // out, per other rank ahead of it on its core; added, times (ranks x threads / cores - 1),
  // to every measured collective's latency (time_model.h). Fitted from such runs only (0:
  // none).
  double time_sliced_sync_s = 0;
  // Measured runs against these rates (`strata run --update-profile`, profile_feedback.h):
  // every compute time of a prediction is multiplied by compute_time_scale, every
  // collective and point-to-point time by comm_time_scale (0: never fitted, taken as 1).
  double compute_time_scale = 0;
  double comm_time_scale = 0;
  // What the last runs folded in asked each fed-back factor to be, oldest first (the
  // calibration's busy_cores_slowdown is the first of its list): the factor is their trimmed
  // mean (profile_feedback.h). Empty: the factor was set by hand or never fitted.
  std::vector<double> busy_cores_slowdown_asks;
  std::vector<double> time_sliced_sync_asks;
  std::vector<double> compute_time_scale_asks;
  std::vector<double> comm_time_scale_asks;

  // The kernels the rates were measured with (conventions.h); unset: strata's executor's.
  std::optional<KernelConventions> conventions;
  DeviceHeadroom headroom;

  static Profile from_json(const Json& json, const std::string& source);
  static Profile load(const std::string& path);
  Json to_json() const;
};

}  // namespace strata
