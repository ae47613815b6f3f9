// Compute primitives: GEMM roofline with a shape-dependent efficiency, memory-bound kernels,
// and the per-micro-batch forward of a layer, the head and the embedding (compute_model.h).
#include "cost_model/pricing/compute_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/layer_tensors.h"

namespace strata {

std::int64_t profile_threads_per_rank(const Profile* profile) {
  return profile != nullptr && profile->threads_per_rank > 0 ? profile->threads_per_rank : 1;
}

double cpu_compute_share(const ClusterSpec& cluster, const Profile* profile,
                         std::int64_t ranks_per_node) {
  if (cluster.backend != Backend::kCpu || cluster.host.cpu_cores <= 0) return 1.0;
  const auto threads = static_cast<double>(profile_threads_per_rank(profile));
  const double ranks = static_cast<double>(std::max<std::int64_t>(ranks_per_node, 1));
  const double cores = static_cast<double>(cluster.host.cpu_cores);
  const double share = std::min(1.0, cores / (ranks * threads));
  // Contention among the busy cores (the profile's busy_cores_slowdown, measured with all of
  // its busy_cores cores running kernels): 1 with one core busy, linear up to the measured
  // figure, and that figure once every core is busy.
  // (Below 1 too: on a VM, ranks that keep every core busy can run faster than one alone.)
  if (profile == nullptr || profile->busy_cores < 2 || !(profile->busy_cores_slowdown > 0.0)) {
    return share;
  }
  const double measured_cores = static_cast<double>(profile->busy_cores);
  const double busy = std::min({ranks * threads, cores, measured_cores});
  const double slowdown =
      1.0 + (profile->busy_cores_slowdown - 1.0) * (busy - 1.0) / (measured_cores - 1.0);
  return share / slowdown;
}

DeviceRates device_rates(const ClusterSpec& cluster, const TrainSpec& train,
                         const Profile* profile) {
  return device_rates(cluster, train, profile, 1);
}

DeviceRates device_rates(const ClusterSpec& cluster, const TrainSpec& train,
                         const Profile* profile, std::int64_t ranks_per_node) {
  DeviceRates rates;
  rates.peak_flops = train.precision == Precision::kBf16 ? cluster.device.bf16_flops
                                                         : cluster.device.fp32_flops;
  if (!(rates.peak_flops > 0)) {
    throw ConfigError(fmt::format("cluster '{}': device peak FLOP/s for {} must be > 0, got {}",
                                  cluster.name, to_string(train.precision), rates.peak_flops));
  }
  rates.memory_bytes_per_s = cluster.device.memory_bandwidth_bytes_per_s * kMemoryEfficiency;
  if (!(rates.memory_bytes_per_s > 0)) {
    throw ConfigError(fmt::format(
        "cluster '{}': device.hbm_bandwidth_gb_per_s must be > 0, got {}", cluster.name,
        cluster.device.memory_bandwidth_bytes_per_s));
  }
  rates.elementwise_bytes_per_s = rates.memory_bytes_per_s;
  if (profile != nullptr && profile->elementwise_bytes_per_s > 0) {
    rates.elementwise_bytes_per_s = profile->elementwise_bytes_per_s;  // measured, achievable
  }
  rates.compute_share = cpu_compute_share(cluster, profile, ranks_per_node);
  // What measured runs taught the profile (profile_feedback.h): every compute rate at once.
  if (profile != nullptr && profile->compute_time_scale > 0) {
    rates.compute_share /= profile->compute_time_scale;
  }
  rates.element_bytes = train.compute_bytes();
  rates.profile = profile;
  if (profile != nullptr && !profile->gemm.empty()) {
    rates.gemm_points = std::make_shared<const GemmSamplePoints>(gemm_sample_points(*profile));
  }
  return rates;
}

GemmSamplePoints gemm_sample_points(const Profile& profile) {
  GemmSamplePoints table;
  table.profile = &profile;
  table.points.reserve(profile.gemm.size());
  for (const GemmSample& s : profile.gemm) {
    if (s.m <= 0 || s.n <= 0 || s.k <= 0 || !(s.flops_per_s > 0)) continue;
    table.points.push_back({std::log2(static_cast<double>(s.m)), std::log2(static_cast<double>(s.n)),
                            std::log2(static_cast<double>(s.k)), s.flops_per_s});
  }
  return table;
}

double mfu_peak_flops(const ClusterSpec& cluster, const TrainSpec& train, const Profile* profile,
                      double cores_per_rank) {
  double peak = train.precision == Precision::kBf16 ? cluster.device.bf16_flops
                                                    : cluster.device.fp32_flops;
  if (profile != nullptr) {
    const double timed_on = cluster.backend == Backend::kCpu
                                ? static_cast<double>(profile_threads_per_rank(profile))
                                : 1.0;
    for (const GemmSample& g : profile->gemm) peak = std::max(peak, g.flops_per_s / timed_on);
  }
  return peak * cores_per_rank;
}

double mfu_cores_per_rank(const ClusterSpec& cluster, std::int64_t ranks_per_node,
                          std::int64_t threads_per_rank) {
  if (cluster.backend != Backend::kCpu || cluster.host.cpu_cores <= 0) return 1.0;
  const double ranks = static_cast<double>(std::max<std::int64_t>(ranks_per_node, 1));
  return std::min(static_cast<double>(std::max<std::int64_t>(threads_per_rank, 1)),
                  static_cast<double>(cluster.host.cpu_cores) / ranks);
}

double gemm_efficiency_curve(double m, double n, double k) {
  const auto saturation = [](double x) { return x / (x + kGemmHalfDim); };
  return kGemmPeakEfficiency * saturation(m) * saturation(n) * saturation(k);
}

double gemm_efficiency(double m, double n, double k, const DeviceRates& rates) {
  if (rates.profile == nullptr || rates.profile->gemm.empty()) {
    return gemm_efficiency_curve(m, n, k);
  }
  // Inverse-distance weighting over the (up to) 4 nearest samples in log2-shape space;
  // an exact shape match returns its sample. Fixed-size arrays: no allocation per call.
  constexpr int kNearest = 4;
  std::array<double, kNearest> best_dist;
  std::array<double, kNearest> best_eff{};
  best_dist.fill(std::numeric_limits<double>::infinity());
  const double lm = std::log2(m), ln = std::log2(n), lk = std::log2(k);
  std::optional<GemmSamplePoints> made_here;
  const GemmSamplePoints* samples = rates.gemm_points.get();
  if (samples == nullptr || samples->profile != rates.profile) {
    samples = &made_here.emplace(gemm_sample_points(*rates.profile));
  }
  // A sample whose squared distance is above the 4th nearest's squared, with a margin far
  // wider than the rounding of a square and a root (1e-9 against 1e-16), is no nearer after
  // the root either: skipped without a root or a division (most of the 72 samples).
  double skip_above = std::numeric_limits<double>::infinity();
  for (const GemmSamplePoints::Point& s : samples->points) {
    const double dm = s.log2_m - lm;
    const double dn = s.log2_n - ln;
    const double dk = s.log2_k - lk;
    const double d2 = dm * dm + dn * dn + dk * dk;
    if (d2 > skip_above) continue;
    const double d = std::sqrt(d2);
    for (int i = 0; i < kNearest; ++i) {
      if (d < best_dist[i]) {
        for (int j = kNearest - 1; j > i; --j) {
          best_dist[j] = best_dist[j - 1];
          best_eff[j] = best_eff[j - 1];
        }
        best_dist[i] = d;
        best_eff[i] = s.flops_per_s / rates.peak_flops;
        skip_above = best_dist[kNearest - 1] * best_dist[kNearest - 1] * (1 + 1e-9);
        break;
      }
    }
  }
  if (!std::isfinite(best_dist[0])) return gemm_efficiency_curve(m, n, k);
  if (best_dist[0] < 1e-9) return best_eff[0];
  double weight_sum = 0, eff_sum = 0;
  for (int i = 0; i < kNearest && std::isfinite(best_dist[i]); ++i) {
    const double w = 1.0 / (best_dist[i] * best_dist[i]);
    weight_sum += w;
    eff_sum += w * best_eff[i];
  }
  return eff_sum / weight_sum;
}

GemmTime gemm_time(double m, double n, double k, double batch, const DeviceRates& rates) {
  GemmTime t;
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return t;
  t.flops = 2.0 * m * n * k * batch;
  t.bytes = (m * k + k * n + m * n) * batch * rates.element_bytes;
  t.efficiency = gemm_efficiency(m, n, k, rates);
  t.compute_s = t.flops / (rates.peak_flops * t.efficiency * rates.compute_share);
  // A measured sample already includes the GEMM's memory traffic (see compute_model.h).
  const bool measured = rates.profile != nullptr && !rates.profile->gemm.empty();
  t.memory_s = measured ? 0.0 : t.bytes / (rates.memory_bytes_per_s * rates.compute_share);
  return t;
}

double memory_bound_time(double bytes, const DeviceRates& rates) {
  const double rate =
      rates.elementwise_bytes_per_s > 0 ? rates.elementwise_bytes_per_s : rates.memory_bytes_per_s;
  return bytes / (rate * rates.compute_share);
}

namespace {

// Channels of q and k on one TP rank that a rotary embedding turns: h/t + kv_local d.
double rotated_width(const ModelSpec& model, std::int64_t tp) {
  return static_cast<double>(model.hidden / tp + kv_heads_per_rank(model, tp) * model.head_dim());
}

// Seconds of `bytes` of memory-bound backward kernels: the measured backward rate when the
// profile has one, else the forward kernels' rate.
double backward_memory_bound_time(double bytes, const DeviceRates& rates) {
  if (rates.profile != nullptr && rates.profile->elementwise_backward_bytes_per_s > 0) {
    return bytes / (rates.profile->elementwise_backward_bytes_per_s * rates.compute_share);
  }
  return memory_bound_time(bytes, rates);
}

// Elements per token (times the element bytes) of the memory-bound kernels the family's
// choices add, on one TP rank (f/t wide MLP, q and k of the rank's heads):
//   GeLU: bias + GeLU on fc1's output: forward read and write 2 f/t; backward read inp,
//         dout, dinp, write dinp 4 f/t
//   SwiGLU: silu(gate) * up: forward read gate and up, write the product 3 f/t; backward
//         read gate, up and dout, write dgate and dup 5 f/t
//   rotary: q and k rotated in place, read and write 2 (h/t + kv_local d), backward alike
// (RMSNorm moves the bytes of a LayerNorm: kNormsElements.)
struct FamilyElements {
  double mlp = 0;
  double rope = 0;
};
FamilyElements family_elements_per_token(const ModelSpec& model, std::int64_t tp, bool backward) {
  const double f = static_cast<double>(model.ffn_hidden) / static_cast<double>(tp);
  FamilyElements e;
  if (model.mlp == MlpKind::kSwiglu) {
    e.mlp = (backward ? 5.0 : 3.0) * f;
  } else {
    e.mlp = (backward ? 4.0 : 2.0) * f;
  }
  if (model.position == PositionKind::kRope) e.rope = 2.0 * rotated_width(model, tp);
  return e;
}
double family_forward_bytes_per_token(const ModelSpec& model, std::int64_t tp) {
  const FamilyElements e = family_elements_per_token(model, tp, false);
  return e.mlp + e.rope;
}
double family_backward_bytes_per_token(const ModelSpec& model, std::int64_t tp) {
  const FamilyElements e = family_elements_per_token(model, tp, true);
  return e.mlp + e.rope;
}

// Elements per hidden token (times h and the element bytes) of a layer's two norms, LayerNorm
// or RMSNorm: forward read h, write h each; backward read dout, inp, dinp, write dinp each.
constexpr double kNormsForwardElements = 2.0 * 2.0;
constexpr double kNormsBackwardElements = 2.0 * 4.0;

// Seconds of a layer's `bytes` of memory-bound kernels, of which `llama` are Llama's
// operators: each of those at the profile's rate for it (a backward without one at its
// forward's), the rest, and any operator the profile has no rate for, at the elementwise
// rate (backward_memory_bound_time's in the backward). With no operator rate the rest is
// all the bytes, so the figure is the elementwise rate's alone, to the bit.
double layer_memory_bound_s(double bytes, const LlamaOpBytes& llama, const DeviceRates& rates,
                            bool backward) {
  const Profile* p = rates.profile;
  const auto rate = [&](double Profile::*forward_rate, double Profile::*backward_rate) {
    if (p == nullptr) return 0.0;
    return backward && p->*backward_rate > 0 ? p->*backward_rate : p->*forward_rate;
  };
  const std::pair<double, double> ops[] = {
      {llama.rmsnorm, rate(&Profile::rmsnorm_bytes_per_s, &Profile::rmsnorm_backward_bytes_per_s)},
      {llama.swiglu, rate(&Profile::swiglu_bytes_per_s, &Profile::swiglu_backward_bytes_per_s)},
      {llama.rope, rate(&Profile::rope_bytes_per_s, &Profile::rope_backward_bytes_per_s)},
  };
  double rest = bytes;
  double own_s = 0;
  for (const auto& [op_bytes, op_rate] : ops) {
    if (op_bytes <= 0 || op_rate <= 0) continue;
    rest -= op_bytes;
    own_s += op_bytes / (op_rate * rates.compute_share);
  }
  const double rest_s =
      backward ? backward_memory_bound_time(rest, rates) : memory_bound_time(rest, rates);
  return rest_s + own_s;
}

}  // namespace

LlamaOpBytes llama_op_bytes(const ModelSpec& model, std::int64_t micro_batch, std::int64_t tp,
                            bool sequence_parallel, double element_bytes, bool backward) {
  const double h = static_cast<double>(model.hidden);
  const double c = element_bytes;
  const double tokens = static_cast<double>(micro_batch * model.seq_len);
  const double hidden_tokens = sequence_parallel ? tokens / static_cast<double>(tp) : tokens;
  const FamilyElements family = family_elements_per_token(model, tp, backward);
  LlamaOpBytes b;
  if (model.norm == NormKind::kRmsNorm) {
    b.rmsnorm = hidden_tokens * (backward ? kNormsBackwardElements : kNormsForwardElements) * h * c;
  }
  if (model.mlp == MlpKind::kSwiglu) b.swiglu = tokens * family.mlp * c;
  b.rope = tokens * family.rope * c;
  return b;
}

const AttentionSample* gqa_attention_sample(const ModelSpec& model, const Profile* profile) {
  if (profile == nullptr || model.kv_head_count() >= model.heads) return nullptr;
  const double want = std::log2(static_cast<double>(model.head_dim()));
  const AttentionSample* best = nullptr;
  double best_distance = std::numeric_limits<double>::infinity();
  for (const AttentionSample& s : profile->gqa_attention) {
    const double distance = std::abs(std::log2(static_cast<double>(s.head_size)) - want);
    if (distance < best_distance) {
      best = &s;
      best_distance = distance;
    }
  }
  return best;
}

double LayerForward::attention_core_s() const {
  return attn_score.time_s() + attn_value.time_s() + softmax_s;
}

double LayerForward::full_recompute_s(const LayerKernels& kernels) const {
  const double skipped = kernels.recompute_skips_output ? fc2.time_s() + output_elementwise_s : 0.0;
  return time_s() - skipped;
}

double LayerForward::gemm_s() const {
  return qkv.time_s() + attn_score.time_s() + attn_value.time_s() + proj.time_s() +
         fc1.time_s() + fc2.time_s();
}

double LayerForward::flops() const {
  return qkv.flops + attn_score.flops + attn_value.flops + proj.flops + fc1.flops + fc2.flops;
}

double LayerForward::time_s() const { return gemm_s() + softmax_s + elementwise_s; }

LayerForward layer_forward(const ModelSpec& model, std::int64_t micro_batch, std::int64_t tp,
                           bool sequence_parallel, const LayerKernels& kernels,
                           const DeviceRates& rates) {
  const double b = static_cast<double>(micro_batch);
  const double s = static_cast<double>(model.seq_len);
  const double h = static_cast<double>(model.hidden);
  const double f = static_cast<double>(model.ffn_hidden);
  const double t = static_cast<double>(tp);
  const double d = static_cast<double>(model.head_dim());
  const double heads_per_rank = static_cast<double>(model.heads) / t;
  const double c = rates.element_bytes;
  const double tokens = b * s;

  // GEMM widths from the layer's weights (layer_tensors.h): Q|K|V 3h/t for GPT, h/t + 2
  // kv_local d with grouped-query attention; fc1 f/t, or gate|up 2f/t for SwiGLU.
  const LayerGemmShapes shapes = layer_gemm_shapes(model, tp);
  const auto width = [](std::int64_t n) { return static_cast<double>(n); };
  LayerForward L;
  L.qkv = gemm_time(tokens, width(shapes.qkv_out), h, 1.0, rates);
  L.proj = gemm_time(tokens, h, h / t, 1.0, rates);
  L.fc1 = gemm_time(tokens, width(shapes.fc1_out), h, 1.0, rates);
  L.fc2 = gemm_time(tokens, h, f / t, 1.0, rates);
  // Q K^T: per (sequence, head) [s, d] x [d, s]; probabilities x V: [s, s] x [s, d].
  L.attn_score = gemm_time(s, s, d, b * heads_per_rank, rates);
  L.attn_value = gemm_time(s, d, s, b * heads_per_rank, rates);

  const double dropout = kernels.dropout ? 1.0 : 0.0;
  const AttentionSample* gqa = gqa_attention_sample(model, rates.profile);
  const double attention_rate = gqa != nullptr           ? gqa->flops_per_s
                                : rates.profile != nullptr ? rates.profile->attention_flops_per_s
                                                           : 0.0;
  if (kernels.attention == AttentionKernel::kMaterialized && attention_rate > 0) {
    // The measured kernel (scores, mask, softmax, values) at its causal rate: half the full
    // 2 x 2 s^2 d FLOPs per (sequence, head) per GEMM, no separate softmax traffic.
    for (GemmTime* g : {&L.attn_score, &L.attn_value}) {
      g->compute_s = 0.5 * g->flops / (attention_rate * rates.compute_share);
      g->memory_s = 0;
    }
  } else if (kernels.attention == AttentionKernel::kMaterialized) {
    // Per score element: fused scale-mask-softmax reads and writes it (2c); dropout reads the
    // probabilities, writes the dropped ones and a 1-byte mask (2c + 1).
    L.softmax_bytes = b * heads_per_rank * s * s * (2.0 * c + dropout * (2.0 * c + 1.0));
  } else {
    // Flash attention: one fused kernel streaming Q, K, V and writing O (its score traffic
    // stays in SRAM); the causal mask skips about half of the score blocks.
    const double qkvo_bytes = (width(shapes.qkv_out) + h / t) * tokens * c;
    for (GemmTime* g : {&L.attn_score, &L.attn_value}) {
      g->compute_s *= 0.5;
      g->bytes = qkvo_bytes / 2.0;
      g->memory_s = g->bytes / (rates.memory_bytes_per_s * rates.compute_share);
      if (attention_rate > 0) {
        g->compute_s = 0.5 * g->flops / (attention_rate * rates.compute_share);
      }
    }
  }
  L.softmax_s = memory_bound_time(L.softmax_bytes, rates);

  L.elementwise_bytes = layer_elementwise_bytes(model, micro_batch, tp, sequence_parallel,
                                                kernels, c);
  L.elementwise_s = layer_memory_bound_s(
      L.elementwise_bytes, llama_op_bytes(model, micro_batch, tp, sequence_parallel, c, false),
      rates, false);
  // After fc2, per hidden token: bias + dropout + residual (read 2h, write h, mask), and the
  // separate bias pass (read and write h); see layer_elementwise_bytes.
  const double hidden_tokens = sequence_parallel ? tokens / t : tokens;
  const double output_bytes =
      hidden_tokens * (3.0 * h * c + dropout * h + (kernels.separate_bias ? 2.0 * h * c : 0.0));
  L.output_elementwise_s = memory_bound_time(output_bytes, rates);
  return L;
}

double layer_elementwise_bytes(const ModelSpec& model, std::int64_t micro_batch, std::int64_t tp,
                               bool sequence_parallel, const LayerKernels& kernels,
                               double element_bytes) {
  const double h = static_cast<double>(model.hidden);
  const double t = static_cast<double>(tp);
  const double c = element_bytes;
  const double dropout = kernels.dropout ? 1.0 : 0.0;
  const double tokens = static_cast<double>(micro_batch * model.seq_len);
  // Hidden-sized kernels run on S = s/t tokens per sequence under sequence parallelism and
  // on all s tokens (replicated on every TP rank) otherwise. Per token:
  //   LayerNorm 1 and 2: read h, write h                      -> 2 x 2 h c
  //   bias + dropout + residual, twice: read 2h, write h, mask -> 2 x (3 h c + h dropout)
  //   bias + GeLU on the fc1 output (f/t, never sequence-sharded): read, write -> 2 c f/t
  const double hidden_tokens = sequence_parallel ? tokens / t : tokens;
  double bytes = hidden_tokens * (kNormsForwardElements * h * c + 2.0 * (3.0 * h * c + dropout * h)) +
                 tokens * c * family_forward_bytes_per_token(model, tp);
  if (kernels.separate_bias && model.biases) {
    // The proj and fc2 biases added after the all-reduce (read and write h each). The qkv
    // and fc1 biases seed matmul_forward's output: inside the GEMM (and its samples).
    bytes += hidden_tokens * 4.0 * h * c;
  }
  return bytes;
}

double layer_backward_elementwise_bytes(const ModelSpec& model, std::int64_t micro_batch,
                                        std::int64_t tp, bool sequence_parallel,
                                        const LayerKernels& kernels, double element_bytes) {
  const double h = static_cast<double>(model.hidden);
  const double f = static_cast<double>(model.ffn_hidden);
  const double t = static_cast<double>(tp);
  const double c = element_bytes;
  const double tokens = static_cast<double>(micro_batch * model.seq_len);
  const double hidden_tokens = sequence_parallel ? tokens / t : tokens;
  // Per token, on hidden-sized tensors:
  //   LayerNorm 1 and 2 backward: read dout, inp, dinp, write dinp     -> 2 x 4 h c
  //   residual-path gradient copies (before each block's backward)     -> 2 x 2 h c
  // on the fc1 output (f/t): GeLU backward reads inp, dout, dinp, writes dinp -> 4 c f/t.
  double bytes = hidden_tokens * (kNormsBackwardElements + 4.0) * h * c +
                 tokens * c * family_backward_bytes_per_token(model, tp);
  if (kernels.separate_bias && model.biases) {
    // Bias gradients: each linear layer's output gradient read once (3h/t, h, f/t, h).
    bytes += tokens * c * (static_cast<double>(layer_gemm_shapes(model, tp).qkv_out) + f / t + 2.0 * h);
  }
  return bytes;
}

double LayerBackward::time_s() const {
  double gemm = 0;
  for (int i = 0; i < 4; ++i) gemm += input_grad[i].time_s() + weight_grad[i].time_s();
  return gemm + attention_s + elementwise_s;
}

LayerBackward layer_backward(const ModelSpec& model, std::int64_t micro_batch, std::int64_t tp,
                             bool sequence_parallel, const LayerKernels& kernels,
                             const DeviceRates& rates) {
  const LayerForward fwd =
      layer_forward(model, micro_batch, tp, sequence_parallel, kernels, rates);
  LayerBackward B;
  if (rates.profile == nullptr) {
    // 2x the forward: each GEMM's two gradients at the forward's time (the curve is
    // symmetric in m, n, k), the other kernels read the saved input and the gradient.
    const GemmTime* forward_gemms[4] = {&fwd.qkv, &fwd.proj, &fwd.fc1, &fwd.fc2};
    for (int i = 0; i < 4; ++i) B.input_grad[i] = B.weight_grad[i] = *forward_gemms[i];
    B.attention_s = 2.0 * fwd.attention_core_s();
    B.elementwise_bytes = 2.0 * fwd.elementwise_bytes;
    B.elementwise_s = 2.0 * fwd.elementwise_s;
    return B;
  }
  const double b = static_cast<double>(micro_batch);
  const double s = static_cast<double>(model.seq_len);
  const double h = static_cast<double>(model.hidden);
  const double f = static_cast<double>(model.ffn_hidden);
  const double t = static_cast<double>(tp);
  const double c = rates.element_bytes;
  const double tokens = b * s;
  // Linear layers inp (BT, C) -> out (BT, OC): qkv (h -> 3h/t), proj (h/t -> h),
  // fc1 (h -> f/t), fc2 (f/t -> h).
  const LayerGemmShapes shapes = layer_gemm_shapes(model, tp);
  const double in[4] = {h, h / t, h, f / t};
  const double out[4] = {static_cast<double>(shapes.qkv_out), h, static_cast<double>(shapes.fc1_out), h};
  for (int i = 0; i < 4; ++i) {
    B.input_grad[i] = gemm_time(tokens, in[i], out[i], 1.0, rates);
    B.weight_grad[i] = gemm_time(out[i], in[i], tokens, 1.0, rates);
  }
  const AttentionSample* gqa = gqa_attention_sample(model, rates.profile);
  const double backward_rate =
      gqa != nullptr ? gqa->backward_flops_per_s : rates.profile->attention_backward_flops_per_s;
  if (backward_rate > 0) {
    // Causal backward FLOPs: twice the forward's 2 b (a/t) s^2 d (compute_profile.h), at the
    // rate measured on the kernel the conventions name, its memory traffic included: the
    // CPU's materialised backward, or the CUDA flash backward, which also recomputes the
    // probabilities from the saved log-sum-exp (`strata calibrate --backend cuda`).
    const double causal_flops = fwd.attn_score.flops + fwd.attn_value.flops;
    B.attention_s = causal_flops / (backward_rate * rates.compute_share);
  } else {
    B.attention_s = 2.0 * fwd.attention_core_s();
  }
  B.elementwise_bytes = layer_backward_elementwise_bytes(model, micro_batch, tp,
                                                         sequence_parallel, kernels, c);
  B.elementwise_s = layer_memory_bound_s(
      B.elementwise_bytes, llama_op_bytes(model, micro_batch, tp, sequence_parallel, c, true),
      rates, true);
  return B;
}

HeadForward head_forward(const ModelSpec& model, std::int64_t micro_batch, std::int64_t tp,
                         const DeviceRates& rates) {
  const double b = static_cast<double>(micro_batch);
  const double s = static_cast<double>(model.seq_len);
  const double h = static_cast<double>(model.hidden);
  const double v = static_cast<double>(vocab_shard_rows(model, tp));
  const double c = rates.element_bytes;
  HeadForward head;
  head.logits = gemm_time(b * s, v, h, 1.0, rates);
  // Final LayerNorm (read h, write h per token) and the vocab-parallel cross-entropy: the
  // logits are read in compute precision, cast to fp32 (write 4), then max/exp-sum and the
  // in-place softmax read and write the fp32 copy twice more: c + 4 + 2 x 8 bytes/element.
  const double bytes = b * s * 2.0 * h * c + b * s * v * (c + 4.0 + 16.0);
  head.elementwise_s = memory_bound_time(bytes, rates);
  return head;
}

double head_backward_s(const ModelSpec& model, std::int64_t micro_batch, std::int64_t tp,
                       const DeviceRates& rates) {
  const HeadForward fwd = head_forward(model, micro_batch, tp, rates);
  if (rates.profile == nullptr) return 2.0 * fwd.time_s();
  const double b = static_cast<double>(micro_batch);
  const double s = static_cast<double>(model.seq_len);
  const double h = static_cast<double>(model.hidden);
  const double v = static_cast<double>(vocab_shard_rows(model, tp));
  const double c = rates.element_bytes;
  const double tokens = b * s;
  const double gemms = gemm_time(tokens, h, v, 1.0, rates).time_s() +
                       gemm_time(v, h, tokens, 1.0, rates).time_s();
  // Cross-entropy gradient: read the fp32 logits and write their gradient (4 + c per
  // element); final LayerNorm backward: read dout, inp, dinp, write dinp (4 h c per token).
  const double bytes = tokens * v * (4.0 + c) + tokens * 4.0 * h * c;
  return gemms + backward_memory_bound_time(bytes, rates);
}

double embedding_forward_s(const ModelSpec& model, std::int64_t micro_batch,
                           const DeviceRates& rates) {
  // Per token: read the token row and the position row (2 h c), write their sum (h c),
  // dropout reads and writes it again (2 h c).
  const double tokens = static_cast<double>(micro_batch * model.seq_len);
  return memory_bound_time(tokens * 5.0 * static_cast<double>(model.hidden) *
                               rates.element_bytes,
                           rates);
}

}  // namespace strata

namespace strata {

LayerKernels layer_kernels(const KernelConventions& conventions) {
  LayerKernels k;
  k.attention = conventions.attention;
  k.dropout = conventions.dropout;
  k.separate_bias = conventions.separate_bias;
  k.recompute_skips_output = conventions.recompute == RecomputeScope::kToGeluOutput;
  k.fp32_gradient_reductions = conventions.fp32_gradient_reductions;
  return k;
}

}  // namespace strata
