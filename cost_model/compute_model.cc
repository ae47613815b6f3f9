// Compute primitives: GEMM roofline with a shape-dependent efficiency, memory-bound kernels,
// and the per-micro-batch forward of a layer, the head and the embedding (compute_model.h).
#include "cost_model/compute_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "cost_model/errors.h"

namespace strata {

DeviceRates device_rates(const ClusterSpec& cluster, const TrainSpec& train,
                         const Profile* profile) {
  DeviceRates rates;
  rates.peak_flops = train.precision == Precision::kBf16 ? cluster.device.bf16_flops
                                                         : cluster.device.fp32_flops;
  if (!(rates.peak_flops > 0)) {
    throw ConfigError(fmt::format("cluster '{}': device peak FLOP/s for {} must be > 0, got {}",
                                  cluster.name, to_string(train.precision), rates.peak_flops));
  }
  rates.memory_bytes_per_s = cluster.device.memory_bandwidth_bytes_per_s * kMemoryEfficiency;
  if (profile != nullptr && profile->elementwise_bytes_per_s > 0) {
    rates.memory_bytes_per_s = profile->elementwise_bytes_per_s;  // measured, already achievable
  }
  if (!(rates.memory_bytes_per_s > 0)) {
    throw ConfigError(fmt::format(
        "cluster '{}': device.hbm_bandwidth_gb_per_s must be > 0, got {}", cluster.name,
        cluster.device.memory_bandwidth_bytes_per_s));
  }
  rates.element_bytes = train.compute_bytes();
  rates.profile = profile;
  return rates;
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
  for (const GemmSample& s : rates.profile->gemm) {
    if (s.m <= 0 || s.n <= 0 || s.k <= 0 || !(s.flops_per_s > 0)) continue;
    const double dm = std::log2(static_cast<double>(s.m)) - lm;
    const double dn = std::log2(static_cast<double>(s.n)) - ln;
    const double dk = std::log2(static_cast<double>(s.k)) - lk;
    const double d = std::sqrt(dm * dm + dn * dn + dk * dk);
    const double eff = s.flops_per_s / rates.peak_flops;
    for (int i = 0; i < kNearest; ++i) {
      if (d < best_dist[i]) {
        for (int j = kNearest - 1; j > i; --j) {
          best_dist[j] = best_dist[j - 1];
          best_eff[j] = best_eff[j - 1];
        }
        best_dist[i] = d;
        best_eff[i] = eff;
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
  t.compute_s = t.flops / (rates.peak_flops * t.efficiency);
  t.memory_s = t.bytes / rates.memory_bytes_per_s;
  return t;
}

double memory_bound_time(double bytes, const DeviceRates& rates) {
  return bytes / rates.memory_bytes_per_s;
}

double LayerForward::attention_core_s() const {
  return attn_score.time_s() + attn_value.time_s() + softmax_s;
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

  LayerForward L;
  L.qkv = gemm_time(tokens, 3.0 * h / t, h, 1.0, rates);
  L.proj = gemm_time(tokens, h, h / t, 1.0, rates);
  L.fc1 = gemm_time(tokens, f / t, h, 1.0, rates);
  L.fc2 = gemm_time(tokens, h, f / t, 1.0, rates);
  // Q K^T: per (sequence, head) [s, d] x [d, s]; probabilities x V: [s, s] x [s, d].
  L.attn_score = gemm_time(s, s, d, b * heads_per_rank, rates);
  L.attn_value = gemm_time(s, d, s, b * heads_per_rank, rates);

  const double dropout = kernels.dropout ? 1.0 : 0.0;
  if (kernels.attention == AttentionKernel::kMaterialized) {
    // Per score element: fused scale-mask-softmax reads and writes it (2c); dropout reads the
    // probabilities, writes the dropped ones and a 1-byte mask (2c + 1).
    L.softmax_bytes = b * heads_per_rank * s * s * (2.0 * c + dropout * (2.0 * c + 1.0));
  } else {
    // Flash attention: one fused kernel streaming Q, K, V and writing O (its score traffic
    // stays in SRAM); the causal mask skips about half of the score blocks.
    const double qkvo_bytes = 4.0 * tokens * h / t * c;
    for (GemmTime* g : {&L.attn_score, &L.attn_value}) {
      g->compute_s *= 0.5;
      g->bytes = qkvo_bytes / 2.0;
      g->memory_s = g->bytes / rates.memory_bytes_per_s;
      if (rates.profile != nullptr && rates.profile->attention_flops_per_s > 0) {
        g->compute_s = 0.5 * g->flops / rates.profile->attention_flops_per_s;
      }
    }
  }
  L.softmax_s = memory_bound_time(L.softmax_bytes, rates);

  // Hidden-sized kernels run on S = s/t tokens per sequence under sequence parallelism and
  // on all s tokens (replicated on every TP rank) otherwise. Per token:
  //   LayerNorm 1 and 2: read h, write h                      -> 2 x 2 h c
  //   bias + dropout + residual, twice: read 2h, write h, mask -> 2 x (3 h c + h dropout)
  //   bias + GeLU on the fc1 output (f/t, never sequence-sharded): read, write -> 2 c f/t
  const double hidden_tokens = sequence_parallel ? tokens / t : tokens;
  L.elementwise_bytes = hidden_tokens * (4.0 * h * c + 2.0 * (3.0 * h * c + dropout * h)) +
                        tokens * 2.0 * c * f / t;
  L.elementwise_s = memory_bound_time(L.elementwise_bytes, rates);
  return L;
}

HeadForward head_forward(const ModelSpec& model, std::int64_t micro_batch, std::int64_t tp,
                         const DeviceRates& rates) {
  const double b = static_cast<double>(micro_batch);
  const double s = static_cast<double>(model.seq_len);
  const double h = static_cast<double>(model.hidden);
  const double v = std::ceil(static_cast<double>(model.vocab) / static_cast<double>(tp));
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
