// Activation tensors of one transformer layer, of the embedding and of the head, as named
// lists (see memory_model.h for the lists and their sources), the recomputation filters,
// and Korthikanti et al.'s closed form. Pure functions; no schedule knowledge here (how
// many micro-batches are in flight is in memory_model.cc).
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cost_model/specs/errors.h"
#include "cost_model/specs/layer_tensors.h"
#include "cost_model/memory/memory_model.h"
#include "cost_model/specs/param_layout.h"
#include "cost_model/specs/partition.h"
#include "kernels/cuda/scratch_sizes.h"

namespace strata {
namespace {

// The dimensions every list needs, checked once. S is the sequence length of the tensors
// outside the tensor-parallel region (sharded by sequence parallelism).
struct Dims {
  std::int64_t s, b, h, f, a, t, S;
};

Dims dims_of(const ModelSpec& model, std::int64_t micro_batch, std::int64_t tp,
             bool sequence_parallel) {
  if (micro_batch < 1) {
    throw InfeasiblePlan(fmt::format("memory model: micro_batch = {}, expected >= 1", micro_batch));
  }
  if (tp < 1) throw InfeasiblePlan(fmt::format("memory model: tp = {}, expected >= 1", tp));
  if (model.heads < 1 || model.hidden < 1 || model.seq_len < 1 || model.ffn_hidden < 1) {
    throw InfeasiblePlan(fmt::format(
        "memory model: model '{}' has a non-positive size (hidden {}, heads {}, seq_len {}, "
        "ffn_hidden {})",
        model.name, model.hidden, model.heads, model.seq_len, model.ffn_hidden));
  }
  if (const std::string why = tensor_parallel_violation(model, tp); !why.empty()) {
    throw InfeasiblePlan(fmt::format("memory model: {}", why));
  }
  const bool sp = sequence_parallel_on(sequence_parallel, tp);
  if (sp) {
    if (const std::string why = sequence_parallel_violation(model, tp); !why.empty()) {
      throw InfeasiblePlan(fmt::format("memory model: {}", why));
    }
  }
  const std::int64_t S = sp ? model.seq_len / tp : model.seq_len;
  return Dims{model.seq_len, micro_batch, model.hidden, model.ffn_hidden, model.heads, tp, S};
}

void check_compute_bytes(int compute_bytes) {
  if (compute_bytes != 2 && compute_bytes != 4) {
    throw InfeasiblePlan(
        fmt::format("memory model: compute_bytes = {}, expected 2 (bf16) or 4 (fp32)", compute_bytes));
  }
}

ActivationTensor tensor(std::string name, std::int64_t elements, int bytes, bool core = false) {
  return ActivationTensor{std::move(name), elements, bytes, core};
}

constexpr int kFp32Bytes = 4;

// Elements per token of a layer's tensors on one TP rank that depend on the family
// (layer_tensors.h): the fused Q|K|V output (3h/t for GPT, h/t + 2 kv_local d with GQA) and
// the fc1 output (f/t; gate|up 2f/t for SwiGLU).
std::int64_t qkv_width(const ModelSpec& model, std::int64_t tp) {
  return layer_gemm_shapes(model, tp).qkv_out;
}
std::int64_t fc1_width(const ModelSpec& model, std::int64_t tp) {
  return layer_gemm_shapes(model, tp).fc1_out;
}
// A norm's saved statistics: LayerNorm keeps mean and rstd per row, RMSNorm rstd only.
void add_norm_stats(std::vector<ActivationTensor>& list, const ModelSpec& model,
                    const std::string& norm, std::int64_t rows);
constexpr int kMaskBytes = 1;      // Megatron stores dropout masks as uint8/bool
constexpr int kPublishedBytes = 2; // Korthikanti's figures are for 16-bit activations

// The bytes of the tensors of `list` with one of `names` (a name absent from the list, as
// ln_mean under RMSNorm, counts 0).
double bytes_named(const std::vector<ActivationTensor>& list,
                   std::initializer_list<const char*> names) {
  double total = 0;
  for (const auto& t : list) {
    for (const char* name : names) total += t.name == name ? t.bytes() : 0.0;
  }
  return total;
}

}  // namespace

ActivationConvention activation_convention(Backend backend) {
  return backend == Backend::kCpu ? ActivationConvention::kCpuExecutor
                                  : ActivationConvention::kCudaExecutor;
}

double sum_bytes(const std::vector<ActivationTensor>& tensors) {
  double total = 0;
  for (const auto& t : tensors) total += t.bytes();
  return total;
}

std::vector<ActivationTensor> layer_activation_tensors(const ModelSpec& model,
                                                       std::int64_t micro_batch, std::int64_t tp,
                                                       bool sequence_parallel,
                                                       ActivationConvention convention,
                                                       int compute_bytes) {
  const Dims d = dims_of(model, micro_batch, tp, sequence_parallel);
  const std::int64_t sbh_outside = d.S * d.b * d.h;      // sequence-sharded with SP
  const std::int64_t sbh_inside = d.s * d.b * d.h / d.t;  // head-split inside the TP region
  const std::int64_t sbf_inside = d.s * d.b * d.f / d.t;
  const std::int64_t scores = d.a / d.t * d.s * d.s * d.b;  // (b, a/t, s, s)

  if (convention == ActivationConvention::kPublished) {
    const int c = kPublishedBytes;
    return {
        tensor("ln1_in", sbh_outside, c),
        tensor("qkv_in", sbh_outside, c),
        tensor("q", sbh_inside, c),
        tensor("k", sbh_inside, c),
        tensor("v", sbh_inside, c),
        tensor("attn_probs", scores, c, true),
        tensor("attn_mask", scores, kMaskBytes, true),
        tensor("attn_dropped", scores, c, true),
        tensor("proj_in", sbh_inside, c),
        tensor("proj_mask", sbh_outside, kMaskBytes),
        tensor("ln2_in", sbh_outside, c),
        tensor("fc1_in", sbh_outside, c),
        tensor("gelu_in", sbf_inside, c),
        tensor("fc2_in", sbf_inside, c),
        tensor("mlp_mask", sbh_outside, kMaskBytes),
    };
  }

  check_compute_bytes(compute_bytes);
  const int c = compute_bytes;
  const std::int64_t rows = d.S * d.b;  // LayerNorm statistics: one per token
  std::vector<ActivationTensor> list;
  list.reserve(13);
  list.push_back(tensor("ln1_in", sbh_outside, c));
  add_norm_stats(list, model, "ln1", rows);
  list.push_back(tensor("ln1_out", sbh_outside, c));
  list.push_back(tensor("qkv", d.s * d.b * qkv_width(model, d.t), c));
  // Both executors' attention is tiled (flash): the backward needs each row's log-sum-exp.
  list.push_back(tensor("attn_lse", d.a / d.t * d.s * d.b, kFp32Bytes, true));
  // The executor's selective recomputation drops the attention output too (gpt_layer.cc's
  // drop_activations, on both backends): rerunning the attention rebuilds it with the
  // log-sum-exp at no extra cost.
  list.push_back(tensor("attn_out", sbh_inside, c, /*core=*/true));
  list.push_back(tensor("ln2_in", sbh_outside, c));
  add_norm_stats(list, model, "ln2", rows);
  list.push_back(tensor("ln2_out", sbh_outside, c));
  list.push_back(tensor("fc1_out", d.s * d.b * fc1_width(model, d.t), c));
  // The activation's output (GeLU, or SwiGLU's silu(gate) * up): fc2's input, f/t wide.
  list.push_back(tensor("gelu_out", sbf_inside, c));
  return list;
}

std::vector<ActivationTensor> apply_recompute(const std::vector<ActivationTensor>& tensors,
                                              Recompute recompute) {
  std::vector<ActivationTensor> kept;
  kept.reserve(tensors.size());
  for (const auto& t : tensors) {
    const bool keep = recompute == Recompute::kNone ||
                      (recompute == Recompute::kSelective && !t.attention_core) ||
                      (recompute == Recompute::kFull && t.name == "ln1_in");
    if (keep) kept.push_back(t);
  }
  return kept;
}

double korthikanti_layer_activation_bytes(std::int64_t seq, std::int64_t micro_batch,
                                          std::int64_t hidden, std::int64_t heads,
                                          std::int64_t tp, bool sequence_parallel,
                                          Recompute recompute) {
  const double s = static_cast<double>(seq);
  const double b = static_cast<double>(micro_batch);
  const double h = static_cast<double>(hidden);
  const double a = static_cast<double>(heads);
  const double t = static_cast<double>(tp);
  const double sbh = s * b * h;
  // Korthikanti et al. 2022, Table 2.
  if (recompute == Recompute::kFull) return sequence_parallel ? 2 * sbh / t : 2 * sbh;
  const double core = recompute == Recompute::kSelective ? 0.0 : 5 * a * s / h;
  if (sequence_parallel) return sbh * (34 + core) / t;
  return sbh * (10 + 24 / t + core / t);
}

std::vector<ActivationTensor> embedding_activation_tensors(const ModelSpec& model,
                                                           std::int64_t micro_batch,
                                                           std::int64_t tp, bool sequence_parallel,
                                                           ActivationConvention convention,
                                                           int compute_bytes) {
  const Dims d = dims_of(model, micro_batch, tp, sequence_parallel);
  // The embedding's output is layer 0's ln1_in (already counted with the layer); the
  // published convention adds the embedding dropout mask (Korthikanti 4.3: s b h / t
  // with SP). The token ids (s b integers) are the data loader's, not counted.
  if (convention == ActivationConvention::kPublished) {
    return {tensor("embed_mask", d.S * d.b * d.h, kMaskBytes)};
  }
  check_compute_bytes(compute_bytes);
  return {};
}

std::vector<ActivationTensor> head_activation_tensors(const ModelSpec& model,
                                                      std::int64_t micro_batch, std::int64_t tp,
                                                      bool sequence_parallel,
                                                      ActivationConvention convention,
                                                      int compute_bytes) {
  const Dims d = dims_of(model, micro_batch, tp, sequence_parallel);
  const std::int64_t sbh_outside = d.S * d.b * d.h;
  // Final LayerNorm input and its output (the output layer's input), Korthikanti 4.3:
  // 4 s b h / t bytes in 16-bit with SP.
  if (convention == ActivationConvention::kPublished) {
    return {tensor("lnf_in", sbh_outside, kPublishedBytes),
            tensor("lnf_out", sbh_outside, kPublishedBytes)};
  }
  check_compute_bytes(compute_bytes);
  const std::int64_t rows = d.S * d.b;
  // The executors run the logits' backward inside the head's forward and keep the gradient
  // at the LayerNorm output (lnf_dout) instead of the output itself: the same size.
  std::vector<ActivationTensor> list{tensor("lnf_in", sbh_outside, compute_bytes)};
  add_norm_stats(list, model, "lnf", rows);
  list.push_back(tensor("lnf_dout", sbh_outside, compute_bytes));
  return list;
}

std::vector<ActivationTensor> head_working_tensors(const ModelSpec& model,
                                                   std::int64_t micro_batch, std::int64_t tp,
                                                   bool sequence_parallel, int compute_bytes) {
  const Dims d = dims_of(model, micro_batch, tp, sequence_parallel);
  check_compute_bytes(compute_bytes);
  const int c = compute_bytes;
  const std::int64_t shard = vocab_shard_rows(model, d.t);
  const std::int64_t valid = std::min(shard, std::max<std::int64_t>(0, model.vocab));
  const std::int64_t logits = d.s * d.b * valid;  // the last rank's shard may be shorter: the
                                                  // first (largest) shard is the peak
  std::vector<ActivationTensor> list{
      tensor("lnf_out", d.s * d.b * d.h, c),      // gathered to every token row for the logits
      tensor("logits", logits, kFp32Bytes),
      tensor("head_stats", 4 * d.s * d.b, kFp32Bytes),  // row max, sum, target, lse
      tensor("dlogits", logits, kFp32Bytes)};
  if (sequence_parallel_on(sequence_parallel, d.t)) {
    list.push_back(tensor("lnf_dout_full", d.s * d.b * d.h, c));  // before its reduce-scatter
  }
  return list;
}

double layer_backward_peak_bytes(const ModelSpec& model, std::int64_t micro_batch,
                                 std::int64_t tp, bool sequence_parallel,
                                 ActivationConvention convention, int compute_bytes) {
  const Dims d = dims_of(model, micro_batch, tp, sequence_parallel);
  check_compute_bytes(compute_bytes);
  const bool sp = sequence_parallel_on(sequence_parallel, d.t);
  const double c = compute_bytes;
  const double n = static_cast<double>(d.s * d.b * d.h) * c;   // a full (B T, C) tensor
  const double nl = static_cast<double>(d.S * d.b * d.h) * c;  // this rank's rows of it
  const double nf = static_cast<double>(d.s * d.b * fc1_width(model, d.t)) * c;  // dfc1
  const double na = static_cast<double>(d.s * d.b * d.h / d.t) * c;
  const double nqkv = static_cast<double>(d.s * d.b * qkv_width(model, d.t)) * c;  // dqkv
  const double scratch = static_cast<double>(d.b * d.a / d.t * d.s) * kFp32Bytes;  // attention
  const double g = sp ? n : 0.0;  // an all-gathered (B T, C) copy, SP only
  // The layer's saved tensors (recomputed ones included: they are rebuilt first) besides its
  // input, and which of them layer_backward frees after each phase.
  const auto saved = layer_activation_tensors(model, micro_batch, tp, sequence_parallel,
                                              convention, compute_bytes);
  const auto bytes_of = [&saved](std::initializer_list<const char*> names) {
    return bytes_named(saved, names);
  };
  const double all = sum_bytes(saved) - bytes_of({"ln1_in"});
  const double after_mlp_out = all - bytes_of({"fc1_out", "gelu_out"});
  const double after_fc1 = after_mlp_out - bytes_of({"ln2_out"});
  const double after_ln2 = after_fc1 - bytes_of({"ln2_in", "ln2_mean", "ln2_rstd"});  // no mean: 0
  const double after_core = after_ln2 - bytes_of({"attn_out", "attn_probs", "attn_lse"});
  const double after_qkv = after_core - bytes_of({"qkv", "ln1_out"});
  // gpt_layer.cc's layer_backward phase by phase (the gradient flowing through, dres, is
  // the engine's and not counted here):
  const double phases[] = {
      all + nf + g,                     // fc2: dfc1, gathered dy
      after_mlp_out + nf + n + g,       // fc1: dfc1, dln2 (full), gathered ln2_out
      after_fc1 + n + (sp ? nl : 0.0),  // ln2: dln2 (full) and its reduce-scattered rows
      after_ln2 + na + g,               // proj: dattn, gathered dres
      after_ln2 + na + nqkv + scratch,  // attention: dattn, dqkv, its scratch
      after_core + nqkv + n + g,        // qkv: dqkv, dln1 (full), gathered ln1_out
      after_qkv + n + (sp ? nl : 0.0),  // ln1: dln1 (full) and its rows
  };
  double peak = 0;
  for (double p : phases) peak = std::max(peak, p);
  if (convention == ActivationConvention::kCudaExecutor) {
    // CUDA's norm backward (LayerNorm or RMSNorm) takes pool scratch for its partials, beside the completed
    // rows (SP: the reduce-scattered rows; else the all-reduced full tensor). The partial of
    // SP's reduce-scatter is gone by then (a by-value argument, destroyed with its call).
    const double ln = cuda_norm_backward_scratch_bytes(model, d.S * d.b, d.h);
    peak = std::max({peak, after_fc1 + (sp ? nl : n) + ln, after_qkv + (sp ? nl : n) + ln});
  }
  return peak;
}

double cuda_norm_backward_scratch_bytes(const ModelSpec& model, std::int64_t rows,
                                        std::int64_t hidden) {
  const int r = static_cast<int>(rows);
  const int h = static_cast<int>(hidden);
  const std::int64_t floats = model.norm == NormKind::kRmsNorm
                                  ? kernels::cuda::rmsnorm_backward_scratch_floats(r, h)
                                  : kernels::cuda::layernorm_backward_scratch_floats(r, h);
  return static_cast<double>(floats) * kFp32Bytes;
}

double layer_forward_extra_bytes(const ModelSpec& model, std::int64_t micro_batch, std::int64_t tp,
                                 bool sequence_parallel, ActivationConvention convention,
                                 int compute_bytes, Recompute recompute) {
  const Dims d = dims_of(model, micro_batch, tp, sequence_parallel);
  check_compute_bytes(compute_bytes);
  const bool sp = sequence_parallel_on(sequence_parallel, d.t);
  const double c = compute_bytes;
  const double n = static_cast<double>(d.s * d.b * d.h) * c;   // a full (B T, C) tensor
  const double nl = static_cast<double>(d.S * d.b * d.h) * c;  // this rank's rows of it
  const double g = sp ? n : 0.0;  // an all-gathered input, SP only
  const auto saved = layer_activation_tensors(model, micro_batch, tp, sequence_parallel,
                                              convention, compute_bytes);
  const auto bytes_of = [&saved](std::initializer_list<const char*> names) {
    return bytes_named(saved, names);
  };
  // gpt_layer.cc's layer_forward, allocation by allocation (its input and output are the
  // engine's): the tensors it has saved so far plus its transients at each moment.
  const double ln1 = bytes_of({"ln1_mean", "ln1_rstd", "ln1_out"});
  const double qkv = ln1 + bytes_of({"qkv"});
  const double core = qkv + bytes_of({"attn_lse", "attn_out"});
  const double ln2 = bytes_of({"ln2_in", "ln2_mean", "ln2_rstd", "ln2_out"});
  const double all = sum_bytes(saved) - bytes_of({"ln1_in"});
  std::vector<double> phases{
      qkv + g,                                  // QKV GEMM over the gathered ln1_out
      core + n + (sp ? nl : 0.0),               // the projection's partial (and its rows)
      core + (sp ? nl : n) + ln2,               // residual + LayerNorm 2
      all + g,                                  // fc1 + GeLU over the gathered ln2_out
  };
  if (d.t > 1) phases.push_back(all + n + (sp ? nl : 0.0));  // fc2's partial (and its rows)
  double peak = all;
  for (double p : phases) peak = std::max(peak, p);
  // What the forward keeps once the recomputation policy has dropped the rest.
  const double kept = sum_bytes(apply_recompute(saved, recompute)) - bytes_of({"ln1_in"});
  return peak - kept;
}

double cuda_head_working_bytes(const ModelSpec& model, std::int64_t micro_batch, std::int64_t tp,
                               bool sequence_parallel) {
  const Dims d = dims_of(model, micro_batch, tp, sequence_parallel);
  const bool sp = sequence_parallel_on(sequence_parallel, d.t);
  const double c = backend_compute_bytes(Backend::kCuda);
  const double n = static_cast<double>(d.s * d.b * d.h) * c;
  const double nl = static_cast<double>(d.S * d.b * d.h) * c;
  const double o = sp ? n : nl;  // the LayerNorm output on every token row
  // The logits over every row of the 128-aligned wte shard (LayerOps::logits_width), in bf16;
  // the loss turns them into their gradient in place.
  const double logits = static_cast<double>(d.s * d.b) *
                        static_cast<double>(vocab_shard_rows(model, d.t, vocab_row_alignment(Backend::kCuda))) * c;
  const double stats = 4.0 * static_cast<double>(d.s * d.b) * kFp32Bytes;  // the loss's rows
  // gpt_head.cc's head_forward: the LayerNorm output (SP: gathered beside its rows), the
  // logits with the loss's statistics, then (SP) the full gradient at the LayerNorm output.
  return std::max({nl + (sp ? n : 0.0), o + logits + stats, o + logits + (sp ? n : 0.0)});
}

std::vector<ActivationTensor> logits_tensors(const ModelSpec& model, std::int64_t micro_batch,
                                             std::int64_t tp, int compute_bytes) {
  const Dims d = dims_of(model, micro_batch, tp, /*sequence_parallel=*/false);
  check_compute_bytes(compute_bytes);
  if (model.vocab < 1) {
    throw InfeasiblePlan(fmt::format("memory model: vocab = {}, expected >= 1", model.vocab));
  }
  const std::int64_t shard = vocab_shard_rows(model, d.t);  // vocab-parallel rows
  const std::int64_t elements = d.s * d.b * shard;
  std::vector<ActivationTensor> list{tensor("logits_fp32", elements, kFp32Bytes)};
  if (compute_bytes != kFp32Bytes) list.push_back(tensor("logits", elements, compute_bytes));
  return list;
}

namespace {

void add_norm_stats(std::vector<ActivationTensor>& list, const ModelSpec& model,
                    const std::string& norm, std::int64_t rows) {
  if (model.norm == NormKind::kLayerNorm) list.push_back(tensor(norm + "_mean", rows, kFp32Bytes));
  list.push_back(tensor(norm + "_rstd", rows, kFp32Bytes));
}

}  // namespace

}  // namespace strata
