// Compute primitives of the time model: the time of one GEMM from its shape, of a
// memory-bound kernel from its bytes, and the forward of one transformer layer, the
// embedding and the logits for one micro-batch on one tensor-parallel rank.
//
// GEMM (C[m,n] = A[m,k] B[k,n], batch independent copies): a roofline
//   t = max(2 m n k batch / (peak * eff(m,n,k)),  bytes(A,B,C) / (HBM * kMemoryEfficiency))
// with the default shape curve
//   eff(m,n,k) = kGemmPeakEfficiency * m/(m+kGemmHalfDim) * n/(n+kGemmHalfDim) * k/(k+kGemmHalfDim)
// Why this form: large bf16 GEMMs on A100/H100 reach ~80% of the tensor-core peak (cuBLAS
// saturates there: clocks under load, epilogue, tile tails); each small dimension leaves
// tiles/waves partly idle, a loss that vanishes as the dimension grows past a few tile
// widths, which x/(x+x0) captures with x0 ~ one 128-wide tile. Low arithmetic intensity is
// the roofline's memory term. With a Profile, the measured samples replace the curve
// (inverse-distance interpolation in log-shape space of the nearest samples).
//
// A measured GEMM sample is a throughput at that shape, its memory traffic included: with
// samples the roofline's memory term is dropped (the HBM figure is not this GEMM's limit).
//
// Memory-bound kernels (LayerNorm, GeLU, softmax, dropout, residual adds): bytes read and
// written / (HBM bandwidth * kMemoryEfficiency), or the Profile's elementwise_bytes_per_s
// (only these kernels: it is not the GEMMs' memory limit).
//
// Attention with a Profile's attention_flops_per_s (measured as causal FLOPs 2 B NH T^2 HS
// per forward, softmax included): the attention core costs those FLOPs at that rate, on the
// flash path and on the CPU backend's materialized path alike.
//
// Llama's operators with a Profile's rates for them (profile.h): a layer's memory-bound bytes
// are split into the RMSNorms', SwiGLU's and the rotary embedding's (llama_op_bytes, each 0
// where the model makes GPT's choice) and the rest (residual adds, gradient copies, bias
// passes); each of the three at its measured rate, the rest at the elementwise rate. A
// grouped-query model's attention (kv_heads < heads) runs at the gqa_attention sample nearest
// its head size. Every one falls back to the rate it had before the profile measured it: a
// Llama op's backward to its forward's rate, then both to the elementwise rates; grouped-query
// attention to attention_flops_per_s (and a backward to 2x its forward). A GPT model reads
// none of them.
//
// Backward of a layer (layer_backward): without a Profile, 2x the forward (each GEMM becomes
// two of the same FLOPs; the efficiency curve is symmetric in m, n, k, so a shape-by-shape
// pricing gives the same GEMM time). With a Profile, each linear layer's two backward GEMMs
// at their own shapes (dinp (BT, C) = dout (BT, OC) W: m = BT, n = C, k = OC; dW (OC, C) =
// dout^T inp: m = OC, n = C, k = BT), the attention backward at the measured backward rate
// (else 2x the forward), and the backward kernels' bytes at the measured backward elementwise
// rate (else the forward one).
//
// CPU backend: the "device" is one MPI rank and a node's ranks share its cores. The kernel
// rates (GEMM, elementwise, attention, AdamW) are those of one rank running on
// threads_per_rank cores of its own (the Profile records it; 1 without a Profile); with r
// ranks on c cores each gets compute_share = min(1, c / (r x threads)) of them (time-sliced
// beyond one rank per core; `strata run` gives each rank max(1, c / r) threads, which the
// calibration matches, so the share is 1 up to c ranks).
//
// Any backend: a Profile's compute_time_scale (fitted from measured runs,
// profile_feedback.h) divides the share, so every kernel and the device optimizer take that
// factor longer.
//
// Deliberately not here: communication (collectives.h), how the layer ops combine into a
// step (time_model.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "cost_model/specs/cluster_spec.h"
#include "cost_model/specs/conventions.h"
#include "cost_model/specs/model_spec.h"
#include "cost_model/specs/plan.h"
#include "cost_model/specs/profile.h"
#include "cost_model/specs/train_spec.h"

