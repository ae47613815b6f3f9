// Measured seconds into the Profile's units; see compute_profile.h.
#include "executor/calibrate/compute_profile.h"

#include <fmt/format.h>

#include "cost_model/errors.h"

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
  p.elementwise_bytes_per_s =
      rate(layer_elementwise_bytes(m, at.micro_batch, 1, false, at.kernels, at.element_bytes),
           measured.layer_elementwise_s);
  p.elementwise_backward_bytes_per_s =
      rate(layer_backward_elementwise_bytes(m, at.micro_batch, 1, false, at.kernels,
                                            at.element_bytes),
           measured.layer_elementwise_backward_s);
  p.attention_flops_per_s =
      rate(attention_causal_flops(at.micro_batch, m.seq_len, C, NH), measured.attention_s);
  p.attention_backward_flops_per_s = rate(
      attention_backward_causal_flops(at.micro_batch, m.seq_len, C, NH),
      measured.attention_backward_s);
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
