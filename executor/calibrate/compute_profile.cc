// Measured seconds into the Profile's units; see compute_profile.h.
#include "executor/calibrate/compute_profile.h"

#include <fmt/format.h>

#include "cost_model/specs/errors.h"

namespace strata::calibrate {

double attention_causal_flops(std::int64_t B, std::int64_t T, std::int64_t C, std::int64_t NH) {
  const double hs = static_cast<double>(C / NH);
  return 2.0 * static_cast<double>(B) * static_cast<double>(NH) * static_cast<double>(T) *
         static_cast<double>(T) * hs;
}

double attention_backward_causal_flops(std::int64_t B, std::int64_t T, std::int64_t C,
                                       std::int64_t NH) {
  return 2.0 * attention_causal_flops(B, T, C, NH);
}

namespace {

// count / seconds, or 0 (not measured) when seconds is not positive.
double rate(double count, double seconds) { return seconds > 0 ? count / seconds : 0.0; }

// A GPT layer of `model`'s sizes: what the elementwise timings ran (LayerNorm, GeLU, the
// bias passes), whose bytes their rates are counted in.
ModelSpec gpt_layer_of(ModelSpec model) {
  model.norm = NormKind::kLayerNorm;
  model.mlp = MlpKind::kGelu;
  model.position = PositionKind::kLearned;
  model.kv_heads = 0;
  model.biases = true;
  return model;
}

void set_llama_rates(Profile& p, const LlamaOpSeconds& s, const MeasuredAt& at) {
  const ModelSpec& m = at.llama_model;
  const LlamaOpBytes forward =
      llama_op_bytes(m, at.micro_batch, at.tp, false, at.element_bytes, false);
  const LlamaOpBytes backward =
      llama_op_bytes(m, at.micro_batch, at.tp, false, at.element_bytes, true);
  p.rmsnorm_bytes_per_s = rate(forward.rmsnorm, s.rmsnorm_s);
  p.rmsnorm_backward_bytes_per_s = rate(backward.rmsnorm, s.rmsnorm_backward_s);
  p.swiglu_bytes_per_s = rate(forward.swiglu, s.swiglu_s);
  p.swiglu_backward_bytes_per_s = rate(backward.swiglu, s.swiglu_backward_s);
  p.rope_bytes_per_s = rate(forward.rope, s.rope_s);
  p.rope_backward_bytes_per_s = rate(backward.rope, s.rope_backward_s);
  const std::int64_t heads = m.heads / at.tp;
  for (const AttentionSeconds& a : s.gqa) {
    if (!(a.forward_s > 0)) continue;
    const std::int64_t C = heads * a.head_size;
    p.gqa_attention.push_back(
        {a.head_size, rate(attention_causal_flops(at.micro_batch, m.seq_len, C, heads), a.forward_s),
         rate(attention_backward_causal_flops(at.micro_batch, m.seq_len, C, heads), a.backward_s)});
  }
}

}  // namespace

Profile compute_profile(const ComputeMeasurements& measured, const MeasuredAt& at) {
  const ModelSpec& m = at.model;
  if (at.tp < 1 || m.heads % at.tp != 0 || m.hidden % at.tp != 0) {
    throw ConfigError(fmt::format("calibrate: tensor-parallel degree {} does not divide "
                                  "heads = {} and hidden = {}", at.tp, m.heads, m.hidden));
  }
  const std::int64_t C = m.hidden / at.tp, NH = m.heads / at.tp;
  Profile p;
  p.gemm = gemm_samples(measured.gemms);
  const ModelSpec gpt = gpt_layer_of(m);
  p.elementwise_bytes_per_s =
      rate(layer_elementwise_bytes(gpt, at.micro_batch, 1, false, at.kernels, at.element_bytes),
           measured.layer_elementwise_s);
  p.elementwise_backward_bytes_per_s =
      rate(layer_backward_elementwise_bytes(gpt, at.micro_batch, 1, false, at.kernels,
                                            at.element_bytes),
           measured.layer_elementwise_backward_s);
  p.attention_flops_per_s =
      rate(attention_causal_flops(at.micro_batch, m.seq_len, C, NH), measured.attention_s);
  p.attention_backward_flops_per_s = rate(
      attention_backward_causal_flops(at.micro_batch, m.seq_len, C, NH),
      measured.attention_backward_s);
  if (measured.llama.measured()) set_llama_rates(p, measured.llama, at);
  p.device_adam_params_per_s = measured.device_adam_params_per_s;
  p.cpu_adam_params_per_s = measured.cpu_adam_params_per_s;
  p.host_to_device_bytes_per_s = measured.host_to_device_bytes_per_s;
  p.device_to_host_bytes_per_s = measured.device_to_host_bytes_per_s;
  p.host_memory_bytes_per_s = measured.host_memory_bytes_per_s;
  p.memory_working_set_bytes = measured.memory_working_set_bytes;
  p.last_level_cache_bytes = measured.last_level_cache_bytes;
  return p;
}

}  // namespace strata::calibrate