namespace strata {

// Kernel calls of one layer's forward and backward that each pay the Profile's op_overhead_s
// (the executor's CPU layer: 6 GEMMs, attention, 2 LayerNorms, GeLU, 2 residual adds ~ 12
// forward; twice as many in the backward, each matmul_backward being two GEMMs and a bias sum).
inline constexpr double kLayerForwardOps = 12.0;
inline constexpr double kLayerBackwardOps = 24.0;
// Of the forward's: fc2, its bias add and the residual add (what a recomputation that stops
// at the GeLU output skips).
inline constexpr double kLayerOutputOps = 3.0;

// Constants of the default curves (documented above; a Profile overrides them).
inline constexpr double kGemmPeakEfficiency = 0.75;
inline constexpr double kGemmHalfDim = 96.0;
// Streaming kernels reach ~80% of HBM peak on A100/H100 (STREAM-like copy).
inline constexpr double kMemoryEfficiency = 0.80;

// A Profile's GEMM samples where gemm_efficiency interpolates: in log2-shape space. Made
// once per DeviceRates, not on each GEMM priced: a plan search prices ~20 GEMM shapes per
// candidate, and the log2 of every sample on each of them was a fifth of its time.
struct GemmSamplePoints {
  struct Point {
    double log2_m = 0, log2_n = 0, log2_k = 0;
    double flops_per_s = 0;
  };
  const Profile* profile = nullptr;  // whose samples these are
  std::vector<Point> points;         // its usable samples (shape and rate > 0), in its order
};
GemmSamplePoints gemm_sample_points(const Profile& profile);

// The device rates one prediction uses.
struct DeviceRates {
  double peak_flops = 0;             // dense peak in the train precision
  double memory_bytes_per_s = 0;     // achievable HBM bandwidth (the GEMM roofline)
  int element_bytes = 2;             // compute precision
  const Profile* profile = nullptr;  // GEMM samples, when given
  // Memory-bound kernels: the profile's measured rate (0: memory_bytes_per_s).
  double elementwise_bytes_per_s = 0;
  // Share of the rates above one rank gets (CPU backend: ranks sharing the cores; else 1).
  double compute_share = 1;
  // profile's samples as gemm_efficiency reads them, made by device_rates (so a profile
  // changed afterwards needs new rates); where they are missing or another profile's,
  // gemm_efficiency makes them on each call: the same figures.
  std::shared_ptr<const GemmSamplePoints> gemm_points = nullptr;
};
DeviceRates device_rates(const ClusterSpec& cluster, const TrainSpec& train,
                         const Profile* profile);
// The same for `ranks_per_node` ranks of one plan on a node (sets compute_share, see above).
DeviceRates device_rates(const ClusterSpec& cluster, const TrainSpec& train,
                         const Profile* profile, std::int64_t ranks_per_node);
// The peak MFU is taken against, per rank: the cluster device's in the train precision, or
// the best GEMM rate the profile measured when that is higher (a nominal figure below what
// the hardware reached, as local-cpu's once was, put MFU above 100%), times the cores the
// rank's kernels run on. On the CPU backend the device is one core and the profile's GEMMs
// ran on its threads_per_rank threads, so both are per core before the multiplication (a
// 2-thread rank compared with one core's peak read 105%); on GPUs cores_per_rank is 1.
double mfu_peak_flops(const ClusterSpec& cluster, const TrainSpec& train, const Profile* profile,
                      double cores_per_rank = 1);
// The cores one rank's kernels run on: on the CPU backend min(threads_per_rank, host cores /
// ranks_per_node) (ranks time-sharing the cores each get their share of one), else 1.
double mfu_cores_per_rank(const ClusterSpec& cluster, std::int64_t ranks_per_node,
                          std::int64_t threads_per_rank);
// Ranks of a plan that share one node (its host, its cores, its NVMe).
inline std::int64_t plan_ranks_per_node(const Plan& plan, const ClusterSpec& cluster) {
  return std::min(plan.world_size(), cluster.gpus_per_node);
}
// The kernel threads of one rank the rates assume: profile->threads_per_rank when recorded,
// else 1.
std::int64_t profile_threads_per_rank(const Profile* profile);
// min(1, cores / (ranks x threads)) on the CPU backend, 1 otherwise; threads =
// profile_threads_per_rank.
double cpu_compute_share(const ClusterSpec& cluster, const Profile* profile,
                         std::int64_t ranks_per_node);

struct GemmTime {
  double flops = 0;
  double bytes = 0;
  double efficiency = 0;  // of peak, from the shape curve or the profile
  double compute_s = 0;
  double memory_s = 0;
  double time_s() const { return compute_s > memory_s ? compute_s : memory_s; }
};

// Default shape curve (see above); 0 < eff <= kGemmPeakEfficiency.
double gemm_efficiency_curve(double m, double n, double k);
// Profile interpolation when it has GEMM samples, else the curve.
double gemm_efficiency(double m, double n, double k, const DeviceRates& rates);
GemmTime gemm_time(double m, double n, double k, double batch, const DeviceRates& rates);

// bytes / achievable bandwidth.
double memory_bound_time(double bytes, const DeviceRates& rates);

// The kernels a run uses: the published Megatron runs use materialized attention with
// dropout (p = 0.1) on the probabilities and after the projections; strata's executor trains
// without dropout.
struct LayerKernels {
  AttentionKernel attention = AttentionKernel::kFlash;
  bool dropout = false;
  // Biases in passes of their own (strata's CPU backend: matmul_forward seeds the output with
  // the bias, the row-parallel projections add it after the all-reduce; matmul_backward sums
  // the bias gradient over the rows) instead of fused into the GEMM epilogue.
  bool separate_bias = false;
  // Full recomputation stops at the last tensor the backward needs (the GeLU output): the
  // layer's output GEMM (fc2), its bias, residual add and TP collective are not rerun, their
  // result being the next layer's saved input (strata's CPU executor). Megatron's
  // checkpointing and strata's CUDA engine rerun the whole layer.
  bool recompute_skips_output = false;
  // Gradients reduced in fp32 rather than in the compute dtype
  // (KernelConventions::fp32_gradient_reductions): the bytes each gradient reduction moves.
  bool fp32_gradient_reductions = true;
};
// The layer's kernels under a set of conventions (conventions.h).
LayerKernels layer_kernels(const KernelConventions& conventions);

// Forward of one transformer layer for one micro-batch (b sequences) on one TP rank.
struct LayerForward {
  GemmTime qkv;         // [b s, h] x [h, 3h/t]                       6 b s h^2 / t FLOPs
  GemmTime attn_score;  // (b a/t) x [s, d] x [d, s]                 2 b s^2 h / t
  GemmTime attn_value;  // (b a/t) x [s, s] x [s, d]                 2 b s^2 h / t
  GemmTime proj;        // [b s, h/t] x [h/t, h]                      2 b s h^2 / t
  GemmTime fc1;         // [b s, h] x [h, f/t]                        2 b s h f / t
  GemmTime fc2;         // [b s, f/t] x [f/t, h]                      2 b s h f / t
  double softmax_bytes = 0;      // attention softmax (+ dropout) traffic (0 for kFlash)
  double elementwise_bytes = 0;  // LayerNorms, bias+GeLU, bias+dropout+residual adds
  double softmax_s = 0;
  double elementwise_s = 0;
  // Of elementwise_s: what follows fc2 (its bias, dropout and residual add).
  double output_elementwise_s = 0;
  // The attention core (what selective recomputation recomputes): scores, softmax, values.
  double attention_core_s() const;
  // What a full recomputation reruns: time_s(), less fc2 and output_elementwise_s when the
  // kernels' recompute_skips_output.
  double full_recompute_s(const LayerKernels& kernels) const;
  double gemm_s() const;
  double flops() const;
  double time_s() const;
};
LayerForward layer_forward(const ModelSpec& model, std::int64_t micro_batch, std::int64_t tp,
                           bool sequence_parallel, const LayerKernels& kernels,
                           const DeviceRates& rates);

// Bytes read and written by the memory-bound kernels of one layer's forward / backward for
// one micro-batch on one TP rank (LayerNorms, GeLU, residual adds, gradient copies, separate
// bias passes): the elementwise_bytes of LayerForward / LayerBackward. `strata calibrate`
// divides the same counts by the measured time of those kernels, so a rate and its use agree
// on what a byte stands for (the GeLU's tanh makes its bytes dearer than a copy's).
double layer_elementwise_bytes(const ModelSpec& model, std::int64_t micro_batch, std::int64_t tp,
                               bool sequence_parallel, const LayerKernels& kernels,
                               double element_bytes);
double layer_backward_elementwise_bytes(const ModelSpec& model, std::int64_t micro_batch,
                                        std::int64_t tp, bool sequence_parallel,
                                        const LayerKernels& kernels, double element_bytes);

// Of those bytes, what Llama's operators move for one micro-batch on one TP rank (0 for a
// model that makes GPT's choice instead), forward or backward:
//   RMSNorm, the layer's two (on s/t tokens a sequence with sequence parallelism):
//       forward read h, write h: 2 x 2 h c a token; backward read dout, inp, dinp, write
//       dinp: 2 x 4 h c
//   SwiGLU: forward read gate and up, write their product: 3 c f/t a token; backward read
//       gate, up and dout, write dgate and dup: 5 c f/t
//   rotary embedding: q and k of the rank's heads read and written, 2 c (h/t + kv_local d) a
//       token, forward and backward alike.
// `strata calibrate` divides the same counts by each operator's measured seconds.
struct LlamaOpBytes {
  double rmsnorm = 0;
  double swiglu = 0;
  double rope = 0;
};
LlamaOpBytes llama_op_bytes(const ModelSpec& model, std::int64_t micro_batch, std::int64_t tp,
                            bool sequence_parallel, double element_bytes, bool backward);

// The profile's grouped-query attention sample for the model: the one whose head size is
// nearest the model's (in log2; the first of equals), or null when the model is not
// grouped-query (kv_heads = heads) or the profile (possibly null) has none.
const AttentionSample* gqa_attention_sample(const ModelSpec& model, const Profile* profile);

// Backward of one transformer layer for one micro-batch on one TP rank (see the header
// comment for how it is priced with and without a Profile).
struct LayerBackward {
  // Input- and weight-gradient GEMMs of qkv, proj, fc1, fc2 in that order.
  GemmTime input_grad[4];
  GemmTime weight_grad[4];
  double attention_s = 0;        // attention core backward (softmax backward included)
  double elementwise_bytes = 0;  // LayerNorm and GeLU backward, gradient copies, bias sums
  double elementwise_s = 0;
  double time_s() const;
};
LayerBackward layer_backward(const ModelSpec& model, std::int64_t micro_batch, std::int64_t tp,
                             bool sequence_parallel, const LayerKernels& kernels,
                             const DeviceRates& rates);

// Forward of the output layer and loss for one micro-batch on one TP rank: the logits GEMM
// [b s, h] x [h, V/t] (2 b s h V / t FLOPs), the final LayerNorm and the vocab-parallel
// cross-entropy (softmax over V/t in fp32: read, exp/sum, write).
struct HeadForward {
  GemmTime logits;
  double elementwise_s = 0;
  double time_s() const { return logits.time_s() + elementwise_s; }
};
HeadForward head_forward(const ModelSpec& model, std::int64_t micro_batch, std::int64_t tp,
                         const DeviceRates& rates);
// Its backward with a Profile: the logits' input- and weight-gradient GEMMs ([b s, V/t] x
// [V/t, h] and [V/t, b s] x [b s, h]), the cross-entropy gradient (read the fp32 softmax,
// write the logits' gradient) and the final LayerNorm backward; without one, 2x the forward.
double head_backward_s(const ModelSpec& model, std::int64_t micro_batch, std::int64_t tp,
                       const DeviceRates& rates);

// Forward of the embedding for one micro-batch: gather of token rows + positions, dropout;
// memory-bound, b s h elements written (twice read).
double embedding_forward_s(const ModelSpec& model, std::int64_t micro_batch,
                           const DeviceRates& rates);

}  // namespace strata
